"""Every `PREFLIGHT_*` environment variable the harness reads or sets: its name, type, default
and what it does, in one registry, and the only place that reads one. The README's
"Environment variables" table lists exactly the public ones and every name the code spells is
registered (tests/test_settings.py); no code elsewhere reads one itself
(tests/test_settings_reads.py).

Read a setting with the accessor of its type, from os.environ or from the mapping given (a
launcher's environment handed in, a child's being built): `get_str`, `get_int`, `get_float`,
`get_bool`, `get_path`, `get_list`. Each parses and validates in one place (`parse`): an unset
or empty value is the default, a malformed one a SettingError (or the `error` class the caller
names) that says the variable and its value. Numbers are ASCII and finite, as launchers write
them (a Unicode digit or `nan` is not a count of seconds)."""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path

__all__ = ["SETTINGS", "Setting", "SettingError", "get_bool", "get_float", "get_int",
           "get_list", "get_path", "get_str", "given", "parse", "public", "setting", "text", "value"]


class SettingError(ValueError):
    """A variable's value is not of its type; str() names the variable."""


Value = str | int | float | bool | Path | list[str] | None


@dataclass(frozen=True, slots=True)
class Setting:
    name: str
    type: type
    """str, int, float, bool, Path or list: what its accessor returns."""
    default: str | int | float | bool | None
    doc: str
    public: bool = True
    """False: set by the harness for its own children (tests, selftest), not for users."""
    sep: str | None = None
    """list: the characters that separate items (None: whitespace)."""


def _s(name: str, kind: type, default: str | int | float | bool | None, doc: str, *,
       public: bool = True, sep: str | None = None) -> Setting:
    return Setting(f"PREFLIGHT_{name}", kind, default, doc, public, sep)


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
    _s("MPIRUN_ARGS", list, None, "extra mpirun options (site MCA parameters)"),
    _s("SRUN_ARGS", list, None, "extra srun options (--mpi=pmix)"),
    _s("NCCL_TESTS_LAUNCHER", str, None, "mpirun: run the single-node test under mpirun"),
    _s("NUM_NODES", int, None, "number of nodes instead of the job's topology"),
    _s("NCCL_FORCE_NET", bool, True, "0: certify/diagnose add no NCCL collective forced "
       "through the NIC (docs/network.md)"),
    _s("EXTRA_CHECKS", list, None, "site check folders (colon-separated) beside the built-in suite",
       sep=":"),
    _s("PYTEST_PLUGINS", list, None, "pytest plugins (modules, comma-separated) the check "
       "sessions load beside xdist and pytest-timeout (others are not autoloaded)", sep=","),
    _s("SUITE", str, None, "replace the built-in suite with another check folder"),
    _s("SYSROOT", Path, "/", "read /sys, /proc and /dev under this root (tests, debugging)"),
    _s("OPT_ML", Path, "/opt/ml", "SageMaker's /opt/ml read from this folder"),
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
    _s("K8S_MARK", list, None, "label,condition,taint,hyperpod: mark this Kubernetes node with "
       "the verdict (docs/container.md)", sep=","),
    _s("NODE_NAME", str, None, "this pod's node (downward API spec.nodeName), for K8S_MARK"),
    _s("K8S_API", str, None, "the Kubernetes API server URL instead of the in-cluster one"),
    _s("TERMINATION_LOG", Path, "/dev/termination-log", "where a failing run writes its "
       "Kubernetes termination message"),
    _s("OUTPUT_PATHS", list, None, "checkpoint/output paths (colon-separated) judged by "
       "PF-HOST-002 beside SageMaker's (docs/host.md)", sep=":,"),
    _s("REQUIRED_MOUNTS", list, None, "mount points (colon-separated) that must be present and "
       "answer (PF-HOST-003)", sep=":,"),
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
    _s("SELFTEST_SLOW_S", float, 0.25, "selftest: seconds a slow node sleeps", public=False),
    _s("TRAIN_FAULT", str, None, "tests: a fault the training-step worker injects",
       public=False),
)

_BY_NAME = {s.name: s for s in SETTINGS}

#: Numbers as launchers and people write them: ASCII, bounded (a 5000-digit value is not a
#: count of anything), finite.
_INTEGER = re.compile(r"[+-]?[0-9]{1,18}")
_NUMBER = re.compile(r"[+-]?(?:[0-9]{1,18}(?:\.[0-9]{0,18})?|\.[0-9]{1,18})(?:[eE][+-]?[0-9]{1,3})?")
_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")


