"""XIDs in a window (harness.judges.xid) on recorded kernel logs (tests/data/kernel_log)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from harness.judges.xid import event_epoch, is_application, summarize
from harness.parsers.kernel_log import parse_kernel_log

DATA = Path(__file__).parent / "data" / "kernel_log"


def _log(name: str):
    return parse_kernel_log((DATA / name).read_text())


def test_application_vs_hardware():
    assert all(is_application(x) for x in (13, 31, 43, 45))
    assert not is_application(79) and not is_application(109) and not is_application(48)
    assert not is_application(45, "channel 0x00000010 caused by previous Xid 79")
    assert is_application(45, "caused by previous Xid 13")


def test_event_times_in_every_form():
    now = datetime(2025, 3, 1, tzinfo=UTC)
    assert event_epoch("100.5", boot_epoch=1000.0, now=now) == 1100.5
    assert event_epoch("100.5", boot_epoch=None, now=now) is None
    assert event_epoch("2025-02-23T16:24:18+0000", boot_epoch=None, now=now) == \
        datetime(2025, 2, 23, 16, 24, 18, tzinfo=UTC).timestamp()
    assert event_epoch("Sun Feb 23 16:24:18 2025", boot_epoch=None, now=now) == \
        datetime(2025, 2, 23, 16, 24, 18, tzinfo=UTC).timestamp()
    # syslog has no year: a date after `now` is last year's
    assert event_epoch("Dec 31 23:00:00", boot_epoch=None, now=now) == \
        datetime(2024, 12, 31, 23, tzinfo=UTC).timestamp()
    assert event_epoch("garbage", boot_epoch=None, now=now) is None


def test_real_log_split_and_window():
    log = _log("real_dmesg-T-xid13-109-31-pt_main_thread.txt")
    first = event_epoch(log.events[0].time, boot_epoch=None, now=datetime.now(UTC))
    now = datetime.fromtimestamp(first + 3600, UTC)  # one hour after the first XID
    window = summarize(log.events, window_s=2 * 3600, now=now, boot_epoch=None)
    assert {e.xid for e in window.application} >= {13, 31}
    assert {e.xid for e in window.hardware} == {109}
    assert window.undated == 0 and round(window.hours, 1) == 2.0
    # the job started after the first XIDs: they are not in its window (the next day's are)
    later = summarize(log.events, window_s=2 * 3600, now=now, boot_epoch=None,
                      since_epoch=first + 1800)
    assert 13 not in {e.xid for e in later.application}
    assert all(e.time.startswith("Sat Aug 31") for e in later.hardware)


def test_suspicious_application_needs_several_processes():
    log = _log("real_dmesg-T-xid13-109-31-pt_main_thread.txt")
    first = event_epoch(log.events[0].time, boot_epoch=None, now=datetime.now(UTC))
    window = summarize(log.events, window_s=3600, now=datetime.fromtimestamp(first + 60, UTC),
                       boot_epoch=None)
    pcis = {e.pci for e in window.application}
    procs = {e.process or e.pid for e in window.application}
    assert window.suspicious_application() == (sorted(pcis) if len(procs) >= 2
                                               and len(window.application) >= 3 else [])


def test_check_pf_gpu_019_end_to_end(pytester, monkeypatch, tmp_path: Path):
    from tests.conftest import facts_conftest, run_check_file

    monkeypatch.setenv("PYTHONPATH", str(Path(__file__).resolve().parent.parent))
    pytester.makeconftest(facts_conftest("tests.host_facts", "xid_2024", ["kernel_log"]))
    monkeypatch.setenv("PREFLIGHT_XID_WINDOW_H", str(24 * 365 * 20))  # reaches back to 2024
    got = run_check_file(pytester, "test_xid.py", "p5.48xlarge", f"--preflight-sysroot={tmp_path}")
    result = got["PF-GPU-019"]
    assert result["outcome"] == "fail"
    assert "Xid 109, pt_main_thread" in result["message"] and "-> reset GPU" in result["message"]
    assert any("application-caused GPU 0000:cb:00: Xid 13" in w for w in result["warnings"])
    monkeypatch.setenv("PREFLIGHT_XID_WINDOW_H", "2")
    recent = run_check_file(pytester, "test_xid.py", "p5.48xlarge",
                            f"--preflight-sysroot={tmp_path}")["PF-GPU-019"]
    assert recent["outcome"] == "pass"  # 2024's XIDs are outside the last 2 hours
