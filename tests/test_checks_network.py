"""Network checks with canned facts: checks/test_network.py copied into a pytester directory,
its fact fixtures overridden from tests/network_facts.py, run under the plugin."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from harness.fixtures.reading import Reading
from harness.probes import gpu
from harness.probes.gpu_visible import no_gpu_cause
from tests.conftest import check_session, facts_conftest, run_check_file

ROOT = Path(__file__).resolve().parent.parent

NETWORK_FACTS = ["efa_devices", "fi_info_efa", "kernel_modules", "memlock_kib", "nccl_net_log",
                 "ofi_nccl_lib"]


def run_checks(pytester: pytest.Pytester, scenario: str | None,
               profile: str = "p5.48xlarge") -> dict[str, dict]:
    """Run the network checks (canned scenario, or the real probes when None)."""
    if scenario is not None:
        pytester.makeconftest(facts_conftest("tests.network_facts", scenario, NETWORK_FACTS))
    return run_check_file(pytester, "test_network.py", profile)


@pytest.fixture(autouse=True)
def _importable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTHONPATH", str(ROOT))


NET_IDS = [f"PF-NET-{i:03d}" for i in range(1, 12)]
P5 = "required for p5.48xlarge"
R_DEVICES = ("pass every EFA device to the container (docker run --device /dev/infiniband/uverbsN "
             "for each, or the EKS vpc.amazonaws.com/efa resource); on the host check "
             "`ls /sys/class/infiniband`")
R_GDR = ("load nvidia_peermem (or use a driver with DMA-BUF), do not set FI_EFA_USE_DEVICE_RDMA=0, "
         "NCCL_NET_GDR_LEVEL=LOC or FI_HMEM_DISABLE_P2P=1")
R_NO_EFA_PROVIDER = ("expose /dev/infiniband/uverbs* to the container (docker --device, EKS "
                     "vpc.amazonaws.com/efa resource) and check `fi_info -p efa`")
FALLBACK = ("NET/Socket: aws-ofi-nccl loaded but failed to initialise (libfabric offers no EFA "
            "provider: the EFA devices are not visible in this container or the EFA software "
            "is missing); traffic goes over TCP sockets")
NO_PLUGIN = ("NET/Socket: aws-ofi-nccl did not load (check LD_LIBRARY_PATH, the plugin library); "
             "traffic goes over TCP sockets")

# scenario -> {check ID: (outcome, exact message)}; every other check passes.
EXPECTED: dict[str, dict[str, tuple[str, str]]] = {
    "healthy": {},
    "efa_nv_peermem": {},
    "nv_peer_mem_legacy": {},
    "uverbs_not_openable": {
        "PF-NET-002": ("fail", f"[PF-NET-002] EFA device nodes /dev/infiniband/uverbs* 0 < 32 "
                               f"{P5} (32 present but not openable: uverbs0: Operation not "
                               f"permitted and 31 more); {R_DEVICES}"),
    },
    "container_without_devices": {
        "PF-NET-002": ("fail", f"[PF-NET-002] EFA device nodes /dev/infiniband/uverbs* 0 < 32 "
                               f"{P5}; {R_DEVICES}"),
        "PF-NET-003": ("fail", f"[PF-NET-003] EFA devices listed by `fi_info -p efa` 0 < 32 "
                               f"{P5} (fi_info printed error -61 (FI_ENODATA: no EFA device "
                               f"usable)); {R_DEVICES}; install the EFA software (libfabric "
                               "from the EFA installer)"),
        "PF-NET-006": ("fail", f"[PF-NET-006] aws-ofi-nccl loaded but failed to initialise "
                               f"({FALLBACK}), required to work for p5.48xlarge; "
                               f"{R_NO_EFA_PROVIDER}"),
        "PF-NET-007": ("fail", f"[PF-NET-007] provider NCCL used socket != efa {P5} "
                               f"({FALLBACK}); {R_DEVICES}; do not set FI_PROVIDER to anything "
                               "but efa"),
        "PF-NET-008": ("fail", f"[PF-NET-008] network NCCL used is {FALLBACK}; efa {P5}; "
                               f"{R_NO_EFA_PROVIDER}"),
        "PF-NET-009": ("fail", f"[PF-NET-009] NET channels without GDRDMA 4 != 0 {P5} (0/4 "
                               f"NET/Socket channel lines end in /GDRDMA); {R_GDR}"),
        "PF-NET-010": ("fail", f"[PF-NET-010] no EFA NIC carried NCCL traffic ({FALLBACK}); 32 "
                               f"EFA NICs {P5}; {R_DEVICES}"),
        "PF-NET-011": ("fail", "[PF-NET-011] NCCL WARN lines and known failures: 3 found, none "
                               "allowed for p5.48xlarge: NET/OFI No eligible providers were "
                               "found (libfabric offers no EFA provider: the EFA devices are "
                               "not visible in this container or the EFA software is missing); "
                               "NET/OFI aws-ofi-nccl initialization failed (the aws-ofi-nccl "
                               "NET plugin failed to initialize, so NCCL fell back to another "
                               "network (usually TCP sockets)); Failed to initialize NET plugin "
                               "Libfabric (the aws-ofi-nccl NET plugin failed to initialize, so "
                               "NCCL fell back to another network (usually TCP sockets)); "
                               f"{R_NO_EFA_PROVIDER}"),
    },
    "no_plugin": {
        "PF-NET-006": ("fail", f"[PF-NET-006] NCCL did not load aws-ofi-nccl ({NO_PLUGIN}; no "
                               "library found), required for p5.48xlarge; install aws-ofi-nccl "
                               "(EFA installer >= 1.38 ships it in /opt/amazon/ofi-nccl) and put "
                               "its lib directory on LD_LIBRARY_PATH; read the NET/OFI lines of "
                               "an NCCL_DEBUG=INFO log"),
        "PF-NET-007": ("fail", None),
        "PF-NET-008": ("fail", None),
        "PF-NET-009": ("error", "[PF-NET-009] the NCCL log has no NET channel line and no "
                                "`GPU Direct RDMA Enabled for GPU` line, so GPUDirect RDMA is "
                                f"unproven ({NO_PLUGIN})"),
        "PF-NET-010": ("fail", None),
    },
    "plugin_unused": {
        "PF-NET-007": ("fail", None),
        "PF-NET-008": ("fail", "[PF-NET-008] network NCCL used is NET/Socket: aws-ofi-nccl "
                               "loaded but NCCL used sockets (NCCL_NET=Socket?); traffic goes "
                               f"over TCP sockets; efa {P5}; install aws-ofi-nccl (EFA "
                               "installer >= 1.38 ships it in /opt/amazon/ofi-nccl) and put its "
                               "lib directory on LD_LIBRARY_PATH; read the NET/OFI lines of an "
                               "NCCL_DEBUG=INFO log"),
        "PF-NET-009": ("fail", None),
        "PF-NET-010": ("fail", None),
    },
    "no_gdr": {
        "PF-NET-009": ("fail", "[PF-NET-009] GPUDirect RDMA unavailable, required for "
                               "p5.48xlarge: the plugin said 'NET/OFI Need to force simple "
                               f"protocol: GDR not supported'; {R_GDR}"),
        "PF-NET-010": ("fail", f"[PF-NET-010] NICs found by aws-ofi-nccl 1 < 32 {P5}; "
                               f"{R_DEVICES}"),
        "PF-NET-011": ("fail", None),
    },
    "gdr_missing_on_some_channels": {
        "PF-NET-009": ("fail", f"[PF-NET-009] NET channels without GDRDMA 4 != 0 {P5} (12/16 "
                               f"NET/Libfabric channel lines end in /GDRDMA); {R_GDR}"),
    },
    "old_plugin": {
        "PF-NET-006": ("fail", f"[PF-NET-006] aws-ofi-nccl version 1.4.0aws < 1.7.3 {P5}; "
                               "upgrade aws-ofi-nccl (a current EFA installer)"),
        "PF-NET-009": ("error", None),
        "PF-NET-010": ("fail", None),
    },
    "security_group": {
        "PF-NET-009": ("error", None),
        "PF-NET-011": ("fail", "[PF-NET-011] NCCL WARN lines and known failures: 1 found, none "
                               "allowed for p5.48xlarge: NET/OFI Request 0x7f2a8c0 (send) "
                               "completed with error: err: 113, flags: 0, prov_errno: 13, "
                               "strerror: No route to host, len: 0 (EFA packets between the "
                               "nodes are dropped: the security group does not allow all "
                               "traffic to and from itself); add inbound AND outbound rules "
                               "'All traffic' whose source/destination is the security group "
                               "itself (EC2 EFA user guide)"),
    },
    "collective_timed_out": {
        "PF-NET-011": ("fail", "[PF-NET-011] NCCL WARN lines and known failures: 1 found, none "
                               "allowed for p5.48xlarge: the collective failed: `torchrun ...` "
                               "did not finish within 90 s and was killed; fix the first "
                               "failure named; `preflight inspect nccl-log FILE` explains a "
                               "log"),
    },
    "small_memlock_no_modules": {
        "PF-NET-004": ("fail", "[PF-NET-004] kernel modules missing: 1 found, none allowed for "
                               "p5.48xlarge: efa; install the EFA driver on the host "
                               "(efa_installer.sh) and reboot or `modprobe efa`"),
        "PF-NET-005": ("fail", f"[PF-NET-005] locked-memory limit (ulimit -l) 65536 KiB < "
                               f"16777216 KiB {P5}; run the container with `--ulimit "
                               "memlock=-1:-1` (unlimited)"),
    },
    "fi_info_half_the_devices": {
        "PF-NET-003": ("fail", f"[PF-NET-003] EFA devices listed by `fi_info -p efa` 16 < 32 "
                               f"{P5} (rdmap79s27, rdmap80s27, rdmap81s27, rdmap82s27 and 12 "
                               f"more); {R_DEVICES}; install the EFA software (libfabric from "
                               "the EFA installer)"),
    },
    "counts_unread": {
        "PF-NET-001": ("error", "[PF-NET-001] EFA device count unread: /sys/class is not there "
                                f"(sysfs not mounted); 32 {P5}"),
        "PF-NET-002": ("error", "[PF-NET-002] EFA device nodes unread: cannot list "
                                f"/dev/infiniband: Permission denied; 32 {P5}"),
        "PF-NET-003": ("error", "[PF-NET-003] fi_info listed 1 efa provider entries but no "
                                f"domain names: the EFA device count is unread; 32 {P5}"),
    },
    "peermem_missing": {
        "PF-NET-004": ("warn", "[PF-NET-004] kernel module nvidia_peermem is not loaded: "
                               "GPUDirect RDMA then relies on DMA-BUF (driver >= 515 with the "
                               "open kernel modules); PF-NET-009 shows whether GDR works; "
                               "`modprobe nvidia_peermem` if PF-NET-009 fails"),
    },
}


@pytest.mark.parametrize("scenario", sorted(EXPECTED))
def test_checks_judge_canned_facts(pytester: pytest.Pytester, scenario: str):
    results = run_checks(pytester, scenario)
    assert sorted(results) == NET_IDS
    for check_id in NET_IDS:
        outcome, message = EXPECTED[scenario].get(check_id, ("pass", ""))
        got = results[check_id]
        assert got["outcome"] == outcome, (check_id, got["message"])
        if message is not None:
            assert got["message"] == message, check_id


def test_healthy_node_records_its_measurements(pytester: pytest.Pytester):
    results = run_checks(pytester, "healthy")
    assert results["PF-NET-001"]["measurements"][0]["value"] == 32
    assert results["PF-NET-009"]["measurements"][0] == {
        "what": "NET channels without GDRDMA", "value": 0, "unit": "", "op": "==",
        "threshold": 0, "ok": True, "name": "pf_net_expect"}  # a judge's: named by its check


def test_local_cpu_skips_every_network_check_with_the_reason(pytester: pytest.Pytester):
    results = run_checks(pytester, "healthy", profile="local-cpu")
    for check_id in NET_IDS:
        assert results[check_id]["outcome"] == "skip", check_id
        assert results[check_id]["message"].startswith("not applicable to local-cpu: the "
                                                       "profile expects no"), check_id


def test_real_probes_on_a_machine_without_efa_fail_or_error_clearly(pytester: pytest.Pytester):
    if shutil.which("fi_info") or Path("/sys/class/infiniband").exists():
        pytest.skip("this machine has EFA software or devices: the messages differ")
    inventory = Reading.of(gpu.inventory)
    no_gpu = no_gpu_cause(Path("/"), inventory.value, inventory.error)
    if no_gpu is None:
        pytest.skip("this machine may have a GPU: the collective would run")
    results = run_checks(pytester, None)
    assert {k: r["outcome"] for k, r in results.items()}["PF-NET-003"] == "error"
    assert results["PF-NET-001"]["message"].startswith(
        "[PF-NET-001] EFA devices in /sys/class/infiniband 0 != 32 required for p5.48xlarge")
    assert results["PF-NET-003"]["message"] == (
        "[PF-NET-003] fi_info could not list providers: `fi_info -p efa` could not run: "
        "command not found")
    for check_id in NET_IDS[5:]:
        assert results[check_id]["outcome"] == "error", check_id
        # No GPU device node and no NVML: no rank is launched, the cause is named.
        assert results[check_id]["message"] == (
            f"[{check_id}] no NCCL log: the worker cannot start: {no_gpu}")


FIXTURE_CONFTEST = '''
import json
import os
from pathlib import Path

import pytest

import harness.fixtures.worker as worker_fixture
import harness.probes.nccl_collective as nccl_collective
from harness.base.proc_result import ProcResult
from harness.worker.launch import PartOutcome, WorkerRun
from tests.network_facts import HEALTHY

LOG = Path({log!r})
CALLS = Path({calls!r})


def _call(kind, **fields):
    with CALLS.open("a") as fh:
        fh.write(json.dumps(dict(kind=kind, **fields)) + "\\n")


def fake_run_worker(nproc, parts, *, env, extra=(), limit_s=None, **kwargs):
    """The worker's launch: its ranks write the NCCL log where NCCL_DEBUG_FILE says."""
    _call("worker", nproc=nproc, parts=[p.name for p in parts], nccl_debug=env.get("NCCL_DEBUG"),
          subsys=env.get("NCCL_DEBUG_SUBSYS"), user_var=env.get("USER_VAR"))
    if LOG.name:
        target = Path(env["NCCL_DEBUG_FILE"].replace("%h", "host").replace("%p", "1"))
        target.write_bytes(LOG.read_bytes())
    result = ProcResult(("torchrun",), {rc}, stdout="rank 3 died")
    status = "ok" if {rc} == 0 else "crashed"
    return WorkerRun(nproc, {{p.name: PartOutcome(p.name, status, result) for p in parts}},
                     (result,))


