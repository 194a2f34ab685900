"""Kernel-log XID parser: behaviour on crafted lines and on recorded logs cut or noised. What each
recorded log (tests/data/kernel_log) says is in its X.expect.json (tests/test_parsers_samples.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.base.gpu_actions import MONITOR, REBOOT, REPLACE, RESET, xid_action
from harness.parsers import ParseError
from harness.parsers.kernel_log import parse_kernel_log

DATA = Path(__file__).parent / "data" / "kernel_log"


@pytest.mark.parametrize(("line", "pci", "time"), [
    ("NVRM: GPU 0000:29:00.0: GPU has fallen off the bus.", "0000:29:00.0", None),
    ("[ 49.261458] NVRM: GPU at 0000:01:00.0 has fallen off the bus.", "0000:01:00.0", "49.261458"),
    ("kern  :err   : [  912.5] NVRM: GPU at PCI:0000:65:00: GPU has fallen off the bus.",
     "0000:65:00", "912.5"),  # dmesg -x
])
def test_one_line_fallen_off_the_bus(line: str, pci: str, time: str | None):
    (e,) = parse_kernel_log(line).events
    assert (e.xid, e.pci, e.action, e.time) == (79, pci, REBOOT, time)


@pytest.mark.parametrize(("line", "mig", "action"), [
    ("NVRM: Xid (PCI:0000:3b:00 GPU-I:01 GPU-CI:02): 13, pid=9, name=a, Graphics Exception",
     "GPU-I:01 GPU-CI:02", MONITOR),
    ("NVRM: Xid (PCI:0000:3b:00 GPU-I:01): 94, pid=9, Contained: SM (0x1). RST: Yes, D-RST: No",
     "GPU-I:01", RESET),
    ("NVRM: Xid (PCI:0000:3b:00): 94, pid=9, Contained: SM (0x1). RST: No, D-RST: Yes", None, RESET),
])
def test_mig_instances_and_reset_flags(line: str, mig: str | None, action: str):
    (e,) = parse_kernel_log(line).events
    assert (e.pci, e.mig, e.action) == ("0000:3b:00", mig, action)


def test_fallen_line_before_its_xid_line_is_one_event():
    log = parse_kernel_log("[ 1.0] NVRM: GPU 0000:3b:00.0: GPU has fallen off the bus.\n"
                           "[ 1.1] NVRM: Xid (PCI:0000:3b:00): 79, pid=7, name=python, GPU has "
                           "fallen off the bus.\n"
                           "[ 1.2] NVRM: GPU 0000:86:00.0: GPU has fallen off the bus.\n")
    assert [(e.xid, e.pci, e.pid) for e in log.events] == [(79, "0000:3b:00", 7),
                                                            (79, "0000:86:00.0", None)]


def test_the_issue_line_without_prefix():
    line = "NVRM: Xid (PCI:0000:10:1c): 79, pid=1234, name=python, GPU has fallen off the bus."
    (e,) = parse_kernel_log(line).events
    assert (e.xid, e.pci, e.pid, e.process, e.message, e.action) == (
        79, "0000:10:1c", 1234, "python", "GPU has fallen off the bus.", REBOOT)


@pytest.mark.parametrize(("line", "time"), [
    ("[Fri Jan  5 10:34:01 2024] NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=python3, GPU has "
     "fallen off the bus.", "Fri Jan  5 10:34:01 2024"),  # dmesg -T
    ("2024-01-05T10:34:01,123456+00:00 NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=python3, "
     "GPU has fallen off the bus.", "2024-01-05T10:34:01,123456+00:00"),  # dmesg --time-format iso
])
def test_dmesg_time_formats(line: str, time: str):
    (e,) = parse_kernel_log(line).events
    assert (e.xid, e.pci, e.time) == (79, "0000:3b:00", time)


@pytest.mark.parametrize("text", [
    "[Fri Jan  5 10:34:01 2024] Linux version 6.8.0-1015-aws\n",
    "2024-01-05T10:34:01,123456+00:00 Linux version 6.8.0-1015-aws\n",
    "Jan  5 10:34:01 ip-10-1-33-7 kernel: Linux version 6.8.0-1015-aws\n",
])
def test_clean_logs_in_every_time_format_are_kernel_logs(text: str):
    assert parse_kernel_log(text).num_lines == 1


@pytest.mark.parametrize(("line", "time"), [
    ("3,1002,102000417,-;NVRM: Xid (PCI:0000:af:00): 48, pid='<unknown>', name=<unknown>, Ch 00000008",
     "102.000417"),  # /dev/kmsg: microseconds since boot
    ("kern  :warn  : 2025-01-21T04:41:44,285060+00:00 NVRM: Xid (PCI:0000:af:00): 48, DBE",
     "2025-01-21T04:41:44,285060+00:00"),  # dmesg -x --time-format iso
])
def test_times_of_other_forms(line: str, time: str):
    (e,) = parse_kernel_log(line).events
    assert (e.xid, e.pci, e.time) == (48, "0000:af:00", time)


_XID = "NVRM: Xid (PCI:0000:af:00): 48, pid=1, name=python3, DBE"


@pytest.mark.parametrize("stamp", ["[2026-01-02 10:24:27] ",
                                   "  | 2025-05-16T16:39:51.208-07:00 | "],
                         ids=["bracketed", "cloudwatch"])
@pytest.mark.parametrize(("line", "time"), [(f"[ 1399.140323] {_XID}", "1399.140323"),
                                            (_XID, None)])
def test_a_shippers_stamp_is_not_the_events_time(stamp: str, line: str, time: str | None):
    """A collector's or CloudWatch console's stamp says when the line was shipped: the event's
    time is the line's own, or unknown (issue 32)."""
    (e,) = parse_kernel_log(stamp + line).events
    assert (e.xid, e.pci, e.time) == (48, "0000:af:00", time)


