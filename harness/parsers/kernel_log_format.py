"""What counts as a kernel log: every line is classified by its format (dmesg in each of its time
formats, /dev/kmsg, journalctl's short formats and JSON, syslog files, talosctl), so that "no Xid
line" means "no Xid" only when what was read is positively a kernel log, never for empty,
truncated-to-nothing or unrelated text (a tool's error message, random bytes, an HTML page)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import NamedTuple

from harness.parsers.values import ascii_int

__all__ = ["KERNEL", "LOG", "NEUTRAL", "OTHER", "WORDS", "Line", "LogShape", "Tally", "classify",
           "ends_mid_line", "lines_to_read"]

#: Line kinds: written by the kernel / a record of another program in a log format (a syslog
#: file's daemons, `systemd[1]:` in dmesg) / nothing to judge (blank, continuation, journal
#: notices) / in no format a kernel log has.
KERNEL, LOG, NEUTRAL, OTHER = "kernel", "log", "neutral", "other"

# dmesg (util-linux sys-utils/dmesg.c print_record): `[%5ld.%06ld] ` (default, and journalctl
# -o short-monotonic), `[... <%12.06f>] ` (-d), `[<%12.06f>] `, `[  +0.000033] ` (-H/-e),
# `[Jan 3 07:39] ` (-H minute marks), `[Fri Jan  5 10:34:01 2024] ` (-T), `%Y-%m-%dT%H:%M:%S,
# %06ld%+03d:%02d ` (--time-format iso); `<6>` before any of them (-r), `kern  :info  : ` (-x).
_FACILITY = (r"(?:kern|user|mail|daemon|auth|syslog|lpr|news|uucp|cron|authpriv|ftp|res\d"
             r"|local[0-7])")
_LEVEL = r"(?:emerg|alert|crit|err|warning|warn|notice|info|debug)"
_DMESG = re.compile(
    rf"^\s*(?:<\d{{1,3}}>)?(?:{_FACILITY}\s*:\s*{_LEVEL}\s*: )?(?:"
    r"\[\s*(?P<uptime>\d+\.\d+)(?:\s*<\s*[\d.]+>)?\]"
    r"|\[<\s*[\d.]+>\]|\[\s*[+-]\d+\.\d+\]"
    r"|\[(?P<ctime>[A-Z][a-z]{2} [A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d \d{4})(?:\s*<\s*[\d.]+>)?\]"
    r"|\[[A-Z][a-z]{2} ?[ \d]?\d \d\d:\d\d\]"
    r"|(?P<iso>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d,\d{6}[+-]\d\d:\d\d))(?: |$)"
)
_PLAIN_DMESG = re.compile(r"\[\s*(\d+\.\d+)\] ")
# `dmesg -x` / `-r` without a time (`-t`): the facility and level, or the priority, alone.
_DMESG_UNTIMED = re.compile(rf"^\s*(?:<\d{{1,3}}>|{_FACILITY}\s*:\s*{_LEVEL}\s*: )")
# /dev/kmsg (Documentation/ABI/testing/dev-kmsg): `6,3998,261229012,-;message`.
_KMSG = re.compile(r"^(?P<pri>\d+),\d+,(?P<usec>\d+),[-+c][^;]*;")
# talosctl dmesg: `192.168.11.119: kern: warning: [2026-04-22T21:25:20.458998481Z]: message`.
_TALOS = re.compile(rf"^\S+: {_FACILITY}:\s*{_LEVEL}: \[(?P<time>\d{{4}}-[^\]]*)\]")
# journalctl -o short / short-precise / short-iso / short-iso-precise / short-full / short-unix
# (systemd src/shared/logs-show.c, output_timestamp_realtime) and syslog files (rsyslog's
# traditional and RFC 3339 formats): `STAMP [HOST ]IDENT[PID]: message`. A host never ends in
# `:`, so `journalctl --no-hostname` (`Mar 21 21:42:01 kernel: NVRM: ...`, ublue-os/bazzite#4449)
# reads `kernel` as the ident, not as a host before an ident `NVRM`.
_STAMP = (r"(?:[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d(?:\.\d+)?"
          r"|\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?"
          r"|[A-Z][a-z]{2} \d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?: [A-Z][A-Za-z0-9+-]{1,5})?"
          r"|\d{9,10}\.\d{6})")
_SYSLOG = re.compile(rf"^\s*(?P<time>{_STAMP}) (?:\S*[^\s:] )?(?P<ident>[^\s:\[]+)(?:\[\d+\])?: ")
# A log shipper's RFC 3339 stamp before a line that has its own (`kubectl logs --timestamps` of
# a pod printing dmesg: `2025-06-01T12:00:00.123456789Z [ 1399.140323] NVRM: Xid ...`).
_SHIPPER_STAMP = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:?\d\d) ")
# ` kernel: ` near the start: syslog lines with a localised or unusual stamp, `host kernel:`.
_KERNEL_TAG = re.compile(r"(?:^|\s)kernel: ")
# Untimestamped text only the kernel writes: the NVIDIA driver (`NVRM: `), the NVSwitch
# driver, the boot banner, and device messages (dev_printk: `pcieport 0000:00:01.0: `).
_KERNEL_TEXT = re.compile(
    r"NVRM: |^\s*(?:nvidia-nvswitch\d*: |Linux version \d|Command line: "
    r"|[a-z][\w-]* [0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-9a-fA-F]:? )"
)
# The shape of a kernel message without a time (`dmesg -t`, `journalctl -o cat`): `subsystem:
# text`, `driver (dev): text`, `systemd[1]: text`. Too loose to prove anything on its own (a
# tool's `error: ...` has it too), so it only keeps such lines from counting as garbage.
_MESSAGE_SHAPE = re.compile(r"^[\w][\w.\-/]*(?:\[\d+\])?(?: \([^)]{0,40}\))?(?: [\w.:\-]+){0,2}: \S")
# journalctl's own lines: `-- Boot 3f2a... --`, `-- No entries --`, `-- Logs begin at ... --`,
# `-- Journal begins at ... --`, `-- Reboot --`; its hint for users outside adm/systemd-journal.
_JOURNAL_NOTICE = re.compile(r"^-- .* --\s*$|^Hint: |^\s+Users in groups |^\s+Pass -q ")
_BOOT_MARKER = re.compile(r"^-- (?:Boot [0-9a-f]{32}|Reboot) --\s*$")
# The first line the kernel prints at boot (init/version.c linux_banner), after any uptime.
_BANNER = re.compile(r"(?:\[\s*\d+\.\d+\] )?Linux version \d")
# What dmesg / journalctl print instead of the log when they may not read it.
_REFUSAL = re.compile(r"Operation not permitted|Permission denied|read kernel buffer failed"
                      r"|No journal files were found|Failed to open", re.I)


class Line(NamedTuple):
    """One classified line: its kind, the message to read Xids from, and its time. (A tuple:
    one is made per line of logs of a million lines.)"""

    kind: str
    text: str
    time: str | None = None
    """The line's time as the log wrote it (`1399.140323`, `Jun 10 03:09:55`, ISO ...)."""
    uptime: str | None = None
    """Seconds since boot as text, where the line's stamp says (dmesg, /dev/kmsg, journal JSON)."""
    boot: bool = False
    """The line starts a boot: the kernel's banner or journalctl's `-- Boot ... --`."""


