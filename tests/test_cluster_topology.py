"""Topology detection from each launcher's environment, and Slurm hostlists (pure tables)."""

from __future__ import annotations

import pytest

from harness.cluster.topology import (
    DEFAULT_PORT,
    TopologyError,
    compress_hostlist,
    detect_topology,
    expand_hostlist,
)

SM_RC = {"current_host": "algo-3", "hosts": ["algo-1", "algo-2", "algo-3", "algo-4"],
         "current_instance_type": "ml.p5.48xlarge", "current_group_name": "homogeneousCluster"}

# (name, env, resourceconfig, expected (rank, nnodes, master, port, source, hosts, local_rank))
CASES = [
    ("nothing", {}, None, None),
    ("torchrun standalone, 1 node", {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500",
                                     "RANK": "3", "WORLD_SIZE": "8", "LOCAL_RANK": "3",
                                     "LOCAL_WORLD_SIZE": "8", "GROUP_RANK": "0"}, None, None),
    ("torchrun worker, 2 nodes x 8", {"MASTER_ADDR": "10.0.0.5", "MASTER_PORT": "29500",
                                      "RANK": "9", "WORLD_SIZE": "16", "LOCAL_RANK": "1",
                                      "LOCAL_WORLD_SIZE": "8", "GROUP_RANK": "1"}, None,
     (1, 2, "10.0.0.5", 29501, "torchrun worker", (), 1)),
    ("Kubernetes PyTorchJob, one pod per node", {"MASTER_ADDR": "job-master-0",
                                                  "MASTER_PORT": "23456", "RANK": "2",
                                                  "WORLD_SIZE": "4",
                                                  "KUBERNETES_SERVICE_HOST": "10.96.0.1"}, None,
     (2, 4, "job-master-0", 23457, "MASTER_ADDR/RANK/WORLD_SIZE", (), 0)),
    ("Kubeflow with nprocPerNode", {"PET_NNODES": "3", "PET_NODE_RANK": "2",
                                    "PET_MASTER_ADDR": "pj-master-0", "PET_MASTER_PORT": "23456",
                                    "MASTER_ADDR": "pj-master-0", "WORLD_SIZE": "24",
                                    "RANK": "2"}, None,
     (2, 3, "pj-master-0", 23457, "Kubeflow (PET_*)", (), 0)),
    ("SageMaker 4 hosts", {}, SM_RC,
     (2, 4, "algo-1", DEFAULT_PORT, "SageMaker resourceconfig.json",
      ("algo-1", "algo-2", "algo-3", "algo-4"), 0)),
    ("SageMaker 1 host", {}, {"current_host": "algo-1", "hosts": ["algo-1"]}, None),
    ("SageMaker with PREFLIGHT_PORT", {"PREFLIGHT_PORT": "7777"}, SM_RC,
     (2, 4, "algo-1", 7777, "SageMaker resourceconfig.json",
      ("algo-1", "algo-2", "algo-3", "algo-4"), 0)),
    ("Slurm sbatch 4 nodes", {"SLURM_JOB_NUM_NODES": "4", "SLURM_NNODES": "4",
                              "SLURM_NODEID": "3", "SLURM_JOB_NODELIST": "p5-st-[01-03,07]",
                              "SLURM_LOCALID": "0"}, None,
     (3, 4, "p5-st-01", DEFAULT_PORT, "Slurm", ("p5-st-01", "p5-st-02", "p5-st-03", "p5-st-07"),
      0)),
    ("Slurm one node", {"SLURM_NNODES": "1", "SLURM_NODEID": "0",
                        "SLURM_JOB_NODELIST": "gpu01", "MASTER_ADDR": "x", "WORLD_SIZE": "4",
                        "RANK": "1"}, None, None),
    ("Slurm with MASTER_ADDR/PORT exported", {"SLURM_NNODES": "2", "SLURM_NODEID": "1",
                                              "SLURM_NODELIST": "gpu[1-2]",
                                              "MASTER_ADDR": "gpu1", "MASTER_PORT": "12340"},
     None, (1, 2, "gpu1", 12341, "Slurm", ("gpu1", "gpu2"), 0)),
    ("explicit PREFLIGHT_* beats Slurm", {"PREFLIGHT_NNODES": "4", "PREFLIGHT_NODE_RANK": "1",
                                          "PREFLIGHT_MASTER_ADDR": "127.0.0.1",
                                          "PREFLIGHT_PORT": "4000",
                                          "PREFLIGHT_HOSTS": "node[0-3]", "SLURM_NNODES": "8",
                                          "SLURM_NODEID": "5", "SLURM_NODELIST": "a[1-8]"},
     None, (1, 4, "127.0.0.1", 4000, "PREFLIGHT_NNODES", ("node0", "node1", "node2", "node3"),
            0)),
    ("NODE_RANK/NNODES", {"MASTER_ADDR": "m", "NODE_RANK": "1", "NNODES": "2",
                          "WORLD_SIZE": "16", "RANK": "0"}, None,
     (1, 2, "m", DEFAULT_PORT, "MASTER_ADDR/NODE_RANK/NNODES", (), 0)),
]


