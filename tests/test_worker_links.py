"""The worker's `links` part: a real 2-rank gloo launch (the latency collective and rank 0's
result line; the copies need CUDA and say so), and which sessions ask for it."""

from __future__ import annotations

import os
import types

import pytest

from harness.fixtures.worker import WorkerSession, wanted_parts
from harness.profiles.table import BUILTIN_PROFILES
from harness.worker.compute import find_record
from harness.worker.launch import PartSpec, run_worker
from harness.worker.links import LINKS_SCHEMA

ENV = {**os.environ, "GLOO_SOCKET_IFNAME": "lo"}


@pytest.mark.timeout(600)
def test_links_part_measures_small_message_latency_over_every_rank():
    run = run_worker(2, [PartSpec("links", 60)], env=ENV,
                     extra=["--device=cpu", "--pg-timeout-s=60", "--lat-iters=5"])
    part = run.parts["links"]
    assert part.status == "ok", part.output[-3000:]
    record = find_record(part.output, LINKS_SCHEMA)
    assert record is not None and record["nranks"] == 2
    rows = record["latency"]["rows"]
    assert [r["size_bytes"] for r in rows] == [8, 65536]
    assert all(r["time_us"] > 0 for r in rows)
    assert record["copies"] == "not measured: no CUDA device"
    assert record["others_idle"] is True  # rank 1 waited on the store, not in a barrier
    assert part.output.count(LINKS_SCHEMA) == 1  # rank 0 alone prints it


def test_the_other_ranks_wait_off_their_gpus_while_rank_0_copies(monkeypatch):
    """An NCCL barrier is a kernel that spins on the GPU until every rank joins: ranks 1..7
    waiting in one would load their GPUs and links while rank 0 times its copies. They wait on
    the store (CPU) until rank 0 sets its key, and only then join the barrier."""
    pytest.importorskip("torch")
    import argparse

    import torch
    import torch.distributed as dist

    from harness.worker import bandwidth as torch_bench
    from harness.worker import links

    events: list[str] = []

    class Store:
        def wait(self, keys, timeout):
            events.append(f"wait {keys[0]}")

        def set(self, key, value):
            events.append(f"set {key}")

    bench = torch_bench.TorchBenchResult("gloo", 2, "float32", (), True, ())
    monkeypatch.setattr(torch_bench, "allreduce_bench", lambda **kw: bench)
    monkeypatch.setattr(dist, "get_world_size", lambda *a: 2)
    monkeypatch.setattr(dist, "barrier", lambda *a: events.append("barrier"))
    monkeypatch.setattr(links, "_store", lambda: Store())
    args = argparse.Namespace(lat_sizes="8", lat_iters=1, pg_timeout_s=30.0)
    for rank in (1, 0):
        monkeypatch.setattr(dist, "get_rank", lambda *a, r=rank: r)
        links.run_part(args, torch.device("cpu"), emit=lambda rec: events.append("emit"))
    assert events == ["wait preflight/links-done", "barrier",  # rank 1
                      "emit", "set preflight/links-done", "barrier"]  # rank 0


def _item(*fixtures: str) -> types.SimpleNamespace:
    return types.SimpleNamespace(fixturenames=fixtures,
                                 module=types.SimpleNamespace(__name__="test_gpu_links"))


def test_the_links_part_is_launched_only_for_gpu_sessions_that_read_it():
    p5, cpu = BUILTIN_PROFILES["p5.48xlarge"], BUILTIN_PROFILES["local-cpu"]
    assert wanted_parts([_item("gpu_links")], p5) == ("links",)
    assert wanted_parts([_item("compute_clocks")], p5) == ("compute",)
    assert wanted_parts([_item("gpu_links", "compute_clocks")], cpu) == ()
    session = WorkerSession(p5, "certify", {}, ("links",))
    assert session.spec("links").timeout_s == 180.0
    assert "--p2p-bytes=256M" in session.extra()
    assert "--p2p-bytes=0" in WorkerSession(p5, "preflight", {}, ("links",)).extra()