def test_kernel_log_without_xids_is_valid():
    log = parse_kernel_log("[    0.000000] Linux version 6.8.0-1015-aws\n"
                           "[    1.234567] pci 0000:53:00.0: [10de:2330] type 00 class 0x030200\n")
    assert log.events == () and log.num_lines == 2


@pytest.mark.parametrize(("text", "message"), [
    ("", "empty input"),
    ("\n\n", "empty input"),
    ("hello world\nthis is not a log\n", "no kernel log lines"),
])
def test_garbage(text: str, message: str):
    with pytest.raises(ParseError, match=message):
        parse_kernel_log(text)


@pytest.mark.parametrize(("xid", "action"), [
    (54, REPLACE), (79, REBOOT), (151, REBOOT), (168, REBOOT), (48, RESET), (74, RESET),
    (46, RESET), (62, RESET),
    (119, RESET), (158, RESET), (13, MONITOR), (31, MONITOR), (94, MONITOR), (154, MONITOR),
    (999, MONITOR),
])
def test_xid_catalogue(xid: int, action: str):
    assert xid_action(xid) == action


@pytest.mark.parametrize(("message", "action"), [
    ("GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)", RESET),
    ("GPU recovery action changed from 0x0 (None) to 0x1 (PF FLR)", RESET),
    ("GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)", REBOOT),
    ("GPU recovery action changed from 0x0 (None) to 0x2 (OS Reboot)", REBOOT),
    ("GPU recovery action changed from 0x0 (None) to 0x3 (Drain P2P)", RESET),
    ("GPU recovery action changed from 0x0 (None) to 0x4 (Drain and Reset)", RESET),
    ("GPU recovery action changed from 0x2 (Node Reboot Required) to 0x0 (None)", MONITOR),
    ("GPU recovery action changed from 0x0 to 0x2", REBOOT),
    ("", MONITOR),
])
def test_xid_154_takes_the_action_it_names(message: str, action: str):
    # A 154 that follows an Xid 31 (monitor) must not leave a GPU that needs a reboot passing.
    assert xid_action(154, message) == action


@pytest.mark.parametrize(("message", "action"), [
    ("channel 0x00000010 caused by previous Xid 79", REBOOT),
    ("Ch 00000002 caused by previous Xid 48", RESET),
    ("channel 0x00000010 caused by previous Xid 45", MONITOR),
    ("Ch 00000001 caused by previous Xid 149", MONITOR),  # its severity is on the 149 line
    ("Ch 00000008", MONITOR),
])
def test_xid_45_follows_the_xid_that_caused_it(message: str, action: str):
    assert xid_action(45, message) == action


# ---- what counts as a kernel log (harness/parsers/kernel_log_format.py) ----

REAL_CLEAN = sorted(p.name for p in DATA.glob("*.txt"))


