"""harness.report.kube against a fake Kubernetes API server (http.server): the node label, condition and
taint requests, the kubectl fallback, /dev/termination-log."""

from __future__ import annotations

import re

import pytest
import test_cli

from harness import cli
from harness.commands import EXIT_FAILED
from harness.report import kube
from harness.report.model import Report
from tests.fake_kube_api import FakeApi

# The neutral environment of a run and the recorded hand-off (tests/test_cli.py).
clean_env = test_cli.clean_env
execs = test_cli.execs

FAILED = {"host": "gpu7", "verdict": "fail", "exit_code": 1,
          "checks": [{"id": "PF-GPU-016", "outcome": "fail"}, {"id": "PF-ENV-001", "outcome": "pass"}]}
PASSED = {"host": "gpu7", "verdict": "pass", "exit_code": 0,
          "checks": [{"id": "PF-ENV-001", "outcome": "pass"}]}
ENV = {"PREFLIGHT_K8S_MARK": "label,condition,taint", "PREFLIGHT_NODE_NAME": "ip-10-0-0-7"}


@pytest.fixture
def api():
    servers = []

    def start(status: int = 200) -> FakeApi:
        servers.append(FakeApi(status).start())
        return servers[-1]

    yield start
    for server in servers:
        server.stop()


def _url(server: FakeApi) -> str:
    return server.url


def test_failed_node_gets_label_taint_and_condition(api, tmp_path):
    server = api()
    (tmp_path / "token").write_text("sa-token-value\n")
    target = kube.KubeTarget.from_env({"PREFLIGHT_K8S_API": _url(server)}, sa_dir=tmp_path)
    kube.mark_node(kube.node_mark(Report.from_dict(FAILED), ENV), target)
    (get, patch, status) = server.requests
    assert get[:2] == ("GET", "/api/v1/nodes/ip-10-0-0-7")
    assert get[4] == "Bearer sa-token-value"
    assert patch[:3] == ("PATCH", "/api/v1/nodes/ip-10-0-0-7", "application/merge-patch+json")
    assert patch[3]["metadata"] == {"labels": {kube.LABEL: "fail"}, "resourceVersion": "991"}
    assert patch[3]["spec"]["taints"] == [  # the node's own taint kept, ours added
        {"key": "nvidia.com/gpu", "effect": "NoSchedule"},
        {"key": kube.TAINT_KEY, "value": "true", "effect": "NoSchedule"}]
    assert status[:3] == ("PATCH", "/api/v1/nodes/ip-10-0-0-7/status",
                          "application/strategic-merge-patch+json")
    [condition] = status[3]["status"]["conditions"]
    assert (condition["type"], condition["status"], condition["reason"]) == (
        kube.CONDITION, "True", "ChecksFailed")
    assert condition["message"] == "gpu-preflight fail on gpu7: PF-GPU-016"


def test_pass_clears_our_taint_only(api, tmp_path):
    server = api()
    server.node["spec"]["taints"].append({"key": kube.TAINT_KEY, "value": "true",
                                          "effect": "NoSchedule"})
    target = kube.KubeTarget.from_env({"PREFLIGHT_K8S_API": _url(server)}, sa_dir=tmp_path)
    kube.mark_node(kube.node_mark(Report.from_dict(PASSED), ENV), target)
    patch = server.requests[1][3]
    assert patch["spec"]["taints"] == [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}]
    assert patch["metadata"]["labels"] == {kube.LABEL: "pass"}
    assert server.requests[2][3]["status"]["conditions"][0]["status"] == "False"


def test_hyperpod_label_only_on_a_node_verdict():
    env = {"PREFLIGHT_K8S_MARK": "hyperpod", "PREFLIGHT_NODE_NAME": "n1"}
    assert kube.kubectl_commands(kube.node_mark(Report.from_dict(FAILED), env)) == [
        "kubectl label node n1 --overwrite "
        "sagemaker.amazonaws.com/node-health-status=UnschedulablePendingReplacement"]
    # never un-set HyperPod's
    assert kube.kubectl_commands(kube.node_mark(Report.from_dict(PASSED), env)) == []


@pytest.mark.parametrize("exit_code", [2, 3, 143])
def test_usage_or_harness_error_marks_nothing(exit_code):
    report = Report.from_dict({**FAILED, "verdict": "error", "exit_code": exit_code})
    assert kube.node_mark(report, ENV) is None


