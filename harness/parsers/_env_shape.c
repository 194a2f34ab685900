/* The env format pass's inert lines in C, part of the _nccl_scan extension (its method table
 * lists env_shape_run): harness.parsers.env_shape._shape_lines passes over them when it is
 * built (and not switched off by PREFLIGHT_ENV_NO_C=1), and reads each line otherwise; the
 * shape is the same (tests/test_env_lines_c.py: every line of the recorded scripts, mutated).
 *
 * Why by hand: the pass reads every line of the input; a script whose lines do not repeat
 * gains nothing from its memo of lines judged before (~0.4 us a line in Python, 0.1 s of a
 * 20 MB script; here ~0.05 us).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "_env_lines.h"

/* The line tells env_shape._shape_lines nothing but that it is blank (0) or not (1), as far as
 * a shape already holds a first character, a script line and no structure marker; -1 where
 * it may tell more (the Python loop reads it): a character past ASCII or a control character
 * but tab (a NUL, a Unicode blank), a first non-blank character that may start a list item, a
 * JSON string, a dict entry, a rank prefix or a timestamp (`-` before a blank or `{`, `"`, `'`,
 * `[`, a digit), a name then `:` (an `env:` block key), or a `{` after `=` or `:` (an inline
 * `env={...}` map). */
static int
inert_line(PyObject *line)
{
    if (!PyUnicode_IS_ASCII(line))
        return -1;
    const Py_UCS1 *s = PyUnicode_1BYTE_DATA(line);
    Py_ssize_t n = PyUnicode_GET_LENGTH(line), k = 0;
    while (k < n && IS_BLANK(s[k]))
        k++;
    if (k == n)
        return 0;
    Py_UCS1 c = s[k];
    if (c == '"' || c == '\'' || c == '[' || (c >= '0' && c <= '9'))
        return -1;
    if (c == '-' && (k + 1 == n || IS_BLANK(s[k + 1]) || s[k + 1] == '{'))
        return -1;
    if (IS_NAME_START(c)) {
        Py_ssize_t j = k;
        while (j < n && IS_NAME_START(s[j]))
            j++;
        if (j < n && (s[j] == '"' || s[j] == '\''))
            j++;
        while (j < n && IS_BLANK(s[j]))
            j++;
        if (j < n && s[j] == ':')
            return -1;
    }
    Py_UCS1 before = 0;
    for (Py_ssize_t j = k; j < n; j++) {
        c = s[j];
        if (c < 0x20 && c != '\t')
            return -1;
        if (c == '{' && (before == '=' || before == ':'))
            return -1;
        if (!IS_BLANK(c))
            before = c;
    }
    return 1;
}

const char env_lines_shape_run_doc[] =
    "env_shape_run(lines, i) -> (j, nonblank): lines[i:j] tell the env shape pass nothing but\n"
    "their count of non-blank lines (see harness/parsers/_env_shape.c).";

PyObject *
env_lines_shape_run(PyObject *self, PyObject *args)
{
    PyObject *lines;
    Py_ssize_t i, nonblank = 0;
    (void)self;
    if (!PyArg_ParseTuple(args, "O!n", &PyList_Type, &lines, &i))
        return NULL;
    Py_ssize_t n = PyList_GET_SIZE(lines);
    for (; i >= 0 && i < n; i++) {
        PyObject *line = PyList_GET_ITEM(lines, i);
        if (!PyUnicode_Check(line))
            break;
        int inert = inert_line(line);
        if (inert < 0)
            break;
        nonblank += inert;
    }
    return Py_BuildValue("(nn)", i, nonblank);
}
