"""Topology detection from each launcher's environment, and Slurm hostlists (pure tables)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from harness.commands import EXIT_USAGE
from harness.topology.hostlist import compress_hostlist
from harness.topology.model import DEFAULT_PORT, TopologyError, expand_hostlist
from harness.topology.providers import detect_topology

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
    ("NODE_RANK/NUM_NODES", {"MASTER_ADDR": "m", "NODE_RANK": "1", "NUM_NODES": "3"}, None,
     (1, 3, "m", DEFAULT_PORT, "MASTER_ADDR/NODE_RANK/NNODES", (), 0)),
    ("NODE_RANK/NNODES", {"MASTER_ADDR": "m", "NODE_RANK": "1", "NNODES": "2",
                          "WORLD_SIZE": "16", "RANK": "0"}, None,
     (1, 2, "m", DEFAULT_PORT, "MASTER_ADDR/NODE_RANK/NNODES", (), 0)),
    # srun sets SLURM_NNODES and SLURM_STEP_* to the step, SLURM_JOB_* stay the job's (values
    # as in the Open MPI users thread "SLURM environment variables at runtime", see SOURCES.md).
    ("srun -N2 step inside a 4-node allocation", {
        "SLURM_JOB_NUM_NODES": "4", "SLURM_NNODES": "2", "SLURM_NODELIST": "node[1-4]",
        "SLURM_JOB_NODELIST": "node[1-4]", "SLURM_STEP_NODELIST": "node[3-4]",
        "SLURM_STEP_NUM_NODES": "2", "SLURM_STEP_ID": "0", "SLURM_NODEID": "1",
        "SLURM_PROCID": "1", "SLURM_LOCALID": "0"}, None,
     (1, 2, "node3", DEFAULT_PORT, "Slurm", ("node3", "node4"), 0)),
    ("srun -N1 step inside a 2-node allocation", {
        "SLURM_JOB_NUM_NODES": "2", "SLURM_NNODES": "1", "SLURM_NODELIST": "node[1-2]",
        "SLURM_STEP_NODELIST": "node1", "SLURM_STEP_NUM_NODES": "1", "SLURM_STEP_ID": "5",
        "SLURM_NODEID": "0"}, None, None),
    ("srun one task per GPU: local rank 3", {
        "SLURM_STEP_NUM_NODES": "2", "SLURM_STEP_NODELIST": "p5-[01-02]", "SLURM_STEP_ID": "0",
        "SLURM_NODEID": "0", "SLURM_LOCALID": "3", "SLURM_PROCID": "3"}, None,
     (0, 2, "p5-01", DEFAULT_PORT, "Slurm", ("p5-01", "p5-02"), 3)),
    # torchrun >= 1.9 exports GROUP_WORLD_SIZE (the agents, i.e. nodes); values from a torchx
    # log (meta-pytorch/torchx#492): group_world_size=2, local_ranks=[0].
    ("torchrun worker, GROUP_WORLD_SIZE", {"GROUP_RANK": "0", "GROUP_WORLD_SIZE": "2",
                                           "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1",
                                           "RANK": "0", "WORLD_SIZE": "2",
                                           "MASTER_ADDR": "tristanr-arch2",
                                           "MASTER_PORT": "48089"}, None,
     (0, 2, "tristanr-arch2", 48090, "torchrun worker", (), 0)),
    # training-operator v1 with nprocPerNode: WORLD_SIZE counts processes, PET_NNODES pods.
    ("PyTorchJob worker-1, nprocPerNode 2", {"MASTER_ADDR": "ddp-demo-master-0",
                                             "MASTER_PORT": "23456",
                                             "PET_MASTER_ADDR": "ddp-demo-master-0",
                                             "PET_MASTER_PORT": "23456", "PET_NNODES": "4",
                                             "PET_NODE_RANK": "2", "PET_NPROC_PER_NODE": "2",
                                             "RANK": "2", "WORLD_SIZE": "8"}, None,
     (2, 4, "ddp-demo-master-0", 23457, "Kubeflow (PET_*)", (), 0)),
    # Kubeflow Trainer v2 torch plugin: PET_* only, master `<job>-node-0-0.<job>`, port 29400.
    ("Trainer v2 TrainJob node 1", {"PET_NNODES": "2", "PET_NPROC_PER_NODE": "8",
                                    "PET_NODE_RANK": "1", "PET_MASTER_ADDR": "tj-node-0-0.tj",
                                    "PET_MASTER_PORT": "29400"}, None,
     (1, 2, "tj-node-0-0.tj", 29401, "Kubeflow (PET_*)", (), 0)),
    # AWS Batch MNP: the main node is rank 0 even when its index is not 0; only the other nodes
    # get AWS_BATCH_JOB_MAIN_NODE_PRIVATE_IPV4_ADDRESS (docs: batch/latest/userguide/mnp-env-vars).
    ("AWS Batch child node", {"AWS_BATCH_JOB_NUM_NODES": "3", "AWS_BATCH_JOB_NODE_INDEX": "2",
                              "AWS_BATCH_JOB_MAIN_NODE_INDEX": "0",
                              "AWS_BATCH_JOB_MAIN_NODE_PRIVATE_IPV4_ADDRESS": "10.0.1.7"}, None,
     (2, 3, "10.0.1.7", DEFAULT_PORT, "AWS Batch multi-node", (), 0)),
    ("AWS Batch main node index 1", {"AWS_BATCH_JOB_NUM_NODES": "3",
                                     "AWS_BATCH_JOB_NODE_INDEX": "1",
                                     "AWS_BATCH_JOB_MAIN_NODE_INDEX": "1",
                                     "PREFLIGHT_HOSTNAME": "ip-10-0-1-7"}, None,
     (0, 3, "ip-10-0-1-7", DEFAULT_PORT, "AWS Batch multi-node", (), 0)),
    ("AWS Batch node index 0 when main is 1", {
        "AWS_BATCH_JOB_NUM_NODES": "3", "AWS_BATCH_JOB_NODE_INDEX": "0",
        "AWS_BATCH_JOB_MAIN_NODE_INDEX": "1",
        "AWS_BATCH_JOB_MAIN_NODE_PRIVATE_IPV4_ADDRESS": "10.0.1.7"}, None,
     (2, 3, "10.0.1.7", DEFAULT_PORT, "AWS Batch multi-node", (), 0)),
    # kubeflow/pytorch-operator pod.go setClusterSpec: the master pod gets MASTER_ADDR=localhost
    # (forks of training-operator also PET_MASTER_ADDR); the others get "<job>-master-0".
    ("PyTorchJob master pod told localhost", {"MASTER_ADDR": "localhost", "MASTER_PORT": "23456",
                                              "RANK": "0", "WORLD_SIZE": "3",
                                              "PREFLIGHT_HOSTNAME": "pj-master-0"}, None,
     (0, 3, "pj-master-0", 23457, "MASTER_ADDR/RANK/WORLD_SIZE", (), 0)),
    ("PyTorchJob master pod, PET_MASTER_ADDR=localhost", {
        "MASTER_ADDR": "localhost", "PET_MASTER_ADDR": "localhost", "PET_MASTER_PORT": "23456",
        "PET_NNODES": "3", "PET_NODE_RANK": "0", "PREFLIGHT_HOSTNAME": "pj-master-0"}, None,
     (0, 3, "pj-master-0", 23457, "Kubeflow (PET_*)", (), 0)),
    ("PyTorchJob worker pod of the same job", {"MASTER_ADDR": "pj-master-0", "MASTER_PORT": "23456",
                                               "RANK": "2", "WORLD_SIZE": "3"}, None,
     (2, 3, "pj-master-0", 23457, "MASTER_ADDR/RANK/WORLD_SIZE", (), 0)),
    ("explicit loopback master is kept (one-machine test)", {
        "PREFLIGHT_NNODES": "2", "PREFLIGHT_NODE_RANK": "0", "PREFLIGHT_MASTER_ADDR": "127.0.0.1",
        "PREFLIGHT_HOSTNAME": "node0"}, None,
     (0, 2, "127.0.0.1", DEFAULT_PORT, "PREFLIGHT_NNODES", (), 0)),
    ("AWS Batch single node", {"AWS_BATCH_JOB_NUM_NODES": "1", "AWS_BATCH_JOB_NODE_INDEX": "0",
                               "AWS_BATCH_JOB_MAIN_NODE_INDEX": "0"}, None, None),
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
    # partial environments: each names the missing variable (they used to read as one node)
    ({"GROUP_RANK": "1", "GROUP_WORLD_SIZE": "2"}, None, "MASTER_ADDR is unset"),
    ({"GROUP_RANK": "1", "WORLD_SIZE": "12", "LOCAL_WORLD_SIZE": "8", "MASTER_ADDR": "m"}, None,
     "WORLD_SIZE(12) is not a multiple of LOCAL_WORLD_SIZE(8)"),
    ({"PET_NNODES": "4", "PET_RDZV_ENDPOINT": "pj-worker-0:23456"}, None, "PET_NODE_RANK is unset"),
    ({"PET_NNODES": "1:4", "PET_RDZV_ENDPOINT": "pj-worker-0:23456"}, None,
     "PET_NNODES='1:4' is an elastic range"),
    ({"PET_NNODES": "2", "PET_NODE_RANK": "1"}, None, "PET_MASTER_ADDR (or MASTER_ADDR) is unset"),
    ({"MASTER_ADDR": "m", "WORLD_SIZE": "4"}, None, "RANK is unset"),
    ({"MASTER_ADDR": "m", "NNODES": "2", "WORLD_SIZE": "16", "RANK": "9"}, None,
     "NODE_RANK is unset"),
    ({"MASTER_ADDR": "m", "NODE_RANK": "1", "WORLD_SIZE": "16", "RANK": "9"}, None,
     "NNODES is unset"),
    ({"SLURM_STEP_ID": "0", "SLURM_STEP_NUM_NODES": "2", "SLURM_STEP_NODELIST": "n[1-2]"}, None,
     "SLURM_NODEID is unset"),
    ({"SLURM_STEP_ID": "0", "SLURM_STEP_NUM_NODES": "2", "SLURM_STEP_NODELIST": "localhost",
      "SLURM_NODEID": "0"}, None, "names 1 nodes but SLURM_STEP_NUM_NODES/SLURM_NNODES says 2"),
    ({"OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_LOCAL_SIZE": "2", "OMPI_COMM_WORLD_RANK": "1",
      "OMPI_COMM_WORLD_LOCAL_RANK": "0", "MASTER_ADDR": "m"}, None, "(--map-by node?)"),
    ({"OMPI_COMM_WORLD_SIZE": "6", "OMPI_COMM_WORLD_LOCAL_SIZE": "4", "OMPI_COMM_WORLD_RANK": "0",
      "OMPI_COMM_WORLD_LOCAL_RANK": "0", "MASTER_ADDR": "m"}, None,
     "OMPI_COMM_WORLD_SIZE(6) is not a multiple of OMPI_COMM_WORLD_LOCAL_SIZE(4)"),
    ({"AWS_BATCH_JOB_NUM_NODES": "2", "AWS_BATCH_JOB_NODE_INDEX": "1",
      "AWS_BATCH_JOB_MAIN_NODE_INDEX": "0"}, None,
     "AWS_BATCH_JOB_MAIN_NODE_PRIVATE_IPV4_ADDRESS is unset"),
    ({"AWS_BATCH_JOB_NUM_NODES": "2", "AWS_BATCH_JOB_NODE_INDEX": "2",
      "AWS_BATCH_JOB_MAIN_NODE_INDEX": "0"}, None, "AWS_BATCH_JOB_NODE_INDEX=2 not in [0, 2)"),
    ({"SM_HOSTS": "algo-1,algo-2", "SM_CURRENT_HOST": "algo-1"}, None, "is not a JSON list"),
    ({}, {"current_host": "algo-1", "hosts": ["algo-1", "algo-1"]}, "lists a host twice"),
    ({}, {"current_host": "algo-1", "hosts": ["algo-1", "algo-2"]}, None),
])
def test_detect_topology_rejects_inconsistent_env(env, rc, message):
    if message is None:  # the control row: the same shape, consistent, is accepted
        assert detect_topology(env, rc) is not None
        return
    with pytest.raises(TopologyError) as info:
        detect_topology(env, rc)
    assert message in str(info.value)


DATA = Path(__file__).parent / "data" / "topology"


def _env_file(name: str) -> dict[str, str]:
    from harness.parsers.env import parse_env_dump

    return parse_env_dump((DATA / name).read_text()).variables


# Real launcher environments and resource configs (tests/data/topology/SOURCES.md) combined
# (an env with its resourceconfig.json, or variables a dump filtered out added on top), read by
# hand: (env file, resourceconfig file, variables added on top, expected tuple or error text).
# What each file alone gives is in its X.expect.json (tests/test_parsers_samples.py).
REAL = [
    # mpirun rank 2 of 4, two per node (rank 2 is the second host's first process).
    ("real_ompi_rank2_of_4_second_node.env", None, {"MASTER_ADDR": "node-a"},
     (1, 2, "node-a", DEFAULT_PORT, "Open MPI (OMPI_COMM_WORLD_*)", (), 0)),
    ("real_ompi_rank3_of_4_local1.env", None, {"MASTER_ADDR": "node-a"},
     (1, 2, "node-a", DEFAULT_PORT, "Open MPI (OMPI_COMM_WORLD_*)", (), 1)),
    # SageMaker toolkit variables with the resourceconfig.json.
    ("real_sagemaker_containers_readme_2hosts.env",
     "real_sagemaker_containers_readme_resourceconfig.json", {},
     (0, 2, "algo-1", DEFAULT_PORT, "SageMaker resourceconfig.json", ("algo-1", "algo-2"), 0)),
    # SageMaker's mpirun exports the master's SM_CURRENT_HOST to every node
    # (aws/sagemaker-training-toolkit#158): the per-node file wins; without it, refuse.
    ("real_sagemaker_containers_readme_2hosts.env",
     "real_sagemaker_containers_readme_resourceconfig.json",
     {"SM_CURRENT_HOST": "algo-2", "OMPI_COMM_WORLD_RANK": "8", "OMPI_COMM_WORLD_LOCAL_RANK": "0",
      "OMPI_COMM_WORLD_SIZE": "16", "OMPI_COMM_WORLD_LOCAL_SIZE": "8"},
     (0, 2, "algo-1", DEFAULT_PORT, "SageMaker resourceconfig.json", ("algo-1", "algo-2"), 0)),
    ("real_sagemaker_containers_readme_2hosts.env", None,
     {"OMPI_COMM_WORLD_RANK": "8", "OMPI_COMM_WORLD_LOCAL_RANK": "0",
      "OMPI_COMM_WORLD_SIZE": "16", "OMPI_COMM_WORLD_LOCAL_SIZE": "8"},
     "SM_CURRENT_HOST cannot be trusted under SageMaker's mpirun"),
    # The same processes with the Open MPI variables that the dumps filtered out ("I'm 3 of 4 on
    # node1", "I'm 1 of 4 on node2"; ranks 0-1 ran on node2): Open MPI's view wins over Slurm's.
    ("real_slurm_openmpi143_salloc_node1_rank3.env", None,
     {"OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_LOCAL_SIZE": "2", "OMPI_COMM_WORLD_RANK": "3",
      "OMPI_COMM_WORLD_LOCAL_RANK": "1", "MASTER_ADDR": "node2"},
     (1, 2, "node2", DEFAULT_PORT, "Open MPI (OMPI_COMM_WORLD_*)", (), 1)),
    ("real_slurm_openmpi143_salloc_node2_rank1.env", None,
     {"OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_LOCAL_SIZE": "2", "OMPI_COMM_WORLD_RANK": "1",
      "OMPI_COMM_WORLD_LOCAL_RANK": "1", "MASTER_ADDR": "node2"},
     (0, 2, "node2", DEFAULT_PORT, "Open MPI (OMPI_COMM_WORLD_*)", (), 1)),
]


@pytest.mark.parametrize(("env_file", "rc_file", "extra", "expected"), REAL,
                         ids=[f"{r[0] or r[1]}{'+' + ','.join(r[2]) if r[2] else ''}" for r in REAL])
def test_detect_topology_on_real_launcher_env(env_file, rc_file, extra, expected):
    env = {**(_env_file(env_file) if env_file else {}), **extra}
    rc = json.loads((DATA / rc_file).read_text()) if rc_file else None
    if expected is None:
        assert detect_topology(env, rc) is None
        return
    if isinstance(expected, str):
        with pytest.raises(TopologyError) as info:
            detect_topology(env, rc)
        assert expected in str(info.value)
        return
    topo = detect_topology(env, rc)
    assert topo is not None
    assert (topo.node_rank, topo.num_nodes, topo.master_addr, topo.port, topo.source,
            topo.hosts, topo.local_rank) == expected


def test_heterogeneous_resourceconfig_with_current_host_outside_its_group_is_refused():
    rc = json.loads((DATA / "real_sagemaker_hetero_data_group_resourceconfig.json").read_text())
    rc["current_group_name"] = "dnn_group"
    with pytest.raises(TopologyError, match="is not in its current_group_name 'dnn_group'"):
        detect_topology({}, rc)


@pytest.mark.parametrize(("spec", "hosts"), [
    ("node01", ["node01"]),
    ("node[01-03,07]", ["node01", "node02", "node03", "node07"]),
    ("a[1-2],b3,c[08-10]", ["a1", "a2", "b3", "c08", "c09", "c10"]),
    ("rack[1-2]-n[1-2]", ["rack1-n1", "rack1-n2", "rack2-n1", "rack2-n2"]),
    ("ip-10-1-2-[3,5]", ["ip-10-1-2-3", "ip-10-1-2-5"]),
    ("ip-10-1-2-[3-5,9]", ["ip-10-1-2-3", "ip-10-1-2-4", "ip-10-1-2-5", "ip-10-1-2-9"]),
    ("gnode[10,20,25,37]", ["gnode10", "gnode20", "gnode25", "gnode37"]),
    ("node[001-004]", ["node001", "node002", "node003", "node004"]),
    ("a[1-2]-b[3-4]", ["a1-b3", "a1-b4", "a2-b3", "a2-b4"]),
    ("node[8-10],login1", ["node8", "node9", "node10", "login1"]),
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


def test_inspect_topology_reads_env_dumps_and_resourceconfigs(capsys):
    from harness import cli

    assert cli.main(["inspect", "topology", str(DATA / "real_slurm_sbatch_batch_script_4nodes.env"),
                     "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["num_nodes"] is None and "sbatch batch script" in out["error"]
    rc = DATA / "real_sagemaker_hetero_data_group_resourceconfig.json"
    assert cli.main(["inspect", "topology", str(rc), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert (out["num_nodes"], out["node_rank"], out["master_addr"], out["error"]) == (
        2, 0, "algo-1", None)


def test_inspect_topology_rejects_text_without_variables(tmp_path):
    from harness import cli

    garbage = tmp_path / "notes.txt"
    garbage.write_text("no variables here\n")
    assert cli.main(["inspect", "topology", str(garbage), "--json"]) == EXIT_USAGE


# --- malformed and huge host lists: an error naming the variable, never a traceback or a hang --

@pytest.mark.parametrize("spec", [
    "n[²-3]", "n[1-٣]", "n[١-3]", "n[1_0-2]", "n[]", "n[-3]", "n[3-1]", "n[[1-2]]", "n]1[",
    "n[1-2]]", "n[" + "9" * 5000 + "]",
])
def test_malformed_hostlists_are_errors(spec):
    with pytest.raises(TopologyError):
        expand_hostlist(spec)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("spec", [
    "n[0-99999999999]", "n[0-65536]", "a[0-9999][0-9999]", ",".join(f"n{i}" for i in range(70_000)),
    "n" + "[1-2]" * 40,
])
def test_hostlists_larger_than_any_cluster_are_errors_at_once(spec):
    """Slurm's own limit is 64K hosts a range; the bound is checked before expanding."""
    with pytest.raises(TopologyError, match="more than 65,536 hosts"):
        expand_hostlist(spec)


