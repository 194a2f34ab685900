/* nccl-tests table rows (harness/parsers/_nccl_rows.c), listed in _nccl_scan's method table. */
#ifndef NCCL_ROWS_H
#define NCCL_ROWS_H
#include <Python.h>

extern const char nccl_rows_table_rows_doc[];
PyObject *nccl_rows_table_rows(PyObject *self, PyObject *args);

#endif
