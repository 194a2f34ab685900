"""Kubernetes: the verdict written on the Node (a label, a condition, optionally a taint, the
HyperPod node-health label) and the failure reason in /dev/termination-log.

Opt-in with `PREFLIGHT_K8S_MARK=label,condition[,taint][,hyperpod]` and the node's name from the
downward API (`PREFLIGHT_NODE_NAME` <- `spec.nodeName`). In a pod the service account's token
and CA are used (/var/run/secrets/kubernetes.io/serviceaccount); `PREFLIGHT_K8S_API` points at
another API server (`kubectl proxy`: http://127.0.0.1:8001). Without credentials, or when the
API refuses, the exact `kubectl` commands are printed instead; nothing here changes the verdict.
A suspect run (harness.base.blast: more of the run's nodes failed than PREFLIGHT_DRAIN_CAP lets it
take out) gets its label and condition, never the taint nor HyperPod's replace label, and says so.

Hand-written on the standard library on purpose: three REST calls (GET node, PATCH node, PATCH
node/status) do not justify the official `kubernetes` client's dependency tree (it pins
urllib3/requests ranges the training image also needs) in every training container.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from harness.base.jsontypes import JSONObject
from harness.base.settings import get_list, get_path, get_str, setting
from harness.report.model import Report

__all__ = ["KubeTarget", "NodeMark", "kubectl_commands", "mark_node", "node_mark",
           "write_termination_log"]

SA_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
LABEL = "gpu-preflight.io/verdict"
CONDITION = "GPUPreflightFailed"
TAINT_KEY = "gpu-preflight.io/failed"
#: HyperPod on EKS acts on this label (auto-repair replaces or reboots the node):
#: https://docs.aws.amazon.com/sagemaker/latest/dg/sagemaker-hyperpod-eks-resiliency-node-labels.html
HYPERPOD_LABEL = "sagemaker.amazonaws.com/node-health-status"
HYPERPOD_REPLACE = "UnschedulablePendingReplacement"
#: The kubelet reads at most 4096 bytes of the termination message (Pod API terminationMessagePath).
TERMINATION_LOG_BYTES = 4096
TIMEOUT_S = 10
#: The marks that take a node out of service: never written for a suspect run (harness.base.blast).
_DRAINING = ("taint", "hyperpod")
#: What PREFLIGHT_K8S_MARK may name (its registry rule refuses anything else).
KINDS = setting("PREFLIGHT_K8S_MARK").rule.choices


@dataclass(frozen=True, slots=True)
class NodeMark:
    """What to write on the node for one run."""

    node: str
    kinds: tuple[str, ...]
    failed: bool
    reason: str
    message: str
    held_back: tuple[str, ...] = ()
    """The kinds asked for but not written: the taint and the HyperPod label of a suspect run."""
    suspect: str = ""
    """Why the run is suspect (harness.base.blast), else ""."""


@dataclass(slots=True)
class KubeTarget:
    """Where the API is and how to authenticate."""

    base_url: str
    token: str | None = None
    ca_file: str | None = None
    done: list[str] = field(default_factory=list)

    @classmethod
    def from_env(cls, env: Mapping[str, str], sa_dir: Path = SA_DIR) -> KubeTarget | None:
        token_file, ca = sa_dir / "token", sa_dir / "ca.crt"
        token = token_file.read_text().strip() if token_file.is_file() else None
        if api := get_str("PREFLIGHT_K8S_API", env):
            return cls(api.rstrip("/"), token,
                       str(ca) if ca.is_file() else None)
        host, port = env.get("KUBERNETES_SERVICE_HOST"), env.get("KUBERNETES_SERVICE_PORT", "443")
        if not host or token is None:
            return None
        host = f"[{host}]" if ":" in host else host
        return cls(f"https://{host}:{port}", token, str(ca) if ca.is_file() else None)

    def call(self, method: str, path: str, body: object = None,
             content_type: str = "application/merge-patch+json") -> JSONObject:
        import ssl  # the API is called when a node is marked: not imported by every run
        import urllib.request

        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.base_url + path, data=data, method=method)
        req.add_header("Accept", "application/json")
        if data is not None:
            req.add_header("Content-Type", content_type)
        if self.token:
            req.add_header("Authorization", f"Bearer {self.token}")
        context = ssl.create_default_context(cafile=self.ca_file) if self.ca_file else None
        with urllib.request.urlopen(req, timeout=TIMEOUT_S, context=context) as resp:
            return json.loads(resp.read() or b"{}")


def node_mark(report: Report, env: Mapping[str, str]) -> NodeMark | None:
    """The mark for this run, or None when not asked for (or no node name)."""
    kinds = tuple(get_list("PREFLIGHT_K8S_MARK", env))
    node = get_str("PREFLIGHT_NODE_NAME", env) or ""
    if not kinds or not node:
        return None
    if report.exit_code not in (0, 1):  # usage/harness error, signal: not a node verdict
        return None
    failed_ids = [c.id for c in report.checks if c.failed]
    message = (f"gpu-preflight {report.verdict} on {report.host or node}"
               + (f": {', '.join(failed_ids[:20])}" if failed_ids else ""))
    cluster = report.extra.get("cluster")
    radius = cluster.get("blast_radius") if isinstance(cluster, Mapping) else None
    suspect = str(radius.get("why") or "") if isinstance(radius, Mapping) and \
        radius.get("suspect") else ""
    held = tuple(k for k in kinds if k in _DRAINING) if suspect else ()
    return NodeMark(node=node, kinds=tuple(k for k in kinds if k not in held),
                    failed=report.exit_code == 1,
                    reason="SuspectRun" if suspect else "ChecksFailed" if failed_ids else "Passed",
                    message=(f"{message}; {suspect}" if suspect else message)[:1000],
                    held_back=held, suspect=suspect)


def _now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _label_patch(mark: NodeMark) -> JSONObject:
    labels: dict[str, str | None] = {}
    if "label" in mark.kinds:
        labels[LABEL] = "fail" if mark.failed else "pass"
    if "hyperpod" in mark.kinds and mark.failed:  # a pass never clears HyperPod's own label
        labels[HYPERPOD_LABEL] = HYPERPOD_REPLACE
    return {"metadata": {"labels": labels}} if labels else {}


def _taints(current: list[JSONObject], mark: NodeMark) -> list[JSONObject]:
    """The node's taints with ours added (failed) or removed (passed). Taints are replaced as
    a whole list by a patch, hence read-modify-write with the node's resourceVersion."""
    kept = [t for t in current if t.get("key") != TAINT_KEY]
    if mark.failed:
        kept.append({"key": TAINT_KEY, "value": "true", "effect": "NoSchedule"})
    return kept


