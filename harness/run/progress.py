"""What a run shows while it runs. The check sessions write their events to results.jsonl
(harness.run.recorder); a thread here tails that file and prints:

- a line per finished check (`PASS PF-ENV-001 title (0.1 s)`); with -v also every value the check
  measured with its threshold, and why a check does not apply;
- in a log (not a terminal): a `selected` line as soon as the checks are collected, and a
  heartbeat line when a long check keeps the run quiet for HEARTBEAT_S;
- on a terminal: one live status line from the first second (rich's Status, redrawn in place,
  never left in the scrollback): what phase the run is in, how many checks are done, which are
  running now and for how long, and the elapsed time against the tier's upper bound.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from harness.base.jsontypes import JSONObject, JSONValue

if TYPE_CHECKING:
    from rich.console import Console
    from rich.status import Status

__all__ = ["HEARTBEAT_S", "Progress"]

#: Seconds without a finished check after which a heartbeat line says the run is alive (logs).
HEARTBEAT_S = 30.0
#: Seconds between polls of the results file (and redraws of the status line).
POLL_S = 0.2
#: Checks named as running in the status line; more are counted.
RUNNING_SHOWN = 3


def _items(value: JSONValue) -> list[JSONValue]:
    """A collected event's list of items (anything else: none)."""
    return value if isinstance(value, list) else []


class Progress(threading.Thread):
    """Tails `path` (results.jsonl) until `stop` is set; `out` defaults to stdout, `live` to
    whether `out` is a terminal."""

    def __init__(self, path: Path, budget_s: float = 0.0, verbose: bool = False,
                 out: TextIO | None = None, live: bool | None = None) -> None:
        super().__init__(daemon=True, name="preflight-progress")
        self.path, self.stop, self.offset = path, threading.Event(), 0
        self.budget_s, self.verbose, self.out = budget_s, verbose, out or sys.stdout
        self.live = self.out.isatty() if live is None else live
        self.total, self.done = 0, 0
        self.ids: dict[str, str] = {}  # nodeid -> check ID (from the collected events)
        self.running: dict[str, float] = {}  # nodeid -> monotonic start
        self.collected = False
        self.began = self.last = time.monotonic()
        self._console: Console | None = None
        self._status: Status | None = None

    # -- reading --------------------------------------------------------------------------

    def poll(self) -> None:
        try:
            with self.path.open("rb") as fh:
                fh.seek(self.offset)
                data = fh.read()
        except OSError:
            return
        end = data.rfind(b"\n") + 1
        self.offset += end
        for line in data[:end].splitlines():
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if isinstance(record, dict):
                self._event(record)

    def _event(self, record: JSONObject) -> None:
        from harness.report.summary import print_progress

        kind = record.get("event")
        if kind == "collected":
            checks = _items(record.get("checks"))
            # Every phase's session records the whole selection (`selected`): the header and
            # the verdict count the same checks, whatever the phases.
            selected = _items(record.get("selected")) or checks
            self.total = max(self.total, len(selected))
            for c in [*checks, *selected]:
                if isinstance(c, dict) and c.get("nodeid"):
                    self.ids[str(c["nodeid"])] = str(c.get("id") or c["nodeid"])
            if not self.collected and not self.live:
                print(f"gpu-preflight: {self.total} checks selected, running (upper bound "
                      f"{self.budget_s:g} s)", file=self.out, flush=True)
            self.collected = True
        elif kind == "started":
            self.running[str(record.get("nodeid"))] = time.monotonic()
        elif kind == "result":
            self.done += 1
            self.last = time.monotonic()
            self.running.pop(str(record.get("nodeid")), None)
            if record.get("outcome") != "skip" or self.verbose:
                print_progress(record, self.out if self._console is None else None,
                               verbose=self.verbose, console=self._console)

    # -- what is shown between results --------------------------------------------------------

    def status_text(self, now: float | None = None) -> str:
        """`12 of 38 checks done · running PF-BW-001 (14 s) · 20 s of at most 300 s`."""
        now = time.monotonic() if now is None else now
        elapsed = f"{now - self.began:.0f} s of at most {self.budget_s:g} s"
        if not self.collected:
            return f"gpu-preflight: collecting the checks · {elapsed}"
        parts = [f"{self.done} of {self.total} checks done"]
        if self.running:
            oldest = sorted(self.running.items(), key=lambda kv: kv[1])
            names = [f"{self.ids.get(n, n.rpartition('::')[2])} ({now - t:.0f} s)"
                     for n, t in oldest[:RUNNING_SHOWN]]
            more = len(oldest) - RUNNING_SHOWN
            parts.append("running " + ", ".join(names) + (f" and {more} more" if more > 0 else ""))
        return "gpu-preflight: " + " · ".join(parts) + f" · {elapsed}"

    def heartbeat(self) -> None:
        from harness.report.summary import print_heartbeat

        now = time.monotonic()
        if now - self.last >= HEARTBEAT_S:
            self.last = now
            print_heartbeat(self.done, self.total, now - self.began, self.budget_s, self.out)

    # -- the thread ---------------------------------------------------------------------------

    def _start_live(self) -> None:
        from rich.console import Console

        self._console = Console(file=self.out, highlight=False)
        self._status = self._console.status(self.status_text(), spinner="dots")
        self._status.start()

    def run(self) -> None:
        if self.live:
            try:
                self._start_live()
            except Exception:  # a terminal rich cannot drive: the plain lines still come
                self.live, self._console, self._status = False, None, None
        try:
            while not self.stop.wait(POLL_S):
                self.poll()
                if self._status is not None:
                    self._status.update(self.status_text())
                else:
                    self.heartbeat()
            self.poll()
        finally:
            if self._status is not None:
                self._status.stop()  # transient: the line is erased, the results stay
