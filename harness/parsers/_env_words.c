/* The common forms of a shell command's words in C, part of the _nccl_scan extension (its
 * method table lists env_words): harness.parsers.env_script_lines' lexer tries it first when it
 * is built (and not switched off by PREFLIGHT_ENV_NO_C=1), and shell_words reads every text it
 * leaves (None); where it gives words, they are shell_words' (tests/test_env_lines_c.py, on
 * every line of the recorded scripts, mutated, and command substitutions with quotes).
 *
 * Why by hand: shell_words' regexes, its `$(...)` placeholders and its per-word unquoting cost
 * ~60 us for a 50-word mpirun command joined from 19 lines; this, ~3 us.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>

#include "_env_lines.h"

/* A blank between words: shell_words' [ \t\r\n] (a `\r` never comes here). */
#define IS_WORD_END(c) (IS_BLANK(c) || (c) == '\n')

const char env_lines_words_doc[] =
    "env_words(text) -> list[str] | None: shell_words(text) where text is one of the common\n"
    "forms (see harness/parsers/_env_words.c), None where the Python lexer must read it.";

/* shell_words(text) (harness/parsers/shell_words.py) for a text of printable ASCII, tabs and
 * line ends without `#` (strip_comment leaves it as it is) or `\\`: words split at blanks, each
 * the concatenation of its pieces (plain characters as they are, "..." and '...' without their
 * quotes, `$(...)` as written, inside double quotes too, with its own quotes, parentheses and
 * `;&|`: sub_end). A text without quotes or `;&|` is split at blanks only, `$(` or not (as
 * shell_words' first branch). None for any other text, and for `;&|` outside quotes and `$(...)`
 * (the Python lexer reads them); False for an unclosed quote or `$(` (shell_words raises there:
 * a value that goes on in the next line), which env_words raises as ValueError. */
PyObject *
env_lines_words(PyObject *self, PyObject *arg)
{
    (void)self;
    if (!PyUnicode_Check(arg)) {
        PyErr_SetString(PyExc_TypeError, "env_words: a str");
        return NULL;
    }
    PyObject *words = env_words_of(arg);
    if (words == Py_False) {
        Py_DECREF(words);
        PyErr_SetString(PyExc_ValueError, "No closing quotation");
        return NULL;
    }
    return words;
}

/* How deep `$(` may nest inside double quotes inside `$(` (each level a C call): deeper, the
 * Python lexer reads the text. */
#define MAX_NESTED 32

/* shell_words' _substitution_end: the index after the `)` that closes the `$(` before s[i]
 * (quotes and parentheses inside it balanced; a `$(` inside double quotes read whole), -1 where
 * it is not closed, -2 where it nests past MAX_NESTED. */
static Py_ssize_t
sub_end(const Py_UCS1 *s, Py_ssize_t n, Py_ssize_t i, int nested)
{
    if (nested > MAX_NESTED)
        return -2;
    int depth = 1;
    while (i < n) {
        Py_UCS1 c = s[i];
        if (c == '\'') {
            const Py_UCS1 *q = memchr(s + i + 1, '\'', (size_t)(n - i - 1));
            if (q == NULL)
                return -1;
            i = q - s + 1;
        } else if (c == '"') {
            for (i++; i < n && s[i] != '"';) {
                if (s[i] == '$' && i + 1 < n && s[i + 1] == '(') {
                    i = sub_end(s, n, i + 2, nested + 1);
                    if (i < 0)
                        return i;
                } else {
                    i++;
                }
            }
            if (i >= n)
                return -1;
            i++;
        } else if (c == ')') {
            if (--depth == 0)
                return i + 1;
            i++;
        } else if (c == '(') {
            depth++;
            i++;
        } else {
            i++; /* (`$(`: its `(` is counted next) */
        }
    }
    return -1;
}

/* The `$(...)` at s[i] copied to buf + *k (*k moved past it): the index after it, or sub_end's
 * -1 (not closed) or -2 (nested too deep). */
static Py_ssize_t
copy_sub(const Py_UCS1 *s, Py_ssize_t n, Py_ssize_t i, char *buf, Py_ssize_t *k)
{
    Py_ssize_t end = sub_end(s, n, i + 2, 1);
    if (end >= 0) {
        memcpy(buf + *k, s + i, (size_t)(end - i));
        *k += end - i;
    }
    return end;
}

PyObject *
env_words_of(PyObject *arg)
{
    if (!PyUnicode_IS_ASCII(arg))
        Py_RETURN_NONE;
    const Py_UCS1 *s = PyUnicode_1BYTE_DATA(arg);
    Py_ssize_t n = PyUnicode_GET_LENGTH(arg);
    int quoted = 0; /* a quote or `;&|`: words are read piece by piece */
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_UCS1 c = s[i];
        if (!(IS_TEXT(c) || c == '\t' || c == '\n') || c == '#' || c == '\\')
            Py_RETURN_NONE;
        if (c == '"' || c == '\'' || c == ';' || c == '&' || c == '|')
            quoted = 1;
    }
    char *buf = PyMem_Malloc((size_t)n + 1);
    PyObject *words = PyList_New(0);
    if (buf == NULL || words == NULL) {
        PyMem_Free(buf);
        Py_XDECREF(words);
        return PyErr_NoMemory();
    }
    Py_ssize_t i = 0;
    PyObject *left = Py_None; /* what a text not read here gives: None, or False (not closed) */
    for (;;) {
        while (i < n && IS_WORD_END(s[i]))
            i++;
        if (i >= n)
            break;
        Py_ssize_t k = 0; /* the word's characters in buf */
        while (i < n && !IS_WORD_END(s[i])) {
            Py_UCS1 c = s[i];
            if (!quoted) {
                buf[k++] = (char)c;
                i++;
            } else if (c == '\'') {
                const Py_UCS1 *q = memchr(s + i + 1, '\'', (size_t)(n - i - 1));
                if (q == NULL)
                    goto open;
                memcpy(buf + k, s + i + 1, (size_t)(q - s - i - 1));
                k += q - s - i - 1;
                i = q - s + 1;
            } else if (c == '"') {
                Py_ssize_t j = i + 1;
                while (j < n && s[j] != '"') {
                    if (s[j] == '$' && j + 1 < n && s[j + 1] == '(') {
                        if ((j = copy_sub(s, n, j, buf, &k)) == -1)
                            goto open;
                        if (j < 0)
                            goto python;
                    } else {
                        buf[k++] = (char)s[j++];
                    }
                }
                if (j >= n)
                    goto open;
                i = j + 1;
            } else if (c == '$' && i + 1 < n && s[i + 1] == '(') {
                if ((i = copy_sub(s, n, i, buf, &k)) == -1)
                    goto open;
                if (i < 0)
                    goto python;
            } else if (c == ';' || c == '&' || c == '|') {
                goto python; /* a word of its own: the Python lexer's */
            } else {
                buf[k++] = (char)c;
                i++;
            }
        }
        PyObject *word = PyUnicode_FromStringAndSize(buf, k);
        if (word == NULL || PyList_Append(words, word) < 0) {
            Py_XDECREF(word);
            PyMem_Free(buf);
            Py_DECREF(words);
            return NULL;
        }
        Py_DECREF(word);
    }
    PyMem_Free(buf);
    return words;
open:
    left = Py_False;
python:
    PyMem_Free(buf);
    Py_DECREF(words);
    Py_INCREF(left);
    return left;
}