def mark_node(mark: NodeMark, target: KubeTarget) -> list[str]:
    """Write the mark through the API; returns what was done. Raises urllib/OSError errors."""
    path = f"/api/v1/nodes/{mark.node}"
    patch = _label_patch(mark)
    if "taint" in mark.kinds:
        node = target.call("GET", path)
        patch.setdefault("metadata", {})["resourceVersion"] = (
            node.get("metadata", {}).get("resourceVersion"))
        patch["spec"] = {"taints": _taints(node.get("spec", {}).get("taints") or [], mark)}
    if patch:
        target.call("PATCH", path, patch)
        target.done.append("node labels/taints patched")
    if "condition" in mark.kinds:
        now = _now()
        condition = {"type": CONDITION, "status": "True" if mark.failed else "False",
                     "reason": mark.reason, "message": mark.message,
                     "lastHeartbeatTime": now, "lastTransitionTime": now}
        # Conditions merge by `type` under a strategic merge patch: the others are kept.
        target.call("PATCH", path + "/status", {"status": {"conditions": [condition]}},
                    content_type="application/strategic-merge-patch+json")
        target.done.append(f"condition {CONDITION}={condition['status']}")
    return target.done


def kubectl_commands(mark: NodeMark) -> list[str]:
    """The same marks as kubectl commands (printed when the API cannot be used)."""
    node = shlex.quote(mark.node)
    out = []
    labels = _label_patch(mark).get("metadata", {}).get("labels", {})
    if labels:
        out.append(f"kubectl label node {node} --overwrite "
                   + " ".join(f"{k}={v}" for k, v in labels.items()))
    if "taint" in mark.kinds:
        out.append(f"kubectl taint node {node} {TAINT_KEY}=true:NoSchedule" if mark.failed
                   else f"kubectl taint node {node} {TAINT_KEY}:NoSchedule-")
    if "condition" in mark.kinds:
        body = json.dumps({"status": {"conditions": [{
            "type": CONDITION, "status": "True" if mark.failed else "False",
            "reason": mark.reason, "message": mark.message}]}})
        out.append(f"kubectl patch node {node} --subresource=status --type=strategic "
                   f"-p {shlex.quote(body)}")
    return out


def write_termination_log(text: str, path: Path = Path("/dev/termination-log")) -> bool:
    """The failure reason where the kubelet reads a container's termination message, if the
    file is there (Kubernetes mounts it in every container); True when written."""
    if not path.exists():
        return False
    data = text.encode("utf-8")[:TERMINATION_LOG_BYTES]
    try:
        path.write_bytes(data.decode("utf-8", errors="ignore").encode("utf-8"))
    except OSError:
        return False
    return True


def apply(report: Report, env: Mapping[str, str], failure_text: str | None,
          say: Callable[[str], object] = print) -> None:
    """The run's Kubernetes outputs, each problem said and never raised (called by the CLI)."""
    if failure_text and report.verdict != "pass":
        write_termination_log(failure_text, get_path("PREFLIGHT_TERMINATION_LOG", env))
    try:
        mark = node_mark(report, env)
    except ValueError as exc:
        say(f"preflight: warning: {exc}")
        return
    if mark is None:
        return
    if mark.held_back:
        say(f"preflight: node {mark.node}: not marked {'/'.join(mark.held_back)}: "
            f"{mark.suspect}")
    target = KubeTarget.from_env(env)
    problem = "no service account token in this pod" if target is None else ""
    if target is not None:
        import urllib.error  # with a target alone: start-up, issue 28 item 6

        try:
            done = mark_node(mark, target)
            say(f"preflight: node {mark.node}: {'; '.join(done)}")
            return
        except (urllib.error.URLError, OSError, ValueError) as exc:
            problem = str(getattr(exc, "reason", None) or exc)
            if isinstance(exc, urllib.error.HTTPError):
                problem = f"HTTP {exc.code} {exc.reason} (RBAC: container/k8s/rbac.yaml)"
    say(f"preflight: warning: cannot mark node {mark.node} through the API ({problem}); run:")
    for command in kubectl_commands(mark):
        say(f"  {command}")