def test_not_asked_or_unknown_kind():
    assert kube.node_mark(Report.from_dict(FAILED), {"PREFLIGHT_NODE_NAME": "n1"}) is None
    with pytest.raises(ValueError, match=re.escape("not one of label, condition, taint, hyperpod ('drain')")):
        kube.node_mark(Report.from_dict(FAILED), {**ENV, "PREFLIGHT_K8S_MARK": "label,drain"})


def test_refused_by_rbac_prints_the_kubectl_commands(api, tmp_path):
    server = api(403)
    said: list[str] = []
    kube.apply(Report.from_dict(FAILED), {**ENV, "PREFLIGHT_K8S_API": _url(server),
                        "PREFLIGHT_TERMINATION_LOG": str(tmp_path / "none")}, "why", say=said.append)
    assert "HTTP 403" in said[0] and "rbac.yaml" in said[0]
    assert said[1].strip() == (f"kubectl label node ip-10-0-0-7 --overwrite {kube.LABEL}=fail")
    assert said[2].strip() == f"kubectl taint node ip-10-0-0-7 {kube.TAINT_KEY}=true:NoSchedule"
    assert said[3].strip().startswith("kubectl patch node ip-10-0-0-7 --subresource=status")


def test_no_service_account_prints_commands():
    said: list[str] = []
    kube.apply(Report.from_dict(FAILED), {**ENV, "KUBERNETES_SERVICE_HOST": "10.0.0.1"}, None,
               say=said.append)
    assert "no service account token" in said[0]


def test_termination_log_written_bounded_only_when_present(tmp_path):
    path = tmp_path / "termination-log"
    assert kube.write_termination_log("x", path) is False and not path.exists()
    path.write_text("")
    assert kube.write_termination_log("é" * 5000, path) is True
    data = path.read_bytes()
    assert len(data) <= kube.TERMINATION_LOG_BYTES
    data.decode("utf-8")  # never cut inside a character


def test_run_writes_the_termination_log(tmp_path, execs, monkeypatch):
    log = tmp_path / "termination-log"
    log.write_text("")
    monkeypatch.setenv("PREFLIGHT_TERMINATION_LOG", str(log))
    monkeypatch.setenv("NCCL_NET", "Socket")
    rc = cli.main(["run", "--profile", "p5.48xlarge", "--report-dir", str(tmp_path / "r"),
                   "-k", "PF-ENV-001"])
    assert rc == EXIT_FAILED
    assert log.read_text().startswith("gpu-preflight FAILED on node-a")
    assert "NCCL_NET=Socket" in log.read_text()


SUSPECT = {**FAILED, "cluster": {"blast_radius": {
    "num_nodes": 4, "bad": 3, "cap": 0.5, "allowed": 2, "suspect": True,
    "why": "suspect run: 3 of 4 nodes failed, more than the 50% any one run may drain (2)"}}}


def test_a_suspect_run_is_labelled_but_never_tainted_nor_replaced(api, tmp_path):
    """Issue 30 item 4: the cluster verdict found more bad nodes than the drain cap: the node
    gets its label and a SuspectRun condition, and no taint, no HyperPod replace label."""
    server = api()
    env = {**ENV, "PREFLIGHT_K8S_MARK": "label,condition,taint,hyperpod",
           "PREFLIGHT_K8S_API": _url(server)}
    said: list[str] = []
    kube.apply(Report.from_dict(SUSPECT), env, None, say=said.append)
    methods = [(r[0], r[1]) for r in server.requests]
    assert ("GET", "/api/v1/nodes/ip-10-0-0-7") not in methods  # no taint read-modify-write
    patch = next(r[3] for r in server.requests if r[1] == "/api/v1/nodes/ip-10-0-0-7")
    assert patch == {"metadata": {"labels": {kube.LABEL: "fail"}}}
    condition = next(r[3] for r in server.requests
                     if r[1].endswith("/status"))["status"]["conditions"][0]
    assert condition["reason"] == "SuspectRun"
    assert condition["message"].startswith("gpu-preflight fail on gpu7: PF-GPU-016; suspect run")
    assert said[0] == ("preflight: node ip-10-0-0-7: not marked taint/hyperpod: suspect run: 3 "
                       "of 4 nodes failed, more than the 50% any one run may drain (2)")


def test_a_run_within_the_cap_is_tainted():
    """The removal test: the same report without `suspect` asks for the taint."""
    within = {**FAILED, "cluster": {"blast_radius": {**SUSPECT["cluster"]["blast_radius"],
                                                     "suspect": False}}}
    mark = kube.node_mark(Report.from_dict(within), ENV)
    assert "taint" in mark.kinds and mark.held_back == ()
    assert kube.node_mark(Report.from_dict(SUSPECT), ENV).kinds == ("label", "condition")
