/* What a shell command's words set, in C, part of the _nccl_scan extension (its method table
 * lists env_reading): env_run (harness/parsers/_env_lines.c) reads a line it lexed (env_words)
 * with it, as harness.parsers.env_script._reading reads the words the Python path lexed; the
 * two give the same reading (tests/test_env_lines_c.py: on the words of every line of the
 * recorded scripts, mutated, and on word lists made of the keywords and flags read below).
 *
 * env_reading(words) -> (prints, pairs, found), as _reading: whether the command prints the
 * environment (_prints_env), its assignments in order as (name, value as written) (None for a
 * Dockerfile `RUN` or no words), and whether it had any, from each simple command (split at
 * words of `;&|` only) read as _read_command reads it: `VAR=x VAR2=y cmd`, `env VAR=x cmd`,
 * `export`/`declare -x`/`typeset -x`/`local -x`/`readonly`/`ENV` and their options, legacy
 * `ENV NAME value`; then, where a word is one, launcher flags anywhere: mpirun `-x A=b`, docker
 * `-e A=b`/`--env A=b`/`--env=A=b`, srun `--export=ALL,A=b`, and `... /usr/bin/env A=b prog`.
 *
 * Why by hand: a 50-word mpirun command that sets ten variables took ~16 us in Python, a
 * script whose commands do not repeat reads each one (no memo of readings helps there).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "_env_lines.h"

static int
eq(PyObject *word, const char *lit)
{
    return PyUnicode_CompareWithASCIIString(word, lit) == 0;
}

/* word[a:b] is a variable name (IS_NAME: [A-Za-z_][A-Za-z0-9_]*, all of it). */
static int
is_name(PyObject *word, Py_ssize_t a, Py_ssize_t b)
{
    int kind = PyUnicode_KIND(word);
    const void *s = PyUnicode_DATA(word);
    if (b <= a || !IS_NAME_START(PyUnicode_READ(kind, s, a)))
        return 0;
    for (Py_ssize_t i = a + 1; i < b; i++) {
        Py_UCS4 c = PyUnicode_READ(kind, s, i);
        if (!IS_NAME_CHAR(c))
            return 0;
    }
    return 1;
}

/* _reading's add(): word[a:] as NAME=value appended to pairs; 1 added, 0 not, -1 error. */
static int
add(PyObject *pairs, PyObject *word, Py_ssize_t a)
{
    Py_ssize_t n = PyUnicode_GET_LENGTH(word);
    Py_ssize_t sep = PyUnicode_FindChar(word, '=', a, n, 1);
    if (sep == -2)
        return -1;
    if (sep < 0 || !is_name(word, a, sep))
        return 0;
    PyObject *name = PyUnicode_Substring(word, a, sep);
    PyObject *value = name ? PyUnicode_Substring(word, sep + 1, n) : NULL;
    PyObject *pair = value ? PyTuple_Pack(2, name, value) : NULL;
    Py_XDECREF(name);
    Py_XDECREF(value);
    if (pair == NULL)
        return -1;
    int rc = PyList_Append(pairs, pair);
    Py_DECREF(pair);
    return rc < 0 ? -1 : 1;
}

static int
has_char(PyObject *word, Py_UCS4 c)
{
    return PyUnicode_FindChar(word, c, 0, PyUnicode_GET_LENGTH(word), 1) >= 0;
}

static int
starts(PyObject *word, const char *lit)
{
    Py_ssize_t m = (Py_ssize_t)strlen(lit);
    if (PyUnicode_GET_LENGTH(word) < m)
        return 0;
    for (Py_ssize_t i = 0; i < m; i++)
        if (PyUnicode_READ_CHAR(word, i) != (Py_UCS4)(unsigned char)lit[i])
            return 0;
    return 1;
}

