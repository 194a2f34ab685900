"""The versioned JSON report and the redaction of every file the run leaves behind (the failure
file's text, SageMaker's /opt/ml/output/failure, is harness.report.failure).

Secrets: the report is the run's one record, and every output (report.json, the summary on
stdout, the failure file, junit, metrics, uploads, Kubernetes) renders `Report.redacted()`,
never the raw record; the check sessions redact their results as they make them
(harness.run.session_redaction), and `redact_outputs` sweeps what pytest itself wrote."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import tempfile
import traceback
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from harness import __version__
from harness.base.jsontypes import JSONMapping, JSONObject
from harness.base.redact import Redactor
from harness.report.causes import find_causes
from harness.report.v1 import is_v1, upgrade
from harness.results import CheckResult, results

__all__ = [
    "REPORT_SCHEMA",
    "Report",
    "ReportDirError",
    "check_report_dir",
    "describe_crash",
    "load_results",
    "redact_outputs",
    "write_json_atomic",
]

REPORT_SCHEMA = "gpu-preflight.report/v1"
#: The check records' version (harness.results): 2 has `size_bytes`/`gpu_index`/`node` on
#: measurements. A report without the key is read as a v1 report (harness.report.v1).
RESULTS_SCHEMA = 2
#: Environment variables kept (redacted) in the report: what decides how NCCL/torch behave.
ENV_PREFIXES = ("NCCL_", "FI_", "TORCH_", "CUDA_", "NVIDIA_", "OMPI_", "SLURM_", "SM_", "PMIX_",
                "PREFLIGHT_", "AWS_REGION", "AWS_DEFAULT_REGION", "MASTER_", "WORLD_SIZE", "RANK",
                "LOCAL_RANK", "LD_LIBRARY_PATH", "PATH", "RDMAV_", "HOSTNAME")


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


@dataclass(slots=True)
class Report:
    """One node's run: built by the runner, written as report.json, summarised for people."""

    host: str
    profile: str
    profile_source: str
    tier: str
    started_at: str = field(default_factory=now_iso)
    finished_at: str = ""
    duration_s: float = 0.0
    budget_s: float = 0.0
    checks: list[CheckResult] = field(default_factory=list)
    """Every check's result (report.json holds each as `CheckResult.to_dict()`)."""
    harness_errors: list[str] = field(default_factory=list)
    command: list[str] = field(default_factory=list)
    warn_only: bool = False
    environment: dict[str, str] = field(default_factory=dict)
    phases: list[JSONObject] = field(default_factory=list)
    exit_code: int = 0
    suites: list[dict[str, str]] = field(default_factory=list)
    """Every check suite the run collected (harness.run.suites.Suite.to_dict)."""
    overrides: list[dict[str, str]] = field(default_factory=list)
    profile_detail: JSONObject = field(default_factory=dict)
    """The whole resolved profile (Profile.to_dict: origin, derived_from, every threshold)."""
    """Every override in force that changes where evidence comes from (harness.run.suites)."""
    selection: JSONObject = field(default_factory=dict)
    """What was selected and what reported (harness.run.selection): the proof of a pass."""
    usage_error: str = ""
    """Set when the run could not start as asked (an empty selection, a bad -k): exit 2."""
    extra: JSONObject = field(default_factory=dict)
    """Sections later stages add (the cluster verdict, uploads)."""
    interrupted: JSONObject | None = None
    """Set when a signal stopped the run (harness.run.interrupted): the verdict is `interrupted`."""
    harness_version: str = __version__
    """The harness that wrote it (another for a report read from a file)."""
    source: str = ""
    """Where it was read from (a file, an S3 key); never written into report.json."""

    @classmethod
    def from_dict(cls, data: JSONMapping) -> Report:
        """A report.json read back (the file edge: `preflight report`, a peer's report): what
        `to_dict` wrote gives the same dict again; the derived keys (`verdict`, `counts`,
        `causes`) are judged again from the checks, keys this version does not know are kept
        in `extra`. A v1 report (no `results_schema`) is read through harness.report.v1."""
        if is_v1(data):
            data = upgrade(data)
        profile = data.get("profile")
        profile = profile if isinstance(profile, Mapping) else {"name": str(profile or "?")}
        interrupted = data.get("interrupted")
        return cls(
            host=str(data.get("host") or ""), profile=str(profile.get("name") or "?"),
            profile_source=str(profile.get("source") or ""),
            profile_detail=dict(profile.get("resolved") or {}), tier=str(data.get("tier") or ""),
            started_at=str(data.get("started_at") or ""),
            finished_at=str(data.get("finished_at") or ""),
            duration_s=_number(data.get("duration_s")), budget_s=_number(data.get("budget_s")),
            checks=results(data.get("checks") or []),
            harness_errors=[str(e) for e in data.get("harness_errors") or []],
            command=[str(a) for a in data.get("command") or []],
            warn_only=bool(data.get("warn_only")),
            environment={str(k): str(v) for k, v in (data.get("environment") or {}).items()},
            phases=list(data.get("phases") or []), exit_code=int(data.get("exit_code") or 0),
            suites=list(data.get("suites") or []), overrides=list(data.get("overrides") or []),
            selection=dict(data.get("selection") or {}),
            usage_error=str(data.get("usage_error") or ""),
            interrupted=dict(interrupted) if isinstance(interrupted, Mapping) else None,
            harness_version=str(data.get("harness_version") or ""),
            extra={k: v for k, v in data.items() if k not in _WRITTEN},
        )

    def counts(self) -> dict[str, int]:
        counts = dict.fromkeys(("pass", "warn", "skip", "fail", "error"), 0)
        for c in self.checks:
            counts[c.outcome] = counts.get(c.outcome, 0) + 1
        return counts

    @property
    def failed(self) -> list[CheckResult]:
        return [c for c in self.checks if c.failed]

    @property
    def verdict(self) -> str:
        """`pass`, `fail` (a check failed or errored), `error` (the harness could not judge) or
        `interrupted` (a signal stopped the run). A report without a single check result is
        never a pass."""
        if self.interrupted:
            return "interrupted"
        if (self.harness_errors or self.usage_error or not self.checks) and not self.failed:
            return "error"
        return "fail" if self.failed or self.harness_errors else "pass"

    def refuse_if_nothing_judged(self) -> None:
        """A run whose every selected check was skipped judged nothing: make it the usage
        error the runner worded (`selection.nothing_judged`), as an empty selection is. The
        caller decides where that holds: a single node; on a multi-node job the cluster
        verdict does, since another node may judge what this one skipped."""
        message = self.selection.get("nothing_judged")
        if message and not self.usage_error:
            self.usage_error = str(message)
            self.harness_errors.insert(0, self.usage_error)

    def redacted(self, env: Mapping[str, str] | None = None) -> Report:
        """This report with every string in it redacted against `env`'s secrets (default: this
        process's environment): what every output renders. A copy; redacting a redacted report
        again costs a lookup per string (Redactor.of remembers what it redacted)."""
        redactor = Redactor.of(env)
        changes: dict[str, object] = {f.name: redactor.obj(getattr(self, f.name))
                                      for f in dataclasses.fields(self) if f.name != "checks"}
        changes["checks"] = [CheckResult.from_dict(redactor.obj(c.to_dict())) for c in self.checks]
        return Report(**changes)

    def to_dict(self) -> JSONObject:
        return {
            "schema": REPORT_SCHEMA,
            "results_schema": RESULTS_SCHEMA,
            "harness_version": self.harness_version,
            "host": self.host,
            "profile": {"name": self.profile, "source": self.profile_source,
                        "resolved": self.profile_detail},
            "tier": self.tier,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "duration_s": round(self.duration_s, 3),
            "budget_s": self.budget_s,
            "verdict": self.verdict,
            "exit_code": self.exit_code,
            "counts": self.counts(),
            "checks": [c.to_dict() for c in self.checks],
            "causes": [c.to_dict() for c in find_causes(self.checks)],
            "harness_errors": self.harness_errors,
            "command": self.command,
            "warn_only": self.warn_only,
            "environment": self.environment,
            "phases": self.phases,
            "suites": self.suites,
            "overrides": self.overrides,
            "selection": self.selection,
            "usage_error": self.usage_error or None,
            **({"interrupted": self.interrupted} if self.interrupted else {}),
            **self.extra,
        }