def fake_run_collective(nproc, *, env, workdir, timeout_s, force_net, **kwargs):
    _call("collective", nproc=nproc, timeout_s=timeout_s, force_net=force_net,
          user_var=env.get("USER_VAR"))
    if LOG.name:
        (workdir / "nccl-host-1.log").write_bytes(LOG.read_bytes())
    logs = tuple(sorted(workdir.glob("nccl-*.log")))
    result = ProcResult(("torchrun",), {rc}, stdout="rank 3 died")
    return nccl_collective.CollectiveRun(result, logs, workdir)


worker_fixture.run_worker = fake_run_worker
nccl_collective.run_collective = fake_run_collective


@pytest.fixture(scope="session")
def no_gpu_visible():
    return None  # a GPU may be visible: the worker launches


@pytest.fixture(scope="session")
def ofi_nccl_lib():
    return HEALTHY["ofi_nccl_lib"]
'''


def _fixture_session(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, log: str,
                     rc: int, tier: str) -> tuple[dict[str, dict], list[dict]]:
    monkeypatch.setenv("USER_VAR", "kept")
    monkeypatch.setenv("NCCL_DEBUG", "WARN")  # the job's: the worker's own log needs INFO
    path = str(ROOT / "tests" / "data" / "nccl_log" / log) if log else ""
    calls = pytester.path / "calls.jsonl"
    pytester.makeconftest(FIXTURE_CONFTEST.format(log=path, rc=rc, calls=str(calls)))
    shutil.copy(ROOT / "checks" / "test_network.py", pytester.path / "test_network.py")
    results_file = pytester.path / "results.jsonl"
    check_session(pytester, "-p", "harness.plugin", "-p", "no:cacheprovider",
                                  "--preflight-profile", "p5.48xlarge", "--preflight-tier", tier,
                                  "-k", "ofi or provider or socket or gdr or nic or warnings",
                                  "--preflight-results", str(results_file),
                                  "--basetemp", str(pytester.path / "tmp"))
    records = [json.loads(line) for line in results_file.read_text().splitlines()]
    results = {r["id"]: r for r in records if r.get("event") == "result"}
    made = [json.loads(x) for x in calls.read_text().splitlines()] if calls.exists() else []
    return results, made


SINGLE_NODE = "composed_p5_single_node_worker_gdr_init.log"


@pytest.mark.parametrize(("log", "rc", "want"), [
    (SINGLE_NODE, 0, {}),
    (SINGLE_NODE, 1, {
        "PF-NET-011": "[PF-NET-011] NCCL WARN lines and known failures: 1 found, none allowed for "
                      "p5.48xlarge: the collective failed: `torchrun` exited with status 1: rank "
                      "3 died; fix the first failure named; `preflight inspect nccl-log FILE` "
                      "explains a log"}),
    ("", 1, {check_id: f"[{check_id}] the worker's launch wrote no NCCL log (NCCL_DEBUG_FILE "
                       "under {LOGDIR}): `torchrun` exited with status 1: rank 3 died"
             for check_id in NET_IDS[5:]}),
])
def test_preflight_evidence_is_the_workers_own_nccl_log(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, log: str, rc: int,
    want: dict[str, str],
):
    """One NCCL start per node: no collective of its own, the worker's launch logs NCCL at INFO
    (whatever the job's NCCL_DEBUG) and its log proves the plugin, provider, NICs and, on one
    node without NET channels, GPUDirect RDMA from NCCL's init lines."""
    results, calls = _fixture_session(pytester, monkeypatch, log, rc, "preflight")
    assert sorted(results) == NET_IDS[5:]
    assert [c["kind"] for c in calls] == ["worker"]  # one launch for all six checks
    assert calls[0] == dict(kind="worker", nproc=8, parts=[], nccl_debug="INFO",
                            subsys="INIT,NET", user_var="kept")
    for check_id in NET_IDS[5:]:
        message = want.get(check_id)
        if message is None:
            assert results[check_id]["outcome"] == "pass", results[check_id]["message"]
        else:
            got = results[check_id]["message"]
            assert got.startswith(message.split("{LOGDIR}")[0]), got
            assert got.endswith(message.split("{LOGDIR}")[-1]), got


def test_longer_tiers_add_a_forced_net_collective(pytester: pytest.Pytester,
                                                  monkeypatch: pytest.MonkeyPatch):
    results, calls = _fixture_session(pytester, monkeypatch,
                                      "composed_ofi_1.16_efa_direct_p5_srun.log", 0, "certify")
    assert [c["kind"] for c in calls] == ["collective"]
    assert calls[0] == dict(kind="collective", nproc=8, timeout_s=75.0, force_net=True,
                            user_var="kept")
    assert {k: r["outcome"] for k, r in results.items()} == dict.fromkeys(NET_IDS[5:], "pass")


def _gdr_log(drop: str | None = None, only_disabled: str | None = None) -> str:
    text = (ROOT / "tests" / "data" / "nccl_log" / SINGLE_NODE).read_text()
    lines = []
    for line in text.splitlines():
        if drop and drop in line:
            continue
        if only_disabled and f"Enabled for GPU {only_disabled} " in line:
            line = line.replace("Enabled", "Disabled").replace("<=", ">")
        lines.append(line)
    return "\n".join(lines)


def test_single_node_gdr_is_judged_on_nccls_init_verdict_per_gpu():
    from harness.judges import network as judges
    from harness.parsers.nccl_log import parse_nccl_log
    from harness.profiles.table import get_profile

    p5 = get_profile("p5.48xlarge")
    healthy = judges.net_gdr(p5, parse_nccl_log(_gdr_log()))
    assert healthy.status == "pass", healthy.message
    assert "8/8 GPUs" in healthy.detail
    one_gpu = judges.net_gdr(p5, parse_nccl_log(_gdr_log(only_disabled="a8000")))
    assert one_gpu.status == "fail"
    assert "none for GPU a8000" in one_gpu.message
    unknown = judges.net_gdr(p5, parse_nccl_log(_gdr_log(drop="GPU Direct RDMA")))
    assert unknown.status == "unknown"
    assert "no NET channel line and no `GPU Direct RDMA Enabled for GPU` line" in unknown.message


def test_pf_net_004_judge_is_a_function_of_the_modules_and_the_profile():
    """harness.judges.network.efa_kernel_modules: what the check settles, without a session."""
    from harness.judges.network import efa_kernel_modules
    from harness.profiles.table import get_profile

    p5 = get_profile("p5.48xlarge")
    assert p5.gdr_required
    assert [v.status for v in efa_kernel_modules(p5, frozenset({"efa", "nvidia_peermem"}))] == ["pass"]
    assert [v.status for v in efa_kernel_modules(p5, frozenset({"efa"}))] == ["pass", "warn"]
    missing = efa_kernel_modules(p5, frozenset({"nvidia_peermem"}))
    assert [v.status for v in missing] == ["fail"] and missing[0].offenders == ("efa",)
    assert [v.status for v in efa_kernel_modules(get_profile("local-cpu"), frozenset())] == ["n/a"]
