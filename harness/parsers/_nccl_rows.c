/* nccl-tests table rows in C, part of the _nccl_scan extension (its method table lists
 * table_rows): harness.parsers.nccl_tests_rows.table_rows uses it when it is built, and the
 * layout's rows_pattern match otherwise; both give the same stretch (tests/test_nccl_rows_c.py
 * compares them on every recorded table and on generated and mutated rows).
 *
 * Why by hand: a soak run's single table is mostly rows, and past the kept rows (MAX_ROWS) each
 * is only checked to be well formed and counted. sre spends ~5 ns a character on the row
 * pattern (the per-character class tests of its possessive repeats; ~100 ms for 20 MB), this
 * scan ~1: each cell is a run of one character class, walked once.
 *
 * The grammar is rows_pattern's (harness/parsers/nccl_tests_rows.py), one letter of `spec` per
 * cell, cells separated by [ \t]+, a row being `\n[ \t]*` cells `[ \t]*` before `\n` or the end:
 *   D  [0-9]+                    the first cell when it is neither size, count nor root
 *   I  [0-9]{1,18}               size, count (and a root in the first cell)
 *   S  [-+]?[0-9]{1,18}          root
 *   F  [0-9]{1,30}(\.[0-9]{1,30})?([eE][-+]?[0-9]{1,2})?   time, algbw, busbw
 *   X  [0-9]{1,15}|N/A           #wrong
 *   W  [a-z0-9_.+-]+             any other cell
 * Every repeat there is possessive and the cells' classes hold no blank, so a cell is one run
 * that must end where a blank (or the row's end) follows: a longer run than a bound allows, or a
 * `.`/`e` part cut short, fails the row as the pattern fails it.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>

#include "_nccl_rows.h"

#define IS_DIGIT(c) ((c) >= '0' && (c) <= '9')
#define IS_BLANK(c) ((c) == ' ' || (c) == '\t')
#define IS_WORD(c) (((c) >= 'a' && (c) <= 'z') || IS_DIGIT(c) || (c) == '_' || (c) == '.' \
                    || (c) == '+' || (c) == '-')

/* ROW_WORDS (feed_line's literals a lower-case word can hold): only a W cell can hold one (the
 * others are digits, `.`, `e`, `E`, signs and `N/A`), so only W cells are searched. */
static const char *const WORDS[] = {"ailure", "imeout", "algbw"};

/* One scan per string kind (1, 2 or 4 bytes a character: a batch holding one character past
 * U+00FF is read as UCS-2 or UCS-4); rows are ASCII, any wider character fails its row. */
#define DEFINE_SCAN(NAME, T)                                                                  \
static Py_ssize_t                                                                             \
NAME##_digits(const T *s, Py_ssize_t q, Py_ssize_t end)                                       \
{                                                                                             \
    Py_ssize_t start = q;                                                                     \
    while (q < end && IS_DIGIT(s[q]))                                                         \
        q++;                                                                                  \
    return q - start;                                                                         \
}                                                                                             \
                                                                                              \
static int                                                                                    \
NAME##_worded(const T *s, Py_ssize_t a, Py_ssize_t b)                                         \
{                                                                                             \
    for (size_t w = 0; w < sizeof(WORDS) / sizeof(WORDS[0]); w++) {                           \
        Py_ssize_t m = (Py_ssize_t)strlen(WORDS[w]);                                          \
        for (Py_ssize_t i = a; i + m <= b; i++) {                                             \
            Py_ssize_t k = 0;                                                                 \
            while (k < m && s[i + k] == (T)WORDS[w][k])                                       \
                k++;                                                                          \
            if (k == m)                                                                       \
                return 1;                                                                     \
        }                                                                                     \
    }                                                                                         \
    return 0;                                                                                 \
}                                                                                             \
                                                                                              \
/* Where the row that starts with the `\n` at s[p] ends (its `\n` or `end`), or -1; *worded     \
 * set when one of its W cells holds one of WORDS. */                                         \
