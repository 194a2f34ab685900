"""container/k8s/*.yaml and the manifests in docs/container.md: the structure the docs promise,
checked against what harness.report.kube does, and the API server's own validation rules
(tests/k8s_rules.py: no API server here), each rule shown to refuse what the API server does."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness.report import kube
from tests import k8s_rules

K8S = Path(__file__).resolve().parents[1] / "container" / "k8s"
WORKLOADS = ["pytorchjob.yaml", "jobset.yaml", "certify-cronjob.yaml"]


def docs(name: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((K8S / name).read_text()) if d]


def pod_specs(node: object) -> Iterator[dict[str, Any]]:
    """Every pod spec (a mapping with `containers`) anywhere in a manifest."""
    if isinstance(node, dict):
        if "containers" in node:
            yield node
        for value in node.values():
            yield from pod_specs(value)
    elif isinstance(node, list):
        for value in node:
            yield from pod_specs(value)


def env_of(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container.get("env", [])}


def test_rbac_grants_exactly_what_kube_calls():
    by_kind = {d["kind"]: d for d in docs("rbac.yaml")}
    rules = {(tuple(r["apiGroups"]), tuple(r["resources"])): set(r["verbs"])
             for r in by_kind["ClusterRole"]["rules"]}
    assert rules == {(("",), ("nodes",)): {"get", "patch"}, (("",), ("nodes/status",)): {"patch"}}
    binding = by_kind["ClusterRoleBinding"]
    assert binding["roleRef"]["name"] == by_kind["ClusterRole"]["metadata"]["name"]
    assert binding["subjects"][0]["name"] == by_kind["ServiceAccount"]["metadata"]["name"]


#: The image whose entrypoint runs the preflight.
IMAGE = "gpu-preflight:"


def preflight_containers(spec: dict[str, Any]) -> list[dict[str, Any]]:
    return [c for c in spec.get("initContainers", []) + spec["containers"] if IMAGE in c["image"]]


@pytest.mark.parametrize("name", WORKLOADS)
def test_preflight_pods_never_restart_in_place_and_can_mark_their_node(name):
    sa = next(d for d in docs("rbac.yaml") if d["kind"] == "ServiceAccount")["metadata"]
    specs = [s for d in docs(name) for s in pod_specs(d)]
    assert specs
    for spec in specs:
        preflight = preflight_containers(spec)
        assert len(preflight) == 1
        env = env_of(preflight[0])
        assert env["PREFLIGHT_NODE_NAME"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
        assert set(env["PREFLIGHT_K8S_MARK"].split(",")) <= set(kube.KINDS)
        assert spec["serviceAccountName"] == sa["name"]
        assert spec.get("restartPolicy", "Never") == "Never"
        assert preflight[0]["resources"]["limits"]["nvidia.com/gpu"] == 8


@pytest.mark.parametrize("name", WORKLOADS)
def test_the_preflight_runs_through_the_images_entrypoint(name):
    """`command` replaces the image's ENTRYPOINT: the preflight would never run."""
    for spec in (s for d in docs(name) for s in pod_specs(d)):
        for container in preflight_containers(spec):
            assert "command" not in container, container["name"]


