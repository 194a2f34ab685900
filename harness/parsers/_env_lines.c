/* A shell script's common lines in C, part of the _nccl_scan extension (its method table lists
 * env_run and env_join): harness.parsers.env_script_lines.logical_lines uses it when it is built (and not
 * switched off by PREFLIGHT_ENV_NO_C=1), and its per-line path otherwise; both give the same
 * variables (tests/test_env_lines_c.py compares them line by line on mutated lines, and
 * tests/test_parsers_env_equivalence.py reading whole inputs with and without it).
 *
 * Why by hand: a script whose lines do not repeat (values that differ in every copy) spends
 * ~5 us a line in the Python state machine, its regexes and the lexer; 20 MB of script took
 * 23x a plain line loop (issue 32 asks for 10x). This scan reads a line in tens of ns.
 *
 * env_run(text, pos, end, memo, memo_lines, memo_chars) reads the lines of text[pos:end] (each ending in `\n`) while
 * each is one of (nothing pending before it, as logical_lines reads them):
 *   - blank or a comment: [ \t]* then optionally `#` and anything (logical_lines' _NOOP_LINE);
 *   - simple assignments: [ \t]* (`export`[ \t]+)? A ([ \t]+ A)* [ \t]* (`#` comment)? where
 *     A is NAME=V, NAME [A-Za-z_][A-Za-z0-9_]*, and V one of: printable ASCII without blanks,
 *     quotes, `\`, `;&|` or backquote; "..." without `"`, `\` or backquote; '...' without `'`
 *     (no `$(` in any; a V ending in `/env` is not taken: _read_command reads more there);
 *     these are what shell_words + _read_command make of such a line: (NAME, V unquoted);
 *   - a line the caller's memo holds (text -> its reading, see env_script._Reading): its
 *     reading's pairs and whether it set nothing, as env_script._effect applies them;
 *   - any other line that env_words lexes (harness/parsers/_env_words.c): read by
 *     env_reading (_env_read.c), applied as above and kept in the memo while it holds fewer
 *     than memo_lines readings and the line has at most memo_chars characters (as
 *     parse_script keeps one);
 * and stops at the first other line (a line ending in `\`, a `$ ` prompt, a line the C lexer
 * leaves to shell_words: quotes inside `$(...)`, `#`, `\`, `;&|`, characters past ASCII...).
 * It returns
 * (stop, ops, unset): where it stopped (after the last line taken), the ops in order as
 * env_script._effect makes them (a (name, value) pair to expand where the value holds `$`,
 * else a chunk (pairs, longest value, all values' characters, dict(pairs))), and the count of
 * commands that set nothing. Lines after `env` output read otherwise: the caller reads the
 * run's text again on the Python path there.
 *
 * env_join(text, pos, end) (harness/parsers/_env_join.c) joins the backslash-continued command
 * that starts at pos as logical_lines joins it line by line; the caller lexes the command.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "_env_lines.h"

/* An assignment of a simple line: the name's and the value's spans (the value without its
 * quotes), and whether the value holds a `$`. */
typedef struct {
    Py_ssize_t name, name_end, value, value_end;
    int dollar;
} Assign;

#define MAX_ASSIGNS 64


/* The pending pairs (a chunk being built) and the ops. */
typedef struct {
    PyObject *ops;
    PyObject *chunk; /* list of (name, value) or NULL */
} Out;

static int
flush(Out *out)
{
    if (out->chunk == NULL)
        return 0;
    PyObject *pairs = out->chunk;
    out->chunk = NULL;
    Py_ssize_t n = PyList_GET_SIZE(pairs), longest = 0, chars = 0;
    PyObject *dict = PyDict_New();
    if (dict == NULL) {
        Py_DECREF(pairs);
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *pair = PyList_GET_ITEM(pairs, i);
        PyObject *value = PyTuple_GET_ITEM(pair, 1);
        Py_ssize_t len = PyUnicode_GET_LENGTH(value);
        longest = len > longest ? len : longest;
        chars += len;
        if (PyDict_SetItem(dict, PyTuple_GET_ITEM(pair, 0), value) < 0) {
            Py_DECREF(pairs);
            Py_DECREF(dict);
            return -1;
        }
    }
    PyObject *op = Py_BuildValue("(NnnN)", pairs, longest, chars, dict);
    if (op == NULL)
        return -1;
    int rc = PyList_Append(out->ops, op);
    Py_DECREF(op);
    return rc;
}

/* Add one (name, value) pair (a new reference, stolen) as _effect orders it. */
static int
add_pair(Out *out, PyObject *pair, int dollar)
{
    int rc;
    if (dollar) {
        if (flush(out) < 0) {
            Py_DECREF(pair);
            return -1;
        }
        rc = PyList_Append(out->ops, pair);
    } else {
        if (out->chunk == NULL && (out->chunk = PyList_New(0)) == NULL) {
            Py_DECREF(pair);
            return -1;
        }
        rc = PyList_Append(out->chunk, pair);
    }
    Py_DECREF(pair);
    return rc;
}