static int
ends_env(PyObject *word) /* word ends with "/env" */
{
    Py_ssize_t n = PyUnicode_GET_LENGTH(word);
    return n >= 4 && PyUnicode_READ_CHAR(word, n - 4) == '/' && PyUnicode_READ_CHAR(word, n - 3) == 'e'
           && PyUnicode_READ_CHAR(word, n - 2) == 'n' && PyUnicode_READ_CHAR(word, n - 1) == 'v';
}

/* A word _FLAG_WORD finds: -x, -e, --env, --env=..., --export=..., env, .../env. */
static int
flag_word(PyObject *w)
{
    return eq(w, "-x") || eq(w, "-e") || eq(w, "--env") || starts(w, "--env=")
           || starts(w, "--export=") || eq(w, "env") || ends_env(w);
}

/* The assignments after the first `=` of word, split at `,` (srun --export=ALL,A=b). */
static int
add_export(PyObject *pairs, PyObject *word, int *found)
{
    Py_ssize_t n = PyUnicode_GET_LENGTH(word);
    Py_ssize_t a = PyUnicode_FindChar(word, '=', 0, n, 1) + 1;
    for (;;) {
        Py_ssize_t comma = PyUnicode_FindChar(word, ',', a, n, 1);
        Py_ssize_t b = comma < 0 ? n : comma;
        PyObject *item = PyUnicode_Substring(word, a, b);
        if (item == NULL)
            return -1;
        int rc = add(pairs, item, 0);
        Py_DECREF(item);
        if (rc < 0)
            return -1;
        *found |= rc;
        if (comma < 0)
            return 0;
        a = comma + 1;
    }
}

/* _read_command over words[a:b]: 1 where it found an assignment, 0 not, -1 error. */
static int
read_command(PyObject *words, Py_ssize_t a, Py_ssize_t b, PyObject *pairs)
{
    PyObject **w = &PyList_GET_ITEM(words, 0);
    int found = 0, rc;
    Py_ssize_t i = a;
    while (i < b) {
        PyObject *word = w[i];
        if (eq(word, "ENV") && b - i >= 3 && !has_char(w[i + 1], '=')) {
            /* legacy Dockerfile `ENV NAME value`: NAME=the rest joined by blanks */
            PyObject *sep = PyUnicode_FromString(" ");
            PyObject *rest = sep ? PyList_GetSlice(words, i + 2, b) : NULL;
            PyObject *value = rest ? PyUnicode_Join(sep, rest) : NULL;
            PyObject *text = value ? PyUnicode_FromFormat("%U=%U", w[i + 1], value) : NULL;
            Py_XDECREF(sep);
            Py_XDECREF(rest);
            Py_XDECREF(value);
            if (text == NULL)
                return -1;
            rc = add(pairs, text, 0);
            Py_DECREF(text);
            return rc;
        }
        if (eq(word, "export") || eq(word, "declare") || eq(word, "typeset") || eq(word, "readonly")
            || eq(word, "local") || eq(word, "ENV")) {
            Py_ssize_t j = i + 1;
            int exported = 0;
            while (j < b && starts(w[j], "-") && !has_char(w[j], '=')) {
                exported |= has_char(w[j], 'x');
                j++;
            }
            if ((eq(word, "declare") || eq(word, "typeset") || eq(word, "local")) && !exported)
                break; /* not exported (arrays, locals) */
            i = j;
            continue;
        }
        if (eq(word, "env")) {
            i++;
            continue;
        }
        if ((rc = add(pairs, word, 0)) < 0)
            return -1;
        if (!rc)
            break;
        found = 1;
        i++;
    }
    int flagged = 0;
    for (Py_ssize_t j = a; j < b && !flagged; j++)
        flagged = flag_word(w[j]);
    if (!flagged)
        return found;
    for (Py_ssize_t j = a; j < b; j++) {
        PyObject *word = w[j];
        if ((eq(word, "-x") || eq(word, "-e") || eq(word, "--env")) && j + 1 < b) {
            if ((rc = add(pairs, w[j + 1], 0)) < 0)
                return -1;
            found |= rc;
        } else if (j > a && (eq(word, "env") || ends_env(word))) {
            /* `env NAME=value prog` as a launcher's program: the assignments right after it */
            for (Py_ssize_t k = j + 1; k < b; k++) {
                if ((rc = add(pairs, w[k], 0)) < 0)
                    return -1;
                if (!rc)
                    break;
                found = 1;
            }
        } else if (starts(word, "--env=")) {
            if ((rc = add(pairs, word, 6)) < 0)
                return -1;
            found |= rc;
        } else if (starts(word, "--export=")) {
            if (add_export(pairs, word, &found) < 0)
                return -1;
        }
    }
    return found;
}

