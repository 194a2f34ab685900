"""GPU probes against faulty sources: emulated tools on PATH that hang, print garbage, print
nothing, print half an answer, and a fake NVML that hangs, raises or lists no GPU. Each gives a
ProbeError that names the source (a hung one with its command, time and last line), within the
deadline, never a healthy answer."""

from __future__ import annotations

import os
import re
import threading
import time
from pathlib import Path

import pynvml
import pytest

from harness.base import deadline as dl
from harness.base.errors import ProbeError
from harness.probes import chain, dcgm, gpu, kernel_log
from harness.probes.nvml import NvmlUnavailableError
from tests.fake_nvml import FakeNvml, h100_node
from tests.fake_tools import empty_path, make_tool

DATA = Path(__file__).parent / "data"
NO_NVML = FakeNvml([], init_error=pynvml.NVMLError_LibraryNotFound)
#: Load on this shared machine can delay a process by seconds: a bound is checked with this slack.
SLACK_S = 15.0


@pytest.fixture(autouse=True)
def _fresh_session():
    dl.forget_hung()
    yield
    dl.forget_hung()


@pytest.fixture
def bin_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return empty_path(tmp_path, monkeypatch)


def _calls(log: Path) -> list[str]:
    return log.read_text().splitlines() if log.exists() else []


# ---- nvidia-smi ----

def test_a_hung_nvidia_smi_is_named_and_asked_once(bin_dir: Path, tmp_path: Path):
    calls = tmp_path / "calls"
    make_tool(bin_dir, "nvidia-smi", f"echo \"$*\" >> '{calls}'; echo 'Timestamp : Mon'; "
              "exec sleep 60")
    start = time.monotonic()
    with pytest.raises(ProbeError) as exc:
        gpu.inventory(NO_NVML, smi_timeout_s=2, deadline=dl.Deadline.after(60, "PF-GPU-001's "
                                                                           "60 s timeout"))
    assert time.monotonic() - start < 2 + dl.KILL_OVERHEAD_S + SLACK_S
    message = str(exc.value)
    assert message.startswith(
        "cannot read the GPUs: NVML could not start: NVML Shared Library Not Found "
        "(NVMLError_LibraryNotFound); fallback `nvidia-smi -q -x` did not finish within 2 s and "
        "was killed; its last line: 'Timestamp : Mon'. A GPU source that does not answer means "
        "a stuck driver")
    assert _calls(calls) == ["-q -x"]  # -q and the CSV query would wait on the same driver


def test_the_chain_fits_the_deadline_and_says_what_was_cut(bin_dir: Path):
    """The deadline, not the tool's own 60 s, bounds a call; the sources after it are not
    started once no time is left, and the message says so."""
    make_tool(bin_dir, "nvidia-smi", "exec sleep 60")
    owner = "PF-GPU-001's 120 s timeout"
    start = time.monotonic()
    with pytest.raises(ProbeError) as exc:
        gpu.inventory(NO_NVML, deadline=dl.Deadline.after(dl.KILL_OVERHEAD_S + 3, owner))
    assert time.monotonic() - start < dl.KILL_OVERHEAD_S + 3 + SLACK_S
    message = str(exc.value)
    assert re.search(r"fallback `nvidia-smi -q -x` did not finish within [0-3](\.\d)? s and was "
                     r"killed; it printed nothing \(all that was left of PF-GPU-001's 120 s "
                     r"timeout\)", message), message
    assert message.count("no time left") == 1
    assert "; nvidia-smi not tried: no time left of PF-GPU-001's 120 s timeout. " in message


def test_a_hung_nvidia_smi_is_not_waited_on_by_the_next_check(bin_dir: Path, tmp_path: Path):
    calls = tmp_path / "calls"
    make_tool(bin_dir, "nvidia-smi", f"echo \"$*\" >> '{calls}'; exec sleep 60")
    with pytest.raises(ProbeError):
        gpu.inventory(NO_NVML, smi_timeout_s=2)
    with pytest.raises(ProbeError, match=re.escape(
            "fallback `nvidia-smi -q -x` could not run: not started: nvidia-smi hung earlier in "
            "this run (`nvidia-smi -q -x` gave no answer within 2 s)")):
        gpu.inventory(NO_NVML, smi_timeout_s=2)
    assert _calls(calls) == ["-q -x"]


