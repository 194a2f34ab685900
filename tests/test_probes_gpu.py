"""GPU probes: NVML against a fake NVML module, and nvidia-smi / dcgmi / journalctl / dmesg as
emulated tools on PATH (recorded output, hang, crash, garbage)."""

from __future__ import annotations

import re
from pathlib import Path

import pynvml
import pytest

from harness.base import deadline
from harness.base.errors import ProbeError
from harness.base.gpu import health_problems, reset_problems
from harness.base.gpu_actions import REBOOT, REPLACE, RESET
from harness.base.gpu_pcie import pcie_problems
from harness.probes import dcgm, gpu, kernel_log, nvidia_smi, nvml
from tests.fake_nvml import FakeNvml, b200_node, h100_node
from tests.fake_tools import empty_path, make_tool

DATA = Path(__file__).parent / "data"


@pytest.fixture(autouse=True)
def _no_hung_tools():
    """Each test is a session of its own: no tool counts as hung from an earlier one."""
    deadline.forget_hung()
    yield
    nvml.shutdown()
    deadline.forget_hung()


# ---- NVML ----

def test_healthy_h100_node_reads_every_fact():
    inv = gpu.query_gpus(FakeNvml(h100_node()))
    assert inv.source == "nvml"
    assert (inv.driver_version, inv.cuda_version) == ("550.90.07", "12.4")
    assert len(inv.gpus) == 8
    g = inv.gpus[3]
    assert (g.index, g.name, g.bus_id, g.serial) == (
        3, "NVIDIA H100 80GB HBM3", "00000000:86:00.0", "1654922000003")
    assert g.memory_total_gib == pytest.approx(79.65, abs=0.01)
    assert (g.ecc_enabled, g.ecc_uncorrected_volatile, g.ecc_uncorrected_aggregate) == (True, 0, 0)
    assert (g.remapped_rows_pending, g.remapped_rows_failure) == (False, False)
    assert (g.retired_pages_pending, g.retired_pages_dbe) == (False, 0)
    assert (g.temperature_c, g.power_draw_w, g.persistence_mode) == (34.0, 71.52, True)
    assert g.throttle_reasons == ("Idle",)
    assert (g.pcie_gen_current, g.pcie_gen_max, g.pcie_width_current, g.pcie_width_max) == (
        5, 5, 16, 16)
    assert g.nvlinks_active == tuple(range(18)) and g.nvlinks_inactive == ()
    assert not g.requires_reset and g.query_errors == ()
    assert all(health_problems(x, max_temp_c=85.0) == [] for x in inv.gpus)


@pytest.mark.parametrize(("change", "field", "value", "action"), [
    ({"ecc_volatile": 2, "ecc_aggregate": 2}, "ecc_uncorrected_volatile", 2, RESET),
    ({"remapped_rows": (0, 2, 1, 0)}, "remapped_rows_pending", True, RESET),
    ({"remapped_rows": (0, 9, 0, 1)}, "remapped_rows_failure", True, REPLACE),
    ({"pending_pages": 1}, "retired_pages_pending", True, RESET),
    ({"reasons": 0x8 | 0x40}, "throttle_reasons", ("HW Slowdown", "HW Thermal Slowdown"),
     REPLACE),
])
def test_one_bad_gpu_is_found_with_its_action(change, field, value, action):
    inv = gpu.query_gpus(FakeNvml(h100_node(gpu5=change)))
    assert getattr(inv.gpus[5], field) == value
    problems = [p for g in inv.gpus for p in health_problems(g, max_temp_c=85.0)]
    assert {p.gpu for p in problems} == {5}
    assert action in {p.action for p in problems}


@pytest.mark.parametrize(("fabric", "expected"), [
    ((3, 0), ("Completed", "Success")),
    ((2, 0), ("In Progress", "Success")),
    ((1, pynvml.NVML_ERROR_UNKNOWN), ("Not Started", "Unknown Error")),
    ((0, 0), (None, None)),  # NVML_GPU_FABRIC_STATE_NOT_SUPPORTED
])
def test_fabric_registration(fabric, expected):
    inv = gpu.query_gpus(FakeNvml(h100_node(gpu0={"fabric": fabric})))
    assert (inv.gpus[0].fabric_state, inv.gpus[0].fabric_status) == expected


