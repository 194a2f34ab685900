/* The NCCL debug log's candidate-line scan in C: harness.parsers.nccl_log_chunk uses it when it
 * is built, and harness.parsers.nccl_log_lines.MAIN's findall otherwise; both give the same
 * payloads (tests/test_nccl_scan.py compares them on every sample and on generated logs).
 *
 * Why by hand: one sre pass over a chunk stops at every `NCCL` (every line of a log) and costs
 * 3-4x what `grep -c NCCL` costs for the whole job; google-re2 and hyperscan were measured
 * slower or no faster through their Python bindings (a Python object or callback per match,
 * bench/README.md). This scan finds the `N` of `NCCL` with memchr (glibc: vectorised; memmem
 * was slower here), tests the few bytes after it with memcmp, takes the line's end with memchr,
 * and makes a bytes object only for a payload it has not seen in this chunk (a hash of the
 * line's bytes first) and drops the ones the caller has seen.
 *
 * The grammar is MAIN's, and only MAIN's (harness/parsers/nccl_log_lines.py):
 *   NCCL[ .(](?:INFO (?:[NUcnIFsG]|[CR][^\n]*via (?:NET|COLLNET)/)|WARN|error|version|cpp:|SeqNum)[^\n]*
 * found as re.findall finds it (leftmost, non-overlapping; a match runs to the line's end).
 *
 * The module also holds nccl-tests' table row scan (table_rows, harness/parsers/_nccl_rows.c)
 * and a shell script's common lines (env_run, harness/parsers/_env_lines.c).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "_env_lines.h"
#include "_nccl_rows.h"

/* The first `needle` in hay[0:n]: memchr for its first byte (vectorised in glibc; the literals
 * looked for start with a byte that is rare in a log, like `<`), then the rest compared. */
static const char *
find(const char *hay, Py_ssize_t n, const char *needle, Py_ssize_t m)
{
    const char *end = hay + n;
    while (end - hay >= m) {
        const char *p = memchr(hay, needle[0], (size_t)(end - hay - m + 1));
        if (p == NULL)
            return NULL;
        if (memcmp(p + 1, needle + 1, (size_t)(m - 1)) == 0)
            return p;
        hay = p + 1;
    }
    return NULL;
}

static int
starts(const char *p, const char *end, const char *lit, Py_ssize_t m)
{
    return end - p >= m && memcmp(p, lit, (size_t)m) == 0;
}

/* Where the MAIN match that starts with the `NCCL` at p ends (its line's end), or NULL. */
static const char *
match_at(const char *p, const char *end)
{
    const char *q = p + 4, *eol;
    if (q >= end || (*q != ' ' && *q != '.' && *q != '('))
        return NULL;
    q++;
    if (starts(q, end, "INFO ", 5)) {
        const char *r = q + 5;
        if (r < end && memchr("NUcnIFsG", *r, 8) != NULL)
            goto to_eol;
        if (r < end && (*r == 'C' || *r == 'R')) {
            eol = memchr(r + 1, '\n', (size_t)(end - r - 1));
            if (eol == NULL)
                eol = end;
            for (const char *v = r + 1; (v = memchr(v, 'v', (size_t)(eol - v))) != NULL; v++)
                if (starts(v, eol, "via NET/", 8) || starts(v, eol, "via COLLNET/", 12))
                    return eol;
        }
        return NULL;
    }
    if (starts(q, end, "WARN", 4) || starts(q, end, "error", 5) || starts(q, end, "version", 7)
        || starts(q, end, "cpp:", 4) || starts(q, end, "SeqNum", 6))
        goto to_eol;
    return NULL;
to_eol:
    eol = memchr(q, '\n', (size_t)(end - q));
    return eol == NULL ? end : eol;
}

/* A cheap hash of a line's bytes (8 at a time), to skip making an object for a line already
 * found in the chunk; a collision costs one memcmp. */
static size_t
line_hash(const char *p, Py_ssize_t n)
{
    uint64_t h = 0x9e3779b97f4a7c15ULL ^ (uint64_t)n, w;
    Py_ssize_t i = 0;
    for (; i + 8 <= n; i += 8) {
        memcpy(&w, p + i, 8);
        h = (h ^ w) * 0xff51afd7ed558ccdULL;
        h ^= h >> 29;
    }
    w = 0;
    memcpy(&w, p + i, (size_t)(n - i));
    h = (h ^ w) * 0xc4ceb9fe1a85ec53ULL;
    return (size_t)(h ^ (h >> 32));
}

