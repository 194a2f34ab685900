"""The kernel log the XID checks read: a saved file ($PREFLIGHT_KERNEL_LOG), else `journalctl -k`,
else `dmesg`. A source counts only when what it printed is positively a kernel log
(harness.parsers.kernel_log_format): an empty answer, a refusal or garbage is never "no XIDs";
and only when the source says it is complete: the tool exited 0, nothing of its output was
cut, and its last line ends with a newline (a file too). A log cut mid-line is not a shorter
clean log: the lines it lost may hold the XIDs (IncompleteLogError)."""

from __future__ import annotations

import dataclasses
import os
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from harness.base import deadline as dl
from harness.base.errors import ProbeError
from harness.base.settings import get_str
from harness.parsers import ParseError
from harness.probes import chain

if TYPE_CHECKING:
    from harness.parsers.kernel_log_events import KernelLog

__all__ = ["KERNEL_LOG_ENV", "IncompleteLogError", "read_kernel_log"]

#: Environment variable naming a saved kernel log to read instead of journalctl / dmesg.
KERNEL_LOG_ENV = "PREFLIGHT_KERNEL_LOG"
#: Wall-time bound of one kernel-log tool, s (a whole boot's journal prints in about a second).
TOOL_TIMEOUT_S = 30.0

#: journalctl output that means it could not see the kernel's messages.
_JOURNAL_BLIND = (
    ("No journal files were found", "no journal files in this container"),
    ("not seeing messages from other users and the system",
     "this user may not read the system journal (needs group adm or systemd-journal)"),
)
_NO_ENTRIES = "-- No entries --"


class IncompleteLogError(ProbeError):
    """A source gave a kernel log that is not complete (cut mid-line) and none gave a complete
    one: an error in every tier, where a log that cannot be read at all only warns in the
    preflight tier (checks/test_gpu_kernel_log.py)."""


def _cut(text: str, what: str) -> str | None:
    """Why `text` is not a complete log (its last line has no newline: the writer or the
    reader stopped mid-line); None when it ends as a complete log ends, or is empty."""
    from harness.parsers.kernel_log_format import ends_mid_line

    if not text or text.endswith("\n"):
        return None
    return ends_mid_line(what, text.rsplit("\n", 1)[-1])


def _boot_time(proc_root: Path = Path("/proc")) -> float | None:
    """When this host booted (epoch seconds), from /proc/uptime (not namespaced: the host's)."""
    try:
        return time.time() - float((proc_root / "uptime").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _from_file(path: str) -> KernelLog:
    """A saved log: its last boot, or ProbeError when it is empty, unreadable, not a kernel log,
    or was last written before this host booted (then it cannot hold this boot's XIDs)."""
    from harness.parsers.kernel_log import parse_kernel_log

    where = f"{KERNEL_LOG_ENV}={path}"
    try:
        text = Path(path).read_text(errors="replace")
        mtime = os.stat(path).st_mtime
    except OSError as exc:
        raise ProbeError(f"cannot read kernel log {path} ({where}): {exc.strerror}") from None
    booted = _boot_time()
    if booted is not None and mtime < booted - 60:
        raise ProbeError(f"{where} was last written {_iso(mtime)}, before this host booted "
                         f"({_iso(booted)}): it cannot show this boot's XIDs; point it at the "
                         "live host log (journal or /var/log/kern.log mounted read-only)")
    try:
        log = parse_kernel_log(text).last_boot()
    except ParseError as exc:
        raise ProbeError(f"{where} is not a kernel log: {exc}") from None
    if (cut := _cut(text, where)) is not None:
        raise IncompleteLogError(cut)
    return dataclasses.replace(log, source=f"{where} (a file, last written {_iso(mtime)})")


def read_kernel_log(
    path: str | os.PathLike[str] | None = None,
    *,
    since: str | None = None,
    timeout_s: float = TOOL_TIMEOUT_S,
    env: dict[str, str] | None = None,
    deadline: dl.Deadline | None = None,
) -> KernelLog:
    """XID events since boot (or `since`, a journalctl time such as `-2h`): from `path` or
    $PREFLIGHT_KERNEL_LOG, else `journalctl -k`, else `dmesg`, each within `timeout_s` and the
    `deadline`. Returns a KernelLog whose `source` names what was read; ProbeError naming every
    source tried when none gave a kernel log."""
    env = dict(os.environ) if env is None else env
    path = path or get_str(KERNEL_LOG_ENV, env)
    if path:
        return _from_file(str(path))
    # The tools run in this process's environment (`env` is the training command's), in the C
    # locale: month names and formats as the parser knows them.
    tool_env = {**os.environ, "LC_ALL": "C"}
    journal = ["journalctl", "-k", "-o", "short-iso", "--no-pager"]
    journal += ["--since", since] if since else ["-b"]
    tried, cut = [], False
    for argv in (journal, ["dmesg"]):
        cmd = " ".join(argv)
        res, note = chain.run(argv, deadline, timeout_s, env=tool_env)
        # journalctl succeeds with nothing to show when there is no journal, or when the user
        # may not read the system's messages: neither means "no XIDs".
        blind = next((why for marker, why in _JOURNAL_BLIND if marker in res.output), None)
        if not res.ok or blind or res.incomplete:
            # Cut output would read as a shorter log without the XIDs it lost.
            tried.append(f"`{cmd}`: {blind}" if blind else chain.describe(res, note))
            cut = cut or (res.ok and res.incomplete)
            continue
        found = _read(res.stdout, cmd, since if argv is journal else None, deadline, tool_env)
        if isinstance(found, str):
            tried.append(found)
            continue
        if (why := _cut(res.stdout, f"`{cmd}` exited 0 but its output")) is not None:
            tried.append(why)  # a kernel log, but cut: the next source may have all of it
            cut = True
            continue
        return found
    error = IncompleteLogError if cut else ProbeError
    raise error("cannot read the kernel log for XID errors: " + "; ".join(tried)
                + f". Give the container CAP_SYSLOG or set {KERNEL_LOG_ENV}=FILE to a copy "
                "of the host's kernel log")


def _read(text: str, cmd: str, since: str | None, deadline: dl.Deadline | None,
          env: dict[str, str]) -> KernelLog | str:
    """The KernelLog in a tool's output, or a string saying why there is none."""
    from harness.parsers.kernel_log import parse_kernel_log
    from harness.parsers.kernel_log_events import KernelLog

    if text.strip() == _NO_ENTRIES and since:
        # An empty window is a clean window only if the journal holds this boot's kernel
        # messages at all (else it is a journal without them: a container's own).
        probe = ["journalctl", "-k", "-b", "-n", "1", "-o", "short-iso", "--no-pager", "-q"]
        res, _ = chain.run(probe, deadline, TOOL_TIMEOUT_S, env=env)
        try:
            parse_kernel_log(res.stdout if res.ok else "")
        except ParseError:
            return (f"`{cmd}` printed `{_NO_ENTRIES}` and the journal holds no kernel message "
                    "of this boot (`journalctl -k -b -n 1` shows none): not a kernel log")
        return KernelLog((), 0, from_boot=False, source=f"`{cmd}`", since=since)
    try:
        log = parse_kernel_log(text)
    except ParseError as exc:
        return f"`{cmd}` printed no kernel log: {exc}"
    return dataclasses.replace(log, source=f"`{cmd}`", since=since)