@pytest.mark.parametrize(("code", "expected", "action"), [
    (0, "None", None), (1, "GPU Reset", RESET), (2, "Node Reboot", REBOOT),
    (4, "Drain and Reset", RESET),
])
def test_driver_recovery_action(code, expected, action):
    inv = gpu.query_gpus(FakeNvml(h100_node(gpu7={"recovery_action": code})))
    assert inv.gpus[7].recovery_action == expected
    assert [p.action for p in reset_problems(inv.gpus[7])] == ([action] if action else [])


def test_pcie_downgrade_is_read():
    inv = gpu.query_gpus(FakeNvml(h100_node(gpu2={"pcie": (5, 5, 5, 8, 16)})))
    assert [p.what for p in pcie_problems(inv.gpus[2])] == ["PCIe link x8 < x16 (P0)"]


def test_nvlink_down_lists_the_links():
    states = tuple(0 if link in (3, 7) else 1 for link in range(18))
    inv = gpu.query_gpus(FakeNvml(h100_node(gpu1={"nvlink_states": states})))
    assert len(inv.gpus[1].nvlinks_active) == 16
    assert inv.gpus[1].nvlinks_inactive == (3, 7)


def test_not_supported_facts_are_none_not_a_crash():
    unsupported = {"nvmlDeviceGetEccMode", "nvmlDeviceGetTotalEccErrors",
                   "nvmlDeviceGetRemappedRows", "nvmlDeviceGetNvLinkState",
                   "nvmlDeviceGetSerial", "nvmlDeviceGetCurrentClocksEventReasons"}
    inv = gpu.query_gpus(FakeNvml(h100_node(gpu0={"unsupported": unsupported,
                                                   "unsupported_fields": {91, 165}})))
    g = inv.gpus[0]
    assert (g.ecc_enabled, g.ecc_uncorrected_volatile, g.remapped_rows_pending, g.serial) == (
        None, None, None, None)
    assert g.nvlinks_active is None
    assert g.throttle_reasons == ("Idle",)  # read through the older throttle-reasons call
    assert g.query_errors == ()


def test_other_nvml_errors_are_kept_per_gpu():
    inv = gpu.query_gpus(FakeNvml(h100_node(gpu4={"failing": {"nvmlDeviceGetTemperature"}})))
    assert inv.gpus[4].temperature_c is None
    assert inv.gpus[4].query_errors == ("nvmlDeviceGetTemperature: Unknown Error",)


def test_lost_gpu_requires_reset():
    inv = gpu.query_gpus(FakeNvml(h100_node(gpu6={"lost": True})))
    assert inv.gpus[6].requires_reset
    assert inv.gpus[6].name is None
    assert not inv.gpus[5].requires_reset


class CountingNvml(FakeNvml):
    """Counts nvmlInit and nvmlShutdown calls."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.inits = self.shutdowns = 0

    def nvmlInit(self) -> None:
        self.inits += 1
        super().nvmlInit()

    def nvmlShutdown(self) -> None:
        self.shutdowns += 1
        super().nvmlShutdown()


def test_nvml_initialised_once_per_process_and_shut_down_at_the_end():
    fake = CountingNvml(h100_node())
    gpu.query_gpus(fake)
    gpu.nvlink_error_growth(fake, interval_s=0)  # two more samples
    gpu.query_gpus(fake)
    gpu.inventory(fake)
    assert (fake.inits, fake.shutdowns, fake.initialised) == (1, 0, 1)
    nvml.shutdown()
    assert (fake.inits, fake.shutdowns, fake.initialised) == (1, 1, 0)
    gpu.query_gpus(fake)  # after a shutdown, the next query starts NVML again
    assert fake.inits == 2


def test_a_failed_start_is_not_kept():
    fake = CountingNvml(h100_node(), init_error=pynvml.NVMLError_DriverNotLoaded)
    with pytest.raises(nvml.NvmlUnavailableError):
        gpu.query_gpus(fake)
    fake.init_error = None
    assert len(gpu.query_gpus(fake).gpus) == 8


def test_nvml_is_shut_down_when_the_process_exits(tmp_path: Path):
    import subprocess
    import sys

    log = tmp_path / "calls"
    code = f"""
import sys
sys.path.insert(0, {str(Path(__file__).parent.parent)!r})
from harness.probes import gpu
from tests.fake_nvml import FakeNvml, h100_node

class Logged(FakeNvml):
    def nvmlInit(self):
        open({str(log)!r}, "a").write("init\\n"); super().nvmlInit()
    def nvmlShutdown(self):
        open({str(log)!r}, "a").write("shutdown\\n"); super().nvmlShutdown()

