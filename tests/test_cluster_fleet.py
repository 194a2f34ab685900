"""The control plane on a simulated fleet (harness/cluster/fleet.py): 512 nodes against the
real master and TCPStore, with a slow, an absent and a dying node. Every node that lives must
reach the same verdict, which names exactly the absent and the dying node (and the slow one as
a straggler), within the cluster step's bounds; judged by those bounds, never by tight times,
so it holds on a loaded machine. Figures at 128..16,384 nodes: bench/bench_fleet.py."""

from __future__ import annotations

import pytest

from harness.cluster.fleet import FleetSpec, run_fleet
from harness.judges.cluster import DEFAULT_LIMITS

pytestmark = pytest.mark.timeout(400)

SLOW, ABSENT, DYING = 7, 100, 300


def test_512_nodes_name_the_slow_absent_and_dying_node_within_the_bound(tmp_path):
    spec = FleetSpec(nodes=512, slow=[SLOW], slow_s=2.0, absent=[ABSENT], dying=[DYING],
                     join_s=40.0, local_budget_s=2.0, gather_s=10.0, collective_s=20.0,
                     exit_s=10.0)
    got = run_fleet(spec, tmp_path)
    assert got["processes_lost"] == 0 and got["hung_threads"] == 0, got
    assert not got["errors"], got
    # Every node that lives decided, and all decided the same.
    assert got["decided"] == got["expected"] == 510, got
    assert got["agree"] and got["verdicts"] == ["fail"], got
    # Exactly the absent and the dying node are bad, each for its own reason.
    assert got["bad"] == [ABSENT, DYING], got
    assert "never joined" in got["reasons"][str(ABSENT)], got
    assert "joined but reported no node-local result" in got["reasons"][str(DYING)], got
    # The slow node reported within the bound (not bad) and is named as a straggler.
    assert got["stragglers"] == [SLOW], got
    # Named within the bound: the snapshot waits for the dying node until the local deadline
    # (join + local + gather), every node has the verdict by then + gather (its own wait).
    local_deadline = spec.join_s + spec.local_budget_s + spec.gather_s
    assert got["master_snapshot_s"] is not None and got["master_snapshot_s"] <= local_deadline + 5
    assert got["all_decided_s"] <= local_deadline + spec.gather_s, got
    # One socket per node to the master, whatever the fleet's size.
    assert got["master"]["peak_sockets"] <= 512 + 16, got
    assert got["fds_per_node"] <= 2.5, got


# --- the plane's scale-bound pieces, on a real TCPStore in this process ---

@pytest.fixture
def plane():
    from datetime import timedelta

    import torch.distributed as dist

    from harness.cluster.plane import ControlPlane
    from harness.topology.model import Topology

    server = dist.TCPStore("127.0.0.1", 0, None, True, timedelta(seconds=10),
                           wait_for_workers=False)
    client = dist.TCPStore("127.0.0.1", server.port, None, False, timedelta(seconds=10))
    topo = Topology(node_rank=1, num_nodes=2, master_addr="127.0.0.1", port=server.port,
                    source="test")
    yield ControlPlane(topo, client, {})
    del client, server


def test_gather_names_exactly_the_missing_keys_across_batches(plane, monkeypatch):
    import time

    from harness.cluster import plane as plane_mod

    monkeypatch.setattr(plane_mod, "BATCH", 8)  # several batches, halving inside each
    missing = {0, 5, 6, 17, 39}
    for r in range(40):
        if r not in missing:
            plane.publish(f"r/{r}", {"rank": r}, counter="count/r")
    found, gone = plane.gather({r: f"r/{r}" for r in range(40)}, "count/r",
                               time.monotonic() + 0.05)
    assert gone == sorted(missing)
    assert found == {r: {"rank": r} for r in range(40) if r not in missing}


def test_wait_for_returns_a_value_set_later_and_fails_at_the_deadline(plane):
    import threading
    import time
    from datetime import timedelta

    import torch.distributed as dist

    from harness.cluster.plane import PlaneError

    other = dist.TCPStore("127.0.0.1", plane.topo.port, None, False, timedelta(seconds=10))
    threading.Timer(0.3, lambda: other.set("k", '"v"')).start()  # another node sets it
    assert plane.wait_for("k", time.monotonic() + 10) == "v"
    start = time.monotonic()
    with pytest.raises(PlaneError, match="by the deadline"):
        plane.wait_for("never", time.monotonic() + 0.5)
    assert time.monotonic() - start < 5