@pytest.mark.parametrize(("body", "why"), [
    ("exit 0", ["nvidia-smi XML does not parse", "no `GPU 0000xxxx:BB:DD.F` section",
                "empty input: no CSV header or rows"]),
    ("head -c 3000 /dev/urandom", ["nvidia-smi XML does not parse",
                                   "no `GPU 0000xxxx:BB:DD.F` section", "CSV"]),
    ("echo 'No devices were found'; exit 0", ["XML does not parse", "nvidia-smi says: No "
                                              "devices were found", "nvidia-smi says: No "
                                              "devices were found"]),
])
def test_nvidia_smi_with_nothing_or_garbage_is_never_an_inventory(bin_dir: Path, body: str,
                                                                   why: list[str]):
    make_tool(bin_dir, "nvidia-smi", body)
    with pytest.raises(ProbeError) as exc:
        gpu.inventory(NO_NVML)
    message = str(exc.value)
    for what, reason in zip(("`nvidia-smi -q -x`", "`nvidia-smi -q`",
                             "`nvidia-smi --query-gpu`"), why, strict=True):
        assert f"fallback {what} printed something unexpected: " in message
        assert reason in message


def test_nvidia_smi_showing_fewer_gpus_than_attached_is_refused(bin_dir: Path):
    xml = (DATA / "nvidia_smi/l4-555-query-xml.xml").read_text()  # 1 <gpu> of 2 attached
    (bin_dir / "dump.xml").write_text(xml)
    text = DATA / "nvidia_smi/h100-550-constructed-faults.txt"
    cut = "".join((text.read_text().split("\nGPU 00000000:64:00.0")[0], "\n"))
    (bin_dir / "dump.txt").write_text(cut)  # 2 attached, the second GPU's section cut off
    make_tool(bin_dir, "nvidia-smi", f'case "$*" in "-q -x") cat "{bin_dir}/dump.xml";; '
              f'"-q") cat "{bin_dir}/dump.txt";; *) exit 0;; esac')
    with pytest.raises(ProbeError) as exc:
        gpu.inventory(NO_NVML)
    message = str(exc.value)
    assert ("fallback `nvidia-smi -q -x` says 2 GPUs are attached but shows 1: its output is "
            "incomplete (cut short?)") in message
    assert ("fallback `nvidia-smi -q` says 2 GPUs are attached but shows 1: its output is "
            "incomplete (cut short?)") in message


def test_the_xml_answer_is_used_first(bin_dir: Path):
    xml = DATA / "nvidia_smi/real_xml-575-rtx4070-laptop.xml"
    make_tool(bin_dir, "nvidia-smi", f'[ "$*" = "-q -x" ] && cat "{xml}"')
    inv = gpu.inventory(NO_NVML)
    assert (inv.source, len(inv.gpus), inv.num_attached) == ("nvidia-smi -q -x", 1, 1)


# ---- NVML ----

class HungNvml(FakeNvml):
    """nvmlInit never returns (a stuck driver) until the test releases it."""

    def __init__(self) -> None:
        super().__init__(h100_node())
        self.release = threading.Event()

    def nvmlInit(self) -> None:
        self.release.wait(120)
        super().nvmlInit()


def test_a_hung_nvml_is_named_then_not_asked_again(bin_dir: Path):
    nvml = HungNvml()
    try:
        start = time.monotonic()
        with pytest.raises(ProbeError) as exc:
            gpu.inventory(nvml, deadline=dl.Deadline.after(dl.KILL_OVERHEAD_S + 2, "X's 8 s "
                                                                                  "timeout"))
        assert time.monotonic() - start < 2 + SLACK_S
        assert re.match(r"cannot read the GPUs: NVML \(nvmlInit and the device queries\) did not "
                        r"return within [12](\.\d)? s \(all that was left of X's 8 s timeout\): "
                        r"the NVIDIA driver may be stuck; nvidia-smi not tried: no time left of "
                        r"X's 8 s timeout\. A GPU source that does not answer",
                        str(exc.value)), str(exc.value)
        with pytest.raises(NvmlUnavailableError, match=re.escape(
                "not asked: nvml hung earlier in this run (NVML (nvmlInit and the device "
                "queries) gave no answer within")):
            gpu.nvlink_error_growth(nvml, interval_s=0)
    finally:
        nvml.release.set()


class CountFails(FakeNvml):
    def nvmlDeviceGetCount(self) -> int:
        raise pynvml.NVMLError_Unknown()


class Crashes(FakeNvml):
    def nvmlDeviceGetCount(self) -> int:
        raise OSError("libnvidia-ml.so.1: undefined symbol: nvmlDeviceGetCount_v2")


@pytest.mark.parametrize(("nvml", "why"), [
    (CountFails(h100_node()), "NVML started but could not count the GPUs: nvmlDeviceGetCount: "
                              "Unknown Error"),
    (Crashes(h100_node()), "NVML (nvmlInit and the device queries) failed: OSError: "
                           "libnvidia-ml.so.1: undefined symbol"),
])
def test_nvml_that_raises_falls_back_to_nvidia_smi(bin_dir: Path, nvml: FakeNvml, why: str):
    make_tool(bin_dir, "nvidia-smi", f"cat '{DATA / 'nvidia_smi/h100-550-constructed-faults.txt'}'")
    inv = gpu.inventory(nvml)
    assert inv.source == "nvidia-smi -q"
    with pytest.raises(ProbeError, match=re.escape(why)):
        make_tool(bin_dir, "nvidia-smi", "exit 0")
        gpu.inventory(nvml)


