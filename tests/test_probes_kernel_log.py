"""Complete evidence only (issue 25 item 8): the kernel log counts as complete only when its
source says so. A tool must exit 0 with nothing of its output cut and its last line ended by a
newline; a $PREFLIGHT_KERNEL_LOG file must end with one. The first half of a clean dmesg, cut
mid-line, is an incomplete log (an error in every tier), never a clean one."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.base.errors import ProbeError
from harness.probes.kernel_log import IncompleteLogError, read_kernel_log
from tests.conftest import REPO, copy_check_file, run_checks
from tests.fake_tools import empty_path, make_tool

DATA = Path(__file__).parent / "data" / "kernel_log"
#: A real clean dmesg (kmsg format, NVSwitch lines, no XID): the e2e fake node's default log.
CLEAN = DATA / "real_dev-kmsg-clean-nvswitch.txt"


def _first_half(path: Path, *, whole_lines: bool) -> str:
    """The first half of a log: cut mid-line, or at the end of the line it reached."""
    text = path.read_text(errors="replace")
    half = text[: len(text) // 2]
    if whole_lines:
        return half[: half.rindex("\n") + 1]
    assert not half.endswith("\n")  # the sample is cut mid-line, as the test means
    return half


@pytest.fixture
def bin_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return empty_path(tmp_path, monkeypatch)


def _printing(bin_dir: Path, tool: str, text: str) -> None:
    """`tool` prints `text` byte for byte (no newline added) and exits 0."""
    out = bin_dir.parent / f"{tool}.out"
    out.write_text(text)
    make_tool(bin_dir, tool, f"cat '{out}'")


def test_dmesg_cut_mid_line_is_incomplete_not_clean(bin_dir: Path):
    _printing(bin_dir, "dmesg", _first_half(CLEAN, whole_lines=False))
    with pytest.raises(IncompleteLogError) as exc:
        read_kernel_log(env={})
    message = str(exc.value)
    assert "`dmesg` exited 0 but its output ends mid-line (its last line " in message
    assert "has no newline): the log is incomplete (cut), and the lines it lost may hold XIDs" \
        in message
    assert "`journalctl -k -o short-iso --no-pager -b` could not run" in message  # tried first


def test_dmesg_of_whole_lines_is_read(bin_dir: Path):
    """The control: the same half ending with its line's newline is a (shorter) complete log."""
    _printing(bin_dir, "dmesg", _first_half(CLEAN, whole_lines=True))
    log = read_kernel_log(env={})
    assert log.source == "`dmesg`" and log.num_lines == 3 and log.events == ()


def test_a_cut_journal_falls_back_to_a_complete_dmesg(bin_dir: Path):
    _printing(bin_dir, "journalctl", _first_half(CLEAN, whole_lines=False))
    _printing(bin_dir, "dmesg", CLEAN.read_text(errors="replace"))
    assert read_kernel_log(env={}).source == "`dmesg`"


def test_a_journal_that_fails_after_printing_is_not_read(bin_dir: Path):
    """journalctl must exit 0: its whole log printed, then a non-zero status, is not complete."""
    out = bin_dir.parent / "journal.out"
    out.write_text(CLEAN.read_text(errors="replace"))
    make_tool(bin_dir, "journalctl", f"cat '{out}'; exit 1")
    with pytest.raises(ProbeError) as exc:
        read_kernel_log(env={})
    assert "`journalctl -k -o short-iso --no-pager -b` exited with status 1" in str(exc.value)
    assert not isinstance(exc.value, IncompleteLogError)  # unread, not cut: a warning tier rule


def test_a_kernel_log_file_cut_mid_line_is_incomplete(tmp_path: Path):
    log = tmp_path / "kern.log"
    log.write_text(_first_half(CLEAN, whole_lines=False))
    with pytest.raises(IncompleteLogError, match=rf"^PREFLIGHT_KERNEL_LOG={log} ends mid-line"):
        read_kernel_log(env={"PREFLIGHT_KERNEL_LOG": str(log)})
    log.write_text(_first_half(CLEAN, whole_lines=True))
    assert read_kernel_log(env={"PREFLIGHT_KERNEL_LOG": str(log)}).events == ()


CUT_LOG = '''
import pytest
from harness.base.errors import ProbeError
from harness.fixtures.reading import Reading
from harness.probes.kernel_log import IncompleteLogError


@pytest.fixture(scope="session")
def gpu_inventory_reading():
    return Reading(error=ProbeError("the GPUs are not read in this test"))


@pytest.fixture(scope="session")
def kernel_log_reading():
    return Reading(error=IncompleteLogError("cannot read the kernel log for XID errors: `dmesg` "
                                            "exited 0 but its output ends mid-line"))
'''


@pytest.mark.parametrize("tier", ["preflight", "certify"])
def test_a_cut_log_is_an_error_in_every_tier(pytester: pytest.Pytester,
                                             monkeypatch: pytest.MonkeyPatch, tier: str):
    """An unreadable log warns in the preflight tier (containers without CAP_SYSLOG); a log
    that was read but is cut errors there too."""
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    pytester.makeconftest(CUT_LOG)
    copy_check_file(pytester, "test_gpu_kernel_log.py")
    _, got = run_checks(pytester, "--preflight-profile", "p5.48xlarge", "--preflight-tier", tier)
    assert sorted(got) == ["PF-GPU-006", "PF-GPU-018"]
    for cid in ("PF-GPU-006", "PF-GPU-018"):
        assert got[cid]["outcome"] == "error", got[cid]
        assert got[cid]["message"].startswith(f"[{cid}] cannot read the kernel log for XID "
                                              "errors: `dmesg` exited 0 but its output ends")