def _journal_json(line: str) -> Line | None:
    """A `journalctl -o json` record (MESSAGE may be a list of bytes when not UTF-8)."""
    try:
        rec = json.loads(line)
    except ValueError:
        return None
    if not isinstance(rec, dict) or "MESSAGE" not in rec:
        return None
    msg = rec["MESSAGE"]
    if isinstance(msg, list):
        msg = bytes(b for b in msg if isinstance(b, int) and 0 <= b < 256).decode(
            errors="replace")
    text = str(msg)
    kernel = rec.get("_TRANSPORT") == "kernel" or rec.get("SYSLOG_IDENTIFIER") == "kernel"
    when = None
    real = ascii_int(str(rec.get("__REALTIME_TIMESTAMP", "")))
    if real is not None and 0 <= real < 10**17:  # microseconds: before the year 5138
        when = datetime.fromtimestamp(real / 1e6, UTC).isoformat()
    mono = ascii_int(str(rec.get("_SOURCE_MONOTONIC_TIMESTAMP", "")))
    uptime = f"{mono / 1e6:.6f}" if kernel and mono is not None and mono >= 0 else None
    return Line(KERNEL if kernel else LOG, text, when, uptime, kernel and _banner(text))


def _banner(text: str) -> bool:
    return "Linux version " in text and bool(_BANNER.search(text[:200]))