def test_nvml_listing_no_gpu_is_an_empty_inventory_not_a_fallback(bin_dir: Path):
    inv = gpu.inventory(FakeNvml([]))
    assert (inv.source, inv.gpus) == ("nvml", ())


class NoHandle(FakeNvml):
    def nvmlDeviceGetHandleByIndex(self, index: int):
        if index == 3:
            raise pynvml.NVMLError_NotFound()
        return super().nvmlDeviceGetHandleByIndex(index)


def test_a_gpu_nvml_cannot_open_is_unreadable_not_healthy():
    inv = gpu.query_gpus(NoHandle(h100_node()))
    assert inv.gpus[3].unreadable and not inv.gpus[3].requires_reset
    assert inv.gpus[3].query_errors == ("nvmlDeviceGetHandleByIndex(3) gave no handle",)
    assert not any(g.unreadable for g in inv.gpus if g.index != 3)
    counters = gpu.nvlink_error_growth(NoHandle(h100_node()), interval_s=0)
    assert counters.unread == {3: "NVML gave no handle for it: its NVLink error counters are "
                                  "unknown"}


# ---- dcgmi ----

@pytest.mark.parametrize(("body", "message"), [
    ("exit 0", "`dcgmi diag -r 1 -j` exited with status 0; it printed nothing; no diagnostic "
               "result in its output (empty input: no dcgmi diag output)"),
    (f"head -c 700 '{DATA / 'dcgm/dcgm4-r3-diagnostic-pass-excerpt.json'}'",
     "no diagnostic result in its output (dcgmi output is neither a result table nor valid JSON"),
    ("head -c 2000 /dev/urandom", "no diagnostic result in its output"),
    ("echo '{\"DCGM Diagnostic\": {\"test_categories\": []}}'",
     "no diagnostic result in its output (dcgmi diag JSON holds no test results)"),
])
def test_dcgmi_with_no_result_is_an_error(bin_dir: Path, body: str, message: str):
    make_tool(bin_dir, "dcgmi", body)
    with pytest.raises(ProbeError) as exc:
        dcgm.run_dcgm_diag(1)
    assert message in str(exc.value)


def test_a_hung_dcgmi_names_its_args_deadline_and_last_line(bin_dir: Path):
    make_tool(bin_dir, "dcgmi", "echo 'Successfully ran diagnostic for group.' >&2; exec sleep 60")
    with pytest.raises(ProbeError) as exc:
        dcgm.run_dcgm_diag(1, deadline=dl.Deadline.after(dl.KILL_OVERHEAD_S + 2,
                                                        "PF-GPU-012's 120 s timeout"))
    assert re.match(
        r"`dcgmi diag -r 1 -j` did not finish within [12](\.\d)? s and was killed; its last line: "
        r"'Successfully ran diagnostic for group\.' \(all that was left of PF-GPU-012's 120 s "
        r"timeout\); a `dcgmi diag` that does not finish means nv-hostengine or a GPU does not "
        r"answer", str(exc.value)), str(exc.value)


# ---- kernel log ----

@pytest.mark.parametrize(("dmesg", "why"), [
    ("exit 0", "`dmesg` printed no kernel log: empty input"),
    ("head -c 5000 /dev/urandom", "`dmesg` printed no kernel log: "),
    ("echo 'dmesg: read kernel buffer failed: Operation not permitted'",
     "`dmesg` printed no kernel log: no kernel log lines; it says: dmesg: read kernel buffer "
     "failed: Operation not permitted"),
    ("echo '<html><title>404</title></html>'", "`dmesg` printed no kernel log: no kernel log "
                                               "lines (first line: '<html><title>404</title>"),
])
def test_a_dmesg_that_prints_no_kernel_log_is_never_no_xids(bin_dir: Path, dmesg: str, why: str):
    make_tool(bin_dir, "dmesg", dmesg)
    with pytest.raises(ProbeError) as exc:
        kernel_log.read_kernel_log(env={})
    message = str(exc.value)
    assert "`journalctl -k -o short-iso --no-pager -b` could not run: command not found" in message
    assert why in message


def test_journalctl_garbage_falls_back_to_dmesg(bin_dir: Path):
    make_tool(bin_dir, "journalctl", "echo 'Failed to determine timestamp'; echo 'xyzzy'")
    make_tool(bin_dir, "dmesg", f"cat '{DATA / 'kernel_log/real_dmesg-xid79-nvswitch-sxid-20034.txt'}'")
    log = kernel_log.read_kernel_log(env={})
    assert ([e.xid for e in log.events], log.source) == ([79], "`dmesg`")


