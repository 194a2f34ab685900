"""Every `PREFLIGHT_*` environment variable the harness reads or sets: its name, type, default
and what it does, in one registry. The README's "Environment variables" table lists exactly the
public ones and every name the code spells is registered (tests/test_settings.py keeps both);
`value()` reads one through the registry, typed."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["SETTINGS", "Setting", "SettingError", "public", "setting", "text", "value"]


class SettingError(ValueError):
    """A variable's value is not of its type; str() names the variable."""


@dataclass(frozen=True, slots=True)
class Setting:
    name: str
    type: type
    """str, int or float: what `value()` returns."""
    default: str | int | float | None
    doc: str
    public: bool = True
    """False: set by the harness for its own children (tests, selftest), not for users."""


def _s(name: str, kind: type, default: str | int | float | None, doc: str, *,
       public: bool = True) -> Setting:
    return Setting(f"PREFLIGHT_{name}", kind, default, doc, public)


SETTINGS: tuple[Setting, ...] = (
    _s("PROFILE", str, None, "profile name (after --profile, before auto-detection)"),
    _s("TIER", str, "preflight", "tier when --tier is not given"),
    _s("REPORT_DIR", str, None, "report folder when --report-dir is not given"),
    _s("S3_URI", str, None, "also upload the report folder here (docs/reports.md)"),
    _s("CW_NAMESPACE", str, None, "also put key figures as CloudWatch metrics in this namespace"),
    _s("JOB_ID", str, None, "the job's name in S3 keys and metrics (docs/reports.md)"),
    _s("HOSTNAME", str, None, "this node's name in reports (default: SageMaker current_host, "
       "else the hostname)"),
    _s("KERNEL_LOG", str, None, "XID/SXid evidence read from this file instead of "
       "journalctl/dmesg (docs/gpu.md)"),
    _s("XID_SINCE", str, None, "kernel log read since this time instead of since boot"),
    _s("DCGM_HOST", str, None, "DCGM diagnostics asked of this nv-hostengine"),
    _s("NCCL_TESTS_DIR", str, None, "nccl-tests binaries taken from this folder first"),
    _s("HOSTFILE", str, None, "mpirun hostfile of the multi-node bandwidth run"),
    _s("MPIRUN", str, None, "this mpirun launches the bandwidth run (default: mpirun on PATH)"),
    _s("MPIRUN_ARGS", str, "", "extra mpirun options (site MCA parameters)"),
    _s("SRUN_ARGS", str, "", "extra srun options (--mpi=pmix)"),
    _s("NCCL_TESTS_LAUNCHER", str, None, "mpirun: run the single-node test under mpirun"),
    _s("NUM_NODES", int, None, "number of nodes instead of the job's topology"),
    _s("NCCL_FORCE_NET", str, None, "0: do not force the single-node NCCL evidence run through "
       "the NIC (docs/network.md)"),
    _s("EXTRA_CHECKS", str, "", "site check folders (colon-separated) beside the built-in suite"),
    _s("SUITE", str, None, "replace the built-in suite with another check folder"),
    _s("SYSROOT", str, "/", "read /sys, /proc and /dev under this root (tests, debugging)"),
    _s("OPT_ML", str, "/opt/ml", "SageMaker's /opt/ml read from this folder"),
    _s("CLUSTER", str, None, "off: node-local checks only; else the CloudWatch Cluster "
       "dimension"),
    _s("PORT", int, None, "control-plane port (default: MASTER_PORT + 1, else 29501)"),
    _s("NNODES", int, None, "nodes of the job, set explicitly (docs/multinode.md)"),
    _s("NODE_RANK", int, None, "this node's rank, set explicitly"),
    _s("MASTER_ADDR", str, None, "host of node rank 0, set explicitly"),
    _s("HOSTS", str, None, "Slurm hostlist of every node rank, set explicitly"),
    _s("JOIN_TIMEOUT_S", float, 300.0, "seconds every node waits for the others to join"),
    _s("GATHER_TIMEOUT_S", float, 60.0, "seconds to gather every node's local result"),
    _s("COLLECTIVE_TIMEOUT_S", float, 60.0, "seconds the cluster collectives may take"),
    _s("ISOLATION_ROUNDS", int, 4, "pairwise rounds that name a bad node or link"),
    _s("EXIT_TIMEOUT_S", float, 30.0, "seconds node 0 waits for the others to take the verdict"),
    _s("CLUSTER_BW_BYTES", str, None, "message size of the cluster bandwidth gate (4M, 1G)"),
    _s("METRICS_FILE", str, None, "also write Prometheus text here (node_exporter textfile "
       "collector; docs/reports.md)"),
    _s("CW_FORMAT", str, "emf", "emf: CloudWatch Embedded Metric Format log events; metrics: "
       "PutMetricData with Host as a dimension (docs/reports.md)"),
    _s("CW_LOG_GROUP", str, None, "the CloudWatch log group of the EMF events"),
    _s("K8S_MARK", str, None, "label,condition,taint,hyperpod: mark this Kubernetes node with "
       "the verdict (docs/container.md)"),
    _s("NODE_NAME", str, None, "this pod's node (downward API spec.nodeName), for K8S_MARK"),
    _s("K8S_API", str, None, "the Kubernetes API server URL instead of the in-cluster one"),
    _s("TERMINATION_LOG", str, "/dev/termination-log", "where a failing run writes its "
       "Kubernetes termination message"),
    _s("OUTPUT_PATHS", str, None, "checkpoint/output paths (colon-separated) judged by "
       "PF-HOST-002 beside SageMaker's (docs/host.md)"),
    _s("REQUIRED_MOUNTS", str, None, "mount points (colon-separated) that must be present and "
       "answer (PF-HOST-003)"),
    _s("XID_WINDOW_H", float, 2.0, "hours of kernel log judged for recent XIDs (PF-GPU-019)"),
    _s("JOB_START_EPOCH", float, None, "XIDs before this Unix time do not count (PF-GPU-019)"),
    _s("WORKER_HANG", str, None, "tests: the torch worker part that hangs", public=False),
    _s("WORKER_T0", float, None, "the worker launch's start time, for its parts", public=False),
    _s("DEADLINE", str, None, "the run's hard deadline, for its children", public=False),
    _s("PROC_TAG", str, None, "marks the processes a run started", public=False),
    _s("ORIG_PYTHONPATH", str, None, "PYTHONPATH before the harness added to it",
       public=False),
    _s("SELFTEST_FAULT", str, None, "selftest: the fault this simulated node injects",
       public=False),
    _s("SELFTEST_SLOW_S", float, None, "selftest: seconds a slow node sleeps", public=False),
    _s("TRAIN_FAULT", str, None, "tests: a fault the training-step worker injects",
       public=False),
)

_BY_NAME = {s.name: s for s in SETTINGS}


def setting(name: str) -> Setting:
    """The registered setting `name`; KeyError for a name nobody registered."""
    return _BY_NAME[name]


def public() -> list[Setting]:
    """The settings users set (the README's table)."""
    return [s for s in SETTINGS if s.public]


def value(env: Mapping[str, str], name: str) -> str | int | float | None:
    """`name` from `env` as its type, else its default; an empty value is the default."""
    spec = _BY_NAME[name]
    raw = env.get(name, "").strip()
    if not raw:
        return spec.default
    try:
        return spec.type(raw)
    except ValueError:
        raise SettingError(f"{name}={raw[:200]!r} is not {spec.type.__name__}") from None


def text(env: Mapping[str, str], name: str) -> str | None:
    """`value()` of a str setting: the text, else its default (None when it has none)."""
    found = value(env, name)
    return None if found is None else str(found)
