"""`dcgmi mndiag` (the multi-node diagnostic) read by host and GPU, with each failure's reason:
the samples are built from DCGM's own display code (tests/data/dcgm/SOURCES.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.parsers import ParseError
from harness.parsers.dcgm import parse_dcgm_diag

DATA = Path(__file__).parent / "data" / "dcgm"
FAIL_TEXT = (DATA / "mndiag-text-4.3-host1-gpu1-fail-constructed.txt").read_text()


@pytest.mark.parametrize("name", ["mndiag-text-4.3-host1-gpu1-fail-constructed.txt",
                                  "mndiag-json-4.3-host1-gpu1-fail-constructed.json"])
def test_each_gpu_is_read_with_its_host(name: str):
    diag = parse_dcgm_diag((DATA / name).read_text())
    got = sorted((r.host, r.gpu, r.status) for r in diag.results)
    assert got == [(0, 0, "pass"), (0, 1, "pass"), (1, 0, "pass"), (1, 1, "fail")]
    assert diag.passed is False
    assert len(diag.failed) == 1
    assert diag.failed[0].message.startswith("Test error message for host 1, GPU 1")


def test_the_reason_is_the_gpus_error_rows():
    """Without the `Error:` rows (under the GPU and in the summary) the failure stands, with no
    reason: the reason read comes from those rows."""
    bare = "\n".join(line for line in FAIL_TEXT.splitlines()
                     if "Error: " not in line and "MNUBERGEMM reported" not in line
                     and "Host 1 (GPU 1)" not in line)
    failed = parse_dcgm_diag(bare).failed
    assert [(r.host, r.gpu, r.message) for r in failed] == [(1, 1, "")]


def test_a_failed_run_with_every_gpu_passing_names_mpis_error():
    diag = parse_dcgm_diag((DATA / "mndiag-text-4.3-mpi-error-constructed.txt").read_text())
    assert [(r.gpu, r.host) for r in diag.failed] == [(None, None)]
    assert diag.failed[0].message.startswith("mpirun exited with status 1: ORTE was unable")
    gone = parse_dcgm_diag("\n".join(line for line in (
        DATA / "mndiag-text-4.3-mpi-error-constructed.txt").read_text().splitlines()
        if "MPI Error" not in line and "ORTE" not in line and "daemons" not in line))
    assert gone.failed[0].message == "dcgmi mndiag reported a failure and no reason"


def test_a_passing_run_passes_and_a_cut_one_is_not_read_as_a_pass():
    text = (DATA / "mndiag-text-4.3-pass-constructed.txt").read_text()
    assert parse_dcgm_diag(text).passed is True
    head = text.split("|-----  Metadata")[0]
    with pytest.raises(ParseError):
        parse_dcgm_diag(head)