/* The next `NCCL` in [pos, end): memchr for its `N`, the rest compared. */
static const char *
find_nccl(const char *pos, const char *end)
{
    while (end - pos >= 4) {
        const char *p = memchr(pos, 'N', (size_t)(end - pos - 3));
        if (p == NULL)
            return NULL;
        if (p[1] == 'C' && p[2] == 'C' && p[3] == 'L')
            return p;
        pos = p + 1;
    }
    return NULL;
}

typedef struct {
    size_t hash;
    const char *start;
    Py_ssize_t len;
} Slot;

/* An open-addressing set of the payloads found in one chunk (a power-of-two table, at most
 * half full; grown by doubling). */
typedef struct {
    Slot *slots;
    size_t mask, used;
} Table;

static int
table_grow(Table *t)
{
    size_t size = (t->mask + 1) * 2;
    Slot *slots = PyMem_Calloc(size, sizeof(Slot));
    if (slots == NULL)
        return -1;
    for (size_t i = 0; t->slots && i <= t->mask; i++) {
        Slot s = t->slots[i];
        if (s.start == NULL)
            continue;
        size_t j = s.hash & (size - 1);
        while (slots[j].start != NULL)
            j = (j + 1) & (size - 1);
        slots[j] = s;
    }
    PyMem_Free(t->slots);
    t->slots = slots;
    t->mask = size - 1;
    return 0;
}

/* 1: (start, len) is new and was added; 0: seen; -1: no memory. */
static int
table_add(Table *t, const char *start, Py_ssize_t len)
{
    if ((t->used + 1) * 2 > t->mask + 1 && table_grow(t) < 0)
        return -1;
    size_t h = line_hash(start, len), j = h & t->mask;
    while (t->slots[j].start != NULL) {
        Slot *s = &t->slots[j];
        if (s->hash == h && s->len == len && memcmp(s->start, start, (size_t)len) == 0)
            return 0;
        j = (j + 1) & t->mask;
    }
    t->slots[j] = (Slot){h, start, len};
    t->used++;
    return 1;
}

/* Add [p, p+n) to `out` when it is new in `table` and, where `seen` is given, not one of its
 * keys: 0, or -1 with an exception set. */
static int
emit(Table *table, PyObject *seen, PyObject *out, const char *p, Py_ssize_t n)
{
    int added = table_add(table, p, n);
    if (added <= 0) {
        if (added < 0)
            PyErr_NoMemory();
        return added;
    }
    PyObject *b = PyBytes_FromStringAndSize(p, n);
    if (b == NULL)
        return -1;
    int known = seen == NULL ? 0 : PyDict_Contains(seen, b);
    int rc = known < 0 ? -1 : known ? 0 : PyList_Append(out, b);
    Py_DECREF(b);
    return rc;
}

PyDoc_STRVAR(candidates_doc,
"candidates(chunk, end, seen) -> (list[bytes], int)\n\n"
"The distinct MAIN payloads of chunk[:end] that are not keys of the dict `seen`, first seen\n"
"first, and how many distinct payloads the chunk holds: with found = list(dict.fromkeys(\n"
"MAIN.findall(chunk, 0, end))), ([p for p in found if p not in seen], len(found)).");

static PyObject *
candidates(PyObject *self, PyObject *args)
{
    Py_buffer view;
    Py_ssize_t limit;
    PyObject *seen, *result = NULL;
    if (!PyArg_ParseTuple(args, "y*nO!:candidates", &view, &limit, &PyDict_Type, &seen))
        return NULL;
    limit = limit < 0 ? 0 : limit > view.len ? view.len : limit;  /* as re's endpos */
    const char *pos = view.buf, *end = (const char *)view.buf + limit;
    Table table = {NULL, 63, 0};
    PyObject *out = PyList_New(0);
    if (out == NULL || table_grow(&table) < 0)
        goto done;
    while (end - pos >= 4) {
        const char *p = find_nccl(pos, end), *stop;
        if (p == NULL)
            break;
        if ((stop = match_at(p, end)) == NULL) {
            pos = p + 1;
            continue;
        }
        if (emit(&table, seen, out, p, stop - p) < 0)
            goto done;
        pos = stop;
    }
    result = Py_BuildValue("(On)", out, (Py_ssize_t)table.used);
done:
    PyMem_Free(table.slots);
    PyBuffer_Release(&view);
    Py_XDECREF(out);
    return result;
}

PyDoc_STRVAR(tails_doc,
"tails(chunk, end, literal) -> list[bytes]\n\n"
"The distinct line tails after each `literal` in chunk[:end] (to the line's end), first seen\n"
"first: list(dict.fromkeys(re.findall(re.escape(literal) + b'([^\\\\n]*)', chunk[:end]))).");