fake = Logged(h100_node())
gpu.query_gpus(fake)
gpu.nvlink_error_growth(fake, interval_s=0)
"""
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
    assert log.read_text().split() == ["init", "shutdown"]


@pytest.mark.parametrize("error", [pynvml.NVMLError_LibraryNotFound,
                                   pynvml.NVMLError_DriverNotLoaded])
def test_no_driver_is_nvml_unavailable(error):
    with pytest.raises(nvml.NvmlUnavailableError, match="NVML could not start: "):
        gpu.query_gpus(FakeNvml([], init_error=error))


def test_nvlink_error_growth_between_two_samples():
    step = {5: {pynvml.NVML_NVLINK_ERROR_DL_CRC_FLIT: 4, pynvml.NVML_NVLINK_ERROR_DL_REPLAY: 1}}
    fake = FakeNvml(h100_node(gpu2={"nvlink_error_step": step}))
    counters = gpu.nvlink_error_growth(fake, interval_s=0)
    assert counters.growth == {2: {5: {"crc_flit": 4, "replay": 1}}}
    assert counters.unread == {}
    assert counters.read[2] == "nvmlDeviceGetNvLinkErrorCounter, 18 links"


def test_nvlink_no_growth_on_healthy_node():
    errors = {0: {pynvml.NVML_NVLINK_ERROR_DL_CRC_FLIT: 12}}  # old errors, not rising
    fake = FakeNvml(h100_node(gpu0={"nvlink_errors": errors}))
    counters = gpu.nvlink_error_growth(fake, interval_s=0)
    assert (counters.growth, counters.unread) == ({}, {})
    assert sorted(counters.read) == list(range(8))


def test_a_sleeping_nvlink_is_up_not_down():
    """Field 165 says SLEEP (NVML_NVLINK_STATE_SLEEP): the link is up. The old call
    (nvmlDeviceGetNvLinkState) reads it as disabled in this fake: the field must win."""
    sleep, traffic_off = pynvml.NVML_NVLINK_STATE_SLEEP, 3
    states = tuple(sleep if link in (2, 9) else traffic_off if link == 4 else 1
                   for link in range(18))
    g = gpu.query_gpus(FakeNvml(h100_node(gpu1={"nvlink_states": states}))).gpus[1]
    assert len(g.nvlinks_active) == 17 and g.nvlinks_sleeping == (2, 9)
    assert g.nvlinks_inactive == (4,)  # active, traffic disabled: not usable


def test_link_state_falls_back_to_the_old_call_without_the_field():
    states = tuple(0 if link in (3, 7) else 1 for link in range(18))
    fake = FakeNvml(h100_node(gpu1={"nvlink_states": states, "unsupported_fields": {91, 165}}))
    g = gpu.query_gpus(fake).gpus[1]
    assert (len(g.nvlinks_active), g.nvlinks_inactive) == (16, (3, 7))


def test_blackwell_counters_come_from_the_nvlink5_fields():
    step = {11: {pynvml.NVML_FI_DEV_NVLINK_COUNT_LINK_RECOVERY_FAILED_EVENTS: 1}}
    fake = FakeNvml(b200_node(gpu6={"nvlink_error_step": step}))
    counters = gpu.nvlink_error_growth(fake, interval_s=0)
    assert counters.growth == {6: {11: {"recovery_failed": 1}}}
    assert counters.unread == {}
    assert counters.read[0] == "NVML fields 213-215, 18 links"
    g = gpu.query_gpus(fake).gpus[0]
    assert g.nvlink_errors[0] == {"recovery_successful": 0, "recovery_failed": 0,
                                  "recovery_events": 0}


def test_older_gpus_read_the_dl_fields_where_the_call_is_not_supported():
    step = {0: {pynvml.NVML_FI_DEV_NVLINK_ERROR_DL_CRC: 7}}
    fake = FakeNvml(h100_node(gpu0={"unsupported": {"nvmlDeviceGetNvLinkErrorCounter"},
                                    "nvlink_error_step": step}))
    counters = gpu.nvlink_error_growth(fake, interval_s=0)
    assert counters.growth == {0: {0: {"crc": 7}}}
    assert counters.read[0] == "NVML fields 161-163, 18 links"


@pytest.mark.parametrize("node", [
    # Blackwell where the NVLink5 fields are not supported either (an older driver).
    b200_node(**{f"gpu{i}": {"unsupported_fields": {161, 162, 163, 213, 214, 215}}
                 for i in range(8)}),
    # Hopper: the call and every field NOT_SUPPORTED.
    h100_node(**{f"gpu{i}": {"unsupported": {"nvmlDeviceGetNvLinkErrorCounter"},
                             "unsupported_fields": {161, 162, 163, 213, 214, 215}}
                 for i in range(8)}),
])
def test_no_counter_read_is_unread_never_no_errors(node):
    counters = gpu.nvlink_error_growth(FakeNvml(node), interval_s=0)
    assert counters.growth == {} and counters.read == {}
    assert sorted(counters.unread) == list(range(8))
    assert counters.unread[0] == ("no NVLink error counter could be read on any of its 18 up "
                                  "links (NOT_SUPPORTED or failing)")


def test_links_without_counters_are_named():
    """Counters on links 0-15 but none on 16 and 17: those two are unknown."""
    fake = FakeNvml(h100_node(gpu3={"unsupported": {"nvmlDeviceGetNvLinkErrorCounter"},
                                    "unsupported_fields": {213, 214, 215}}))
    original = fake._field

    def field(g, fid, scope):
        value = original(g, fid, scope)
        if g.index == 3 and scope >= 16 and fid in (161, 162, 163):
            value.nvmlReturn = pynvml.NVML_ERROR_NOT_SUPPORTED
        return value

    fake._field = field
    counters = gpu.nvlink_error_growth(fake, interval_s=0)
    assert counters.unread == {3: "no NVLink error counter could be read on link(s) 16, 17 "
                                  "(NOT_SUPPORTED or failing)"}


# ---- emulated tools ----

_tool = make_tool


@pytest.fixture
def bin_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return empty_path(tmp_path, monkeypatch)


def test_nvidia_smi_fallback_when_nvml_missing(bin_dir: Path):
    _tool(bin_dir, "nvidia-smi", f"cat '{DATA / 'nvidia_smi/h100-550-constructed-faults.txt'}'")
    inv = gpu.inventory(FakeNvml([], init_error=pynvml.NVMLError_LibraryNotFound))
    assert inv.source == "nvidia-smi -q"
    assert [g.bus_id for g in inv.gpus] == ["00000000:53:00.0", "00000000:64:00.0"]


def test_csv_fallback_when_nvidia_smi_q_is_unreadable(bin_dir: Path, tmp_path: Path):
    args = tmp_path / "args"
    row = ("0, NVIDIA H100 80GB HBM3, GPU-1, 1654922010387, 00000000:53:00.0, 550.90.07, 81559,"
           " Enabled, 0, 0, No, 36, 70.12, Enabled, P0, 5, 5, 16, 16, Not Active, Not Active, "
           "Not Active, Not Active")
    _tool(bin_dir, "nvidia-smi", f'if [ "$1" = -q ]; then echo garbage; exit 0; fi\n'
          f"echo \"$@\" > '{args}'; echo '{row}'")
    inv = gpu.inventory(FakeNvml([], init_error=pynvml.NVMLError_DriverNotLoaded))
    assert inv.source == "nvidia-smi csv"
    assert (inv.driver_version, inv.gpus[0].bus_id, inv.gpus[0].temperature_c) == (
        "550.90.07", "00000000:53:00.0", 36.0)
    assert args.read_text().split()[1] == "--format=csv,noheader,nounits"


def test_no_nvml_and_no_nvidia_smi_is_a_probe_error_naming_both(bin_dir: Path):
    with pytest.raises(ProbeError) as exc:
        gpu.inventory(FakeNvml([], init_error=pynvml.NVMLError_LibraryNotFound))
    assert str(exc.value).startswith(
        "cannot read the GPUs: NVML could not start: NVML Shared Library Not Found "
        "(NVMLError_LibraryNotFound); fallback `nvidia-smi -q -x` could not run: command not "
        "found. Is the NVIDIA driver loaded")


@pytest.mark.parametrize(("body", "message"), [
    ("sleep 30", "`nvidia-smi -q` did not finish within 1 s and was killed"),
    ("kill -SEGV $$", "`nvidia-smi -q` was killed by signal SIGSEGV"),
    ("echo \"NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
     "Make sure that the latest NVIDIA driver is installed and running.\"; exit 9",
     "`nvidia-smi -q` exited with status 9: NVIDIA-SMI has failed because it couldn't"),
    ("echo 'some banner'; echo 'Attached GPUs : 8'",
     "`nvidia-smi -q` printed something unexpected: no `GPU 0000xxxx:BB:DD.F` section"),
])
def test_nvidia_smi_hang_crash_garbage(bin_dir: Path, body: str, message: str):
    _tool(bin_dir, "nvidia-smi", body)
    with pytest.raises(ProbeError, match="^" + _re(message)):
        nvidia_smi.smi_query(timeout_s=1)


@pytest.mark.parametrize("probe", [nvidia_smi.smi_query, nvidia_smi.smi_query_csv])
def test_a_lost_gpu_is_read_even_when_nvidia_smi_exits_non_zero(bin_dir: Path, probe):
    lost = "Unable to determine the device handle for GPU0000:CB:00.0: Unknown Error"
    dump = DATA / "nvidia_smi/h100-550-constructed-faults.txt"
    row = ("0, NVIDIA H100 80GB HBM3, GPU-1, 1654922010387, 00000000:53:00.0, 550.90.07, 81559,"
           " Enabled, 0, 0, No, 36, 70.12, Enabled, P0, 5, 5, 16, 16, Not Active, Not Active, "
           "Not Active, Not Active")
    _tool(bin_dir, "nvidia-smi", f'echo "{lost}"\nif [ "$1" = -q ]; then cat \'{dump}\'; '
          f"else echo '{row}'; fi\nexit 15")
    inv = probe(timeout_s=10)
    found = inv.by_pci("0000:CB:00.0")
    assert found is not None and found.requires_reset


def test_a_non_zero_exit_without_a_lost_gpu_is_a_probe_error(bin_dir: Path):
    dump = DATA / "nvidia_smi/l4-550-idle-x8.txt"
    _tool(bin_dir, "nvidia-smi", f"cat '{dump}'; exit 3")
    with pytest.raises(ProbeError, match="exited with status 3"):
        nvidia_smi.smi_query(timeout_s=10)


def _re(text: str) -> str:
    return re.escape(text)


def test_dcgmi_json_read_despite_failing_exit_status(bin_dir: Path):
    sample = DATA / "dcgm/dcgm4-gb10-r1-software-fail.json"
    _tool(bin_dir, "dcgmi", f"cat '{sample}'; exit 226")
    diag = dcgm.run_dcgm_diag(1, timeout_s=10)
    assert diag.passed is False
    assert [(r.test, r.gpu) for r in diag.failed] == [("software", 0)]


def test_dcgmi_receives_level_and_json_flag(bin_dir: Path, tmp_path: Path):
    args = tmp_path / "args"
    sample = DATA / "dcgm/dcgm4-r3-diagnostic-pass-excerpt.json"
    _tool(bin_dir, "dcgmi", f"echo \"$@\" > '{args}'; cat '{sample}'")
    assert dcgm.run_dcgm_diag(3, timeout_s=10).passed is True
    assert args.read_text().strip() == "diag -r 3 -j"


def test_dcgmi_remote_host_engine(bin_dir: Path, tmp_path: Path):
    args = tmp_path / "args"
    sample = DATA / "dcgm/dcgm4-r3-diagnostic-pass-excerpt.json"
    _tool(bin_dir, "dcgmi", f"echo \"$@\" > '{args}'; cat '{sample}'")
    dcgm.run_dcgm_diag(1, timeout_s=10, host="nvidia-dcgm.gpu-operator.svc:5555")
    assert args.read_text().strip() == "diag -r 1 -j --host nvidia-dcgm.gpu-operator.svc:5555"


@pytest.mark.parametrize(("body", "message"), [
    (None, "`dcgmi diag -r 1 -j` could not run: command not found: install DCGM"),
    ("sleep 30", "`dcgmi diag -r 1 -j` did not finish within 1 s and was killed"),
    ("echo 'Error: unable to establish a connection to the specified host: localhost'; "
     "echo 'Error: Unable to connect to host engine. Host engine connection invalid/disconnected.'"
     "; exit 255",
     "`dcgmi diag -r 1 -j` exited with status 255: Error: Unable to connect to host engine."),
    ("kill -ABRT $$", "`dcgmi diag -r 1 -j` was killed by signal SIGABRT"),
])
def test_dcgmi_missing_hang_error_crash(bin_dir: Path, body: str | None, message: str):
    if body is not None:
        _tool(bin_dir, "dcgmi", body)
    with pytest.raises(ProbeError, match="^" + _re(message)):
        dcgm.run_dcgm_diag(1, timeout_s=1)


def test_journalctl_recorded_xids(bin_dir: Path, tmp_path: Path):
    args = tmp_path / "args"
    sample = DATA / "kernel_log/journal-short-iso-p5-faults-constructed.txt"
    _tool(bin_dir, "journalctl", f"echo \"$@\" > '{args}'; cat '{sample}'")
    log = kernel_log.read_kernel_log(env={})
    assert [e.xid for e in log.events] == [48, 63, 79, 94]
    assert args.read_text().strip() == "-k -o short-iso --no-pager -b"


def test_journalctl_window(bin_dir: Path, tmp_path: Path):
    """An empty `--since` window is clean when the journal holds this boot's kernel lines."""
    args = tmp_path / "args"
    _tool(bin_dir, "journalctl", f"echo \"$@\" >> '{args}'\n"
          'case "$*" in *"-n 1"*) echo "2024-10-01T09:02:11+0000 h kernel: Linux version 6.8";; '
          "*) echo '-- No entries --';; esac")
    log = kernel_log.read_kernel_log(since="-2h", env={})
    assert (log.events, log.window) == ((), "since -2h (the window asked for)")
    assert args.read_text().splitlines() == [
        "-k -o short-iso --no-pager --since -2h", "-k -b -n 1 -o short-iso --no-pager -q"]