@pytest.mark.parametrize("name", REAL_CLEAN)
def test_a_truncated_real_log_is_still_a_kernel_log(name: str):
    text = (DATA / name).read_text()
    assert parse_kernel_log(text[: len(text) * 2 // 3]).num_lines > 0  # cut mid-line


@pytest.mark.parametrize(("text", "message"), [
    ("dmesg: read kernel buffer failed: Operation not permitted\n",
     "no kernel log lines; it says: dmesg: read kernel buffer failed: Operation not permitted"),
    ("-- No entries --\n", "no kernel log lines, only '-- No entries --'"),
    ("<html><body><h1>502 Bad Gateway</h1></body></html>\n", "no kernel log lines (first line: "
     "'<html><body><h1>502 Bad Gateway</h1></body></html>')"),
    ("Error: something went wrong\nusage: dmesg [options]\n", "no kernel log lines"),
    ("\x00\x00\x00\x00\n", "no kernel log lines"),
])
def test_text_that_is_not_a_kernel_log(text: str, message: str):
    with pytest.raises(ParseError) as exc:
        parse_kernel_log(text)
    assert str(exc.value).startswith(message)


def test_random_bytes_are_not_a_kernel_log():
    import random

    rng = random.Random(12)
    for _ in range(50):
        blob = bytes(rng.randrange(256) for _ in range(4000)).decode(errors="replace")
        with pytest.raises(ParseError, match=r"no kernel log lines|not a kernel log"):
            parse_kernel_log(blob)


def test_one_kernel_line_in_garbage_is_not_a_kernel_log():
    text = "[    1.000000] usb 1-1: new device\n" + "".join(f"#{i} ?!garbage\n" for i in range(9))
    with pytest.raises(ParseError, match=r"^not a kernel log: 9 of 10 lines are in no log "
                                         r"format \(first: '#0 \?!garbage'\), 1 are kernel"):
        parse_kernel_log(text)


SXID = "nvidia-nvswitch1: SXid (PCI:0000:aa:00.0): 24007, "


@pytest.mark.parametrize(("lines", "fatal"), [
    ([SXID + "Severity 1 Engine instance 12 Sub-engine instance 00", SXID + "Data {0x1, 0x0}"],
     True),
    ([SXID + "Severity 0 Engine instance 12 Sub-engine instance 00"], False),
    ([SXID + "Data {0x1, 0x0}", SXID + "Data {0x0, 0x0}"], None),
])
def test_an_sxid_without_its_first_line_is_read_from_its_details(lines: list[str],
                                                                   fatal: bool | None):
    log = parse_kernel_log("".join(f"[ 10.0] {line}\n" for line in lines))
    assert [(e.sxid, e.switch, e.fatal) for e in log.sxid_events] == [(24007, 1, fatal)]
    assert "first line (Fatal or Non-fatal) is not in the log" in log.sxid_events[0].message
    # With its first line, the detail lines add nothing.
    whole = parse_kernel_log(f"[ 9.0] {SXID}Fatal, Link 48 LTSSM Fault Up\n"
                             + "".join(f"[ 10.0] {line}\n" for line in lines))
    assert [(e.fatal, e.message) for e in whole.sxid_events] == [(True, "Link 48 LTSSM Fault Up")]


def test_a_log_with_some_noise_is_still_a_kernel_log():
    real = (DATA / "real_dmesg-xid79-nvswitch-sxid-20034.txt").read_text().splitlines()
    noisy = "\n".join(line if i % 3 else f"{line}\n@@@ noise {i}" for i, line in enumerate(real))
    assert [e.xid for e in parse_kernel_log(noisy).events] == [79]


@pytest.mark.parametrize(("line", "kind"), [
    ("[    0.000000] Linux version 6.8.0", "kernel"),
    ("[    5.100000 <    0.000012>] pci 0000:00:01.0: x", "kernel"),  # dmesg -d
    ("[  +0.000033] nvidia 0002:21:00.0: x", "kernel"),  # dmesg -H
    ("[Jan 3 07:39] nvidia: loading", "kernel"),  # dmesg -H minute mark
    ("<6>[    0.000000] Linux version 6.8.0", "kernel"),  # dmesg -r
    ("kern  :info  : Linux version 6.8.0", "kernel"),  # dmesg -x -t
    ("2024-10-01T09:14:40+00:00 host kernel: x", "kernel"),  # journalctl short-iso, systemd 250+
    ("2024-10-01T09:14:40.123456+00:00 host kernel: x", "kernel"),  # short-iso-precise, rsyslog
    ("Oct 01 09:14:40.123456 host kernel: x", "kernel"),  # short-precise
    ("Tue 2024-10-01 09:14:40 UTC host kernel: x", "kernel"),  # short-full
    ("1727773680.123456 host kernel: x", "kernel"),  # short-unix
    ("Oct 01 09:14:40 host systemd[1]: Started x.", "log"),  # syslog, another program
    # journalctl --no-hostname: `kernel` is the ident, even before a `NVRM: ` / `ACPI: ` text
    ("Mar 21 21:42:01 kernel: NVRM: GPU0 _kgspRpcRecvPoll: GSP RM heartbeat timed out", "kernel"),
    ("Mar 21 21:42:01 kernel: ACPI: x", "kernel"),
    ("Mar 21 21:42:01 systemd[1]: Started x.", "log"),
    ("IPv6: ADDRCONF(NETDEV_CHANGE): eth0: link becomes ready", "log"),  # dmesg -t, weak
    ("pcieport 0000:00:01.0: AER: Corrected error received", "kernel"),  # dev_printk, no time
    ("-- Boot 3f2a9c1e4b5d4e6f8a7b6c5d4e3f2a1b --", "neutral"),
    ("               NVRM: (PCI ID: 10de:26b5) installed", "kernel"),
    ("      continuation of a message", "neutral"),
    ("hello world", "other"),
])
def test_line_kinds(line: str, kind: str):
    from harness.parsers.kernel_log_format import classify

    assert classify(line).kind == kind


def test_a_file_with_several_boots_is_judged_on_the_last():
    text = ("Oct 01 09:00:00 h kernel: Linux version 6.8.0\n"
            "Oct 01 09:20:02 h kernel: NVRM: Xid (PCI:0000:64:00): 79, pid=1, name=p, GPU has "
            "fallen off the bus.\n"
            "Oct 01 10:00:00 h kernel: Linux version 6.8.0\n"
            "Oct 01 10:05:00 h kernel: NVRM: Xid (PCI:0000:53:00): 13, pid=2, name=p, Graphics\n")
    log = parse_kernel_log(text)
    assert [e.xid for e in log.events] == [79, 13]
    last = log.last_boot()
    assert ([e.xid for e in last.events], last.first_time, last.from_boot) == (
        [13], "Oct 01 10:00:00", True)


def test_an_xid_in_a_paste_with_commentary_is_still_read():
    text = ("Here's what I got after the crash:\n"
            "[ 4254.197860] NVRM: Xid (PCI:0000:5d:00): 79, pid='<unknown>', name=<unknown>, GPU "
            "has fallen off the bus.\n"
            "Any idea? It happened twice.\nThanks!\n")
    assert [(e.xid, e.pci) for e in parse_kernel_log(text).events] == [(79, "0000:5d:00")]


def test_a_gpu_the_driver_could_not_initialise_is_read_once_with_its_count():
    """`RmInitAdapter failed!` (no Xid line: the GPU never came up, gpu-operator#1146) is one
    init failure per GPU, its first time and the driver's code, the repeats counted; the
    `rm_init_adapter failed, device minor number N` line after it adds nothing. Before, such a
    log read as clean."""
    text = "".join(
        f"[ {t}.000000] NVRM: GPU 0000:{bus}:00.0: RmInitAdapter failed! (0x24:0x72:1568)\n"
        f"[ {t}.000001] NVRM: GPU 0000:{bus}:00.0: rm_init_adapter failed, device minor number 5\n"
        for t, bus in ((885, "0a"), (926, "0a"), (930, "0b")))
    log = parse_kernel_log(text)
    assert log.events == () and [(f.pci, f.code, f.time, f.count) for f in log.init_failures] == [
        ("0000:0a:00.0", "0x24:0x72:1568", "885.000000", 2),
        ("0000:0b:00.0", "0x24:0x72:1568", "930.000000", 1)]


def test_init_failures_before_the_last_boot_are_left_out():
    text = ("[    0.000000] Linux version 6.8.0\n"
            "[   12.000000] NVRM: GPU 0000:0a:00.0: RmInitAdapter failed! (0x24:0x72:1568)\n"
            "[    0.000000] Linux version 6.8.0\n[    1.000000] clean boot\n")
    log = parse_kernel_log(text)
    assert len(log.init_failures) == 1 and log.last_boot().init_failures == ()