@pytest.mark.parametrize("name", ["pytorchjob.yaml", "jobset.yaml"])
def test_retried_pods_avoid_nodes_marked_bad(name):
    for spec in (s for d in docs(name) for s in pod_specs(d)):
        terms = spec["affinity"]["nodeAffinity"][
            "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
        assert {"key": kube.LABEL, "operator": "NotIn", "values": ["fail"]} in [
            e for t in terms for e in t["matchExpressions"]]


def rendered_env(container: dict[str, Any], pod: dict[str, str]) -> dict[str, str]:
    """The container's environment as the kubelet gives it: fieldRefs resolved from `pod`
    (fieldPath -> value), $(VAR) expanded from the variables before it."""
    env: dict[str, str] = {}
    for item in container.get("env", []):
        if "value" in item:
            env[item["name"]] = re.sub(r"\$\((\w+)\)", lambda m: env.get(m[1], m[0]), item["value"])
        else:
            env[item["name"]] = pod[item["valueFrom"]["fieldRef"]["fieldPath"]]
    return env


def expanded_args(container: dict[str, Any], env: dict[str, str]) -> list[str]:
    """The container's args after the kubelet's $(VAR) expansion; an unknown $(VAR) stays as it
    is (the kubelet leaves it), so the caller sees it."""
    return [re.sub(r"\$\((\w+)\)", lambda m: env.get(m[1], m[0]), a) for a in container["args"]]


def test_pytorchjob_preflight_runs_in_the_container_the_operator_gives_the_topology():
    """The training operator sets PET_NNODES / PET_NODE_RANK / MASTER_ADDR on the pod's
    containers, never on its init containers (kubeflow/training-operator
    pkg/controller.v1/pytorch/envvar.go setPodEnv, over spec.containers): the preflight runs
    in `pytorch` and, with that env, checks the whole job, with the trainer's NCCL/FI env."""
    from harness.topology.providers import detect_topology

    (job,) = docs("pytorchjob.yaml")
    replicas = job["spec"]["pytorchReplicaSpecs"]
    num_nodes = sum(r["replicas"] for r in replicas.values())
    for spec in pod_specs(job):
        assert "initContainers" not in spec
        (container,) = preflight_containers(spec)
        assert container["name"] == "pytorch"
        assert container["args"][0] == "torchrun"
        env = rendered_env(container, {"spec.nodeName": "ip-10-0-0-7"})
        assert env["FI_PROVIDER"] == "efa" and "NCCL_DEBUG" in env
        operator = {"PET_NNODES": str(num_nodes), "PET_NODE_RANK": "5",
                    "MASTER_ADDR": "llm-train-master-0", "MASTER_PORT": "23456"}
        topology = detect_topology({**env, **operator})
        assert topology is not None
        assert (topology.num_nodes, topology.node_rank) == (num_nodes, 5)


def test_jobset_gives_the_preflight_and_torchrun_one_topology():
    """JobSet sets no rendezvous variables: the manifest writes them once, from the Job's
    completion index and the JobSet's stable pod names, for the preflight and torchrun alike."""
    from harness.topology.providers import detect_topology

    (js,) = docs("jobset.yaml")
    (rjob,) = js["spec"]["replicatedJobs"]
    job = rjob["template"]["spec"]
    assert job["completionMode"] == "Indexed"
    spec = job["template"]["spec"]
    assert "initContainers" not in spec
    (container,) = preflight_containers(spec)
    index = "metadata.annotations['batch.kubernetes.io/job-completion-index']"
    env = rendered_env(container, {"spec.nodeName": "ip-10-0-0-7", index: "3"})
    topology = detect_topology(env)
    assert topology is not None
    assert (topology.num_nodes, topology.node_rank) == (job["completions"], 3)
    assert job["parallelism"] == job["completions"]
    master = f"{js['metadata']['name']}-{rjob['name']}-0-0.{js['metadata']['name']}"
    assert topology.master_addr == master
    args = expanded_args(container, env)
    assert args[0] == "torchrun" and not [a for a in args if "$(" in a], args
    assert f"--nnodes={job['completions']}" in args and "--node-rank=3" in args
    assert f"--master-addr={master}" in args
    assert env["FI_PROVIDER"] == "efa" and "NCCL_DEBUG" in env


def test_workload_kinds_and_restart_policies():
    (job,) = docs("pytorchjob.yaml")
    assert (job["apiVersion"], job["kind"]) == ("kubeflow.org/v1", "PyTorchJob")
    for replica in job["spec"]["pytorchReplicaSpecs"].values():
        assert replica["restartPolicy"] == "Never"
        assert replica["template"]["spec"]["containers"][0]["name"] == "pytorch"
    (js,) = docs("jobset.yaml")
    assert (js["apiVersion"], js["kind"]) == ("jobset.x-k8s.io/v1alpha2", "JobSet")
    assert js["spec"]["failurePolicy"]["maxRestarts"] >= 1
    assert all(r["template"]["spec"]["backoffLimit"] == 0 for r in js["spec"]["replicatedJobs"])
    (cron,) = docs("certify-cronjob.yaml")
    assert (cron["apiVersion"], cron["kind"]) == ("batch/v1", "CronJob")
    spec = cron["spec"]["jobTemplate"]["spec"]
    assert spec["backoffLimit"] == 0
    env = env_of(spec["template"]["spec"]["containers"][0])
    assert env["PREFLIGHT_TIER"] == "certify"


# ---------------------------------------------------------------- the API server's own rules

DOCS = Path(__file__).resolve().parents[1] / "docs" / "container.md"


def doc_examples() -> list[dict[str, Any]]:
    """The manifests docs/container.md shows (its ```yaml blocks with a `kind`)."""
    blocks = re.findall(r"```yaml\n(.*?)```", DOCS.read_text(), flags=re.S)
    return [d for b in blocks for d in yaml.safe_load_all(b) if isinstance(d, dict) and "kind" in d]


def test_docs_show_manifests() -> None:
    assert doc_examples(), "docs/container.md shows no Kubernetes manifest"


@pytest.mark.parametrize("name", sorted(p.name for p in K8S.glob("*.yaml")))
def test_every_manifest_passes_the_api_servers_rules(name: str) -> None:
    broken = [str(v) for d in docs(name) for v in k8s_rules.manifest(d)]
    assert broken == [], "\n".join(broken)


def test_the_docs_examples_pass_the_api_servers_rules() -> None:
    broken = [f"{d['kind']} {d['metadata']['name']}: {v}" for d in doc_examples()
              for v in k8s_rules.manifest(d)]
    assert broken == [], "\n".join(broken)


def _job() -> dict[str, Any]:
    """A Job the API server accepts: one container with GPUs, EFA, hugepages and memory."""
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"}, "spec": {
        "backoffLimit": 0, "template": {"spec": {
            "restartPolicy": "Never",
            "volumes": [{"name": "shm", "emptyDir": {"medium": "Memory"}}],
            "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [
                    {"key": kube.LABEL, "operator": "NotIn", "values": ["fail"]}]}]}}},
            "containers": [{
                "name": "trainer", "image": "img",
                "env": [{"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
                        {"name": "RANK", "valueFrom": {"fieldRef": {"fieldPath":
                            "metadata.annotations['batch.kubernetes.io/job-completion-index']"}}}],
                "resources": {"limits": {"nvidia.com/gpu": 8, "vpc.amazonaws.com/efa": 32,
                                         "hugepages-2Mi": "5120Mi", "memory": "32Gi"},
                              "requests": {"cpu": "500m"}},
                "volumeMounts": [{"name": "shm", "mountPath": "/dev/shm"}]}]}}}}


