/* A backslash-continued shell command joined in C, part of the _nccl_scan extension (its method
 * table lists env_join): harness.parsers.env_script_lines.logical_lines and env_run
 * (_env_lines.c) join a continued command with it, and logical_lines joins it line by line
 * where it gives None; the command is the same (tests/test_env_lines_c.py).
 *
 * Why by hand: an mpirun command continued over 19 lines took ~50 us through the Python state
 * machine (a state per line); joined here, ~1 us.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "_env_lines.h"

/* Most lines one continued command joins (logical_lines' bounds are 1,000 lines and 1 MiB; a
 * command past these is joined on the Python path). */
#define MAX_JOIN_LINES 256
#define MAX_JOIN_CHARS (64 << 10)

const char env_lines_join_doc[] =
    "env_join(text, pos, end) -> (command, stop) | None: the backslash-continued command whose\n"
    "first line starts at pos, joined as logical_lines joins it (see harness/parsers/_env_lines.c).";

/* The lines from text[pos] while each ends in one `\` (not two), the last one not: each but the
 * last without its `\` and with a blank after it, joined; None where a line is not printable
 * ASCII and tab, starts (after blanks) with `#` (Docker drops such a line: the Python path
 * reads it), the command passes the bounds above, or text[:end] ends before it does. */
PyObject *
env_join_at(PyObject *text, Py_ssize_t pos, Py_ssize_t end, Py_ssize_t *stop)
{
    int kind = PyUnicode_KIND(text);
    const void *s = PyUnicode_DATA(text);
    Py_ssize_t starts[MAX_JOIN_LINES], ends[MAX_JOIN_LINES];
    Py_ssize_t p = pos, chars = 0;
    int n = 0;
    for (;;) {
        if (n == MAX_JOIN_LINES || p >= end)
            Py_RETURN_NONE;
        Py_ssize_t q = p;
        while (q < end && IS_BLANK(PyUnicode_READ(kind, s, q)))
            q++;
        if (q < end && PyUnicode_READ(kind, s, q) == '#' && n > 0)
            Py_RETURN_NONE;
        Py_ssize_t eol = q;
        for (; eol < end; eol++) {
            Py_UCS4 c = PyUnicode_READ(kind, s, eol);
            if (c == '\n')
                break;
            if (!(IS_TEXT(c) || c == '\t'))
                Py_RETURN_NONE;
        }
        if (eol >= end)
            Py_RETURN_NONE;
        int continued = eol > p && PyUnicode_READ(kind, s, eol - 1) == '\\'
                        && !(eol - 1 > p && PyUnicode_READ(kind, s, eol - 2) == '\\');
        starts[n] = p;
        ends[n++] = continued ? eol - 1 : eol;
        chars += eol - p + 1;
        if (chars > MAX_JOIN_CHARS)
            Py_RETURN_NONE;
        p = eol + 1;
        if (!continued)
            break;
    }
    if (n < 2)
        Py_RETURN_NONE; /* one line: not a continued command */
    PyObject *out = PyUnicode_New(chars, 127);
    if (out == NULL)
        return NULL;
    Py_UCS1 *o = PyUnicode_1BYTE_DATA(out);
    Py_ssize_t k = 0;
    for (int i = 0; i < n; i++) {
        for (Py_ssize_t j = starts[i]; j < ends[i]; j++)
            o[k++] = (Py_UCS1)PyUnicode_READ(kind, s, j);
        if (i + 1 < n)
            o[k++] = ' ';
    }
    if (PyUnicode_Resize(&out, k) < 0)
        return NULL;
    *stop = p;
    return out;
}

PyObject *
env_lines_join(PyObject *self, PyObject *args)
{
    PyObject *text;
    Py_ssize_t pos, end, stop = 0;
    (void)self;
    if (!PyArg_ParseTuple(args, "Unn", &text, &pos, &end))
        return NULL;
    if (pos < 0 || end > PyUnicode_GET_LENGTH(text) || pos > end) {
        PyErr_SetString(PyExc_ValueError, "env_join: pos/end outside the text");
        return NULL;
    }
    PyObject *joined = env_join_at(text, pos, end, &stop);
    if (joined == NULL || joined == Py_None)
        return joined;
    return Py_BuildValue("(Nn)", joined, stop);
}
