"""The one build step pyproject.toml cannot declare stably: the optional C extension that scans
NCCL logs (harness/parsers/_nccl_scan.c), nccl-tests' table rows (harness/parsers/_nccl_rows.c) and
shell scripts' common lines (harness/parsers/_env_lines.c,
_env_join.c, _env_words.c, _env_read.c, _env_shape.c)
(setuptools' `ext-modules` table in pyproject.toml is still experimental). Everything else about
the package is in pyproject.toml.

`optional=True`: where no C compiler (or no Python headers) is, the wheel is built without it
and harness.parsers.nccl_log_chunk and nccl_tests_rows scan with the regexes they are tested
against, and the env reader reads every script line in Python (same results, slower on large
logs)."""

from setuptools import Extension, setup

setup(ext_modules=[Extension("harness.parsers._nccl_scan",
                             ["harness/parsers/_nccl_scan.c", "harness/parsers/_nccl_rows.c",
                              "harness/parsers/_env_lines.c", "harness/parsers/_env_join.c",
                              "harness/parsers/_env_words.c",
                              "harness/parsers/_env_read.c", "harness/parsers/_env_shape.c"],
                             depends=["harness/parsers/_nccl_rows.h",
                                      "harness/parsers/_env_lines.h"], optional=True)])
