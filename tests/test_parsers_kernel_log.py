"""Kernel-log XID parser over recorded logs (tests/data/kernel_log, see SOURCES.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.gpu import MONITOR, REBOOT, REPLACE, RESET, XID_ACTIONS, xid_action
from harness.parsers import ParseError
from harness.parsers.kernel_log import parse_kernel_log

DATA = Path(__file__).parent / "data" / "kernel_log"


@pytest.mark.parametrize(("name", "events"), [
    ("dmesg-old-xid32.txt", [(32, "0000:01:00", None, None, MONITOR, "1399.140323"),
                             (32, "0000:01:00", None, None, MONITOR, "1399.140655")]),
    ("syslog-xid13-31-pid-name.txt", [
        (13, "0000:af:00", 108743, "python", MONITOR, "Jun 10 03:09:55"),
        (31, "0000:af:00", 108743, "python", MONITOR, "Jun 10 03:09:55"),
        (31, "0000:01:00", 80798, "llama-server", MONITOR, "May 15 08:57:36")]),
    ("journal-xid13-unknown-pid-truncated.txt", [
        (13, "0000:08:00", None, None, MONITOR, None)] * 2),
    ("journal-short-iso-p5-faults-constructed.txt", [
        (48, "0000:53:00", 41233, "python", RESET, "2024-10-01T09:14:40+0000"),
        (63, "0000:53:00", None, None, MONITOR, "2024-10-01T09:14:40+0000"),
        (79, "0000:64:00", 41240, "python", REBOOT, "2024-10-01T09:20:02+0000"),
        (94, "0000:75:00", 41251, "python", MONITOR, "2024-10-01T09:20:05+0000")]),
    ("dmesg-fallen-off-bus-no-xid.txt", [(79, "0000:b3:00.0", None, None, REBOOT, "1843.308145")]),
    ("real_dmesg-T-xid13-109-31-pt_main_thread.txt", [
        (13, "0000:cb:00", None, None, MONITOR, "Fri Aug 30 11:43:09 2024")] * 3 + [
        (109, "0000:cb:00", 1797828, "pt_main_thread", RESET, "Fri Aug 30 11:43:14 2024"),
        (31, "0000:cb:00", 626486, "pt_main_thread", MONITOR, "Sat Aug 31 07:06:03 2024"),
        (109, "0000:cb:00", 1158578, "pt_main_thread", RESET, "Sat Aug 31 08:53:21 2024")]),
    # syslog lines that also carry the kernel's uptime; each line of the message is prefixed.
    ("real_syslog-kernel-uptime-fallen-off-bus-multiline.txt", [
        (79, "0000:5d:00.0", None, None, REBOOT, "Jan  3 07:39:45")]),
    # The driver prints `NVRM: GPU 0000:5d:00.0: GPU has fallen off the bus.` next to the Xid 79
    # line: one event, not two.
    ("real_dmesg-xid79-with-gpu-fallen-line.txt", [
        (79, "0000:5d:00", None, None, REBOOT, "4254.197860")]),
    ("real_journal-xid79-fallen-line-xid44.txt", [
        (79, "0000:01:00", None, None, REBOOT, "Nov 07 18:17:15"),
        (44, "0000:01:00", 12348, "tf_cnn_benchmar", MONITOR, "Nov 07 18:17:15")]),
    # Old drivers: `NVRM: GPU at 0000:01:00.0 has fallen off the bus.` alone (printed twice).
    ("real_dmesg-old-gpu-at-fallen-off-bus-no-xid.txt", [
        (79, "0000:01:00.0", None, None, REBOOT, "49.261458")]),
    # `dmesg -H` deltas (`[  +0.000033]`) are not times; PCI domain 0002.
    ("real_dmesg-reltime-fallen-off-bus-domain-0002.txt", [
        (79, "0002:21:00.0", None, None, REBOOT, None)]),
    ("real_dmesg-xid79-nvswitch-sxid-20034.txt", [
        (79, "0000:91:00", None, None, REBOOT, "6781741.548779")]),
    # Blackwell DBE: 48 without and with pid, 171 (its DRAM detail), 63, and 154 naming the
    # action the driver wants (Drain and Reset).
    ("real_journal-xid48-171-63-154-drain-and-reset.txt", [
        (48, "0000:55:00", None, None, RESET, "Aug 10 15:36:05"),
        (171, "0000:55:00", None, None, MONITOR, "Aug 10 15:36:05"),
        (48, "0000:55:00", 2187734, "python", RESET, "Aug 10 15:36:05"),
        (63, "0000:55:00", 2187734, "python", MONITOR, "Aug 10 15:36:05"),
        (154, "0000:55:00", None, None, RESET, "Aug 10 15:36:05")]),
    ("real_dmesg-T-xid119-gsp-timeout-xe9680.txt", [
        (119, "0000:9b:00", 2024380, "nvidia-smi", RESET, "Sun Feb 23 16:24:18 2025"),
        (119, "0000:9b:00", 2024380, "nvidia-smi", RESET, "Sun Feb 23 16:24:24 2025"),
        (119, "0000:9b:00", 2024380, "nvidia-smi", RESET, "Sun Feb 23 16:24:30 2025"),
        (119, "0000:9b:00", 1263500, "cache_mgr_main", RESET, "Sun Feb 23 16:27:12 2025"),
        (119, "0000:9b:00", 1240590, "gpud", RESET, "Sun Feb 23 16:30:13 2025")]),
    # GB200 (PCI domains 0008/0009/0018/0019): fatal NVLink5 Xid 149, then 154s.
    ("real_kmsg-gb200-nvlink5-xid149-154.txt", [
        (149, "0009:01:00", None, None, RESET, "171167.620236"),
        (154, "0009:01:00", None, None, RESET, "171167.621162"),
        (149, "0008:01:00", None, None, RESET, "171167.630899"),
        (154, "0019:01:00", None, None, RESET, "171167.897562"),
        (149, "0009:01:00", None, None, RESET, "171167.969026"),
        (149, "0009:01:00", None, None, RESET, "171168.109293"),
        (149, "0008:01:00", None, None, RESET, "171168.409446"),
        (154, "0018:01:00", None, None, RESET, "171168.537473"),
        (154, "0008:01:00", None, None, RESET, "171168.601459")]),
    ("real_kmsg-nvlink5-nonfatal-xid144-145.txt", [
        (144, "0000:01:00", None, None, MONITOR, None),
        (145, "0018:01:00", None, None, MONITOR, None),
        (149, "0019:01:00", None, None, RESET, None)]),
    ("real_dmesg-T-xid43-31-94-contained-h100.txt", [
        (43, "0000:00:05", 1045242, "pt_main_thread", MONITOR, "Wed Jul 31 23:14:18 2024"),
        (43, "0000:00:05", 1084984, "pt_main_thread", MONITOR, "Wed Jul 31 23:15:26 2024"),
        (31, "0000:00:07", 2512125, "python3.10", MONITOR, "Mon Aug  5 03:54:13 2024"),
        (94, "0000:00:08", None, None, MONITOR, "Fri Aug  9 13:32:56 2024")]),
    # A MIG GPU's Xid names its instance inside the parentheses; 95 says RST: Yes.
    ("nvidia-doc_xid94-95-mig-and-rst-flags.txt", [
        (94, "0000:01:00", 7194, None, MONITOR, None),
        (94, "0000:01:00", 7062, None, MONITOR, None),
        (95, "0000:01:00", 7062, None, REBOOT, None),
        (95, "0000:37:00", 5171, None, REBOOT, None)]),
    # talosctl dmesg: `host: kern: warning: [ISO]: ...`; 8x A100 SXM4 with NVSwitch, vLLM.
    ("real_talos-xid62-45-74-154-nvswitch-a100.txt", [
        (62, "0000:48:00", None, None, RESET, "2026-04-22T21:25:20.505406921Z"),
        (45, "0000:48:00", 22884, "VLLM::Worker", MONITOR, "2026-04-22T21:26:20.599488292Z"),
        (45, "0000:48:00", 22884, "VLLM::Worker", MONITOR, "2026-04-22T21:26:20.599595837Z"),
        (74, "0000:48:00", 22884, "VLLM::Worker_TP", RESET, "2026-04-22T21:26:20.599716692Z"),
        (154, "0000:48:00", None, None, RESET, "2026-04-22T21:26:20.695845708Z")]),
    # `kernel: ` prefix only; GB200 Xid 45s caused by NVLink5 Xids whose lines (and severity)
    # were not kept: watched.
    ("real_kernel-prefix-xid45-caused-by-145-149.txt", [
        (45, "0000:dc:00", 1818990, "python3", MONITOR, None),
        (45, "0000:ed:00", 1818992, "python3", MONITOR, None),
        (45, "0000:ba:00", 1818989, "python3", MONITOR, None),
        (45, "0000:97:00", 1818987, "python3", MONITOR, None),
        (45, "0000:dc:00", 1818990, "python3", MONITOR, None),
        (45, "0000:ba:00", 1818989, "python3", MONITOR, None),
        (45, "0000:ed:00", 1818992, "python3", MONITOR, None)]),
    ("real_kmsg-xid79-154-node-reboot-required.txt", [
        (79, "0000:04:00", None, None, REBOOT, None),
        (154, "0000:04:00", None, None, REBOOT, None)]),
])
def test_xid_events(name: str, events: list):
    log = parse_kernel_log((DATA / name).read_text())
    assert [(e.xid, e.pci, e.pid, e.process, e.action, e.time) for e in log.events] == events


def test_nvswitch_sxid_lines():
    log = parse_kernel_log((DATA / "real_dmesg-xid79-nvswitch-sxid-20034.txt").read_text())
    # Only the first line of each SXid (Fatal / Non-fatal) is an event; `Severity ...` and
    # `Data {...}` lines are its details.
    assert [(e.sxid, e.switch, e.pci, e.fatal, e.message, e.time) for e in log.sxid_events] == [
        (20034, 1, "0000:06:00.0", True, "Link 48 LTSSM Fault Up", "6781753.400584"),
        (20034, 0, "0000:05:00.0", True, "Link 63 LTSSM Fault Up", "6781753.404587"),
        (20034, 2, "0000:07:00.0", True, "Link 37 LTSSM Fault Up", "6781753.407899"),
        (20034, 0, "0000:05:00.0", True, "Link 62 LTSSM Fault Up", "6781753.408138"),
    ]


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


def test_messages():
    log = parse_kernel_log((DATA / "journal-short-iso-p5-faults-constructed.txt").read_text())
    assert log.events[2].message == "GPU has fallen off the bus."
    old = parse_kernel_log((DATA / "dmesg-old-xid32.txt").read_text())
    assert old.events[0].message == "Channel ID 00000009 intr 00800000"


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


@pytest.mark.parametrize(("name", "num_lines"), [
    ("real_dev-kmsg-clean-nvswitch.txt", 6),
    ("real_dmesg-decode-iso-clean-nccl-segfault.txt", 2),
])
def test_clean_real_logs_in_other_forms_are_kernel_logs(name: str, num_lines: int):
    log = parse_kernel_log((DATA / name).read_text())
    assert (log.events, log.num_lines) == ((), num_lines)


@pytest.mark.parametrize(("line", "time"), [
    ("3,1002,102000417,-;NVRM: Xid (PCI:0000:af:00): 48, pid='<unknown>', name=<unknown>, Ch 00000008",
     "102.000417"),  # /dev/kmsg: microseconds since boot
    ("kern  :warn  : 2025-01-21T04:41:44,285060+00:00 NVRM: Xid (PCI:0000:af:00): 48, DBE",
     "2025-01-21T04:41:44,285060+00:00"),  # dmesg -x --time-format iso
])
def test_times_of_other_forms(line: str, time: str):
    (e,) = parse_kernel_log(line).events
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


def test_catalogue_is_the_documented_one():
    # domain-facts.md, "GPU health signals": the four classes and their codes; plus 46 and 62,
    # RESET_GPU in NVIDIA's own catalogue (analyzing-xid-catalog.html), absent from the toolkit's.
    by_action: dict[str, set[int]] = {}
    for code, action in XID_ACTIONS.items():
        by_action.setdefault(action, set()).add(code)
    assert by_action == {
        REPLACE: {54},
        REBOOT: {64, 79, 95, 151, 168},
        RESET: {46, 48, 62, 74, 109, 110, 119, 120, 136, 140, 143, 155, 156, 158},
        MONITOR: {13, 31, 43, 63, 92, 94, 121, 126, 154},
    }


# ---- what counts as a kernel log (harness/parsers/kernel_log_format.py) ----

REAL_CLEAN = sorted(p.name for p in DATA.glob("*.txt"))


@pytest.mark.parametrize("name", REAL_CLEAN)
def test_every_recorded_log_is_recognised(name: str):
    """No real log, healthy or not, is refused as 'not a kernel log'."""
    assert parse_kernel_log((DATA / name).read_text()).num_lines > 0


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


@pytest.mark.parametrize(("name", "first_time", "from_boot"), [
    ("real_dmesg-T-clean-boot-banner-kvm.txt", "Thu Jul 18 16:03:50 2024", True),
    ("real_journal-short-iso-clean-no-boot-calico.txt", "2025-01-17T17:10:43+0000", False),
    ("real_dmesg-xid79-nvswitch-sxid-20034.txt", "6781741.548768", False),  # wrapped ring buffer
    ("journal-json-xid79-constructed.txt", "2024-10-01T09:00:00+00:00", True),
    ("real_kmsg-xid79-154-node-reboot-required.txt", None, None),  # no times: unknown
])
def test_what_the_log_covers(name: str, first_time: str | None, from_boot: bool | None):
    log = parse_kernel_log((DATA / name).read_text())
    assert (log.first_time, log.from_boot) == (first_time, from_boot)


def test_window_wording():
    log = parse_kernel_log((DATA / "real_journal-short-iso-clean-no-boot-calico.txt").read_text())
    assert log.window == ("since 2025-01-17T17:10:43+0000 only (the log does not reach back to "
                          "the boot: ring buffer wrapped or journal rotated; older XIDs are not "
                          "seen)")
    boot = parse_kernel_log((DATA / "real_dmesg-T-clean-boot-banner-kvm.txt").read_text())
    assert boot.window == "since boot"


def test_journal_json_records():
    log = parse_kernel_log((DATA / "journal-json-xid79-constructed.txt").read_text())
    assert [(e.xid, e.pci, e.pid, e.time, e.message) for e in log.events] == [
        (79, "0000:64:00", 41240, "2024-10-01T09:20:02+00:00", "GPU has fallen off the bus.")]


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
