"""The results file of a check session: one JSON line per event, written (and flushed) as it
happens, so that a killed session leaves every finished result behind. The runner proves a
pass from it: what was selected, what reported, what could not be collected."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Generator
from pathlib import Path

import pytest

from harness.base.jsontypes import JSONObject

__all__ = ["MESSAGE_CHARS", "ResultsRecorder", "collect_error"]

#: Longest collection-error or lost-item text kept (its end: where the error is said).
MESSAGE_CHARS = 4000


def collect_error(report: pytest.CollectReport, path: object = None) -> dict[str, str]:
    """A file (or folder) that could not be collected: its path (else its node id) and
    pytest's message."""
    return {"nodeid": str(path or report.nodeid or "(session)"),
            "message": report.longreprtext[-MESSAGE_CHARS:]}


class ResultsRecorder:
    """Registered by the plugin with --preflight-results.

    Events: `collected` (written by gw0 under xdist, else by the session: this phase's items,
    the whole selection before the phase split, and the collection errors), `started` (an item
    began: the live progress line names what runs now), `result` (one per
    item at its teardown, by whichever worker ran it), `lost` (the xdist controller: an item
    whose worker crashed under it), `internal_error` (pytest's INTERNALERROR), `finished` (the
    controller: pytest's exit status). Each line is one O_APPEND write, so lines from several
    workers never interleave. A worker that dies mid-check leaves that check without a result,
    which the runner reports as an error.
    """

    def __init__(self, path: Path, worker_id: str | None, phase: str = "checks",
                 redact: Callable[[object], object] = lambda record: record) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.redact = redact
        """Applied to every event before it is written (harness.base.redact.Redactor.obj)."""
        self.worker_id = worker_id
        self.phase = phase
        self.distributing = False
        self.errors: list[dict[str, str]] = []

    def write(self, record: JSONObject) -> None:
        data = (json.dumps(self.redact(record), default=str) + "\n").encode()
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, data)
        finally:
            os.close(fd)

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        self.distributing = session.config.pluginmanager.has_plugin("dsession")

    @pytest.hookimpl(wrapper=True)
    def pytest_make_collect_report(
        self, collector: pytest.Collector
    ) -> Generator[None, pytest.CollectReport, pytest.CollectReport]:
        report: pytest.CollectReport = yield
        if report.failed and not self.distributing:
            self.errors.append(collect_error(report, getattr(collector, "path", None)))
        return report

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        if self.distributing or self.worker_id not in (None, "gw0"):
            return
        from harness.items import describe_item, reused_key, selection_key

        selected = session.config.stash.get(selection_key, session.items)
        self.write({
            "event": "collected", "phase": self.phase, "worker": self.worker_id or "main",
            "checks": [describe_item(i) for i in session.items],
            "selected": [describe_item(i) for i in selected],
            "errors": self.errors, "time": time.time(),
            "reused": session.config.stash.get(reused_key, []),
        })

    def pytest_runtest_logstart(self, nodeid: str, location: object) -> None:
        if not self.distributing:  # the worker that runs it (xdist's controller hears it too)
            self.write({"event": "started", "phase": self.phase, "nodeid": nodeid,
                        "time": time.time()})

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if self.distributing:
            # xdist's controller reports an item whose worker died with when="???".
            if report.when not in ("setup", "call", "teardown"):
                self.write({"event": "lost", "phase": self.phase, "nodeid": report.nodeid,
                            "message": report.longreprtext[-MESSAGE_CHARS:]})
            return
        if report.when != "teardown":
            return
        for key, value in report.user_properties:
            if key == "preflight_result":  # JSON text (harness.plugin)
                record = json.loads(value) if isinstance(value, str) else value
                self.write({"event": "result", "phase": self.phase, **record})

    def pytest_internalerror(self, excrepr: object) -> None:
        # A worker's INTERNALERROR reaches the controller here too (xdist re-raises it).
        self.write({"event": "internal_error", "phase": self.phase, "worker": self.worker_id or "main",
                    "message": str(excrepr)[-MESSAGE_CHARS:]})

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if self.worker_id is None:
            self.write({"event": "finished", "phase": self.phase, "exitstatus": int(exitstatus),
                        "time": time.time()})
