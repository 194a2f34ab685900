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
them (a Unicode digit or `nan` is not a count of seconds). Every setting has a `Rule` beyond its
type (a range, a choice of words, a pattern: a port is 1-65535, a node's name cannot leave the
report folder); `problems(env)` lists every set variable that breaks its type or rule, which
`preflight run` refuses to start on (exit 2, naming each)."""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path

__all__ = ["HOST_NAME", "SETTINGS", "Rule", "Setting", "SettingError", "between", "get_bool",
           "get_float", "get_int", "get_list", "get_path", "get_str", "given", "matching",
           "one_of", "parse", "problems", "public", "setting", "text", "value"]


class SettingError(ValueError):
    """A variable's value is not of its type; str() names the variable."""


Value = str | int | float | bool | Path | list[str] | None


@dataclass(frozen=True, slots=True)
class Rule:
    """What a value must be beyond its type (a list setting: each item): a range of numbers,
    one of some words, or text matching a pattern. `what` says it in words; `bad` is a value
    it refuses (the tests set it, generated over the registry, and expect exit 2)."""

    what: str
    bad: str
    lo: float | None = None
    hi: float | None = None
    choices: tuple[str, ...] = ()
    pattern: str | None = None

    def problem(self, value: object) -> str | None:
        """None when `value` (converted to the setting's type) keeps the rule; else why not."""
        if self.lo is not None and isinstance(value, int | float) and not isinstance(value, bool):
            hi = math.inf if self.hi is None else self.hi
            return None if self.lo <= value <= hi else f"not {self.what}"
        items = value if isinstance(value, list) else [str(value)]
        for item in items:
            if self.choices and item not in self.choices:
                return f"not {self.what}" + (f" ({item!r})" if len(items) > 1 else "")
            if self.pattern is not None and not re.fullmatch(self.pattern, item):
                return f"not {self.what}" + (f" ({item!r})" if len(items) > 1 else "")
        return None


def between(lo: float, hi: float) -> Rule:
    """A number from `lo` to `hi`, both included."""
    def words(x: float) -> str:
        return str(int(x)) if float(x).is_integer() else f"{x:g}"

    return Rule(f"between {words(lo)} and {words(hi)}", words(hi + 1) if float(hi).is_integer()
                else f"{hi * 2}", lo=lo, hi=hi)


def one_of(*choices: str) -> Rule:
    return Rule(f"one of {', '.join(choices)}", "bogus", choices=choices)


def matching(pattern: str, what: str, bad: str) -> Rule:
    return Rule(what, bad, pattern=pattern)


#: Free text: printable, no control characters (what a launcher's variable holds).
TEXT = matching(r"[^\x00-\x1f\x7f]+", "printable text (no control characters)", "a\x1bb")
#: A file or folder: printable, no control characters.
PATH = matching(r"[^\x00-\x1f\x7f]+", "a path (printable, no control characters)", "/tmp/a\nb")
#: A node's name as a report folder's name: a hostname, a Kubernetes pod or node name, SageMaker's
#: `algo-1`, Slurm's `gpu-st-p5-1`, an EC2 `ip-10-0-1-7.ec2.internal`: letters, digits, `.`, `-`,
#: `_`, starting with a letter or digit, at most 253 (DNS). No `/` and no leading `.`: it cannot
#: leave the report folder (`../../etc`) or hide in it.
HOST_NAME = r"[A-Za-z0-9][A-Za-z0-9._-]{0,252}"
HOST = matching(HOST_NAME, "a host name (letters, digits, '.', '-', '_'; first a letter or "
                "digit; at most 253)", "../../etc")
#: Seconds a cluster phase may wait: positive, at most a day.
WAIT_S = between(0.1, 86400)
FLAG = Rule("one of 1/true/yes/on or 0/false/no/off", "maybe")


@dataclass(frozen=True, slots=True)
class Setting:
    name: str
    type: type
    """str, int, float, bool, Path or list: what its accessor returns."""
    default: str | int | float | bool | None
    doc: str
    rule: Rule
    """What a value must be beyond its type; the accessors and `problems` enforce it."""
    public: bool = True
    """False: set by the harness for its own children (tests, selftest), not for users."""
    sep: str | None = None
    """list: the characters that separate items (None: whitespace)."""


def _s(name: str, kind: type, default: str | int | float | bool | None, doc: str, rule: Rule, *,
       public: bool = True, sep: str | None = None) -> Setting:
    return Setting(f"PREFLIGHT_{name}", kind, default, doc, rule, public, sep)