static PyObject *
tails(PyObject *self, PyObject *args)
{
    Py_buffer view, lit;
    Py_ssize_t limit;
    PyObject *result = NULL;
    if (!PyArg_ParseTuple(args, "y*ny*:tails", &view, &limit, &lit))
        return NULL;
    limit = limit < 0 ? 0 : limit > view.len ? view.len : limit;  /* as re's endpos */
    const char *pos = view.buf, *end = (const char *)view.buf + limit;
    Table table = {NULL, 63, 0};
    PyObject *out = PyList_New(0);
    if (lit.len == 0)
        PyErr_SetString(PyExc_ValueError, "tails: an empty literal");
    if (lit.len == 0 || out == NULL || table_grow(&table) < 0)
        goto done;
    while (end - pos >= lit.len) {
        const char *p = find(pos, end - pos, lit.buf, lit.len), *stop;
        if (p == NULL)
            break;
        p += lit.len;
        if ((stop = memchr(p, '\n', (size_t)(end - p))) == NULL)
            stop = end;
        if (emit(&table, NULL, out, p, stop - p) < 0)
            goto done;
        pos = stop;
    }
    result = Py_NewRef(out);
done:
    PyMem_Free(table.slots);
    PyBuffer_Release(&view);
    PyBuffer_Release(&lit);
    Py_XDECREF(out);
    return result;
}

PyDoc_STRVAR(holds_any_doc,
"holds_any(text, literals) -> bool\n\n"
"any(literal in text for literal in literals), the literals non-empty ASCII str; True also\n"
"where `text` holds a character past U+00FF (not looked at here: the caller's own loop, which\n"
"this call only lets it skip, decides). harness.parsers.nccl_log_payloads asks it before\n"
"trying aws-ofi-nccl's rules on a distinct NET/OFI payload (a WARN storm names its own\n"
"address on every line: a Python loop of `in` tests a line cost ~3x this call).");

static PyObject *
holds_any(PyObject *self, PyObject *args)
{
    PyObject *text, *literals;
    if (!PyArg_ParseTuple(args, "UO!:holds_any", &text, &PyTuple_Type, &literals))
        return NULL;
    Py_ssize_t count = PyTuple_GET_SIZE(literals);
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *lit = PyTuple_GET_ITEM(literals, i);
        if (!PyUnicode_Check(lit) || !PyUnicode_IS_ASCII(lit) || PyUnicode_GET_LENGTH(lit) == 0) {
            PyErr_SetString(PyExc_TypeError, "holds_any: literals must be non-empty ASCII str");
            return NULL;
        }
    }
    if (PyUnicode_KIND(text) != PyUnicode_1BYTE_KIND)
        Py_RETURN_TRUE;
    /* One byte a character (Latin-1): an ASCII literal is in the text where its bytes are. */
    const char *data = (const char *)PyUnicode_1BYTE_DATA(text);
    Py_ssize_t n = PyUnicode_GET_LENGTH(text);
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *lit = PyTuple_GET_ITEM(literals, i);
        if (find(data, n, (const char *)PyUnicode_1BYTE_DATA(lit), PyUnicode_GET_LENGTH(lit)))
            Py_RETURN_TRUE;
    }
    Py_RETURN_FALSE;
}

static PyMethodDef methods[] = {
    {"candidates", candidates, METH_VARARGS, candidates_doc},
    {"tails", tails, METH_VARARGS, tails_doc},
    {"holds_any", holds_any, METH_VARARGS, holds_any_doc},
    {"table_rows", nccl_rows_table_rows, METH_VARARGS, nccl_rows_table_rows_doc},
    {"env_run", env_lines_run, METH_VARARGS, env_lines_run_doc},
    {"env_join", env_lines_join, METH_VARARGS, env_lines_join_doc},
    {"env_words", env_lines_words, METH_O, env_lines_words_doc},
    {"env_reading", env_lines_reading, METH_O, env_lines_reading_doc},
    {"env_shape_run", env_lines_shape_run, METH_VARARGS, env_lines_shape_run_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_nccl_scan",
    "The NCCL debug log's candidate-line scan in C (see harness/parsers/nccl_log_chunk.py), and\n"
    "nccl-tests table rows (harness/parsers/_nccl_rows.c, harness/parsers/nccl_tests_rows.py), and\n"
    "a shell script's common lines (harness/parsers/_env_lines.c, env_script_lines.py).",
    -1, methods,
};

PyMODINIT_FUNC
PyInit__nccl_scan(void)
{
    return PyModule_Create(&module);
}
