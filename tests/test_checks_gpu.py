"""GPU checks with canned facts: checks/test_gpu*.py copied into a pytester directory, their
fact fixtures overridden from tests/gpu_facts.py, run under the plugin with --preflight-profile."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from tests.conftest import check_session, facts_conftest, run_check_file

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data"

GPU_FACTS = ["gpu_inventory_reading", "nvlink_growth", "dcgm_diag", "kernel_log_reading",
             "compute_sanity"]
#: The GPU checks (checks/test_gpu.py and the modules split from it); gpu_common.py is imported.
GPU_CHECK_FILES = ("test_gpu.py", "test_gpu_diag.py", "test_gpu_kernel_log.py",
                   "test_gpu_nvlink.py")


def copy_gpu_checks(pytester: pytest.Pytester) -> None:
    for name in GPU_CHECK_FILES:
        shutil.copy(ROOT / "checks" / name, pytester.path / name)


def run_checks(pytester: pytest.Pytester, scenario: str,
               profile: str = "p5.48xlarge") -> dict[str, dict]:
    """Run the GPU checks on a canned scenario; {check ID: result record}."""
    pytester.makeconftest(facts_conftest("tests.gpu_facts", scenario, GPU_FACTS))
    copy_gpu_checks(pytester)
    return run_check_file(pytester, "test_gpu.py", profile)


@pytest.fixture(autouse=True)
def _importable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTHONPATH", str(ROOT))




ACT_RESET = ("reset GPU: stop its processes and run `nvidia-smi -r -i N` (or reboot); replace "
             "the node if it recurs")
ACT_REPLACE = ("replace node: drain it and take it out of service (Slurm `scontrol update "
               "node=X state=drain`, HyperPod `Action:Replace`; on EC2 a stop/start moves the "
               "instance to another host)")
ACT_REBOOT = "reboot the node (what a GPU reset cannot fix); replace it if the problem returns"
ACT_MONITOR = "monitor: no action now; replace the node if it recurs"
GPU = {i: f"GPU {i} (bus 00000000:{bus}:00.0, serial 16549220000{i:02d})"
       for i, bus in enumerate(("53", "64", "75", "86", "97", "A8", "B9", "CA"))}
NONE_FOR = "none allowed for p5.48xlarge"
JOURNAL = "`journalctl -k -o short-iso --no-pager -b`"
NO_GPU = "nvml lists no GPU, so there is nothing to judge (PF-GPU-001 names the count)"
UNREAD = "GPU 3 (bus ?, serial unknown)"
NOT_KNOWN = "not known (unknown is never healthy)"
NO_HANDLE = "(sources tried: NVML: nvmlDeviceGetHandleByIndex: Unknown Error)"
LOST = "(sources tried: NVML: the GPU is lost or requires a reset)"

EXPECTED: dict[str, dict[str, tuple[str, str]]] = {
    "healthy": {},
    "missing_gpu": {"PF-GPU-001": ("fail", (
        "[PF-GPU-001] GPUs visible 7 GPUs < 8 GPUs required for p5.48xlarge (from nvml); "
        "check --gpus / NVIDIA_VISIBLE_DEVICES, then the kernel log for Xid 79; reboot, "
        "replace the node if the GPU stays missing"))},
    "wrong_model": {"PF-GPU-002": ("fail", (
        f"[PF-GPU-002] GPUs of the wrong model or memory size: 1 found, {NONE_FOR}: "
        f"{GPU[0]}: NVIDIA A100-SXM4-80GB, not H100; run with the --profile of this instance "
        "type, or replace the node"))},
    "ecc_off": {"PF-GPU-003": ("fail", (
        f"[PF-GPU-003] GPUs with uncorrected ECC errors: 1 found, {NONE_FOR}: {GPU[5]}: ECC is "
        f"disabled (enable: nvidia-smi -e 1, then reboot) -> reboot; {ACT_REBOOT}"))},
    # Volatile 2, aggregate 5: the message names the volatile count (read as aggregate, it
    # would say 5).
    "ecc": {"PF-GPU-003": ("fail", (
        f"[PF-GPU-003] GPUs with uncorrected ECC errors: 1 found, {NONE_FOR}: {GPU[3]}: 2 "
        f"uncorrected ECC errors since the driver loaded -> reset GPU; {ACT_RESET}"))},
    "ecc_history": {"PF-GPU-003": ("warn", (
        f"[PF-GPU-003] {GPU[1]}: 4 uncorrected ECC errors in its lifetime, none since the "
        f"driver loaded -> monitor; {ACT_MONITOR}"))},
    "remap": {"PF-GPU-004": ("fail", (
        f"[PF-GPU-004] GPUs with pending or failed row remapping: 2 found, {NONE_FOR}: "
        f"{GPU[2]}: row remapping pending (applied at the next GPU reset) -> reset GPU; "
        f"{GPU[6]}: row remapping failed (no spare rows left) -> replace node; "
        f"{ACT_REPLACE}"))},
    "retirement": {"PF-GPU-005": ("fail", (
        f"[PF-GPU-005] GPUs with pending page retirement: 1 found, {NONE_FOR}: {GPU[4]}: page "
        f"retirement pending (applied at the next GPU reset) -> reset GPU; {ACT_RESET}"))},
    "xid": {"PF-GPU-006": ("fail", (
        f"[PF-GPU-006] XID errors (kernel log: {JOURNAL}, since boot): 2 found, {NONE_FOR}: "
        f"{GPU[1]}: Xid 79 (GPU has fallen off "
        "the bus.) -> reboot; GPU at bus 0000:ee:00: Xid 48 (DBE) -> reset GPU; "
        f"{ACT_REBOOT}"))},
    "xid_mixed": {"PF-GPU-006": ("fail", (
        f"[PF-GPU-006] XID errors (kernel log: {JOURNAL}, since boot): 1 found, {NONE_FOR}: GPU "
        "at bus 0000:ee:00: Xid 149 x2 (NETIR_LINK_EVT  Fatal   XC0 i0 Link 01) -> reset GPU; "
        f"{ACT_RESET}"))},
    # The evidence came from PREFLIGHT_KERNEL_LOG, and does not reach back to the boot: both said.
    "xid_from_file": {"PF-GPU-006": ("fail", (
        "[PF-GPU-006] XID errors (kernel log: PREFLIGHT_KERNEL_LOG=/var/log/kern.log (a file, "
        "last written 2024-10-01T10:00:00Z), since 2024-10-01T09:00:00+0000 only (the log does "
        "not reach back to the boot: ring buffer wrapped or journal rotated; older XIDs are not "
        f"seen)): 1 found, {NONE_FOR}: {GPU[1]}: Xid 79 (GPU has fallen off the bus.) -> "
        f"reboot; {ACT_REBOOT}"))},
    "gpu_init_failed": {"PF-GPU-006": ("fail", (
        f"[PF-GPU-006] XID errors (kernel log: {JOURNAL}, since boot): 1 found, {NONE_FOR}: "
        f"{GPU[2]}: RmInitAdapter failed x3 (0x24:0x72:1568): the driver could not initialise "
        f"the GPU -> reboot; {ACT_REBOOT}"))},
    "sxid": {"PF-GPU-018": ("fail", (
        f"[PF-GPU-018] fatal NVSwitch SXid errors (kernel log: {JOURNAL}, since boot): 1 found, "
        f"{NONE_FOR}: NVSwitch 1 (bus 0000:06:00.0): SXid 20034 x2 (Fatal, LTSSM Fault Up on "
        f"Link 48) -> reboot; {ACT_REBOOT}"))},
    "hot": {"PF-GPU-007": ("fail", (
        f"[PF-GPU-007] GPUs too hot or slowed down: 2 found, {NONE_FOR}: {GPU[7]}: "
        f"temperature 91 C > 85 C -> replace node; {GPU[7]}: clocks slowed by HW Slowdown, HW "
        f"Thermal Slowdown -> replace node; {ACT_REPLACE}"))},
    "persistence": {"PF-GPU-008": ("fail", (
        f"[PF-GPU-008] GPUs without persistence mode: 1 found, {NONE_FOR}: {GPU[0]}: "
        "persistence mode off; run `nvidia-smi -pm 1` as root (or start nvidia-persistenced) "
        "on the host"))},
    "pcie": {"PF-GPU-009": ("fail", (
        f"[PF-GPU-009] GPUs with a degraded PCIe link: 1 found, {NONE_FOR}: {GPU[5]}: PCIe "
        f"link x8 < x16 (P0) -> reboot; {ACT_REBOOT}"))},
    "pcie_slot": {},
    "pcie_slot_outlier": {"PF-GPU-009": ("warn", (
        f"[PF-GPU-009] {GPU[3]}: its slot allows PCIe gen 4, the other slots of this node gen 5 "
        "(a riser or the slot's firmware setting: check the host, not the GPU) -> monitor; "
        f"{ACT_MONITOR}"))},
    "nvlink": {"PF-GPU-010": ("fail", (
        f"[PF-GPU-010] GPUs with NVLink problems: 2 found, {NONE_FOR}: {GPU[1]}: 16 of 18 "
        f"NVLinks up (down: 16, 17) -> reset GPU; {GPU[3]}: NVLink 5 error counters "
        f"rising (crc_flit +12, replay +3 in 2 s) -> reset GPU; {ACT_RESET}"))},
    "nvlink_sleep_crc": {"PF-GPU-010": ("warn", (
        f"[PF-GPU-010] {GPU[4]}: NVLink 7 error counters rising (crc_flit +12 in 2 s) -> "
        f"monitor; {ACT_MONITOR}"))},
    # Every counter NOT_SUPPORTED on GPU 5: unknown, never "no errors" (an error in every tier).
    "nvlink_unread": {"PF-GPU-010": ("error", (
        f"[PF-GPU-010] GPUs with NVLink problems: {NOT_KNOWN}: {GPU[5]}: NVLink error counters "
        "not read (no NVLink error counter could be read on link(s) 0, 1 (NOT_SUPPORTED or "
        "failing))"))},
    "old_driver": {"PF-GPU-011": ("fail", (
        "[PF-GPU-011] NVIDIA driver 525.85.12 < 535.54.03 required for p5.48xlarge; use an "
        "AMI / host with a newer NVIDIA driver (the container cannot change it)"))},
    "dcgm_fail": {"PF-GPU-012": ("fail", (
        f"[PF-GPU-012] DCGM 3.3.9 diag -r 1 failures: 2 found, {NONE_FOR}: {GPU[1]}: "
        "Targeted Power: GPU 1 Max power of 224.1 did not reach desired power minimum -> reset "
        "GPU; node: Persistence Mode: Persistence mode for GPU 0 is disabled. -> fix the "
        f"setting DCGM names; {ACT_RESET}"))},
    "dcgm_skipped": {"PF-GPU-012": ("fail", (
        "[PF-GPU-012] dcgmi diag -r 1 ran no GPU test (every test past the deployment checks "
        "was skipped); run `dcgmi diag -r 1 -v` on the node to see why (MIG mode, "
        "permissions)"))},
    "dcgm_partial": {"PF-GPU-012": ("error", (
        "[PF-GPU-012] dcgmi diag -r 1 has results for GPUs 0, 1, 2, 3, 4, 5, 6 but none for "
        f"{GPU[7]}: it did not test them (not in DCGM's group, or not visible to nv-hostengine); "
        "run `dcgmi discovery -l`"))},
    # p5's bf16 floor is an estimate (a share of the datasheet peak): the GPU below it is named
    # in a warning with the floor's source; its HBM floor is DCGM's (sourced): a failure.
    "slow_gpu": {
        "PF-GPU-013": ("warn", (
            "[PF-GPU-013] GPUs below the estimated bf16 matmul floor (an estimate, not a failure "
            "until measured; source: estimate: ~56% of H100 SXM dense bf16 peak 989 TFLOP/s): "
            f"{GPU[5]}: 310.5 TFLOP/s < 550 TFLOP/s -> reset GPU; record this node's figures "
            "with scripts/device-check and set the floor in a profile file; a GPU far below "
            "its peers: reset it")),
        "PF-GPU-015": ("fail", (
            f"[PF-GPU-015] GPUs below the HBM copy floor: 1 found, {NONE_FOR}: {GPU[1]}: "
            f"1200.0 GB/s < 1905 GB/s -> reset GPU; {ACT_RESET}"))},
    "compute_missing_gpu": {cid: ("error", f"[{cid}] {what}: no figure for CUDA device(s) 7 of "
                                           "8 (measured: 0, 1, 2, 3, 4, 5, 6): not measured, "
                                           "never a pass")
                            for cid, what in (("PF-GPU-013", "bf16 matmul"),
                                              ("PF-GPU-014", "matmul result digests"),
                                              ("PF-GPU-015", "HBM copy"))},
    "sdc": {"PF-GPU-014": ("fail", (
        f"[PF-GPU-014] GPUs whose matmul result differs from the others': 1 found, {NONE_FOR}: "
        f"{GPU[4]}: result digest cdcdcdcdcdcd differs -> replace node; {ACT_REPLACE}"))},
    # In progress, completed with an error status: not ready (reset GPU, after the fabric
    # manager); GPU 2's unread state is named beside the failure (a warning, not a pass).
    "fabric": {"PF-GPU-017": ("fail", (
        f"[PF-GPU-017] GPUs whose NVSwitch fabric is not ready: 2 found, {NONE_FOR}: {GPU[0]}: "
        "fabric state In Progress: not ready (registration is still running: wait for "
        "nvidia-fabricmanager (HGX) or IMEX (NVL domains) to finish; stuck for minutes: restart "
        f"the fabric manager, then reset the GPU) -> reset GPU; {GPU[1]}: fabric state Completed "
        "with status Unknown Error: not ready (registration failed: restart nvidia-fabricmanager "
        f"/ IMEX, then reset the GPU) -> reset GPU; {ACT_RESET}"))},
    # Only GPU 2's fabric state is unknown (p5: an H100 has one): an error, never a pass.
    "fabric_unread": {"PF-GPU-017": ("error", (
        f"[PF-GPU-017] GPUs whose NVSwitch fabric is not ready: {NOT_KNOWN}: {GPU[2]}: NVSwitch "
        "fabric state not read (sources tried: NVML: no value (absent, N/A or NotSupported) at "
        "nvmlDeviceGetGpuFabricInfo: state)"))},
    # Temperature unknown on GPU 4 (NVML: Unknown Error): PF-GPU-007 cannot call it cool.
    "query_errors": {
        "PF-GPU-007": ("error", (
            f"[PF-GPU-007] GPUs too hot or slowed down: {NOT_KNOWN}: {GPU[4]}: GPU temperature "
            "not read (sources tried: NVML: nvmlDeviceGetTemperature: Unknown Error)")),
        "PF-GPU-016": ("warn", (
            f"[PF-GPU-016] {GPU[4]}: NVML could not read: nvmlDeviceGetTemperature: Unknown "
            f"Error -> monitor; {ACT_MONITOR}"))},
    # 17 of 18 links up is not "all up".
    "nvlink_17": {"PF-GPU-010": ("fail", (
        f"[PF-GPU-010] GPUs with NVLink problems: 1 found, {NONE_FOR}: {GPU[6]}: 17 of 18 "
        f"NVLinks up (down: 17) -> reset GPU; {ACT_RESET}"))},
    # An empty answer: the count fails, every per-GPU check errors (nothing was judged).
    "no_gpus": {
        "PF-GPU-001": ("fail", (
            "[PF-GPU-001] GPUs visible 0 GPUs < 8 GPUs required for p5.48xlarge (from nvml); "
            "check --gpus / NVIDIA_VISIBLE_DEVICES, then the kernel log for Xid 79; reboot, "
            "replace the node if the GPU stays missing")),
        **{cid: ("error", f"[{cid}] {NO_GPU}") for cid in (
            "PF-GPU-002", "PF-GPU-003", "PF-GPU-004", "PF-GPU-005", "PF-GPU-007", "PF-GPU-008",
            "PF-GPU-009", "PF-GPU-010", "PF-GPU-016", "PF-GPU-017")}},
    # GPU 3 could not be read at all: PF-GPU-016 fails it; every other check errors naming
    # the facts it could not read there and the source's answer.
    "unreadable_gpu": {
        **{cid: ("error", f"[{cid}] {what}: {NOT_KNOWN}: {UNREAD}: {facts} not read {NO_HANDLE}")
           for cid, what, facts in (
               ("PF-GPU-002", "GPUs of the wrong model or memory size", "GPU model, memory size"),
               ("PF-GPU-003", "GPUs with uncorrected ECC errors", "ECC mode, uncorrected ECC "
                "errors since the driver loaded (volatile), uncorrected ECC errors in the GPU's "
                "lifetime (aggregate)"),
               ("PF-GPU-004", "GPUs with pending or failed row remapping",
                "row remapping pending, row remapping failure"),
               ("PF-GPU-007", "GPUs too hot or slowed down",
                "GPU temperature, clock event reasons"),
               ("PF-GPU-008", "GPUs without persistence mode", "persistence mode"),
               ("PF-GPU-009", "GPUs with a degraded PCIe link", "performance state, PCIe link "
                "generation, PCIe link maximum generation, PCIe link width, PCIe link maximum "
                "width"),
               ("PF-GPU-010", "GPUs with NVLink problems", "NVLink link states"),
               ("PF-GPU-017", "GPUs whose NVSwitch fabric is not ready",
                "NVSwitch fabric state"))},
        "PF-GPU-016": ("fail", (
            f"[PF-GPU-016] GPUs lost or requiring a reset: 1 found, {NONE_FOR}: {UNREAD}: nvml "
            "could not read it at all (nvmlDeviceGetHandleByIndex: Unknown Error) -> reset GPU; "
            f"{ACT_RESET}"))},
    # GPU 6 is lost: PF-GPU-016 fails it; what it no longer answers is unknown elsewhere.
    "lost": {
        "PF-GPU-016": ("fail", (
            f"[PF-GPU-016] GPUs lost or requiring a reset: 2 found, {NONE_FOR}: {GPU[2]}: the "
            f"driver asks for recovery: Node Reboot -> reboot; {GPU[6]}: GPU is lost or "
            f"requires a reset -> reset GPU; {ACT_REBOOT}")),
        **{cid: ("error", f"[{cid}] {what}: {NOT_KNOWN}: {GPU[6]}: {fact} not read {LOST}")
           for cid, what, fact in (
               ("PF-GPU-002", "GPUs of the wrong model or memory size", "GPU model"),
               ("PF-GPU-007", "GPUs too hot or slowed down", "GPU temperature"),
               ("PF-GPU-008", "GPUs without persistence mode", "persistence mode"))}},
}


@pytest.mark.parametrize("scenario", sorted(EXPECTED))
def test_each_problem_named_with_its_action(pytester: pytest.Pytester, scenario: str):
    results = run_checks(pytester, scenario)
    assert sorted(results) == [f"PF-GPU-{n:03d}" for n in range(1, 19)]
    not_passing = {cid: (r["outcome"], r["message"]) for cid, r in results.items()
                   if r["outcome"] != "pass"}
    assert not_passing == EXPECTED[scenario]


def test_monitor_class_xids_are_warnings(pytester: pytest.Pytester):
    result = run_checks(pytester, "xid")["PF-GPU-006"]
    assert result["warnings"] == [
        f"[PF-GPU-006] {GPU[0]}: Xid 13 x2 (Graphics Exception) -> monitor; {ACT_MONITOR}"]


def test_non_fatal_sxids_are_warnings(pytester: pytest.Pytester):
    result = run_checks(pytester, "sxid")["PF-GPU-018"]
    assert result["warnings"] == [
        "[PF-GPU-018] NVSwitch 3 (bus 0000:08:00.0): SXid 12028 (Non-fatal, egress non-posted "
        f"PRIV error) -> monitor; {ACT_MONITOR}"]


def test_sxids_are_not_judged_without_nvswitch(pytester: pytest.Pytester):
    (pytester.path / "p.toml").write_text(
        '[profiles."hgx-less"]\nbase = "p5.48xlarge"\nnvswitch = false\n'
        'weakened_because = "a test profile without NVSwitch"\n')
    pytester.makeconftest(facts_conftest("tests.gpu_facts", "sxid", GPU_FACTS))
    copy_gpu_checks(pytester)
    result = run_check_file(pytester, "test_gpu.py", "hgx-less", "--preflight-profile-file",
                            str(pytester.path / "p.toml"))["PF-GPU-018"]
    assert (result["outcome"], result["message"]) == (
        "skip", "not applicable to hgx-less: the profile has no NVSwitch")


def test_a_slot_older_than_the_gpu_is_recorded(pytester: pytest.Pytester):
    result = run_checks(pytester, "pcie_slot")["PF-GPU-009"]
    assert result["outcome"] == "pass"
    assert result["measurements"][0] == {
        "what": "GPU 0 PCIe link max gen (the slot caps the link at gen 5 (the GPU supports gen "
                "6))", "value": 5, "unit": "", "op": None, "threshold": None, "ok": None,
        "name": "gpu_pcie_link_max_gen"}


def test_measurements_are_recorded(pytester: pytest.Pytester):
    results = run_checks(pytester, "healthy")
    matmul = results["PF-GPU-013"]["measurements"]
    assert matmul[0] == {"what": "GPU 0 bf16 matmul", "value": 700.0, "unit": "TFLOP/s",
                         "op": ">=", "threshold": 550.0, "ok": True, "name": "bf16_matmul_tflops"}
    assert len(matmul) == 9  # one per GPU, then the offender count


def test_cuda_devices_are_named_as_nvml_names_them(pytester: pytest.Pytester):
    # slow_gpu: CUDA device d is NVML GPU 7 - d (matched by UUID).
    matmul = run_checks(pytester, "slow_gpu")["PF-GPU-013"]["measurements"]
    assert [m["what"] for m in matmul[:2]] == ["GPU 7 bf16 matmul", "GPU 6 bf16 matmul"]
    # p5's bf16 floor is an estimate: the GPU below it is recorded, not failed (ok None)
    assert (matmul[2]["value"], matmul[2]["ok"], matmul[2]["threshold"]) == (310.5, None, 550.0)


def test_local_cpu_all_not_applicable(pytester: pytest.Pytester):
    results = run_checks(pytester, "healthy", profile="local-cpu")
    assert {(r["outcome"], r["message"]) for r in results.values()} == {
        ("skip", "not applicable to local-cpu: the profile expects no GPUs")}
    assert len(results) == 18


def _run_real_probes(pytester: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                     tools: dict[str, str], *args: str, env: dict[str, str] | None = None
                     ) -> dict[str, dict]:
    """checks/test_gpu*.py with the real probes, the emulated `tools` first on PATH."""
    import pynvml

    from tests.fake_tools import make_tool

    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        pass
    else:  # pragma: no cover - only on a machine with an NVIDIA driver
        pynvml.nvmlShutdown()
        pytest.skip("this machine has an NVIDIA driver")
    bin_dir = tmp_path / "fake-bin"
    for name, body in tools.items():
        make_tool(bin_dir, name, body)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    for key, value in (env or {}).items():
        monkeypatch.setenv(key, value)
    copy_gpu_checks(pytester)
    results_path = pytester.path / "results.jsonl"
    check_session(pytester, "-p", "harness.plugin", "-p", "no:cacheprovider",
                                  "--preflight-profile", "p5.48xlarge",
                                  "--preflight-results", str(results_path), *args)
    return {r["id"]: r for r in map(json.loads, results_path.read_text().splitlines())
            if r.get("event") == "result"}


def test_real_probes_on_this_machine_error_on_a_gpu_profile(
    pytester: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """No overrides: the real probes run. Without NVML, nvidia-smi, dcgmi or CUDA every GPU
    check is an error with its reason (never a skip, never a crash); with no GPU device node
    either, the compute part is not launched and says why."""
    log = tmp_path / "kern.log"
    log.write_text("[    0.000000] Linux version 6.8.0\n")
    results = _run_real_probes(pytester, tmp_path, monkeypatch, {},
                               env={"PREFLIGHT_KERNEL_LOG": str(log)})
    assert len(results) == 18
    # The kernel log was readable and clean.
    assert results["PF-GPU-006"]["outcome"] == results["PF-GPU-018"]["outcome"] == "pass"
    errors = {cid: r["message"] for cid, r in results.items() if r["outcome"] == "error"}
    assert sorted(errors) == sorted(set(results) - {"PF-GPU-006", "PF-GPU-018"})
    assert errors["PF-GPU-001"].startswith(
        "[PF-GPU-001] cannot read the GPUs: NVML could not start: NVML Shared Library Not Found")
    assert errors["PF-GPU-012"].startswith(
        "[PF-GPU-012] `dcgmi diag -r 1 -j` could not run: command not found")
    assert errors["PF-GPU-013"].startswith("[PF-GPU-013] compute sanity could not run: no "
                                           "NVIDIA GPU is visible in this container: no /dev/")


UNREADABLE_LOG = '''
import pytest
from harness.base.errors import ProbeError
from harness.fixtures.reading import Reading
from tests.gpu_facts import SCENARIOS

FACTS = SCENARIOS["healthy"]


@pytest.fixture(scope="session")
def gpu_inventory_reading():
    return FACTS["gpu_inventory_reading"]


@pytest.fixture(scope="session")
def kernel_log_reading():
    return Reading(error=ProbeError("cannot read the kernel log for XID errors: dmesg: read "
                                    "kernel buffer failed: Operation not permitted"))
'''


@pytest.mark.parametrize(("tier", "outcome"), [("preflight", "warn"), ("certify", "error")])
def test_unreadable_kernel_log_warns_in_preflight_errors_in_certify(
    pytester: pytest.Pytester, tier: str, outcome: str
):
    pytester.makeconftest(UNREADABLE_LOG)
    copy_gpu_checks(pytester)
    results = pytester.path / "results.jsonl"
    check_session(pytester, "-p", "harness.plugin", "-p", "no:cacheprovider",
                                  "--preflight-profile", "p5.48xlarge", "--preflight-tier", tier,
                                  "--preflight-results", str(results), "-k", "xid")
    records = [json.loads(line) for line in results.read_text().splitlines()]
    got = {r["id"]: r for r in records if r.get("event") == "result"}
    assert sorted(got) == ["PF-GPU-006", "PF-GPU-018"]
    for cid, what in (("PF-GPU-006", "XIDs"), ("PF-GPU-018", "NVSwitch SXids")):
        assert got[cid]["outcome"] == outcome
        assert "Operation not permitted" in got[cid]["message"]
        if outcome == "warn":
            assert got[cid]["message"].startswith(
                f"[{cid}] {what} not judged: cannot read the kernel")


DCGM_EXPLODES = '''
from harness.probes import dcgm


def _explode(*args, **kwargs):
    raise AssertionError("dcgmi must not run when the profile sets level 0")


dcgm.run_dcgm_diag = _explode
'''


def test_dcgm_level_zero_is_not_applicable(pytester: pytest.Pytester):
    pytester.makeconftest(DCGM_EXPLODES)
    copy_gpu_checks(pytester)
    (pytester.path / "p.toml").write_text(
        '[profiles."p5-nodcgm"]\nbase = "p5.48xlarge"\ndcgm_level = { preflight = 0 }\n'
        'weakened_because = "DCGM off in this test"\n')
    results = pytester.path / "results.jsonl"
    check_session(pytester, "-p", "harness.plugin", "-p", "no:cacheprovider",
                                  "--preflight-profile", "p5-nodcgm",
                                  "--preflight-profile-file", str(pytester.path / "p.toml"),
                                  "--preflight-results", str(results), "-k", "dcgm")
    records = [json.loads(line) for line in results.read_text().splitlines()]
    (result,) = [r for r in records if r.get("event") == "result"]
    assert result["outcome"] == "skip"
    assert "dcgm_level 0 for tier preflight" in result["message"]


def test_a_hung_nvidia_smi_fails_every_inventory_check_by_name_within_its_timeout(
    pytester: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """No NVML here, nvidia-smi hangs: PF-GPU-001 errors within its 14 s pytest-timeout naming
    the command, the time it had and its last line (not `Timeout >14s`); every other check that
    needs the inventory says the same at once; DCGM still runs (and its half JSON is an error
    naming dcgmi); the kernel log that is random bytes is not "no XIDs"."""
    half_json = (DATA / "dcgm/dcgm4-r3-diagnostic-pass-excerpt.json").read_text()[:600]
    (tmp_path / "half.json").write_text(half_json)
    results = _run_real_probes(pytester, tmp_path, monkeypatch, {
        "nvidia-smi": "echo 'Timestamp : Mon Oct  1 09:00:00 2024'; exec sleep 120",
        "dcgmi": f"cat '{tmp_path / 'half.json'}'",
        "journalctl": "echo 'No journal files were found.' >&2",
        "dmesg": "head -c 4000 /dev/urandom",
    }, "--timeout", "14", "--preflight-tier", "certify", "-k", "not matmul and not hbm")
    first = results["PF-GPU-001"]
    assert first["outcome"] == "error"
    assert re.match(
        r"\[PF-GPU-001\] cannot read the GPUs: NVML could not start: NVML Shared Library Not "
        r"Found \(NVMLError_LibraryNotFound\); fallback `nvidia-smi -q -x` did not finish within "
        r"\d(\.\d)? s and was killed; its last line: 'Timestamp : Mon Oct  1 09:00:00 2024' "
        r"\(all that was left of PF-GPU-001's 14 s timeout\)", first["message"]), first["message"]
    assert first["duration_s"] < 14
    inventory_checks = ["PF-GPU-00" + str(n) for n in (2, 3, 4, 5, 7, 8, 9)] + ["PF-GPU-011",
                                                                              "PF-GPU-016"]
    for cid in inventory_checks:
        assert results[cid]["outcome"] == "error"
        assert "`nvidia-smi -q -x` did not finish" in results[cid]["message"]
    assert results["PF-GPU-012"]["outcome"] == "error"
    assert results["PF-GPU-012"]["message"].startswith(
        "[PF-GPU-012] `dcgmi diag -r 2 -j` exited with status 0")
    assert "no diagnostic result in its output" in results["PF-GPU-012"]["message"]
    for cid in ("PF-GPU-006", "PF-GPU-018"):
        assert results[cid]["outcome"] == "error"
        assert "`dmesg` printed no kernel log: " in results[cid]["message"]


def test_a_kernel_log_file_is_named_in_the_xid_checks(
    pytester: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    log = tmp_path / "kern.log"
    log.write_text((DATA / "kernel_log/real_journal-xid79-fallen-line-xid44.txt").read_text())
    results = _run_real_probes(pytester, tmp_path, monkeypatch, {}, "-k", "xid",
                               env={"PREFLIGHT_KERNEL_LOG": str(log)})
    xid = results["PF-GPU-006"]
    assert xid["outcome"] == "fail"
    assert xid["message"].startswith(
        f"[PF-GPU-006] XID errors (kernel log: PREFLIGHT_KERNEL_LOG={log} (a file, last written ")
    assert ("since Nov 07 18:17:15 only (the log does not reach back to the boot" in
            xid["message"])
    assert "GPU at bus 0000:01:00: Xid 79 (GPU has fallen off the bus.) -> reboot" in xid["message"]
    sxid = results["PF-GPU-018"]
    assert sxid["outcome"] == "pass"
    assert sxid["measurements"][0]["what"] == "kernel log"
    assert sxid["measurements"][0]["value"].startswith(f"PREFLIGHT_KERNEL_LOG={log} (a file")


@pytest.mark.parametrize(("tier", "outcome"), [("preflight", "warn"), ("certify", "error")])
def test_a_kernel_log_file_that_is_not_one_is_never_no_xids(
    pytester: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tier: str,
    outcome: str
):
    log = tmp_path / "kern.log"
    log.write_text("<html><body>Service Unavailable</body></html>\n")
    results = _run_real_probes(pytester, tmp_path, monkeypatch, {}, "-k", "xid",
                               "--preflight-tier", tier, env={"PREFLIGHT_KERNEL_LOG": str(log)})
    for cid, what in (("PF-GPU-006", "XIDs"), ("PF-GPU-018", "NVSwitch SXids")):
        assert results[cid]["outcome"] == outcome
        message = results[cid]["message"]
        body = (f"PREFLIGHT_KERNEL_LOG={log} is not a kernel log: no kernel log lines (first "
                "line: '<html><body>Service Unavailable</body></html>')")
        prefix = f"[{cid}] {what} not judged: " if outcome == "warn" else f"[{cid}] "
        assert message.startswith(prefix + body), message


def test_explain_says_what_an_unreadable_kernel_log_gives():
    import checks.test_gpu_kernel_log  # noqa: F401 - registers the checks
    from harness.checking import registry

    for cid in ("PF-GPU-006", "PF-GPU-018"):
        why = registry()[cid].why
        assert ("output that is not a kernel log, a saved file older than the boot) is a warning "
                "in the preflight tier and an error in certify and diagnose.") in why


@pytest.mark.parametrize("tier", ["preflight", "certify"])
def test_unread_nvlink_counters_are_an_error_in_every_tier(pytester: pytest.Pytester, tier: str):
    pytester.makeconftest(facts_conftest("tests.gpu_facts", "nvlink_unread", GPU_FACTS))
    copy_gpu_checks(pytester)
    result = run_check_file(pytester, "test_gpu.py", "p5.48xlarge", "--preflight-tier",
                            tier, "-k", "nvlink")["PF-GPU-010"]
    assert result["outcome"] == "error"
    assert result["message"].startswith(
        f"[PF-GPU-010] GPUs with NVLink problems: {NOT_KNOWN}: {GPU[5]}: NVLink error counters")


def test_explain_says_what_each_gpu_check_reads_and_what_not_supported_means():
    # Importing the check modules registers their checks.
    import checks.test_gpu
    import checks.test_gpu_diag
    import checks.test_gpu_kernel_log
    import checks.test_gpu_nvlink
    import checks.test_sdc
    import checks.test_xid  # noqa: F401
    from harness.checking import registry

    specs = {cid: spec for cid, spec in registry().items() if cid.startswith("PF-GPU-")}
    assert sorted(specs) == [f"PF-GPU-{n:03d}" for n in range(1, 21)]
    for cid, spec in specs.items():
        assert spec.reads, cid
        assert any(line.startswith("not supported") for line in spec.reads), cid
        assert any(" error" in line for line in spec.reads), cid


def test_explain_prints_the_facts_and_the_skus_table(capsys: pytest.CaptureFixture[str]):
    from harness.cli import main

    assert main(["explain", "PF-GPU-005"]) == 0
    out = capsys.readouterr().out
    assert ("reads:    page retirement pending: NVML nvmlDeviceGetRetiredPagesPendingStatus; "
            "nvidia-smi `Retired Pages > Pending Page Blacklist`") in out
    assert "is an error naming the fact, the GPU and the sources tried: never a pass" in out
    assert "profiles.toml [skus.NAME] not_supported.retired_pages, each with its source" in out


#: Issue 25's node: the checks that passed on it before (005 is not applicable: an H100 has no
#: page retirement, profiles.toml says so with its source).
SPARSE_UNKNOWN = ("PF-GPU-003", "PF-GPU-004", "PF-GPU-007", "PF-GPU-008", "PF-GPU-009",
                  "PF-GPU-016", "PF-GPU-017")


def test_a_node_whose_health_nvidia_smi_does_not_say_is_not_healthy(
    pytester: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """No NVML; `nvidia-smi -q -x` lists eight H100s with only name, UUID, bus id and memory:
    the real probes read it and every check whose facts it does not hold errors, naming the
    fact, the GPU and the sources tried (NVML's failure, then nvidia-smi's missing value)."""
    from tests.fake_gpu_node import sparse_smi_xml

    xml = tmp_path / "sparse.xml"
    xml.write_text(sparse_smi_xml())
    results = _run_real_probes(pytester, tmp_path, monkeypatch, {"nvidia-smi": f"cat '{xml}'"},
                               "-k", "count or model or ecc or remap or retirement or hot or "
                               "persistence or pcie or requires_reset or fabric")
    outcomes = {cid: r["outcome"] for cid, r in results.items()}
    assert outcomes == {"PF-GPU-001": "pass", "PF-GPU-002": "pass", "PF-GPU-005": "skip",
                        **dict.fromkeys(SPARSE_UNKNOWN, "error")}
    ecc = results["PF-GPU-003"]["message"]
    assert ecc.startswith(
        f"[PF-GPU-003] GPUs with uncorrected ECC errors: {NOT_KNOWN}: GPUs 0, 1, 2, 3, 4, 5, 6, 7: "
        "ECC mode, uncorrected ECC errors since the driver loaded (volatile), uncorrected ECC "
        "errors in the GPU's lifetime (aggregate) not read (sources tried: NVML could not start: "
        "NVML Shared Library Not Found (NVMLError_LibraryNotFound); `nvidia-smi -q -x`: no value "
        "(absent, N/A or NotSupported) at `ECC Mode > Current`"), ecc
    assert "not applicable to p5.48xlarge: H100-SXM5-80GB has no page retirement pending" in \
        results["PF-GPU-005"]["message"]
    assert "NVSwitch fabric state not read" in results["PF-GPU-017"]["message"]


def test_p6e_gb200_without_a_fabric_state_is_not_ready_to_judge():
    """PF-GPU-017 passed on p6e-gb200 with no fabric state: NVML answering state NOT_SUPPORTED
    on a GB200 (an NVL72 tray, which has one) is unread, an error."""
    import checks.test_gpu_nvlink as nvlink_checks
    from harness.checking import run_check
    from harness.probes import gpu
    from harness.profiles.table import get_profile
    from tests.fake_nvml import FakeGpu, FakeNvml

    gb200 = [FakeGpu(i, name="NVIDIA GB200", fabric=(0, 0)) for i in range(4)]
    inventory = gpu.query_gpus(FakeNvml(gb200, driver="580.173.02"))
    profile = get_profile("p6e-gb200.36xlarge")
    result = run_check(nvlink_checks.test_nvswitch_fabric_registered, profile, inventory,
                       profile=profile.name)
    assert (result.outcome, result.message) == ("error", (
        f"[PF-GPU-017] GPUs whose NVSwitch fabric is not ready: {NOT_KNOWN}: GPUs 0, 1, 2, 3: "
        "NVSwitch fabric state not read (sources tried: NVML: no value (absent, N/A or "
        "NotSupported) at nvmlDeviceGetGpuFabricInfo: state)"))


def test_dcgm_contention_is_waited_out_then_an_error_never_a_failed_diagnostic(
    pytester: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """Issue 30 item 5, through the plugin with the real probe: an emulated dcgmi that answers
    DCGM 4.6's own `resource is in use` refusal (tests/data/dcgm/SOURCES.md) on every run makes
    PF-GPU-012 an error naming the contention within its 20 s timeout, after more than one try;
    never a `fail` (no GPU was tested)."""
    busy = DATA / "dcgm/dcgm4.6-diag-in-use-from-source.json"
    count = tmp_path / "count"
    results = _run_real_probes(pytester, tmp_path, monkeypatch, {
        "dcgmi": f"echo run >> '{count}'; cat '{busy}'; exit 222",
    }, "--timeout", "20", "-k", "dcgm")
    dcgm = results["PF-GPU-012"]
    assert dcgm["outcome"] == "error", dcgm
    assert dcgm["message"].startswith(
        "[PF-GPU-012] `dcgmi diag -r 1 -j` ran no test: another DCGM diagnostic holds the GPUs "
        "(dcgmi: 'Error: Unable to complete diagnostic for entities *,cpu:*. Return: (-34) : "
        "The requested operation could not be completed because the affected resource is in "
        "use') on each of "), dcgm["message"]
    assert len(count.read_text().splitlines()) >= 2
    assert dcgm["duration_s"] < 20