def setting(name: str) -> Setting:
    """The registered setting `name`; KeyError for a name nobody registered."""
    return _BY_NAME[name]


def public() -> list[Setting]:
    """The settings users set (the README's table)."""
    return [s for s in SETTINGS if s.public]


def _convert(spec: Setting, raw: str) -> Value:
    if spec.type is str:
        return raw
    if spec.type is Path:
        return Path(raw)
    if spec.type is list:
        parts = raw.split() if spec.sep is None else re.split(f"[{re.escape(spec.sep)}]", raw)
        return [p.strip() for p in parts if p.strip()]
    if spec.type is bool:
        if raw.lower() in _TRUE + _FALSE:
            return raw.lower() in _TRUE
        raise ValueError(f"not one of {'/'.join(_TRUE)} or {'/'.join(_FALSE)}")
    if spec.type is int:
        if not _INTEGER.fullmatch(raw):
            raise ValueError("not an integer")
        return int(raw)
    if not _NUMBER.fullmatch(raw) or not math.isfinite(float(raw)):
        raise ValueError("not a finite number")
    return float(raw)


def parse(spec: Setting | str, raw: str | None, *,
          error: type[ValueError] = SettingError) -> Value:
    """`raw` (a variable's text, None when unset) as the setting's type; unset or blank: its
    default (None for none; [] for a list). Raises `error` naming the variable and its value."""
    spec = spec if isinstance(spec, Setting) else _BY_NAME[spec]
    text_ = (raw or "").strip()
    if not text_:
        if spec.default is None:
            return [] if spec.type is list else None
        text_ = str(spec.default)
    try:
        return _convert(spec, text_)
    except ValueError as exc:
        raise error(f"{spec.name}={text_[:200]!r} is {exc}") from None


def _get(name: str, env: Mapping[str, str] | None, kinds: tuple[type, ...],
         error: type[ValueError]) -> Value:
    spec = _BY_NAME[name]
    if spec.type not in kinds:
        raise TypeError(f"{name} is registered as {spec.type.__name__}, not read as "
                        f"{kinds[0].__name__}")
    as_read = spec if spec.type is kinds[0] else replace(spec, type=kinds[0])
    return parse(as_read, (os.environ if env is None else env).get(name), error=error)


def get_str(name: str, env: Mapping[str, str] | None = None, *,
            error: type[ValueError] = SettingError) -> str | None:
    """A str setting from `env` (default os.environ): its text, stripped, else its default."""
    return _get(name, env, (str,), error)  # type: ignore[return-value]


def get_int(name: str, env: Mapping[str, str] | None = None, *,
            error: type[ValueError] = SettingError) -> int | None:
    """An int setting: ASCII digits, at most 18, an optional sign."""
    return _get(name, env, (int,), error)  # type: ignore[return-value]


def get_float(name: str, env: Mapping[str, str] | None = None, *,
              error: type[ValueError] = SettingError) -> float | None:
    """A float setting (an int one too, read as a number: `4.0` rounds): finite, ASCII."""
    found = _get(name, env, (float, int), error)
    return None if found is None else float(found)  # type: ignore[arg-type]


def get_bool(name: str, env: Mapping[str, str] | None = None, *,
             error: type[ValueError] = SettingError) -> bool | None:
    """A bool setting: 1/true/yes/on or 0/false/no/off, any case."""
    return _get(name, env, (bool,), error)  # type: ignore[return-value]


def get_path(name: str, env: Mapping[str, str] | None = None, *,
             error: type[ValueError] = SettingError) -> Path | None:
    """A Path setting, else its default as a Path."""
    return _get(name, env, (Path,), error)  # type: ignore[return-value]


def get_list(name: str, env: Mapping[str, str] | None = None, *,
             error: type[ValueError] = SettingError) -> list[str]:
    """A list setting: its items split at the setting's separators, stripped, blanks dropped."""
    return _get(name, env, (list,), error)  # type: ignore[return-value]


def given(name: str, env: Mapping[str, str] | None = None) -> str | None:
    """The text a registered variable is set to (stripped), None when unset or blank; its
    default never: for saying what is in force (the report's overrides), not for using it."""
    _BY_NAME[name]  # registered, or KeyError
    return (os.environ if env is None else env).get(name, "").strip() or None


def value(env: Mapping[str, str], name: str) -> Value:
    """`name` from `env` as its type, else its default; an empty value is the default."""
    return parse(_BY_NAME[name], env.get(name))


def text(env: Mapping[str, str], name: str) -> str | None:
    """`value()` as text (None when unset and without a default)."""
    found = value(env, name)
    return None if found is None else str(found)