@pytest.mark.parametrize(("env", "rc", "expected"), [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
def test_detect_topology(env, rc, expected):
    topo = detect_topology(env, rc)
    if expected is None:
        assert topo is None
        return
    assert topo is not None
    got = (topo.node_rank, topo.num_nodes, topo.master_addr, topo.port, topo.source,
           topo.hosts, topo.local_rank)
    assert got == expected


@pytest.mark.parametrize(("env", "rc", "message"), [
    ({"PREFLIGHT_NNODES": "2"}, None, "PREFLIGHT_NODE_RANK"),
    ({"SLURM_NNODES": "2", "SLURM_NODEID": "x", "SLURM_NODELIST": "a[1-2]"}, None,
     "SLURM_NODEID='x' is not an integer"),
    ({"MASTER_ADDR": "m", "RANK": "4", "WORLD_SIZE": "4"}, None, "node rank 4 not in [0, 4)"),
    ({}, {"current_host": "algo-9", "hosts": ["algo-1", "algo-2"]}, "not in hosts"),
    ({"PREFLIGHT_NNODES": "3", "PREFLIGHT_NODE_RANK": "0", "MASTER_ADDR": "m",
      "PREFLIGHT_HOSTS": "n[1-2]"}, None, "2 hosts listed != 3 nodes"),
])
def test_detect_topology_rejects_inconsistent_env(env, rc, message):
    with pytest.raises(TopologyError, match=message.replace("[", r"\[").replace("(", r"\(")
                       .replace(")", r"\)")):
        detect_topology(env, rc)


@pytest.mark.parametrize(("spec", "hosts"), [
    ("node01", ["node01"]),
    ("node[01-03,07]", ["node01", "node02", "node03", "node07"]),
    ("a[1-2],b3,c[08-10]", ["a1", "a2", "b3", "c08", "c09", "c10"]),
    ("rack[1-2]-n[1-2]", ["rack1-n1", "rack1-n2", "rack2-n1", "rack2-n2"]),
    ("ip-10-1-2-[3,5]", ["ip-10-1-2-3", "ip-10-1-2-5"]),
    ("", []),
])
def test_expand_hostlist(spec, hosts):
    assert expand_hostlist(spec) == hosts


@pytest.mark.parametrize("spec", ["node[1-2", "node[a-b]", "node[1-x]"])
def test_expand_hostlist_rejects_garbage(spec):
    with pytest.raises(TopologyError):
        expand_hostlist(spec)


@pytest.mark.parametrize(("hosts", "spec"), [
    (["node07", "node01", "node02", "node03"], "node[01-03,07]"),
    (["gpu5"], "gpu5"),
    (["algo-2", "algo-1", "algo-10"], "algo-[1-2,10]"),
    (["login", "node1", "node2"], "login,node[1-2]"),
])
def test_compress_hostlist(hosts, spec):
    assert compress_hostlist(hosts) == spec
    assert sorted(expand_hostlist(spec)) == sorted(hosts)


def test_compress_hostlist_merges_padded_and_unpadded_of_the_same_width():
    assert compress_hostlist(["node09", "node10", "node11"]) == "node[09-11]"