static Py_ssize_t                                                                             \
NAME##_row(const T *s, Py_ssize_t p, Py_ssize_t end, const char *spec, Py_ssize_t ncells,     \
           int *worded)                                                                       \
{                                                                                             \
    Py_ssize_t q = p + 1, n;                                                                  \
    while (q < end && IS_BLANK(s[q]))                                                         \
        q++;                                                                                  \
    for (Py_ssize_t c = 0; c < ncells; c++) {                                                 \
        if (c > 0) {                                                                          \
            if (q >= end || !IS_BLANK(s[q]))                                                  \
                return -1;                                                                    \
            while (q < end && IS_BLANK(s[q]))                                                 \
                q++;                                                                          \
        }                                                                                     \
        switch (spec[c]) {                                                                    \
        case 'D':                                                                             \
            if ((n = NAME##_digits(s, q, end)) < 1)                                           \
                return -1;                                                                    \
            q += n;                                                                           \
            break;                                                                            \
        case 'S':                                                                             \
            if (q < end && (s[q] == '-' || s[q] == '+'))                                      \
                q++;                                                                          \
            /* fall through */                                                                \
        case 'I':                                                                             \
            if ((n = NAME##_digits(s, q, end)) < 1 || n > 18)                                 \
                return -1;                                                                    \
            q += n;                                                                           \
            break;                                                                            \
        case 'X':                                                                             \
            if (end - q >= 3 && s[q] == 'N' && s[q + 1] == '/' && s[q + 2] == 'A') {          \
                q += 3;                                                                       \
                break;                                                                        \
            }                                                                                 \
            if ((n = NAME##_digits(s, q, end)) < 1 || n > 15)                                 \
                return -1;                                                                    \
            q += n;                                                                           \
            break;                                                                            \
        case 'F':                                                                             \
            if ((n = NAME##_digits(s, q, end)) < 1 || n > 30)                                 \
                return -1;                                                                    \
            q += n;                                                                           \
            if (q < end && s[q] == '.') {                                                     \
                if ((n = NAME##_digits(s, q + 1, end)) < 1 || n > 30)                         \
                    return -1;                                                                \
                q += 1 + n;                                                                   \
            }                                                                                 \
            if (q < end && (s[q] == 'e' || s[q] == 'E')) {                                    \
                Py_ssize_t r = q + 1;                                                         \
                if (r < end && (s[r] == '-' || s[r] == '+'))                                  \
                    r++;                                                                      \
                if ((n = NAME##_digits(s, r, end)) < 1 || n > 2)                              \
                    return -1;                                                                \
                q = r + n;                                                                    \
            }                                                                                 \
            break;                                                                            \
        default: { /* W */                                                                    \
            Py_ssize_t start = q;                                                             \
            while (q < end && IS_WORD(s[q]))                                                  \
                q++;                                                                          \
            if (q == start)                                                                   \
                return -1;                                                                    \
            if (q - start >= 5 && !*worded)                                                   \
                *worded = NAME##_worded(s, start, q);                                         \
        }                                                                                     \
        }                                                                                     \
    }                                                                                         \
    while (q < end && IS_BLANK(s[q]))                                                         \
        q++;                                                                                  \
    return q == end || s[q] == '\n' ? q : -1;                                                 \
}                                                                                             \
                                                                                              \
static Py_ssize_t                                                                             \
NAME(const T *s, Py_ssize_t pos, Py_ssize_t end, const char *spec, Py_ssize_t ncells,         \
     Py_ssize_t *count, int *worded)                                                          \
{                                                                                             \
    while (pos < end && s[pos] == '\n') {                                                     \
        int row_worded = *worded;                                                             \
        Py_ssize_t stop = NAME##_row(s, pos, end, spec, ncells, &row_worded);                 \
        if (stop < 0)                                                                         \
            break;                                                                            \
        *worded = row_worded;                                                                 \
        (*count)++;                                                                           \
        pos = stop;                                                                           \
    }                                                                                         \
    return pos;                                                                               \
}

DEFINE_SCAN(scan1, Py_UCS1)
DEFINE_SCAN(scan2, Py_UCS2)
DEFINE_SCAN(scan4, Py_UCS4)

const char nccl_rows_table_rows_doc[] =
"table_rows(text, pos, end, spec) -> (count, stop, worded)\n\n"
"The stretch of well-formed table rows at text[pos:end] (each after its `\\n`), read as\n"
"harness.parsers.nccl_tests_rows.rows_pattern's match(text, pos, end) reads it: count rows\n"
"ending at stop ((0, pos) for none); worded: one of ROW_WORDS is in text[pos:stop]. `spec`\n"
"holds one letter per cell (D I S F X W, see harness/parsers/_nccl_rows.c).";

PyObject *
nccl_rows_table_rows(PyObject *self, PyObject *args)
{
    PyObject *text;
    Py_ssize_t pos, end, nspec, count = 0;
    const char *spec;
    int worded = 0;
    if (!PyArg_ParseTuple(args, "Unny#:table_rows", &text, &pos, &end, &spec, &nspec))
        return NULL;
    Py_ssize_t len = PyUnicode_GET_LENGTH(text);
    end = end < 0 ? 0 : end > len ? len : end;  /* as re's endpos */
    pos = pos < 0 ? 0 : pos;
    if (nspec < 1 || strspn(spec, "DISFXW") != (size_t)nspec) {
        PyErr_SetString(PyExc_ValueError, "table_rows: spec holds one of D I S F X W per cell");
        return NULL;
    }
    Py_ssize_t stop = pos;
    const void *data = PyUnicode_DATA(text);
    switch (PyUnicode_KIND(text)) {
    case PyUnicode_1BYTE_KIND:
        stop = scan1(data, pos, end, spec, nspec, &count, &worded);
        break;
    case PyUnicode_2BYTE_KIND:
        stop = scan2(data, pos, end, spec, nspec, &count, &worded);
        break;
    default:
        stop = scan4(data, pos, end, spec, nspec, &count, &worded);
    }
    return Py_BuildValue("(nnO)", count, count ? stop : pos, count && worded ? Py_True : Py_False);
}
