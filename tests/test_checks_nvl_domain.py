"""PF-NVL-004..006 (checks/test_nvl_domain.py) and PF-IB-004 (checks/test_ib_sharp.py) on facts
built from recorded NCCL logs (tests/nvl_domain_facts.py), and the NCCL fabric-log parser on
those logs."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.parsers.nccl_fabric import parse_fabric_log
from tests.conftest import facts_conftest, run_check_file

ROOT = Path(__file__).resolve().parent.parent
LOGS = ROOT / "tests" / "data" / "nccl_log"
FACTS = ["fabric_evidence", "gpu_fabric", "imex_status", "environ", "nvls_allreduce",
         "node_count", "multi_node_allreduce"]
IB_PROFILE = ('[profiles."hgx-ib"]\nbase = "p5.48xlarge"\nfabric = "ib"\nnum_efa_devices = 0\n'
              'weakened_because = "an HGX H100 on InfiniBand, not a p5: no EFA"\n')


@pytest.fixture(autouse=True)
def _importable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTHONPATH", str(ROOT))


def run(pytester: pytest.Pytester, check_file: str, scenario: str, profile: str,
        tier: str = "preflight") -> dict[str, tuple[str, str]]:
    pytester.makeconftest(facts_conftest("tests.nvl_domain_facts", scenario, FACTS))
    (pytester.path / "ib.toml").write_text(IB_PROFILE)
    results = run_check_file(pytester, check_file, profile, f"--preflight-tier={tier}",
                             f"--preflight-profile-file={pytester.path / 'ib.toml'}")
    return {k: (v["outcome"], v.get("message") or "") for k, v in results.items()}


# --- the parser on recorded logs ---------------------------------------------------------------

def test_collnet_lines_of_a_working_and_a_failed_sharp_job():
    ok = parse_fabric_log((LOGS / "real_collnet_sharp_connected.log").read_text())
    assert (ok.collnet_connections, ok.collnet_networks, ok.collnet_gdr) == (4, ("SHARP",), True)
    assert ok.sharp_ranks == 4 and ok.collnet_used and ok.env["NCCL_COLLNET_ENABLE"] == "1"
    bad = parse_fabric_log((LOGS / "real_collnet_sharp_fallback.log").read_text())
    assert bad.collnet_connections == 4 and not bad.collnet_used
    assert "Cannot initialize CollNet, using point-to-point network instead" in bad.collnet_errors
    assert bad.sharp_library_errors == ("ERROR SHArP Job init error: No resource",)
    assert (bad.nvls_channels, bad.collnet_channel_counts) == ((0,), (3,))


def test_nvls_support_lines_old_and_new_formats():
    ok = parse_fabric_log((LOGS / "real_nvls_available_h100.log").read_text())
    assert (ok.nvls_available, ok.nvls_unavailable) == (5, 0)
    no = parse_fabric_log((LOGS / "real_nvls_not_available_h800.log").read_text())
    assert (no.nvls_available, no.nvls_unavailable) == (0, 5)  # `dev xxx` and `(NVLS_NCHANNELS 0)`
    assert no.comm_mnnvl == ((2, 0),)


def test_mnnvl_ranks_keep_their_host_and_a_repeated_line_counts_once():
    text = (LOGS / "real_mnnvl_h200_gb200.txt").read_text()
    log = parse_fabric_log(text + text)  # a communicator created twice
    assert len(log.mnnvl) == 8 and {r.host for r in log.mnnvl} == {"msm-h200-2", "gb200a-04"}
    assert log.env == {"NCCL_NVLS_ENABLE": "1"}
    assert parse_fabric_log(iter(text.splitlines())) == parse_fabric_log(text)


def test_nothing_recognised_is_an_empty_log():
    log = parse_fabric_log("hello\nNCCL INFO Bootstrap : Using eth0\n\x00\xff garbage\n")
    assert not log.has_nccl_lines and not log.nvls_used and not log.collnet_used


# --- the checks ----------------------------------------------------------------------------------

def test_gb200_domain_from_nccl_log_and_imex_pass(pytester):
    got = run(pytester, "test_nvl_domain.py", "gb200_healthy", "p6e-gb200.36xlarge")
    assert got["PF-NVL-004"][0] == "pass" and got["PF-NVL-005"][0] == "pass"
    assert "PF-NVL-006" not in got  # a certify check: not selected in preflight


def test_gb200_rank_in_another_clique_and_degraded_fails_naming_it(pytester):
    got = run(pytester, "test_nvl_domain.py", "gb200_bad_rank", "p6e-gb200.36xlarge")
    outcome, msg = got["PF-NVL-004"]
    assert outcome == "fail"
    assert "gb200a-04 busId 0x801000: degraded bandwidth (healthMask 0xa9)" in msg
    assert "2 clique IDs across the ranks: 0x7ffd, 0x7ffe" in msg


def test_gb200_without_an_nccl_log_is_an_error_not_a_pass(pytester):
    got = run(pytester, "test_nvl_domain.py", "gb200_no_nccl_log", "p6e-gb200.36xlarge")
    assert got["PF-NVL-004"][0] == "error"
    assert "left no NCCL log" in got["PF-NVL-004"][1]


def test_imex_not_ready_fails_and_a_hung_tool_errors(pytester):
    got = run(pytester, "test_nvl_domain.py", "gb200_imex_waiting", "p6e-gb200.36xlarge")
    assert got["PF-NVL-005"][0] == "fail" and "WAITING_FOR_PEERS, not READY" in got["PF-NVL-005"][1]
    got = run(pytester, "test_nvl_domain.py", "gb200_imex_hung", "p6e-gb200.36xlarge")
    assert got["PF-NVL-005"][0] == "error" and "did not finish within 15 s" in got["PF-NVL-005"][1]


def test_hgx_node_is_not_applicable_with_the_reason_no_false_imex_alarm(pytester):
    got = run(pytester, "test_nvl_domain.py", "hgx", "p5.48xlarge")
    assert got["PF-NVL-004"][0] == "skip" and "zero cluster UUID" in got["PF-NVL-004"][1]
    assert got["PF-NVL-005"][0] == "skip"  # no IMEX tool on p5 is not an alarm
    assert "do not apply" in got["PF-NVL-005"][1]


def test_nvls_measured_in_certify(pytester):
    got = run(pytester, "test_nvl_domain.py", "h100_nvls_ok", "p5.48xlarge", tier="certify")
    assert got["PF-NVL-006"][0] == "pass"
    got = run(pytester, "test_nvl_domain.py", "h100_nvls_slow", "p5.48xlarge", tier="certify")
    assert got["PF-NVL-006"][0] == "fail" and "250 GB/s < 396 GB/s" in got["PF-NVL-006"][1]


def test_nvls_unavailable_fails_and_does_not_apply_to_a100_or_one_gpu(pytester):
    got = run(pytester, "test_nvl_domain.py", "h100_nvls_missing", "p5.48xlarge", tier="certify")
    assert got["PF-NVL-006"][0] == "fail"
    assert "NVLS multicast support is not available on 5 GPU(s)" in got["PF-NVL-006"][1]
    got = run(pytester, "test_nvl_domain.py", "h100_nvls_ok", "p4d.24xlarge", tier="certify")
    assert got["PF-NVL-006"][0] == "skip" and "compute capability" in got["PF-NVL-006"][1]
    got = run(pytester, "test_nvl_domain.py", "h100_nvls_ok", "p5.4xlarge", tier="certify")
    assert got["PF-NVL-006"][0] == "skip" and "one GPU" in got["PF-NVL-006"][1]


def test_sharp_used_passes_and_a_silent_fallback_fails(pytester):
    got = run(pytester, "test_ib_sharp.py", "sharp_used", "hgx-ib")
    assert got["PF-IB-004"][0] == "pass"
    got = run(pytester, "test_ib_sharp.py", "sharp_fallback", "hgx-ib")
    outcome, msg = got["PF-IB-004"]
    assert outcome == "fail" and "NCCL_COLLNET_ENABLE=1, but NCCL fell back" in msg
    assert "SHArP Job init error: No resource" in msg


def test_sharp_not_configured_does_not_apply_and_half_configured_warns(pytester):
    got = run(pytester, "test_ib_sharp.py", "sharp_off", "hgx-ib")
    assert got["PF-IB-004"][0] == "skip" and "not enabled" in got["PF-IB-004"][1]
    got = run(pytester, "test_ib_sharp.py", "sharp_env_only", "hgx-ib")
    assert got["PF-IB-004"][0] == "warn" and "SHARP_COLL_LOG_LEVEL" in got["PF-IB-004"][1]
    got = run(pytester, "test_ib_sharp.py", "sharp_used", "p5.48xlarge")
    assert got["PF-IB-004"][0] == "skip" and "fabric: efa" in got["PF-IB-004"][1]


def test_the_multi_node_run_is_judged_before_this_nodes_own(pytester):
    """fabric_evidence itself: on the leader the multi-node run's log (every rank) is judged."""
    pytester.makeconftest(facts_conftest("tests.nvl_domain_facts", "multi_bad_single_good", [
        "gpu_fabric", "imex_status", "multi_node_allreduce", "single_node_allreduce"]))
    got = run_check_file(pytester, "test_nvl_domain.py", "p6e-gb200.36xlarge", "-k", "mnnvl")
    assert got["PF-NVL-004"]["outcome"] == "fail", got


