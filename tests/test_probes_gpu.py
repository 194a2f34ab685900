"""GPU probes: NVML against a fake NVML module, and nvidia-smi / dcgmi / journalctl / dmesg as
emulated tools on PATH (recorded output, hang, crash, garbage)."""

from __future__ import annotations

import re
import stat
from pathlib import Path

import pynvml
import pytest

from harness.checking import ProbeError
from harness.gpu import REBOOT, REPLACE, RESET, health_problems, pcie_problems, reset_problems
from harness.probes import gpu
from tests.fake_nvml import FakeNvml, h100_node

DATA = Path(__file__).parent / "data"


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
    (0, None, None), (1, "GPU Reset", RESET), (2, "Node Reboot", REBOOT),
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
    inv = gpu.query_gpus(FakeNvml(h100_node(gpu0={"unsupported": unsupported})))
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


def test_nvml_shut_down_after_query():
    nvml = FakeNvml(h100_node())
    gpu.query_gpus(nvml)
    assert nvml.initialised == 0


@pytest.mark.parametrize("error", [pynvml.NVMLError_LibraryNotFound,
                                   pynvml.NVMLError_DriverNotLoaded])
def test_no_driver_is_nvml_unavailable(error):
    with pytest.raises(gpu.NvmlUnavailableError, match="NVML could not start: "):
        gpu.query_gpus(FakeNvml([], init_error=error))


def test_nvlink_error_growth_between_two_samples():
    step = {5: {pynvml.NVML_NVLINK_ERROR_DL_CRC_FLIT: 4, pynvml.NVML_NVLINK_ERROR_DL_REPLAY: 1}}
    nvml = FakeNvml(h100_node(gpu2={"nvlink_error_step": step}))
    assert gpu.nvlink_error_growth(nvml, interval_s=0) == {2: {5: {"crc_flit": 4, "replay": 1}}}


def test_nvlink_no_growth_on_healthy_node():
    errors = {0: {pynvml.NVML_NVLINK_ERROR_DL_CRC_FLIT: 12}}  # old errors, not rising
    nvml = FakeNvml(h100_node(gpu0={"nvlink_errors": errors}))
    assert gpu.nvlink_error_growth(nvml, interval_s=0) == {}


# ---- emulated tools ----