@pytest.mark.parametrize(("soft", "hard", "nodes", "raised", "error"), [
    (1024, 65536, 4096, (65536, 65536), None),
    (1024, 2048, 4096, None, "hard limit is 2048"),
    (65536, 65536, 16384, None, None),
])
def test_the_master_makes_room_for_one_socket_per_node(monkeypatch, soft, hard, nodes,
                                                       raised, error):
    import resource

    from harness.cluster.plane import PlaneError, _room_for_sockets

    calls = []
    monkeypatch.setattr(resource, "getrlimit", lambda _: (soft, hard))
    monkeypatch.setattr(resource, "setrlimit", lambda _, v: calls.append(v))
    if error:
        with pytest.raises(PlaneError, match=error):
            _room_for_sockets(nodes)
    else:
        _room_for_sockets(nodes)
    assert calls == ([raised] if raised else [])


def _snap(n: int, missing: tuple[int, ...] = ()) -> dict:
    from harness.cluster.fleet import FleetSpec, _summary

    spec = FleetSpec(nodes=n, slow=[2])
    return {"num_nodes": n, "profile": "local-cpu", "tier": "preflight",
            "straggler_limits": DEFAULT_LIMITS.to_dict(), "drain_cap": None,
            "hosts": {str(r): f"sim{r:05d}" for r in range(n)},
            "nodes": {str(r): _summary(r, spec).to_json() for r in range(n) if r not in missing},
            "missing": {str(r): {"host": f"sim{r:05d}", "reason": "never joined"}
                        for r in missing}}


def _bandwidth(n: int) -> dict:
    """A cluster all_reduce over n nodes at 1 GB/s each, as the master writes it."""
    from harness.cluster.wire import ClusterBandwidth

    return ClusterBandwidth(size_bytes=1 << 20, nranks=n, ranks=tuple(range(n)), floor_gb_s=None,
                            busbw_gb_s=1.0, data_ok=True,
                            per_rank={str(r): 1.0 for r in range(n)}, errors=(),
                            missing={}).to_json()


def test_nodes_get_the_masters_verdict_not_every_summary():
    import json

    from harness.cluster.verdict import decide, for_nodes, verdict_of

    snap = _snap(200, missing=(9,))
    snap["bandwidth"] = _bandwidth(200)
    shared = for_nodes(snap)
    assert "nodes" not in shared and "hosts" not in shared
    assert shared["bandwidth"]["per_rank"] is None  # N floats stay on the master's report
    assert verdict_of(shared).to_full() == decide(snap).to_full()
    assert verdict_of(shared).bad_nodes[0]["rank"] == 9
    # (15x: the whole all_reduce section, `ranks` included, judged to a verdict of ~7 KB)
    assert len(json.dumps(shared)) * 15 < len(json.dumps(snap))
    small = _snap(8)  # small clusters keep the per-rank figures on every node
    small["bandwidth"] = _bandwidth(8)
    assert for_nodes(small)["bandwidth"]["per_rank"] == small["bandwidth"]["per_rank"]


def test_a_changed_snapshot_is_decided_again():
    from harness.cluster.collectives import _without_verdict
    from harness.cluster.verdict import for_nodes, verdict_of

    snap = _snap(8)
    snap["verdict"] = for_nodes(snap)["verdict"]
    assert verdict_of(snap).passed
    changed = _without_verdict(snap) | {"missing": {"3": {"host": "sim00003",
                                                          "reason": "hung"}}}
    assert not verdict_of(changed).passed


@pytest.mark.parametrize(("env", "wanted"), [
    ({}, {"TORCH_GLOO_LAZY_INIT": "1"}),
    ({"TORCH_GLOO_LAZY_INIT": "0"}, {}),  # the user's choice stands
    ({"TORCH_DIST_INIT_BARRIER": "1"}, {"TORCH_GLOO_LAZY_INIT": "1",
                                        "TORCH_DIST_INIT_BARRIER": "0"}),
])
def test_the_plane_connects_gloo_lazily_without_a_barrier_per_pair(env, wanted):
    from harness.cluster.plane import _plane_env
    from harness.topology.model import Topology

    topo = Topology(node_rank=1, num_nodes=4, master_addr="10.0.0.1", port=29501,
                    source="test")
    assert _plane_env(topo, {"GLOO_SOCKET_IFNAME": "eth0", **env}) == wanted
