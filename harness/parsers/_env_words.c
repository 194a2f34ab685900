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

const char env_lines_words_doc[] =
    "env_words(text) -> list[str] | None: shell_words(text) where text is one of the common\n"
    "forms (see harness/parsers/_env_words.c), None where the Python lexer must read it.";

/* shell_words(text) (harness/parsers/shell_words.py) for a text of printable ASCII and tabs
 * without `#` (strip_comment leaves it as it is), `\`, `;&|` or `$(` inside quotes, nor a
 * `(` or quote inside a `$(...)`: words split at blanks, each the concatenation of its pieces
 * (plain characters as they are, "..." and '...' without their quotes, `$(...)` as written).
 * A text without quotes is split at blanks only, `$(` or not (as shell_words' first branch).
 * None for any other text (and an unclosed quote or `$(`: the Python lexer raises there). */
PyObject *
env_lines_words(PyObject *self, PyObject *arg)
{
    (void)self;
    if (!PyUnicode_Check(arg)) {
        PyErr_SetString(PyExc_TypeError, "env_words: a str");
        return NULL;
    }
    return env_words_of(arg);
}

PyObject *
env_words_of(PyObject *arg)
{
    if (!PyUnicode_IS_ASCII(arg))
        Py_RETURN_NONE;
    const Py_UCS1 *s = PyUnicode_1BYTE_DATA(arg);
    Py_ssize_t n = PyUnicode_GET_LENGTH(arg);
    int quoted = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_UCS1 c = s[i];
        if (!(IS_TEXT(c) || c == '\t') || c == '#' || c == '\\' || c == ';' || c == '&' || c == '|')
            Py_RETURN_NONE;
        if (c == '"' || c == '\'')
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
    for (;;) {
        while (i < n && IS_BLANK(s[i]))
            i++;
        if (i >= n)
            break;
        Py_ssize_t k = 0; /* the word's characters in buf */
        while (i < n && !IS_BLANK(s[i])) {
            Py_UCS1 c = s[i];
            if (quoted && (c == '"' || c == '\'')) {
                Py_ssize_t j = i + 1;
                while (j < n && s[j] != c) {
                    if (c == '"' && s[j] == '$' && j + 1 < n && s[j + 1] == '(')
                        goto python;
                    buf[k++] = (char)s[j++];
                }
                if (j >= n)
                    goto python; /* not closed */
                i = j + 1;
            } else if (quoted && c == '$' && i + 1 < n && s[i + 1] == '(') {
                Py_ssize_t j = i + 2;
                while (j < n && s[j] != ')') {
                    if (s[j] == '(' || s[j] == '"' || s[j] == '\'')
                        goto python;
                    j++;
                }
                if (j >= n)
                    goto python;
                while (i <= j)
                    buf[k++] = (char)s[i++];
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
python:
    PyMem_Free(buf);
    Py_DECREF(words);
    Py_RETURN_NONE;
}