def test_an_empty_window_of_a_journal_without_kernel_lines_is_not_evidence(bin_dir: Path):
    _tool(bin_dir, "journalctl", "echo '-- No entries --'")
    with pytest.raises(ProbeError, match=re.escape(
            "`journalctl -k -o short-iso --no-pager --since -2h` printed `-- No entries --` and "
            "the journal holds no kernel message of this boot")):
        kernel_log.read_kernel_log(since="-2h", env={})


def test_no_journal_falls_back_to_dmesg(bin_dir: Path):
    _tool(bin_dir, "journalctl", "echo 'No journal files were found.' >&2; "
          "echo '-- No entries --'")
    _tool(bin_dir, "dmesg", f"cat '{DATA / 'kernel_log/dmesg-old-xid32.txt'}'")
    assert [e.xid for e in kernel_log.read_kernel_log(env={}).events] == [32, 32]


def test_journal_hidden_from_this_user_falls_back_to_dmesg(bin_dir: Path):
    _tool(bin_dir, "journalctl", "echo 'Hint: You are currently not seeing messages from other "
          "users and the system.' >&2; echo '-- No entries --'")
    _tool(bin_dir, "dmesg", "echo 'dmesg: read kernel buffer failed: Operation not permitted' "
          ">&2; exit 1")
    with pytest.raises(ProbeError, match=re.escape(
            "`journalctl -k -o short-iso --no-pager -b`: this user may not read the system "
            "journal (needs group adm or systemd-journal); `dmesg` exited with status 1")):
        kernel_log.read_kernel_log(env={})