def test_journalctl_without_this_boot_falls_back_to_dmesg(bin_dir: Path):
    make_tool(bin_dir, "journalctl", "echo '-- No entries --'")
    make_tool(bin_dir, "dmesg", f"cat '{DATA / 'kernel_log/real_dmesg-T-clean-boot-banner-kvm.txt'}'")
    log = kernel_log.read_kernel_log(env={})
    assert (log.events, log.source, log.window) == ((), "`dmesg`", "since boot")


def test_a_hung_journalctl_is_not_asked_again(bin_dir: Path, tmp_path: Path):
    calls = tmp_path / "calls"
    make_tool(bin_dir, "journalctl", f"echo x >> '{calls}'; exec sleep 60")
    make_tool(bin_dir, "dmesg", f"cat '{DATA / 'kernel_log/dmesg-old-xid32.txt'}'")
    for _ in range(2):
        log = kernel_log.read_kernel_log(env={}, timeout_s=2)
        assert log.source == "`dmesg`"
    assert _calls(calls) == ["x"]


@pytest.mark.parametrize(("content", "why"), [
    ("", "is not a kernel log: empty input"),
    ("\x7fELF\x02\x01\x01\x00garbage\n" * 20, "is not a kernel log: no kernel log lines"),
])
def test_a_kernel_log_file_that_is_not_one(tmp_path: Path, content: str, why: str):
    path = tmp_path / "kern.log"
    path.write_text(content)
    with pytest.raises(ProbeError, match=re.escape(f"PREFLIGHT_KERNEL_LOG={path} {why}")):
        kernel_log.read_kernel_log(env={"PREFLIGHT_KERNEL_LOG": str(path)})


def test_a_kernel_log_file_from_before_this_boot_is_refused(tmp_path: Path):
    path = tmp_path / "kern.log"
    path.write_text((DATA / "kernel_log/syslog-xid13-31-pid-name.txt").read_text())
    booted = time.time() - float(Path("/proc/uptime").read_text().split()[0])
    os.utime(path, (booted - 86400, booted - 86400))
    with pytest.raises(ProbeError, match=re.escape(
            f"PREFLIGHT_KERNEL_LOG={path} was last written ") + r".*before this host booted"):
        kernel_log.read_kernel_log(env={"PREFLIGHT_KERNEL_LOG": str(path)})


def test_a_kernel_log_file_is_named_as_the_source(tmp_path: Path):
    path = tmp_path / "kern.log"
    path.write_text((DATA / "kernel_log/real_journal-short-iso-clean-no-boot-calico.txt").read_text())
    log = kernel_log.read_kernel_log(env={"PREFLIGHT_KERNEL_LOG": str(path)})
    assert re.fullmatch(re.escape(f"PREFLIGHT_KERNEL_LOG={path} (a file, last written ")
                        + r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ\)", log.source)
    assert log.from_boot is False


def test_hung_tools_are_shared_through_the_results_file(tmp_path: Path):
    """The node-local phase's workers and the exclusive phase are separate processes: a tool
    that hung in one is not waited on in the others (the run's results file carries it)."""
    results = tmp_path / "results.jsonl"
    results.write_text('{"event": "collected", "checks": []}\n')
    dl.share_hung(results)
    dl.mark_hung("nvidia-smi", "`nvidia-smi -q -x` gave no answer within 60 s")
    from harness.report.model import load_results

    assert load_results(results) == ([], {}, [])  # the report reader ignores the event
    dl.forget_hung()  # another process: nothing in memory
    assert dl.hung("nvidia-smi") is None
    dl.share_hung(results)
    assert dl.hung("nvidia-smi") == "`nvidia-smi -q -x` gave no answer within 60 s"
    res, _ = chain.run(["nvidia-smi", "-q"], None, 60)
    assert res.error == ("not started: nvidia-smi hung earlier in this run (`nvidia-smi -q "
                         "-x` gave no answer within 60 s)")


def test_readings_nvidia_smi_could_not_take_are_kept_as_errors(bin_dir: Path):
    """`[Unknown Error]` is a failed reading, not "not supported": the GPU's query errors say
    which (PF-GPU-016 warns with them), instead of the fact silently reading as absent."""
    dump = DATA / "nvidia_smi/h100-550-constructed-faults.txt"
    make_tool(bin_dir, "nvidia-smi", f'[ "$*" = "-q" ] && cat "{dump}"')
    inv = gpu.inventory(NO_NVML)
    assert inv.source == "nvidia-smi -q"
    assert inv.gpus[0].query_errors == ()
    assert inv.gpus[1].query_errors[:2] == ("ecc mode > current: [Unknown Error]",
                                            "ecc mode > pending: [Unknown Error]")