def _container(job: dict[str, Any]) -> dict[str, Any]:
    return job["spec"]["template"]["spec"]["containers"][0]


def _limits(job: dict[str, Any]) -> dict[str, Any]:
    return _container(job)["resources"]["limits"]


def _no_cpu_or_memory(job):
    del _limits(job)["memory"], _container(job)["resources"]["requests"]


def _spec(job):
    return job["spec"]["template"]["spec"]


#: One change per rule that the API server refuses, and the rule that must name it.
BREAKS = {
    "hugepages-need-cpu-or-memory": _no_cpu_or_memory,
    "request-equals-limit": lambda j: _container(j)["resources"]["requests"].update(
        {"hugepages-2Mi": "2Mi"}),
    "request-at-most-limit": lambda j: _container(j)["resources"]["requests"].update(
        {"memory": "64Gi"}),
    "limit-for-non-overcommitable": lambda j: _container(j)["resources"]["requests"].update(
        {"example.com/fpga": 1}),
    "integer-resource": lambda j: _limits(j).update({"nvidia.com/gpu": "0.5"}),
    "quantity": lambda j: _limits(j).update({"memory": "32 GB"}),
    "resource-name": lambda j: _limits(j).update({"gpu": 8}),
    "container-name-unique": lambda j: _spec(j).update(
        {"initContainers": [{**_container(j), "resources": {}}]}),
    "container-name": lambda j: _container(j).update({"name": "Trainer_1"}),
    "image": lambda j: _container(j).pop("image"),
    "volume-mount-name": lambda j: _container(j)["volumeMounts"].append(
        {"name": "reports", "mountPath": "/reports"}),
    "volume-mount-path-unique": lambda j: _container(j)["volumeMounts"].append(
        {"name": "shm", "mountPath": "/dev/shm"}),
    "env-name": lambda j: _container(j)["env"].append({"name": "A=B", "value": "1"}),
    "env-field-path": lambda j: _container(j)["env"].append(
        {"name": "X", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels"}}}),
    "termination-message-policy": lambda j: _container(j).update(
        {"terminationMessagePolicy": "FallbackToLogs"}),
    "restart-policy": lambda j: _spec(j).update({"restartPolicy": "Sometimes"}),
    "job-restart-policy": lambda j: _spec(j).update({"restartPolicy": "Always"}),
    "node-selector-values": lambda j: _spec(j)["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0][
        "matchExpressions"][0].update({"values": []}),
    "topology-key": lambda j: _spec(j)["affinity"].update({"podAntiAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": [{"labelSelector": {}}]}}),
    "job-counts": lambda j: j["spec"].update({"parallelism": -1}),
}


def _cronjob(name: str = "c", schedule: str = "0 2 * * *") -> dict[str, Any]:
    job = _job()
    return {"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": name},
            "spec": {"schedule": schedule, "jobTemplate": {"spec": job["spec"]}}}


def test_a_job_within_every_rule_passes() -> None:
    assert k8s_rules.manifest(_job()) == []
    assert k8s_rules.manifest(_cronjob()) == []


@pytest.mark.parametrize("rule", sorted(BREAKS))
def test_each_api_server_rule_refuses_its_break(rule: str) -> None:
    job = _job()
    BREAKS[rule](job)
    assert {v.rule for v in k8s_rules.manifest(job)} == {rule}


@pytest.mark.parametrize(("rule", "cron"), [
    ("cronjob-name-length", _cronjob(name="c" * 53)),
    ("cronjob-schedule", _cronjob(schedule="nightly")),
])
def test_cronjob_rules(rule: str, cron: dict[str, Any]) -> None:
    assert {v.rule for v in k8s_rules.manifest(cron)} == {rule}


def test_every_rule_is_tested_and_cites_its_kube_source() -> None:
    assert set(k8s_rules.RULES) == set(BREAKS) | {"cronjob-name-length", "cronjob-schedule"}
    for source, message in k8s_rules.RULES.values():
        assert source.startswith("kubernetes pkg/apis/") and message


@pytest.mark.parametrize(("text", "value"), [
    ("5120Mi", 5120 * 2**20), ("32Gi", 32 * 2**30), ("8", 8), ("100m", 0.1), ("1e3", 1000),
    ("1.5G", 1.5e9), ("32 GB", None), ("Mi", None), ("", None)])
def test_quantities_parse_like_the_api_server(text: str, value: float | None) -> None:
    parsed = k8s_rules.quantity(text)
    assert (parsed if parsed is None else float(parsed)) == value