/* _prints_env: `env`, `printenv`, `env | grep NCCL`, `export -p`, `declare -x`, `set`. */
static int
prints_env(PyObject *words)
{
    Py_ssize_t n = PyList_GET_SIZE(words), head = n;
    for (Py_ssize_t i = 0; i < n; i++)
        if (eq(PyList_GET_ITEM(words, i), "|")) {
            head = i;
            break;
        }
    if (head == 0)
        return 0;
    PyObject *w0 = PyList_GET_ITEM(words, 0);
    if (eq(w0, "env") || eq(w0, "printenv")) {
        int assigns = 0;
        for (Py_ssize_t i = 0; i < head && !assigns; i++)
            assigns = has_char(PyList_GET_ITEM(words, i), '=');
        if (!assigns)
            return 1;
    }
    if (head == 2)
        return (eq(w0, "export") && eq(PyList_GET_ITEM(words, 1), "-p"))
               || (eq(w0, "declare") && eq(PyList_GET_ITEM(words, 1), "-x"));
    return head == 1 && eq(w0, "set");
}

/* A word of `;&|` characters only: the end of a simple command (_commands). */
static int
punctuation(PyObject *word)
{
    Py_ssize_t n = PyUnicode_GET_LENGTH(word);
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_UCS4 c = PyUnicode_READ_CHAR(word, i);
        if (c != ';' && c != '&' && c != '|')
            return 0;
    }
    return n > 0;
}

PyObject *
env_reading_of(PyObject *words)
{
    Py_ssize_t n = PyList_GET_SIZE(words);
    for (Py_ssize_t i = 0; i < n; i++)
        if (!PyUnicode_Check(PyList_GET_ITEM(words, i))) {
            PyErr_SetString(PyExc_TypeError, "env_reading: words are str");
            return NULL;
        }
    PyObject *prints = PyBool_FromLong(prints_env(words));
    if (n == 0 || eq(PyList_GET_ITEM(words, 0), "RUN"))
        return Py_BuildValue("(NOO)", prints, Py_None, Py_False);
    PyObject *pairs = PyList_New(0);
    if (pairs == NULL) {
        Py_DECREF(prints);
        return NULL;
    }
    int found = 0;
    Py_ssize_t start = 0;
    for (Py_ssize_t i = 0; i <= n; i++) {
        if (i < n && !punctuation(PyList_GET_ITEM(words, i)))
            continue;
        if (i > start) {
            int rc = read_command(words, start, i, pairs);
            if (rc < 0) {
                Py_DECREF(prints);
                Py_DECREF(pairs);
                return NULL;
            }
            found |= rc;
        }
        start = i + 1;
    }
    PyObject *tuple = PyList_AsTuple(pairs);
    Py_DECREF(pairs);
    if (tuple == NULL) {
        Py_DECREF(prints);
        return NULL;
    }
    return Py_BuildValue("(NNO)", prints, tuple, found ? Py_True : Py_False);
}

const char env_lines_reading_doc[] =
    "env_reading(words) -> (prints, pairs, found): env_script._reading(words) in C (see\n"
    "harness/parsers/_env_read.c).";

PyObject *
env_lines_reading(PyObject *self, PyObject *words)
{
    (void)self;
    if (!PyList_Check(words)) {
        PyErr_SetString(PyExc_TypeError, "env_reading: a list of words");
        return NULL;
    }
    return env_reading_of(words);
}