/* The assignments of the simple line text[p:eol] into a[], their count; 0 where the line is
 * not one (see the grammar above). */
static int
simple_line(int kind, const void *s, Py_ssize_t p, Py_ssize_t eol, Assign *a)
{
    int n = 0;
    while (p < eol && IS_BLANK(PyUnicode_READ(kind, s, p)))
        p++;
    if (eol - p > 6) {
        static const char kw[] = "export";
        int i = 0;
        while (i < 6 && PyUnicode_READ(kind, s, p + i) == (Py_UCS4)kw[i])
            i++;
        if (i == 6 && IS_BLANK(PyUnicode_READ(kind, s, p + 6))) {
            p += 6;
            while (p < eol && IS_BLANK(PyUnicode_READ(kind, s, p)))
                p++;
        }
    }
    for (;;) {
        /* NAME= */
        if (p >= eol || !IS_NAME_START(PyUnicode_READ(kind, s, p)) || n == MAX_ASSIGNS)
            return 0;
        a[n].name = p++;
        while (p < eol && IS_NAME_CHAR(PyUnicode_READ(kind, s, p)))
            p++;
        if (p >= eol || PyUnicode_READ(kind, s, p) != '=')
            return 0;
        a[n].name_end = p++;
        /* V */
        Py_UCS4 q = p < eol ? PyUnicode_READ(kind, s, p) : 0;
        int dollar = 0;
        if (q == '"' || q == '\'') {
            a[n].value = ++p;
            for (;; p++) {
                if (p >= eol)
                    return 0; /* not closed on this line */
                Py_UCS4 c = PyUnicode_READ(kind, s, p);
                if (c == q)
                    break;
                if (!(IS_TEXT(c) || c == '\t') || c == '`')
                    return 0;
                if (q == '"' && c == '\\')
                    return 0;
                if (c == '$') {
                    if (p + 1 < eol && PyUnicode_READ(kind, s, p + 1) == '(')
                        return 0;
                    dollar = 1;
                }
            }
            a[n].value_end = p++;
        } else {
            a[n].value = p;
            for (; p < eol; p++) {
                Py_UCS4 c = PyUnicode_READ(kind, s, p);
                if (c == ' ' || c == '\t')
                    break;
                if (!IS_TEXT(c) || c == '"' || c == '\'' || c == '\\' || c == ';' || c == '&'
                    || c == '|' || c == '`')
                    return 0;
                if (c == '$') {
                    if (p + 1 < eol && PyUnicode_READ(kind, s, p + 1) == '(')
                        return 0;
                    dollar = 1;
                }
            }
            a[n].value_end = p;
        }
        Py_ssize_t v = a[n].value, ve = a[n].value_end;
        if (ve - v >= 4 && PyUnicode_READ(kind, s, ve - 4) == '/'
            && PyUnicode_READ(kind, s, ve - 3) == 'e' && PyUnicode_READ(kind, s, ve - 2) == 'n'
            && PyUnicode_READ(kind, s, ve - 1) == 'v')
            return 0; /* `A=/usr/bin/env B=1`: _read_command reads B twice */
        a[n++].dollar = dollar;
        /* the end, or blanks then the end, a comment or the next assignment */
        if (p >= eol)
            return n;
        if (!IS_BLANK(PyUnicode_READ(kind, s, p)))
            return 0;
        while (p < eol && IS_BLANK(PyUnicode_READ(kind, s, p)))
            p++;
        if (p >= eol || PyUnicode_READ(kind, s, p) == '#')
            return n;
    }
}

/* text[p:eol] is blank or a comment (and does not end in `\`, tested before). */
static int
noop_line(int kind, const void *s, Py_ssize_t p, Py_ssize_t eol)
{
    while (p < eol && IS_BLANK(PyUnicode_READ(kind, s, p)))
        p++;
    return p == eol || PyUnicode_READ(kind, s, p) == '#';
}

/* Apply a memo's reading (prints, pairs or None, found); -1 on an error, else the unset count
 * it adds. */
static int
apply_reading(Out *out, PyObject *reading)
{
    if (!PyTuple_Check(reading) || PyTuple_GET_SIZE(reading) != 3) {
        PyErr_SetString(PyExc_TypeError, "env_run: a memo reading is (prints, pairs, found)");
        return -1;
    }
    PyObject *pairs = PyTuple_GET_ITEM(reading, 1);
    if (pairs == Py_None)
        return 0;
    if (!PyTuple_Check(pairs)) {
        PyErr_SetString(PyExc_TypeError, "env_run: a reading's pairs are a tuple");
        return -1;
    }
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(pairs); i++) {
        PyObject *pair = PyTuple_GET_ITEM(pairs, i);
        if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2
            || !PyUnicode_Check(PyTuple_GET_ITEM(pair, 1))) {
            PyErr_SetString(PyExc_TypeError, "env_run: a pair is (name, value)");
            return -1;
        }
        PyObject *value = PyTuple_GET_ITEM(pair, 1);
        Py_ssize_t len = PyUnicode_GET_LENGTH(value);
        int dollar = PyUnicode_FindChar(value, '$', 0, len, 1) >= 0;
        Py_INCREF(pair);
        if (add_pair(out, pair, dollar) < 0)
            return -1;
    }
    int found = PyObject_IsTrue(PyTuple_GET_ITEM(reading, 2));
    return found < 0 ? -1 : !found;
}