def test_unreadable_kernel_log_is_a_probe_error(bin_dir: Path):
    _tool(bin_dir, "journalctl", "sleep 30")
    _tool(bin_dir, "dmesg", "echo 'dmesg: read kernel buffer failed: Operation not permitted' "
          ">&2; exit 1")
    with pytest.raises(ProbeError) as exc:
        kernel_log.read_kernel_log(timeout_s=1, env={})
    assert str(exc.value) == (
        "cannot read the kernel log for XID errors: `journalctl -k -o short-iso --no-pager -b` "
        "did not finish within 1 s and was killed; it printed nothing; `dmesg` exited with "
        "status 1: dmesg: read kernel buffer failed: Operation not permitted. Give the "
        "container CAP_SYSLOG or set PREFLIGHT_KERNEL_LOG=FILE to a copy of the host's kernel "
        "log")


def test_kernel_log_from_a_file(bin_dir: Path):
    sample = DATA / "kernel_log/syslog-xid13-31-pid-name.txt"
    log = kernel_log.read_kernel_log(env={"PREFLIGHT_KERNEL_LOG": str(sample)})
    assert [(e.xid, e.pid, e.process) for e in log.events] == [
        (13, 108743, "python"), (31, 108743, "python"), (31, 80798, "llama-server")]


def test_missing_kernel_log_file(tmp_path: Path):
    with pytest.raises(ProbeError, match=r"cannot read kernel log .*/nope \(PREFLIGHT_KERNEL_LOG="
                                         r".*/nope\): No such file"):
        kernel_log.read_kernel_log(tmp_path / "nope", env={})


def test_a_hung_nvml_is_not_shut_down_at_exit():
    """nvmlShutdown on a driver that hung would hang the process's exit."""
    fake = CountingNvml(h100_node())
    gpu.query_gpus(fake)
    deadline.mark_hung("nvml", "NVML NVLink counters gave no answer within 32 s")
    nvml.shutdown()
    assert fake.shutdowns == 0
