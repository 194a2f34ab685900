"""GPU links and clocks: the pure logic (harness.probes.gpu_links, gpu_clocks, link_floors) on
synthetic numbers; the PF-LINK / PF-CLOCK checks under pytester with canned facts
(tests/link_facts.py); the CUDA copies themselves only where CUDA is (`gpu`)."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from harness.fixtures.links import links_args, links_result
from harness.judges import gpu_links as link_floors
from harness.probes import gpu_clocks, gpu_links
from harness.probes.gpu_links import HostCopy, PairCopy
from harness.profiles.table import BUILTIN_PROFILES, load_data
from tests.conftest import copy_check_file, facts_conftest, run_checks

ROOT = Path(__file__).resolve().parent.parent
MIB = 1024**2


# ------------------------------------------------------------------ arithmetic and thresholds

def test_copy_bandwidth_is_bytes_over_seconds_in_gb():
    assert gpu_links.copy_gb_s(256 * MIB, 20, 14.0) == pytest.approx(256 * MIB * 20 / 0.014 / 1e9)
    with pytest.raises(ValueError):
        gpu_links.copy_gb_s(MIB, 1, 0.0)


def test_pcie_model_follows_nccl_and_scales_with_width():
    assert link_floors.pcie_model_gb_s(4, 16) == 24.0
    assert link_floors.pcie_model_gb_s(5, 16) == 48.0
    assert link_floors.pcie_model_gb_s(4, 8) == 12.0
    assert link_floors.pcie_model_gb_s(2, 16) is None
    floor = link_floors.host_copy_floor(5, 16, "NVML")
    assert floor is not None and floor.value == 28.8 and floor.estimate
    assert "Gen5 x16 from NVML" in floor.source
    assert link_floors.host_copy_floor(None, 16, "x") is None


def test_every_gpu_sku_has_link_figures_with_sources():
    _, skus = load_data()
    for name in skus:
        floors = link_floors.floors_for(name)
        assert floors is not None, f"SKU {name} has no entry in harness/judges/gpu_links.py"
        for value in (floors.p2p_gb_s_min, floors.latency_us_max):
            assert value is None or value.source
        if floors.host_link == "pcie":
            assert floors.pcie_gen and floors.pcie_width and floors.pcie_source, name


def test_multi_gpu_profiles_have_a_pair_floor():
    for profile in BUILTIN_PROFILES.values():
        if profile.num_gpus >= 2 and profile.sku:
            floors = link_floors.floors_for(profile.sku)
            assert floors is not None and floors.p2p_gb_s_min is not None, profile.name
    assert not link_floors.floors_for("H100-SXM5-80GB").p2p_gb_s_min.estimate  # type: ignore[union-attr]
    assert link_floors.floors_for("B200").p2p_gb_s_min.estimate  # type: ignore[union-attr]
    assert link_floors.floors_for(None) is None


# ------------------------------------------------------------------ matrix and outliers

def _pairs(n: int = 4, value: float = 380.0, **slow: float) -> list[PairCopy]:
    return [PairCopy(s, d, slow.get(f"p{s}_{d}", value), MIB)
            for s, d in itertools.permutations(range(n), 2)]


def test_weak_pairs_below_the_floor_or_the_median():
    pairs = _pairs(p1_2=150.0, p3_0=300.0)
    weak = gpu_links.weak_pairs(pairs, 320.0, 0.5)
    assert [(w.pair.src, w.pair.dst) for w in weak] == [(1, 2), (3, 0)]
    assert weak[0].why == "< 320 GB/s floor and < 0.5 x the median pair (380.0 GB/s)"
    assert weak[1].why == "< 320 GB/s floor"
    assert (weak[0].below_median, weak[1].below_median, weak[1].below_floor) == (True, False,
                                                                                 True)
    # Without a floor only the relative judgement remains; without either nothing is weak.
    assert [(w.pair.src, w.pair.dst) for w in gpu_links.weak_pairs(pairs, None, 0.5)] == [
        (1, 2)]
    assert gpu_links.weak_pairs(pairs, None, None) == []


def test_missing_pairs_are_the_unmeasured_and_the_failed():
    pairs = _pairs(3)
    pairs[0] = PairCopy(0, 1, None, MIB, error="RuntimeError: CUDA error")
    del pairs[-1]  # 2 -> 1 never measured
    assert gpu_links.missing_pairs(pairs, [0, 1, 2]) == [(0, 1), (2, 1)]


def test_matrix_text_marks_the_diagonal_and_the_unknown():
    lines = gpu_links.matrix_lines(_pairs(2)[:1], [0, 1])
    assert lines[1].split() == ["0", "-", "380.0"]
    assert lines[2].split() == ["1", "?", "-"]


def test_host_outliers_compare_a_gpu_with_its_siblings():
    copies = [HostCopy(d, "h2d", MIB, 50.0 if d != 2 else 30.0) for d in range(4)]
    copies.append(HostCopy(0, "d2h", MIB, 5.0))  # alone in its group: not compared
    assert [(c.device, c.direction) for c in gpu_links.host_outliers(copies)] == [(2, "h2d")]


def test_measure_links_lists_what_the_budget_did_not_reach():
    now = iter(range(100))
    seen = []

    def pair(s, d, *, nbytes, iters):
        seen.append((s, d))
        return PairCopy(s, d, 100.0, nbytes)

    def host(d, r, *, nbytes, iters):
        return HostCopy(d, r, nbytes, 20.0)

    record = gpu_links.measure_links([0, 1, 2], p2p_bytes=MIB, p2p_iters=2,
                                     host_sizes=[MIB], host_iters=2, budget_s=8.5,
                                     pair=pair, host=host, clock=lambda: float(next(now)))
    # the clock reads 1 s more at each job: 6 host jobs and 2 pairs start by 8.5 s
    assert len(record["host"]) == 6 and seen == [(0, 1), (0, 2)]
    assert record["skipped"] == ["GPU 1 -> GPU 0", "GPU 1 -> GPU 2", "GPU 2 -> GPU 0",
                                 "GPU 2 -> GPU 1"]
    result = links_result({**record, "latency": None})
    assert gpu_links.missing_pairs(result.pairs, result.devices) == [(1, 0), (1, 2), (2, 0),
                                                                      (2, 1)]


def _numa_sysroot(root: Path, bus: str, node: str, cpus: str) -> Path:
    dev = root / "sys/bus/pci/devices" / bus
    dev.mkdir(parents=True)
    (dev / "numa_node").write_text(f"{node}\n")
    if node.strip() != "-1":
        nodes = root / "sys/devices/system/node" / f"node{node}"
        nodes.mkdir(parents=True)
        (nodes / "cpulist").write_text(f"{cpus}\n")
    return root


def test_host_buffers_are_allocated_on_the_gpus_numa_node(tmp_path):
    """rank 0 serves every GPU from one process: each GPU's pinned buffer is made while the
    thread runs on that GPU's node (first touch), then the thread's CPUs are given back."""
    import os

    mine = sorted(os.sched_getaffinity(0))
    root = _numa_sysroot(tmp_path, "0000:ca:00.0", "1", str(mine[-1]))
    assert gpu_links.numa_node_cpus("0000:CA:00.0", root) == (1, {mine[-1]})
    with gpu_links.on_numa_node("0000:ca:00.0", root) as node:
        assert node == 1 and os.sched_getaffinity(0) == {mine[-1]}
    assert sorted(os.sched_getaffinity(0)) == mine
    assert gpu_links._cpulist("0-3,8-9,12") == {0, 1, 2, 3, 8, 9, 12}


def test_an_unknown_numa_node_leaves_the_thread_where_it_is(tmp_path):
    import os

    before = os.sched_getaffinity(0)
    one_node = _numa_sysroot(tmp_path / "a", "0000:53:00.0", "-1", "")
    outside = _numa_sysroot(tmp_path / "b", "0000:53:00.0", "0", "4096")  # not our CPUs
    for root, bus in ((one_node, "0000:53:00.0"), (outside, "0000:53:00.0"),
                      (tmp_path, "0000:99:00.0"), (tmp_path, None)):
        with gpu_links.on_numa_node(bus, root) as node:
            assert node is None and os.sched_getaffinity(0) == before


def test_the_part_asks_for_the_matrix_only_in_the_longer_tiers():
    p5 = BUILTIN_PROFILES["p5.48xlarge"]
    assert "--p2p-bytes=0" in links_args(p5, "preflight")
    assert "--p2p-bytes=256M" in links_args(p5, "certify")
    assert "--p2p-bytes=0" in links_args(BUILTIN_PROFILES["p5.4xlarge"], "certify")
    assert links_args(BUILTIN_PROFILES["local-cpu"], "preflight") == ()


# ------------------------------------------------------------------ clock readings

def test_clock_summary_peak_sustained_drop_and_reasons():
    readings = [{"t_s": i, "sm_clock_mhz": c, "power_w": p, "event_reasons": m}
                for i, (c, p, m) in enumerate([(1980, 600.0, 0x1), (1980, 700.0, 0x4),
                                               (1500, 690.0, 0x44), (1500, 680.0, 0x44)])]
    s = gpu_clocks.summarize({"device": 3, "uuid": "GPU-x", "readings": readings})
    assert (s.peak_mhz, s.sustained_mhz, s.drop_pct) == (1980, 1500.0, 24.2)
    assert (s.power_median_w, s.power_max_w) == (685.0, 700.0)
    assert s.reasons == ("HW Thermal Slowdown", "SW Power Cap")  # Idle left out
    assert s.throttled_by == ("HW Thermal Slowdown",) and s.reasons_read


def test_clock_summary_without_readings_is_unknown_not_healthy():
    s = gpu_clocks.summarize({"device": 0, "readings": [{"t_s": 0.1, "sm_clock_mhz": None,
                                                         "event_reasons": None}]})
    assert not s.known and s.drop_pct is None and not s.reasons_read
    assert gpu_clocks.summaries({"ranks": [{"device": 1}, {"device": 0}]})[0].device == 0


# ------------------------------------------------------------------ the checks, canned facts

FACTS = ["gpu_inventory", "gpu_links", "compute_clocks"]


@pytest.fixture(autouse=True)
def _importable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTHONPATH", str(ROOT))


def _run(pytester: pytest.Pytester, scenario: str, profile: str = "p5.48xlarge",
         tier: str = "certify") -> dict[str, dict]:
    pytester.makeconftest(facts_conftest("tests.link_facts", scenario, FACTS))
    copy_check_file(pytester, "test_gpu_links.py")
    copy_check_file(pytester, "test_gpu_clocks.py")
    return run_checks(pytester, "--preflight-profile", profile, "--preflight-tier", tier)[1]


def test_healthy_node_passes_with_every_figure_recorded(pytester: pytest.Pytester):
    results = _run(pytester, "healthy")
    assert {k: v["outcome"] for k, v in results.items()} == {
        "PF-LINK-001": "pass", "PF-LINK-002": "pass", "PF-LINK-003": "pass",
        "PF-CLOCK-001": "pass"}
    pairs = [m for m in results["PF-LINK-001"]["measurements"] if "peer copy" in m["what"]]
    assert len(pairs) == 56 and pairs[0]["threshold"] == 320.0
    assert pairs[0]["size_bytes"] == 256 * MIB and pairs[0]["gpu_index"] == 0
    clocks = [m for m in results["PF-CLOCK-001"]["measurements"] if m.get("gpu_index") == 4]
    assert {m["unit"] for m in clocks} == {"MHz", "%", "W"}
    lat = results["PF-LINK-003"]["measurements"][0]
    assert (lat["value"], lat["unit"], lat["size_bytes"], lat["threshold"]) == (28.0, "us", 8, 100.0)


#: scenario -> {check ID: (outcome, text the message or a warning must contain)}
EXPECTED: dict[str, dict[str, tuple[str, str]]] = {
    "weak_pair": {"PF-LINK-001": ("fail", "GPU 2 (bus 00000000:75:00.0, serial 1654922000002) "
                                  "-> GPU 5 (bus 00000000:A8:00.0, serial 1654922000005): "
                                  "150.0 GB/s < 320 GB/s floor and < 0.5 x the median pair")},
    "weak_pair_renumbered": {"PF-LINK-001": ("fail", "GPU 5 (bus 00000000:A8:00.0, serial "
                                             "1654922000005) -> GPU 2 (bus")},
    "pair_missing": {"PF-LINK-001": ("error", "1 GPU pair(s) have no figure: GPU 0 -> GPU 1: not "
                                     "reached within the part budget")},
    "slow_host_estimate": {"PF-LINK-002": ("warn", "h2d: 20.0 GB/s < 28.8 GB/s (an estimate")},
    "broken_host": {"PF-LINK-002": ("fail", "h2d: 9.0 GB/s < 0.25 x 48 GB/s (Gen5 x16, NVML")},
    "slow_latency": {"PF-LINK-003": ("warn", "all_reduce at 8 B took 400.0 us > 100 us (an "
                                     "estimate")},
    "hw_slowdown": {"PF-CLOCK-001": ("fail", "GPU 4 (bus 00000000:97:00.0, serial "
                                     "1654922000004): clocks slowed by HW Slowdown under load "
                                     "(peak 1980 MHz, sustained 990 MHz)")},
    "power_capped_drop": {"PF-CLOCK-001": ("warn", "SM clock fell 29.3% under load (1980 -> "
                                           "1400 MHz; SW Power Cap)")},
    "no_readings": {"PF-CLOCK-001": ("error", "clock readings not known, so throttling cannot "
                                     "be ruled out: GPU 1 (bus 00000000:64:00.0, serial "
                                     "1654922000001): no SM clock read (1 readings); GPU 2")},
    "no_reasons": {"PF-CLOCK-001": ("error", "NVML gave no clock event reasons")},
}


def _texts(result: dict) -> str:
    return " | ".join([result.get("message") or "", *result.get("warnings", [])])


@pytest.mark.parametrize("scenario", sorted(EXPECTED))
def test_each_problem_is_named_and_nothing_else_is(pytester: pytest.Pytester, scenario: str):
    results = _run(pytester, scenario)
    assert set(results) == {"PF-LINK-001", "PF-LINK-002", "PF-LINK-003", "PF-CLOCK-001"}
    for check_id, result in results.items():
        outcome, text = EXPECTED[scenario].get(check_id, ("pass", ""))
        assert result["outcome"] == outcome, (check_id, _texts(result))
        assert text in _texts(result), (check_id, _texts(result))


def test_unknown_readings_only_warn_in_preflight(pytester: pytest.Pytester):
    result = _run(pytester, "no_readings", tier="preflight")
    assert result["PF-CLOCK-001"]["outcome"] == "warn"
    assert "PF-LINK-001" not in result  # the matrix is a certify check


def test_not_applicable_without_gpus_or_a_pair(pytester: pytest.Pytester):
    for profile, ids in (("local-cpu", {"PF-LINK-001", "PF-LINK-002", "PF-LINK-003",
                                        "PF-CLOCK-001"}),
                         ("p5.4xlarge", {"PF-LINK-001", "PF-LINK-003"})):
        results = _run(pytester, "healthy", profile=profile)
        skipped = {k for k, v in results.items() if v["outcome"] == "skip"}
        assert skipped == ids, profile
        for k in ids:
            assert "not applicable" in _texts(results[k]), (k, results[k])


def test_preflight_list_shows_the_new_checks(capsys: pytest.CaptureFixture[str]):
    import json

    from harness import cli

    assert cli.main(["list", "--tier", "certify", "--json"]) == 0
    listed = {c["id"]: c for c in json.loads(capsys.readouterr().out)}
    assert listed["PF-LINK-001"]["tier"] == "certify"
    for check_id in ("PF-LINK-002", "PF-LINK-003", "PF-CLOCK-001"):
        assert listed[check_id]["tier"] == "preflight" and listed[check_id]["exclusive"]
    assert cli.main(["list"]) == 0
    assert "PF-LINK-001    certify" in capsys.readouterr().out
    assert cli.main(["list", "--tier", "preflight"]) == 0  # the matrix is a certify check
    out = capsys.readouterr().out
    assert "PF-LINK-002" in out and "PF-LINK-001" not in out
    assert cli.main(["explain", "PF-LINK-001"]) == 0
    assert "remedy:" in capsys.readouterr().out


@pytest.mark.gpu
def test_cuda_copies_on_real_gpus():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    for direction in ("h2d", "d2h"):
        h = gpu_links.measure_host(0, direction, nbytes=64 * MIB, iters=3)
        assert h.error is None and h.gb_s is not None and h.gb_s > 1.0, h
    if torch.cuda.device_count() > 1:
        p = gpu_links.measure_pair(0, 1, nbytes=64 * MIB, iters=3)
        assert p.error is None and p.gb_s is not None and p.gb_s > 1.0, p
        assert p.peer_access == torch.cuda.can_device_access_peer(0, 1)


def test_clock_event_reasons_are_read_under_either_nvml_name():
    import types

    from harness.worker.compute import _event_reasons

    old = types.SimpleNamespace(nvmlDeviceGetCurrentClocksThrottleReasons=lambda h: 0x8)
    new = types.SimpleNamespace(nvmlDeviceGetCurrentClocksEventReasons=lambda h: 0x44,
                                nvmlDeviceGetCurrentClocksThrottleReasons=lambda h: 0)
    assert _event_reasons(old, None) == 0x8 and _event_reasons(new, None) == 0x44


def test_real_fixtures_without_cuda_error_on_a_gpu_profile(pytester: pytest.Pytester):
    """No canned facts: on this machine without GPUs (no /dev/nvidia*, no NVML) a GPU profile's
    link and clock checks are errors naming why (no GPU is visible; the worker is not
    launched), never a pass or a skip."""
    copy_check_file(pytester, "test_gpu_links.py")
    copy_check_file(pytester, "test_gpu_clocks.py")
    results = run_checks(pytester, "--preflight-profile", "p5.48xlarge")[1]
    assert set(results) == {"PF-LINK-002", "PF-LINK-003", "PF-CLOCK-001"}
    for check_id, result in results.items():
        assert result["outcome"] == "error", (check_id, result)
        assert "part cannot run: no NVIDIA GPU is visible in this container: no /dev/nvidia" in (
            result["message"]), (check_id, result["message"])


def test_estimated_floors_and_c2c_hosts_warn_once_and_never_fail(pytester: pytest.Pytester):
    # GB200's per-pair floor (630 GB/s) is an estimate: 56 pairs at 380 GB/s are one warning;
    # its host link is NVLink-C2C: host copies are recorded, not judged against PCIe.
    results = _run(pytester, "healthy", profile="p6e-gb200.36xlarge")
    pairs, host = results["PF-LINK-001"], results["PF-LINK-002"]
    assert pairs["outcome"] == "warn" and len(pairs["warnings"]) == 1, pairs
    assert pairs["warnings"][0].startswith("[PF-LINK-001] 56 GPU pair(s) below 630 GB/s: GPU 0 ")
    assert "and 48 more GB/s (an estimate" in pairs["warnings"][0]
    assert host["outcome"] == "warn" and "NVLink-C2C" in " ".join(host["warnings"])
    assert all(m.get("threshold") is None for m in host["measurements"] if "copy" in m["what"])