def _tool(bin_dir: Path, name: str, body: str) -> None:
    bin_dir.mkdir(exist_ok=True)
    path = bin_dir / name
    # The script itself may use the system's tools; the probe looks tools up on bin_dir only.
    path.write_text("#!/bin/sh\nPATH=/usr/bin:/bin\n" + body + "\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


@pytest.fixture
def bin_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty PATH the test fills with emulated tools (no real nvidia-smi/dcgmi leaks in)."""
    path = tmp_path / "bin"
    path.mkdir()
    monkeypatch.setenv("PATH", str(path))
    return path


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
        "(NVMLError_LibraryNotFound); fallback `nvidia-smi -q` could not run: command not found.")


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
        gpu.smi_query(timeout_s=1)


@pytest.mark.parametrize("probe", [gpu.smi_query, gpu.smi_query_csv])
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
        gpu.smi_query(timeout_s=10)


def _re(text: str) -> str:
    return re.escape(text)


def test_dcgmi_json_read_despite_failing_exit_status(bin_dir: Path):
    sample = DATA / "dcgm/dcgm4-gb10-r1-software-fail.json"
    _tool(bin_dir, "dcgmi", f"cat '{sample}'; exit 226")
    diag = gpu.run_dcgm_diag(1, timeout_s=10)
    assert diag.passed is False
    assert [(r.test, r.gpu) for r in diag.failed] == [("software", 0)]


def test_dcgmi_receives_level_and_json_flag(bin_dir: Path, tmp_path: Path):
    args = tmp_path / "args"
    sample = DATA / "dcgm/dcgm4-r3-diagnostic-pass-excerpt.json"
    _tool(bin_dir, "dcgmi", f"echo \"$@\" > '{args}'; cat '{sample}'")
    assert gpu.run_dcgm_diag(3, timeout_s=10).passed is True
    assert args.read_text().strip() == "diag -r 3 -j"


def test_dcgmi_remote_host_engine(bin_dir: Path, tmp_path: Path):
    args = tmp_path / "args"
    sample = DATA / "dcgm/dcgm4-r3-diagnostic-pass-excerpt.json"
    _tool(bin_dir, "dcgmi", f"echo \"$@\" > '{args}'; cat '{sample}'")
    gpu.run_dcgm_diag(1, timeout_s=10, host="nvidia-dcgm.gpu-operator.svc:5555")
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
        gpu.run_dcgm_diag(1, timeout_s=1)


def test_journalctl_recorded_xids(bin_dir: Path, tmp_path: Path):
    args = tmp_path / "args"
    sample = DATA / "kernel_log/journal-short-iso-p5-faults-constructed.txt"
    _tool(bin_dir, "journalctl", f"echo \"$@\" > '{args}'; cat '{sample}'")
    log = gpu.read_kernel_log(env={})
    assert [e.xid for e in log.events] == [48, 63, 79, 94]
    assert args.read_text().strip() == "-k -o short-iso --no-pager -b"


def test_journalctl_window(bin_dir: Path, tmp_path: Path):
    args = tmp_path / "args"
    _tool(bin_dir, "journalctl", f"echo \"$@\" > '{args}'; echo '-- No entries --'")
    assert gpu.read_kernel_log(since="-2h", env={}).events == ()
    assert args.read_text().strip() == "-k -o short-iso --no-pager --since -2h"


def test_no_journal_falls_back_to_dmesg(bin_dir: Path):
    _tool(bin_dir, "journalctl", "echo 'No journal files were found.' >&2; "
          "echo '-- No entries --'")
    _tool(bin_dir, "dmesg", f"cat '{DATA / 'kernel_log/dmesg-old-xid32.txt'}'")
    assert [e.xid for e in gpu.read_kernel_log(env={}).events] == [32, 32]


def test_journal_hidden_from_this_user_falls_back_to_dmesg(bin_dir: Path):
    _tool(bin_dir, "journalctl", "echo 'Hint: You are currently not seeing messages from other "
          "users and the system.' >&2; echo '-- No entries --'")
    _tool(bin_dir, "dmesg", "echo 'dmesg: read kernel buffer failed: Operation not permitted' "
          ">&2; exit 1")
    with pytest.raises(ProbeError, match=re.escape(
            "`journalctl -k -o short-iso --no-pager -b`: this user may not read the system "
            "journal (needs group adm or systemd-journal); `dmesg` exited with status 1")):
        gpu.read_kernel_log(env={})


def test_unreadable_kernel_log_is_a_probe_error(bin_dir: Path):
    _tool(bin_dir, "journalctl", "sleep 30")
    _tool(bin_dir, "dmesg", "echo 'dmesg: read kernel buffer failed: Operation not permitted' "
          ">&2; exit 1")
    with pytest.raises(ProbeError) as exc:
        gpu.read_kernel_log(timeout_s=1, env={})
    assert str(exc.value) == (
        "cannot read the kernel log for XID errors: `journalctl -k -o short-iso --no-pager -b` "
        "did not finish within 1 s and was killed; it printed nothing; `dmesg` exited with "
        "status 1: dmesg: read "
        "kernel buffer failed: Operation not permitted. Give the container CAP_SYSLOG or set "
        "PREFLIGHT_KERNEL_LOG=FILE to a copy of the host's kernel log")


def test_kernel_log_from_a_file(bin_dir: Path):
    sample = DATA / "kernel_log/syslog-xid13-31-pid-name.txt"
    log = gpu.read_kernel_log(env={"PREFLIGHT_KERNEL_LOG": str(sample)})
    assert [(e.xid, e.pid, e.process) for e in log.events] == [
        (13, 108743, "python"), (31, 108743, "python"), (31, 80798, "llama-server")]


def test_missing_kernel_log_file(tmp_path: Path):
    with pytest.raises(ProbeError, match=r"cannot read kernel log .*/nope: No such file"):
        gpu.read_kernel_log(tmp_path / "nope", env={})