_tuple = tuple.__new__  # Line(...) without NamedTuple's keyword handling: a third of the cost


def classify(line: str) -> Line:
    """Which kind of line `line` is in a kernel log (see the module docstring), with its time."""
    if not line or line.isspace():
        return Line(NEUTRAL, line)
    if line[0] == "[":
        fast = _PLAIN_DMESG.match(line)  # dmesg's default form: most lines of most logs
        if fast:
            return _tuple(Line, (KERNEL, line, fast[1], fast[1], _banner(line)))
    elif line[0] == "{":
        found = _journal_json(line)
        if found is not None:
            return found
    shipped = None  # the line under a shipper's stamp (kubectl --timestamps), without one of its own
    if line[0].isdigit() and (st := _SHIPPER_STAMP.match(line)) is not None:
        inner = classify(line[st.end():])
        if inner.time is not None:  # the line's own stamp is the event's time, not the shipper's
            return inner
        shipped = inner
    m = _DMESG.match(line)
    if m:
        up = m["uptime"]
        return _tuple(Line, (KERNEL, line, up or m["ctime"] or m["iso"], up, _banner(line)))
    km = _KMSG.match(line)
    if km:
        usec = ascii_int(km["usec"]) or 0
        when = f"{usec // 1_000_000}.{usec % 1_000_000:06d}"
        return _tuple(Line, (KERNEL, line, when, when, _banner(line)))
    tm = _TALOS.match(line)
    if tm or _DMESG_UNTIMED.match(line):
        return Line(KERNEL, line, tm["time"] if tm else None, None, _banner(line))
    if _JOURNAL_NOTICE.match(line):
        return Line(NEUTRAL, line, boot=bool(_BOOT_MARKER.match(line)))
    sm = _SYSLOG.match(line)
    if shipped is not None and (not sm or (shipped.kind == KERNEL and sm["ident"] != "kernel")):
        # Not a journal/syslog line of its own (`STAMP host ident: ...`): the stamp is the
        # shipper's, the line's time unknown (the shipper's says when it was shipped; an event's
        # own time quoted nearby, as in a HyperPod event's JSON, must win).
        return shipped
    if sm:
        kernel = sm["ident"] == "kernel"
        return _tuple(Line, (KERNEL if kernel else LOG, line, sm["time"], None,
                             kernel and _banner(line)))
    if _KERNEL_TAG.search(line[:120]) or _KERNEL_TEXT.search(line):
        return Line(KERNEL, line, None, None, _banner(line))
    if line[0] in " \t":
        return Line(NEUTRAL, line)  # a continuation line of a multi-line message
    if _MESSAGE_SHAPE.match(line):
        return Line(LOG, line)
    return Line(OTHER, line)


#: Where a line starts that classify() does not read as an ordinary dmesg line (_PLAIN_DMESG, in
#: a batch joined with `\n` in front: `[^\S\n]` is `\s` inside one line).
_NOT_PLAIN = re.compile(r"\n(?!\[[^\S\n]*\d+\.\d+\] )")
#: The words the kernel-log reader's rules look for (Xid and fallen-off-the-bus lines, SXids,
#: the boot banner): a plain dmesg line without any of them changes nothing but the line count.
WORDS = ("NVRM:", "SXid", "fallen", "Linux version ")