def test_the_largest_accepted_hostlist_expands():
    hosts = expand_hostlist("n[00000-65535]")
    assert len(hosts) == 65_536 and hosts[-1] == "n65535"


def test_a_bad_slurm_hostlist_names_its_variable():
    env = {"SLURM_STEP_NODELIST": "n[²-3]", "SLURM_STEP_NUM_NODES": "2", "SLURM_NODEID": "0",
           "SLURM_STEP_ID": "0"}
    with pytest.raises(TopologyError, match=r"SLURM_STEP_NODELIST='n\[²-3\]': bad range"):
        detect_topology(env)


@pytest.mark.parametrize("value", ["١٢", "1_0", "²"])
def test_counts_in_unicode_digits_are_not_integers(value):
    with pytest.raises(TopologyError, match="is not an integer"):
        detect_topology({"PREFLIGHT_NNODES": value, "PREFLIGHT_NODE_RANK": "0",
                         "PREFLIGHT_MASTER_ADDR": "a"})


@pytest.mark.parametrize("nodelist", ["n[²-3]", "n[0-99999999999]"])
def test_preflight_run_with_a_bad_hostlist_is_a_usage_error_with_a_report(
        tmp_path, monkeypatch, capsys, nodelist):
    from harness import cli

    for name in list(os.environ):
        if name.startswith(("NCCL_", "FI_", "PREFLIGHT_", "SM_", "SLURM_", "OMPI_")):
            monkeypatch.delenv(name)
    for name in ("MASTER_ADDR", "RANK", "WORLD_SIZE", "GROUP_RANK", "PET_NNODES", "LOCAL_RANK"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("PREFLIGHT_OPT_ML", str(tmp_path / "opt_ml"))
    monkeypatch.setenv("PREFLIGHT_HOSTNAME", "node-a")
    for name, value in {"SLURM_STEP_NODELIST": nodelist, "SLURM_STEP_NUM_NODES": "2",
                        "SLURM_NODEID": "0", "SLURM_STEP_ID": "0"}.items():
        monkeypatch.setenv(name, value)
    rc = cli.main(["run", "--report-dir", str(tmp_path / "r"), "--", "true"])
    assert rc == EXIT_USAGE
    err = capsys.readouterr().err
    assert "SLURM_STEP_NODELIST=" in err and "Traceback" not in err
    report = json.loads((tmp_path / "r" / "node-a" / "report.json").read_text())
    assert report["exit_code"] == EXIT_USAGE
    assert "SLURM_STEP_NODELIST" in " ".join(report["harness_errors"])