#: The keys `to_dict` writes itself (the rest of a read report is its `extra`).
_WRITTEN = frozenset((
    "schema", "results_schema", "harness_version", "host", "profile", "tier", "started_at",
    "finished_at", "duration_s", "budget_s", "verdict", "exit_code", "counts", "checks",
    "causes", "harness_errors", "command", "warn_only", "environment", "phases", "suites",
    "overrides", "selection", "usage_error", "interrupted"))


def _number(value: object) -> float:
    """A figure read back as written (600 stays 600: the file's bytes do not change)."""
    return value if isinstance(value, int | float) and not isinstance(value, bool) else 0.0


def report_environment(env: Mapping[str, str]) -> dict[str, str]:
    """The report's environment section: the variables that matter, redacted."""
    kept = {k: v for k, v in env.items() if k.startswith(ENV_PREFIXES)}
    return Redactor.of(env).env(dict(sorted(kept.items())))


def write_json_atomic(path: Path, data: object) -> None:
    """Write JSON so that a reader never sees half a file (temp file + rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(data, fh, indent=2, default=str)
            fh.write("\n")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


class ReportDirError(Exception):
    """The report folder cannot be written (not a folder, read-only, full): a harness error
    (exit 3), never a node verdict; str() names the folder and the reason."""

    def __init__(self, directory: Path, exc: OSError) -> None:
        self.directory = directory
        where = f" ({exc.filename})" if exc.filename and str(exc.filename) != str(directory) else ""
        # mkdir(exist_ok=True) over a file says EEXIST: say what is there instead.
        why = "a file is there, not a folder" if isinstance(exc, FileExistsError) else (
            exc.strerror or str(exc))
        super().__init__(f"the report folder {directory} cannot be written{where}: {why}")


#: Bytes written to prove the report folder takes data (a full disk refuses them).
_PROBE_BYTES = 64 * 1024


def check_report_dir(directory: Path) -> None:
    """Raise ReportDirError unless `directory` is (or can be made) a folder that takes a file
    of _PROBE_BYTES: before any check runs, rather than after they all ran."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".preflight-probe.", dir=directory)
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(b"\0" * _PROBE_BYTES)
                fh.flush()
                os.fsync(fh.fileno())
        finally:
            Path(tmp).unlink(missing_ok=True)
    except OSError as exc:
        raise ReportDirError(directory, exc) from exc


