"""`preflight report SOURCE --html out.html`: one self-contained HTML page (inline CSS and SVG, no
external URL, no script) from the report.json files of many nodes, read from a folder tree or an
S3 prefix. Loading is here; the sections are built by html_page (frame, header, failures),
html_nodes (cluster band, bad nodes, matrix), html_plots (bandwidth) and html_isolation."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from harness.base.jsontypes import JSONObject, JSONValue
from harness.report.figures import bandwidth_curves
from harness.report.html.isolation import isolation_section
from harness.report.html.nodes import bad_nodes_section, cluster_band, matrix_section
from harness.report.html.page import CSS, esc, failures_section, header, reports_section, warnings_section
from harness.report.html.plots import bandwidth_section
from harness.report.model import Report
from harness.report.verdicts import is_cluster_check, natural_key, summarise

__all__ = ["ReportSet", "ReportSourceError", "load_reports", "render_html", "write_html"]

SCHEMA_PREFIX = "gpu-preflight.report/"


class ReportSourceError(Exception):
    """The source holds no readable report; str() says what was looked at."""


@dataclass(slots=True)
class ReportSet:
    """The newest report of every host found in a source, and what was skipped and why."""

    source: str
    reports: list[Report] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


#: Cluster-section parts every node's report holds alike (the pairwise rounds, the cluster
#: bandwidth): redacted once per distinct content, not once per node (1024 nodes: ~60 KB each).
_SHARED = ("isolation", "bandwidth")


class _Redact:
    """Redacts each report (written by preflight they are redacted already; ones from elsewhere
    may not be), the shared cluster parts once. A part is redacted on its own: the redactor
    judges each dict by its own keys, so the result is the same as in place. Each distinct
    string is redacted once too (titles, remedies and cluster messages repeat on every node)."""

    def __init__(self) -> None:
        import functools

        from harness.base.redact import Redactor

        self.redactor = Redactor()
        self.seen: dict[str, object] = {}
        memo = functools.lru_cache(maxsize=65536)(self.redactor.text)
        self.redactor.text = memo  # type: ignore[method-assign]

    def __call__(self, data: JSONObject) -> JSONObject:
        cluster = data.get("cluster")
        shared: dict[str, JSONValue] = {}
        if isinstance(cluster, dict):
            shared = {k: cluster.pop(k) for k in _SHARED if k in cluster}
        out = self.redactor.obj(data)
        for key, part in shared.items():
            memo = json.dumps(part, sort_keys=True, default=str)
            if memo not in self.seen:
                self.seen[memo] = self.redactor.obj(part)
            out["cluster"][key] = self.seen[memo]
        return out


def _add(found: dict[str, Report], where: str, raw: bytes | str,
         problems: list[str], redact: _Redact) -> None:
    """The file edge: one report.json's bytes, redacted, read as the typed report."""
    try:
        data = json.loads(raw)
    except ValueError as exc:
        problems.append(f"{where}: not JSON ({exc})")
        return
    if not isinstance(data, dict) or not str(data.get("schema", "")).startswith(SCHEMA_PREFIX):
        problems.append(f"{where}: not a gpu-preflight report (no schema {SCHEMA_PREFIX}v1)")
        return
    report = Report.from_dict(redact(data))
    report.source = where
    host = report.host or where
    known = found.get(host)
    if known is None or report.started_at > known.started_at:
        if known is not None:
            problems.append(f"{known.source}: older report of {host}, not shown")
        found[host] = report
    else:
        problems.append(f"{where}: older report of {host}, not shown")


def load_reports(source: str) -> ReportSet:
    """Every report.json under a folder (or one file) or an `s3://` prefix, newest per host."""
    found: dict[str, Report] = {}
    result = ReportSet(source=source)
    redact = _Redact()
    if source.startswith("s3://"):
        from harness.report.publish import describe_error, download_reports

        try:
            items = download_reports(source)
        except Exception as exc:  # boto3 missing, no credentials, no such bucket

            raise ReportSourceError(f"cannot read {source}: {describe_error(exc)}") from None
        for where, raw in items:
            _add(found, where, raw, result.problems, redact)
    else:
        path = Path(source)
        if not path.exists():
            raise ReportSourceError(f"{source} does not exist")
        files = [path] if path.is_file() else sorted(path.rglob("report.json"))
        for file in files:
            try:
                raw = file.read_bytes()
            except OSError as exc:
                result.problems.append(f"{file}: {exc.strerror}")
                continue
            _add(found, str(file), raw, result.problems, redact)
    if not found:
        extra = f" ({'; '.join(result.problems[:3])})" if result.problems else ""
        raise ReportSourceError(f"no gpu-preflight report.json found under {source}{extra}")
    result.reports = [found[h] for h in sorted(found, key=natural_key)]
    return result


# ----------------------------------------------------------------------------------- rendering


def render_html(rs: ReportSet, generated_at: str | None = None) -> str:
    """The whole page as one string (every value escaped; no external resource): the verdict,
    the cluster-wide checks, the bad nodes and why, the matrix, bandwidth, isolation rounds."""
    generated_at = generated_at or datetime.now(timezone.utc).isoformat(timespec="seconds")
    reports = rs.reports
    summary = summarise(reports)
    bad = {n.host for n in summary.bad}
    # Per node only: a cluster check's figure is the cluster's (shown in its band).
    curves = [(r.host, r.host in bad,
               [c for c in bandwidth_curves(r) if not is_cluster_check(c.check_id)])
              for r in reports]
    body = "\n".join(s for s in (
        header(summary, reports, rs.source, generated_at),
        cluster_band(summary),
        bad_nodes_section(summary),
        matrix_section(summary, reports),
        bandwidth_section(curves),
        isolation_section(summary),
        failures_section(reports),
        warnings_section(reports, rs.problems),
        reports_section(reports),
    ) if s)
    return ('<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            '<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>gpu-preflight report: {esc(summary.line)}</title><style>{CSS}</style>"
            f"</head><body>\n{body}\n</body></html>\n")


def write_html(rs: ReportSet, path: Path) -> Path:
    """Write the page atomically (a reader never sees half a file); returns its path."""
    import os
    import tempfile

    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(render_html(rs))
        os.chmod(tmp, 0o644)  # a page to share, not a secret (mkstemp makes it 0600)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path