const char env_lines_run_doc[] =
    "env_run(text, pos, end, memo, memo_lines, memo_chars) -> (stop, ops, unset): the run of\n"
    "common script lines of text[pos:end] from pos (see harness/parsers/_env_lines.c).";

PyObject *
env_lines_run(PyObject *self, PyObject *args)
{
    PyObject *text, *memo;
    Py_ssize_t pos, end;
    (void)self;
    Py_ssize_t memo_lines, memo_chars;
    if (!PyArg_ParseTuple(args, "UnnO!nn", &text, &pos, &end, &PyDict_Type, &memo, &memo_lines,
                          &memo_chars))
        return NULL;
    Py_ssize_t len = PyUnicode_GET_LENGTH(text);
    if (pos < 0 || end > len || pos > end) {
        PyErr_SetString(PyExc_ValueError, "env_run: pos/end outside the text");
        return NULL;
    }
    int kind = PyUnicode_KIND(text);
    const void *s = PyUnicode_DATA(text);
    Out out = {PyList_New(0), NULL};
    if (out.ops == NULL)
        return NULL;
    Py_ssize_t unset = 0, p = pos;
    Assign a[MAX_ASSIGNS];
    while (p < end) {
        Py_ssize_t eol = PyUnicode_FindChar(text, '\n', p, end, 1);
        if (eol == -2)
            goto error;
        if (eol < 0)
            break;
        if (eol - p >= 2 && PyUnicode_READ(kind, s, p) == '$' && PyUnicode_READ(kind, s, p + 1) == ' ')
            break; /* a prompt */
        Py_ssize_t next = eol + 1; /* where the line (or the command continued from it) ends */
        PyObject *key;
        if (eol > p && PyUnicode_READ(kind, s, eol - 1) == '\\') {
            /* a continued command: joined as logical_lines joins it, read as a line below */
            key = env_join_at(text, p, end, &next);
            if (key == NULL)
                goto error;
            if (key == Py_None) {
                Py_DECREF(key);
                break;
            }
        } else if (noop_line(kind, s, p, eol)) {
            p = eol + 1;
            continue;
        } else {
            int n = simple_line(kind, s, p, eol, a);
            if (n > 0) {
                for (int i = 0; i < n; i++) {
                    PyObject *name = PyUnicode_Substring(text, a[i].name, a[i].name_end);
                    PyObject *value = name ? PyUnicode_Substring(text, a[i].value, a[i].value_end) : NULL;
                    PyObject *pair = value ? PyTuple_Pack(2, name, value) : NULL;
                    Py_XDECREF(name);
                    Py_XDECREF(value);
                    if (pair == NULL || add_pair(&out, pair, a[i].dollar) < 0)
                        goto error;
                }
                p = eol + 1;
                continue;
            }
            if ((key = PyUnicode_Substring(text, p, eol)) == NULL)
                goto error;
        }
        PyObject *reading = PyDict_GetItemWithError(memo, key); /* borrowed */
        if (reading != NULL) {
            Py_INCREF(reading);
        } else if (PyErr_Occurred()) {
            Py_DECREF(key);
            goto error;
        } else {
            /* a line read here: lexed (env_words) and read (env_reading), and kept in the memo
             * as parse_script keeps a reading (within its bounds) */
            PyObject *words = env_words_of(key);
            if (words == Py_None || words == Py_False) { /* (False: a quote or `$(` left open) */
                Py_DECREF(words);
                Py_DECREF(key);
                break;
            }
            reading = words ? env_reading_of(words) : NULL;
            Py_XDECREF(words);
            if (reading == NULL
                || (PyDict_GET_SIZE(memo) < memo_lines && PyUnicode_GET_LENGTH(key) <= memo_chars
                    && PyDict_SetItem(memo, key, reading) < 0)) {
                Py_XDECREF(reading);
                Py_DECREF(key);
                goto error;
            }
        }
        Py_DECREF(key);
        int added = apply_reading(&out, reading);
        Py_DECREF(reading);
        if (added < 0)
            goto error;
        unset += added;
        p = next;
    }
    if (flush(&out) < 0)
        goto error;
    return Py_BuildValue("(nNn)", p, out.ops, unset);
error:
    Py_XDECREF(out.chunk);
    Py_DECREF(out.ops);
    return NULL;
}