def write_report(report: Report, directory: Path, env: Mapping[str, str] | None = None) -> Path:
    """report.json in `directory`, rendered from the redacted report; returns its path. Raises
    ReportDirError when the folder cannot take it."""
    path = directory / "report.json"
    try:
        write_json_atomic(path, report.redacted(env).to_dict())
    except OSError as exc:
        raise ReportDirError(directory, exc) from exc
    return path


def describe_crash(exc: BaseException) -> str:
    """An uncaught exception as the report's harness error: its type, message and where it was
    raised (a bug to report); a ReportDirError is its own message."""
    if isinstance(exc, ReportDirError):
        return str(exc)
    frames = traceback.extract_tb(exc.__traceback__)
    where = f" (at {Path(frames[-1].filename).name}:{frames[-1].lineno} in {frames[-1].name})" \
        if frames else ""
    return f"internal error: {type(exc).__name__}: {exc}{where}"


def redact_file(path: Path, env: Mapping[str, str] | None = None) -> None:
    """Rewrite a text file (JUnit XML, pytest output) with secrets redacted, if it exists."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return
    redacted = Redactor.of(env).text(text)
    if redacted != text:
        path.write_text(redacted, encoding="utf-8")


def redact_outputs(directory: Path, env: Mapping[str, str] | None = None) -> None:
    """Every file under a report folder but report.json (rendered from the redacted record)
    rewritten with secrets redacted: what pytest itself printed (warnings, internal errors)
    around the results the sessions redacted, and any file a later version adds there."""
    try:
        files = sorted(p for p in directory.rglob("*") if p.is_file())
    except OSError:
        return
    for path in files:
        if path != directory / "report.json":
            with contextlib.suppress(OSError):  # left as is: the report says what failed
                redact_file(path, env)


def load_results(path: Path) -> tuple[list[JSONObject], dict[str, JSONObject], list[int]]:
    """(collected checks, results by nodeid, pytest exit statuses) from a results JSONL file.
    A torn last line (the session was killed mid-write) is ignored."""
    collected: list[JSONObject] = []
    results: dict[str, JSONObject] = {}
    statuses: list[int] = []
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return collected, results, statuses
    for line in lines:
        try:
            record = json.loads(line)
        except ValueError:
            continue
        event = record.pop("event", None)
        if event == "collected":
            collected.extend(record.get("checks", []))
        elif event == "result":
            results[record["nodeid"]] = record
        elif event == "finished":
            statuses.append(int(record.get("exitstatus", -1)))
    return collected, results, statuses


def command_for_report(argv: Sequence[str], env: Mapping[str, str]) -> list[str]:
    return Redactor.of(env).argv(argv)
