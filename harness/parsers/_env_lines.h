/* A shell script's common lines (harness/parsers/_env_lines.c: env_run; _env_join.c: env_join), words
 * (_env_words.c: env_words), readings (_env_read.c: env_reading) and the format pass's inert
 * lines (_env_shape.c: env_shape_run), listed in _nccl_scan's method table. */
#ifndef ENV_LINES_H
#define ENV_LINES_H
#include <Python.h>

#define IS_BLANK(c) ((c) == ' ' || (c) == '\t')
#define IS_NAME_START(c) (((c) >= 'A' && (c) <= 'Z') || ((c) >= 'a' && (c) <= 'z') || (c) == '_')
#define IS_NAME_CHAR(c) (IS_NAME_START(c) || ((c) >= '0' && (c) <= '9'))
/* printable ASCII (and tab, which only a quoted value may hold) */
#define IS_TEXT(c) ((c) >= 0x20 && (c) < 0x7f)

extern const char env_lines_run_doc[];
PyObject *env_lines_run(PyObject *self, PyObject *args);
extern const char env_lines_words_doc[];
PyObject *env_lines_words(PyObject *self, PyObject *arg);
/* env_words(text) and env_reading(words) for env_run: a new reference (None: not lexed; from
 * env_words_of, False: a quote or `$(` not closed). */
PyObject *env_words_of(PyObject *text);
PyObject *env_reading_of(PyObject *words);
extern const char env_lines_reading_doc[];
PyObject *env_lines_reading(PyObject *self, PyObject *words);
/* The command continued from text[pos] (_env_join.c), a new reference (None: not joined); *stop:
 * where it ends. */
PyObject *env_join_at(PyObject *text, Py_ssize_t pos, Py_ssize_t end, Py_ssize_t *stop);
extern const char env_lines_join_doc[];
PyObject *env_lines_join(PyObject *self, PyObject *args);
extern const char env_lines_shape_run_doc[];
PyObject *env_lines_shape_run(PyObject *self, PyObject *args);

#endif