def lines_to_read(batch: list[str]) -> list[int] | None:
    """The indices, in order, of the lines of `batch` that are not ordinary dmesg lines without
    WORDS: all the others classify() as KERNEL lines with a time and no banner, and no rule
    reads them. None: every line is to be read (the batch has a colour code, which the
    unwrapper removes from any line). (One regex pass and a `str.find` per word over the
    joined batch instead of Python code per line: most of a large log is such lines.)"""
    text = "\n" + "\n".join(batch)
    if "\x1b" in text or "\ufffd[" in text or "\r" in text:
        return None
    at = [m.start() for m in _NOT_PLAIN.finditer(text)]
    for word in WORDS:
        p = text.find(word)
        while p >= 0:
            at.append(p)
            p = text.find(word, p + len(word))
    found: list[int] = []
    newlines = seen = 0
    for p in sorted(at):  # the line holding each position: the `\n`s before it, counted once
        newlines += text.count("\n", seen, p + 1)
        seen = p + 1
        if not found or found[-1] != newlines - 1:
            found.append(newlines - 1)
    return found


@dataclass(frozen=True, slots=True)
class LogShape:
    """What a text held, by kind of line; `problem` says why it is not a kernel log."""

    num_kernel: int
    num_log: int
    num_other: int
    first_other: str | None = None
    refusal: str | None = None
    """The first line saying the tool was refused the log (`Operation not permitted`)."""
    notice: str | None = None
    """journalctl's first notice (`-- No entries --`), when it printed one."""

    @property
    def problem(self) -> str | None:
        """None when the text is positively a kernel log: at least one line the kernel wrote,
        and no more lines in no log format than lines in one (a log with some noise in it
        stays a log; text with an accidental match does not)."""
        if self.num_kernel and self.num_kernel + self.num_log >= self.num_other:
            return None
        if not (self.num_kernel or self.num_log or self.num_other):
            return f"no kernel log lines, only {self.notice!r}" if self.notice else "empty input"
        if self.refusal:
            return f"no kernel log lines; it says: {self.refusal[:200]}"
        if not self.num_kernel:
            sample = self.first_other or ""
            return ("no kernel log lines" + (f" (first line: {sample[:120]!r})" if sample else "")
                    + "; expected dmesg / journalctl -k / syslog lines (`[ 12.345678] ...`, "
                    "`... kernel: ...`, `NVRM: ...`)")
        total = self.num_kernel + self.num_log + self.num_other
        return (f"not a kernel log: {self.num_other} of {total} lines are in no log format "
                f"(first: {(self.first_other or '')[:120]!r}), {self.num_kernel} are kernel lines")


class Tally:
    """Counts the kinds of lines as they are read (see LogShape.problem); no line is kept."""

    def __init__(self) -> None:
        self.kernel = self.log = self.other = 0
        self.first_other: str | None = None
        self.refusal: str | None = None
        self.notice: str | None = None

    def add(self, ln: Line) -> None:
        if ln.kind == KERNEL:
            self.kernel += 1
            return
        if ln.kind == NEUTRAL and self.notice is None and ln.text.startswith("-- "):
            self.notice = ln.text.strip()[:200]
        if ln.kind == LOG:
            self.log += 1
        elif ln.kind == OTHER:
            self.other += 1
            self.first_other = self.first_other or ln.text.strip()[:200]
        if self.refusal is None and _REFUSAL.search(ln.text[:300]):
            self.refusal = ln.text.strip()[:300]

    @property
    def shape(self) -> LogShape:
        return LogShape(self.kernel, self.log, self.other, self.first_other, self.refusal,
                        self.notice)


def ends_mid_line(what: str, last: str) -> str:
    """Why a kernel log whose last line (`last`) has no line end is not read as complete (the
    writer or the reader stopped mid-line): what PF-GPU-006 / 018 error on (harness.probes.
    kernel_log) and `inspect kernel-log` names (`cut`)."""
    return (f"{what} ends mid-line (its last line {last[-80:]!r} has no newline): the log is "
            "incomplete (cut), and the lines it lost may hold XIDs")