SETTINGS: tuple[Setting, ...] = (
    _s("PROFILE", str, None, "profile name (after --profile, before auto-detection)",
       matching(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}", "a profile name (p5.48xlarge, local-cpu, "
                "auto)", "p5/48xlarge")),
    _s("TIER", str, "preflight", "tier when --tier is not given",
       one_of("preflight", "certify", "diagnose")),  # harness.base.tiers.TIERS (tests/test_settings.py)
    _s("REPORT_DIR", str, None, "report folder when --report-dir is not given", PATH),
    _s("S3_URI", str, None, "also upload the report folder here (docs/reports.md)",
       matching(r"s3://[^/\s]+(/\S*)?", "an S3 URI (s3://BUCKET/PREFIX)", "s3:/bucket")),
    _s("CW_NAMESPACE", str, None, "also put key figures as CloudWatch metrics in this namespace",
       # CloudWatch's own rule for a namespace (PutMetricData: 1-255 of these, not `AWS/...`)
       matching(r"(?!AWS/)[A-Za-z0-9.\-_/#: ]{1,255}", "a CloudWatch namespace (1-255 of "
                "letters, digits, . - _ / # : and space; not AWS/...)", "AWS/EC2")),
    _s("JOB_ID", str, None, "the job's name in S3 keys and metrics (docs/reports.md)",
       matching(r"[A-Za-z0-9][A-Za-z0-9._:=+@-]{0,254}", "a job name (letters, digits and "
                "._:=+@-, at most 255)", "a/../b")),
    _s("HOSTNAME", str, None, "this node's name in reports (default: SageMaker current_host, "
       "else the hostname)", HOST),
    _s("KERNEL_LOG", str, None, "XID/SXid evidence read from this file instead of "
       "journalctl/dmesg (docs/gpu.md)", PATH),
    _s("XID_SINCE", str, None, "kernel log read since this time instead of since boot", TEXT),
    _s("DCGM_HOST", str, None, "DCGM diagnostics asked of this nv-hostengine",
       matching(r"[A-Za-z0-9._:\[\]/%-]{1,255}", "a host[:port], an address or a socket path",
                "host name")),
    _s("NCCL_TESTS_DIR", str, None, "nccl-tests binaries taken from this folder first", PATH),
    _s("HOSTFILE", str, None, "mpirun hostfile of the multi-node bandwidth run", PATH),
    _s("MPIRUN", str, None, "this mpirun launches the bandwidth run (default: mpirun on PATH)",
       PATH),
    _s("MPIRUN_ARGS", list, None, "extra mpirun options (site MCA parameters)", TEXT),
    _s("SRUN_ARGS", list, None, "extra srun options (--mpi=pmix)", TEXT),
    _s("NCCL_TESTS_LAUNCHER", str, None, "mpirun: run the single-node test under mpirun",
       one_of("mpirun")),
    _s("NUM_NODES", int, None, "number of nodes instead of the job's topology",
       between(1, 65536)),
    _s("NCCL_FORCE_NET", bool, True, "0: certify/diagnose add no NCCL collective forced "
       "through the NIC (docs/network.md)", FLAG),
    _s("EXTRA_CHECKS", list, None, "site check folders (colon-separated) beside the built-in "
       "suite", PATH, sep=":"),
    _s("PYTEST_PLUGINS", list, None, "pytest plugins (modules, comma-separated) the check "
       "sessions load beside xdist and pytest-timeout (others are not autoloaded)",
       matching(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*", "a Python module name",
                "pytest-asyncio"), sep=","),
    _s("SUITE", str, None, "replace the built-in suite with another check folder", PATH),
    _s("SYSROOT", Path, "/", "read /sys, /proc and /dev under this root (tests, debugging)", PATH),
    _s("OPT_ML", Path, "/opt/ml", "SageMaker's /opt/ml read from this folder", PATH),
    _s("CLUSTER", str, None, "off: node-local checks only; else the CloudWatch Cluster "
       "dimension", matching(r"[^\x00-\x1f\x7f]{1,255}", "off, or a CloudWatch dimension "
                             "value (printable, at most 255)", "c" * 256)),
    _s("PORT", int, None, "control-plane port (default: MASTER_PORT + 1, else 29501)",
       between(1, 65535)),
    _s("NNODES", int, None, "nodes of the job, set explicitly (docs/multinode.md)",
       between(1, 65536)),
    _s("NODE_RANK", int, None, "this node's rank, set explicitly", between(0, 65535)),
    _s("MASTER_ADDR", str, None, "host of node rank 0, set explicitly",
       matching(r"[A-Za-z0-9._:\[\]%-]{1,253}", "a host name or an IP address", "node 0")),
    _s("HOSTS", str, None, "Slurm hostlist of every node rank, set explicitly",
       matching(r"[A-Za-z0-9._\[\],-]+", "a Slurm hostlist (node[0-3],gpu-7)", "node0 node1")),
    _s("JOIN_TIMEOUT_S", float, 300.0, "seconds every node waits for the others to join", WAIT_S),
    _s("GATHER_TIMEOUT_S", float, 60.0, "seconds to gather every node's local result", WAIT_S),
    _s("COLLECTIVE_TIMEOUT_S", float, 60.0, "seconds the cluster collectives may take", WAIT_S),
    _s("ISOLATION_ROUNDS", int, 4, "pairwise rounds that name a bad node or link",
       between(0, 64)),
    _s("EXIT_TIMEOUT_S", float, 30.0, "seconds node 0 waits for the others to take the verdict",
       WAIT_S),
    _s("CLUSTER_BW_BYTES", str, None, "message size of the cluster bandwidth gate (4M, 1G)",
       # harness.worker.bandwidth.parse_size's form, not zero
       matching(r"(?i)(?=[0-9.]*[1-9])[0-9]{1,12}(\.[0-9]{1,6})?[KMGT]?B?", "a size in bytes "
                "(4M, 1G, 65536)", "4 MB")),
    _s("GROUPS", str, None, "the job's parallel layout for the job-shaped groups "
       "(tp=8,pp=4,ep=2, or a JSON/TOML file; harness/cluster/groups.py)",
       matching(r"[A-Za-z0-9=,._/ -]{1,500}", "tp=N,pp=N,ep=N,... or a file path",
                "tp=8;pp=4")),
    _s("METRICS_FILE", str, None, "also write Prometheus text here (node_exporter textfile "
       "collector; docs/reports.md)", PATH),
    _s("CW_FORMAT", str, "emf", "emf: CloudWatch Embedded Metric Format log events; metrics: "
       "PutMetricData with Host as a dimension (docs/reports.md)", one_of("emf", "metrics")),
    _s("CW_LOG_GROUP", str, None, "the CloudWatch log group of the EMF events",
       # CloudWatch Logs' rule for a log group name
       matching(r"[A-Za-z0-9._/#-]{1,512}", "a CloudWatch log group name (1-512 of letters, "
                "digits and . _ / # -)", "my group")),
    _s("K8S_MARK", list, None, "label,condition,taint,hyperpod: mark this Kubernetes node with "
       "the verdict (docs/container.md)", one_of("label", "condition", "taint", "hyperpod"),
       sep=","),
    _s("DRAIN_CAP", float, 0.5, "the largest fraction of one run's nodes the Slurm and "
       "Kubernetes integrations drain or taint; beyond it the run is suspect (a shared cause) "
       "and none is (docs/container.md)", between(0.01, 1)),
    _s("NODE_NAME", str, None, "this pod's node (downward API spec.nodeName), for K8S_MARK",
       # a Kubernetes object name: an RFC 1123 subdomain
       matching(r"[a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?", "a Kubernetes node name (lower-case "
                "letters, digits, '.', '-')", "Node_1")),
    _s("K8S_API", str, None, "the Kubernetes API server URL instead of the in-cluster one",
       matching(r"https?://[^\s/]+(/\S*)?", "an http:// or https:// URL", "127.0.0.1:8001")),
    _s("TERMINATION_LOG", Path, "/dev/termination-log", "where a failing run writes its "
       "Kubernetes termination message", PATH),
    _s("OUTPUT_PATHS", list, None, "checkpoint/output paths (colon-separated) judged by "
       "PF-HOST-002 beside SageMaker's (docs/host.md)", PATH, sep=":,"),
    _s("REQUIRED_MOUNTS", list, None, "mount points (colon-separated) that must be present and "
       "answer (PF-HOST-003)", PATH, sep=":,"),
    _s("XID_WINDOW_H", float, None, "hours of kernel log judged for recent XIDs (PF-GPU-019), "
       "instead of the profile's xid_window_h",
       between(0.01, 1e6)),
    _s("JOB_START_EPOCH", float, None, "XIDs before this Unix time do not count (PF-GPU-019)",
       between(0, 4102444800)),  # up to 2100-01-01
    _s("CERT_STORE", str, None, "keep certify-tier certificates here too: a folder or an "
       "s3:// prefix (docs/certification.md)", PATH),
    _s("REUSE_CERTIFIED", str, None, "reuse a certificate younger than this (90m, 6h, 2d) "
       "when --reuse-certified is not given (docs/certification.md)",
       matching(r"[0-9]{1,7}(\.[0-9]{1,3})?[smhd]?", "an age (90m, 6h, 2d, 3600)", "6 hours")),
    _s("IMAGE_DIGEST", str, None, "the container image's digest, part of the node's identity "
       "in a certificate", matching(r"[A-Za-z0-9@:._/+-]{1,300}", "an image digest "
                                    "(sha256:...)", "a b")),
    _s("LEDGER", str, None, "the bad-hardware ledger: a folder or an s3:// prefix "
       "(docs/certification.md)", PATH),
    _s("WORKER_HANG", str, None, "tests: the torch worker part that hangs",
       one_of("compute", "sdc", "links", "bandwidth", "train"), public=False),  # worker.parts.PARTS
    _s("WORKER_T0", float, None, "the worker launch's start time, for its parts",
       between(0, 1e12), public=False),
    _s("DEADLINE", str, None, "the run's hard deadline, for its children",
       matching(r"[0-9]{1,15}(\.[0-9]{1,9})? [^\x00-\x1f\x7f]*", "`<monotonic seconds> "
                "<what>`", "soon"), public=False),
    _s("PROC_TAG", str, None, "marks the processes a run started",
       matching(r"[0-9a-f.]+(,[0-9a-f.]+)*", "tags `PID.N.HEX[,...]`", "x y"), public=False),
    _s("ORIG_PYTHONPATH", str, None, "PYTHONPATH before the harness added to it", PATH,
       public=False),
    # SELFTEST_FAULT: one_of mirrors harness.cluster.node.FAULTS
    _s("SELFTEST_FAULT", str, None, "selftest: the fault this simulated node injects",
       one_of("slow", "hang", "crash", "fail-check", "absent", "sdc", "slowlink", "flaky"),
       public=False),
    _s("SELFTEST_SLOW_LINK", str, None, "selftest: the nodes whose link to each other is slow",
       matching(r"[0-9]{1,5}(,[0-9]{1,5})*", "node ranks (1,2)", "1 2"), public=False),
    _s("SELFTEST_SLOW_S", float, 0.25, "selftest: seconds a slow node sleeps", between(0, 3600),
       public=False),
    _s("ENV_NO_C", bool, False, "1: the env reader reads every script line in Python, not "
       "with its C scans (harness/parsers/_env_lines.c; the same results)", FLAG, public=False),
    _s("TRAIN_FAULT", str, None, "tests: a fault the training-step worker injects",
       # harness.probes.train_step.parse_fault's form, FAULT_KINDS
       matching(r"(grad-perturb|nan|corrupt-replica|hang|oom)(,(rank|step|scale)=[0-9.eE+-]+)*",
                "a fault KIND[,rank=R][,step=S][,scale=X]", "bogus"), public=False),
)

_BY_NAME = {s.name: s for s in SETTINGS}

#: Numbers as launchers and people write them: ASCII, bounded (a 5000-digit value is not a
#: count of anything), finite.
_INTEGER = re.compile(r"[+-]?[0-9]{1,18}(?:\.0*)?")  # `4.0` is 4 (a count written as a float)
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
        return int(raw.partition(".")[0])
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
        found = _convert(spec, text_)
        problem = spec.rule.problem(found)
        if problem is not None:
            raise ValueError(problem)
    except ValueError as exc:
        raise error(f"{spec.name}={text_[:200]!r} is {exc}") from None
    return found


def problems(env: Mapping[str, str]) -> dict[str, str]:
    """Every registered variable set in `env` whose value its accessor would refuse (its type
    or its rule): {name: the message naming it and its value}. `preflight run` refuses to start
    on any (exit 2) rather than let a check or the cluster step trip over one later, or a
    default replace it silently."""
    found: dict[str, str] = {}
    for spec in SETTINGS:
        if spec.name in env:
            try:
                parse(spec, env[spec.name])
            except SettingError as exc:
                found[spec.name] = str(exc)
    return found


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
