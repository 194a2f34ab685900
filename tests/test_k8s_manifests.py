"""container/k8s/*.yaml: the structure the docs promise, checked against what harness.kube does
(no API server or OpenAPI schema here: a structural check of the fields that matter)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness import kube

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


@pytest.mark.parametrize("name", WORKLOADS)
def test_preflight_pods_never_restart_in_place_and_can_mark_their_node(name):
    sa = next(d for d in docs("rbac.yaml") if d["kind"] == "ServiceAccount")["metadata"]
    specs = [s for d in docs(name) for s in pod_specs(d)]
    assert specs
    for spec in specs:
        preflight = [c for c in spec.get("initContainers", []) + spec["containers"]
                     if c["name"] == "gpu-preflight"]
        assert len(preflight) == 1
        env = env_of(preflight[0])
        assert env["PREFLIGHT_NODE_NAME"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
        assert set(env["PREFLIGHT_K8S_MARK"].split(",")) <= set(kube.KINDS)
        assert spec["serviceAccountName"] == sa["name"]
        assert spec.get("restartPolicy", "Never") == "Never"
        assert preflight[0]["resources"]["limits"]["nvidia.com/gpu"] == 8


@pytest.mark.parametrize("name", ["pytorchjob.yaml", "jobset.yaml"])
def test_retried_pods_avoid_nodes_marked_bad(name):
    for spec in (s for d in docs(name) for s in pod_specs(d)):
        terms = spec["affinity"]["nodeAffinity"][
            "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
        assert {"key": kube.LABEL, "operator": "NotIn", "values": ["fail"]} in [
            e for t in terms for e in t["matchExpressions"]]
        assert [c["name"] for c in spec["initContainers"]] == ["gpu-preflight"]


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