def test_nccl_info_env_keeps_the_users_settings():
    from harness.fixtures.bandwidth import nccl_info_env

    assert nccl_info_env({"A": "1"}) == {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,NET",
                                         "A": "1"}
    assert nccl_info_env({"NCCL_DEBUG": "WARN"})["NCCL_DEBUG"] == "WARN"


def test_truncated_garbled_and_flooded_logs_never_raise():
    import random

    rng = random.Random(17)
    texts = [p.read_text() for p in sorted(LOGS.glob("real_*")) if "collnet" in p.name
             or "nvls" in p.name or "mnnvl" in p.name]
    for text in texts:
        for _ in range(40):
            cut = rng.randrange(len(text))
            mutated = text[:cut] + rng.choice(["", "\x00", "0x", "\n", "é" * 5, "9" * 400]) \
                + text[cut + rng.randrange(30):]
            parse_fabric_log(mutated)
    flood = "x NCCL INFO MNNVL busId 0x" + "f" * 2_000_000 + " fabric UUID 1.2\n"
    assert parse_fabric_log(flood).mnnvl == ()
    many = "h:1:1 [0] NCCL WARN NVLS failure %d\n" * 1
    log = parse_fabric_log("".join(many.replace("%d", str(i)) for i in range(5000)))
    assert len(log.warnings) == 50  # MAX_KEPT distinct messages
