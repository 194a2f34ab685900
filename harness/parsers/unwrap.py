"""Per-line unwrapping: what launchers, log shippers and pastes put around a tool's output.

`Unwrapper.unwrap(line)` returns the tool's own line, or None for a line that is only wrapping
(a markdown fence, an ssh warning, an author's `...` elision, a shell command line); it records
which rank or host each line came from and the command lines it saw (`commands`), which give
parsers context (`./build/alltoall_perf ...` above a table names the collective).

The wrappers, each seen in real output (the sources are in tests/data/*/SOURCES and
docs/parsers.md):

- Open MPI `--tag-output` `[1,N]<stdout>:` (rank N), with `--timestamp-output` glued before it
  (`Thu Jun 18 14:28:58 2020[1,0]<stdout>:`); Slurm `srun --label` `N: ` (rank N);
- `kubectl logs --prefix` `[pod/NAME/CONTAINER] ` (host NAME);
- ISO / RFC 3339 timestamps (`kubectl logs --timestamps`, CloudWatch copies) and the bracketed
  `[2026-01-02 10:24:27] ` form, before a line, or a line of their own;
- CloudWatch console copies ` | ts | line` (the rest of the row, `|`s and all) and
  ` | tsline | line` (the message once);
- docker json-file `{"log":"...","stream":"stdout",...}` (JSON-decoded, not stripped);
- ANSI colour sequences (also their mojibake, ESC read as U+FFFD), CR left inside a line;
- markdown fences, `> ` quote markers, inline-code backticks around a command;
- shell prompts (`user@host:dir# cmd`, `$ cmd`, `$./path/cmd`, `➜ $ cmd`, a root `# cmd`
  naming a known program, or `which`: the paths it prints are output), `+ cmd` xtrace lines,
  bare command lines of a known program, ssh `Warning: Permanently added ...` lines.

Leading blanks are kept (nvidia-smi -q nests by indentation); blanks before a wrapper go with
it. Kernel-log stamps (syslog, journal, dmesg, kmsg) are not removed here: the kernel-log
parser reads them (harness.parsers.kernel_log_format), `timestamps=False` keeps bare ISO stamps
too (a bracketed one or a CloudWatch row is a shipper's: removed).
Each rule is tried only when the line's first non-blank character can start it; `lines()` given a
reader's batch first finds the lines that may carry a wrapper with one regex pass over the whole
batch, and hands the others on untouched (a log without wrappers costs one C-speed scan).

Beside this module: which line is a command line (harness.parsers.unwrap_commands), which lines
of a batch may carry a wrapper (harness.parsers.unwrap_candidates), and a source read inside its
transport wrappers only (harness.parsers.unwrap_transport).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

from harness.parsers.unwrap_candidates import candidates
from harness.parsers.unwrap_commands import command_program

__all__ = ["ANSI", "MAX_COMMANDS", "RANK_PREFIX", "Unwrapper", "cloudwatch_message", "docker_line",
           "is_docker_record", "table_line"]

#: Command lines remembered (the first ones: the command that produced the output comes first).
MAX_COMMANDS = 16
#: Ranks and hosts remembered.
MAX_ORIGINS = 4096

#: A rank prefix: srun `--label` (`0: `) or Open MPI `--tag-output` (`[1,0]<stdout>:`); the
#: groups `srun` / `mpi` hold the rank (shared with the env parser, which keeps one rank's copy).
RANK_PREFIX = re.compile(
    r"^(?:\s*(?P<srun>[0-9]+): |\s*(?:[A-Z][a-z]{2} [A-Z][a-z]{2} [ 0-9][0-9] [0-9:]{8} [0-9]{4})?"
    r"\[(?P<mpi>[0-9]+,[0-9]+)\]<std(?:out|err)>:)")
_ISO = (r"[0-9]{4}-[0-9]{2}-[0-9]{2}[T ][0-9]{2}:[0-9]{2}:[0-9]{2}(?:[.,][0-9]+)?"
        r"(?:Z|[+-][0-9]{2}:?[0-9]{2})?")
_TIMESTAMP = re.compile(rf"^\s*(?:{_ISO}|\[{_ISO}\])(?: |\t|$)")  # the line's own indent stays
#: A bracketed stamp, which no kernel log format writes (removed with `timestamps=False` too).
_BRACKETED = re.compile(rf"^\s*\[{_ISO}\](?: |\t|$)")
_KUBECTL = re.compile(r"^\s*\[pod/(?P<pod>[^/\]\s]+)/[^\]\s]+\] ")
#: CloudWatch console copy: `| 2025-05-16T16:39:51.208-07:00 | line`, or the stamp glued to the
#: line and the line repeated: `| 2025-..-07:00ip-10-36-29-253:79:79 [0] NCCL INFO ... | ...`
#: (aws-ofi-nccl issue #889; tests/data/nccl_log/real_cloudwatch_*.log).
_CLOUDWATCH = re.compile(rf"^\s*\|\s*(?:[0-9]{{13}}|{_ISO})(?P<bar>\s*\|\s?)?")
#: ANSI colour (SGR and other CSI) sequences and OSC titles.
ANSI = re.compile(r"(?:\x1b|\ufffd)\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07")
_FENCE = re.compile(r"^\s*(?:```|~~~)[\w+-]*\s*$")
_QUOTE = re.compile(r"^\s*>(?: |$)")
#: A comment marker before any line (`# `, `//`), for tools that never start a line with one
#: (`Unwrapper(comments=True)`: nvidia-smi): a section pasted into a script or a doc, each line
#: commented out. One blank after the marker goes with it; the line's own indentation stays
#: (nvidia-smi -q nests by it).
_COMMENT = re.compile(r"^\s*(?:#|//) ?")
#: A comment marker before a table's line (`# +----+`, `# | Memory | Pass |`, `// |...`): a
#: table quoted into a script or a doc, each line commented out. (No tool prints `#` before a
#: `|`/`+` table line: nccl-tests' own `#` lines are followed by words and blanks.)
_TABLE_QUOTE = re.compile(r"^\s*(?:#+|//|>)[ \t]*(?=[|+])")
_SSH = re.compile(r"^\s*Warning: Permanently added .* to the list of known hosts\.?\s*$")
_ELISION = re.compile(r"^\s*(?:\.\.\.|…)(?:\s.*)?$")
#: Shell prompts: `user@host:~/dir# `, `user@host ~ ➜ $ `, `(venv) $ `, `$ `, `% `.
_PROMPT = re.compile(
    r"^\s*(?:\([\w.-]+\)\s*)?(?:[\w.-]+@[\w.-]+(?::\S*| \S+)?\s*(?:➜\s*)?[#$%]|➜\s*\S*\s*\$|[$%])"
    r"\s+(?P<cmd>\S.*)$")
_ROOT_PROMPT = re.compile(r"^\s*[#+]\s+(?P<cmd>\S.*)$")
#: A `$` prompt glued to the path of the program it runs: `$./build/libfabric/bin/fi_info -v`
#: (tests/data/fi_info/real_verbose_efa_libfabric_2.0.txt); a `$NAME` variable is not one.
_GLUED_PROMPT = re.compile(r"^\s*\$(?P<cmd>(?:\.{1,2}|~)?/\S.*)$")
#: The one-word lines a `which` command prints: the paths it found.
_PATH_WORD = re.compile(r"^\s*/\S*\s*$")
_BACKTICKS = re.compile(r"^\s*`(?P<cmd>[^`]+)`\s*$")
_HOST = re.compile(r"^\s*(?P<host>[A-Za-z][\w.-]*):\s")


def docker_line(line: str) -> str:
    """The line a docker json-file record `{"log":"...\\n","stream":...}` holds (JSON-decoded,
    without its line end); `line` itself when it is not such a record."""
    try:
        record = json.loads(line)
    except (ValueError, RecursionError):
        return line
    text = record.get("log") if isinstance(record, dict) else None
    return text.rstrip("\r\n") if isinstance(text, str) else line


def cloudwatch_message(line: str) -> str | None:
    """The message of a CloudWatch console row (`| STAMP | message`: the rest of the row, `|`s
    and all, as a table line or a `cmd | grep` holds them; `| STAMPmessage | message`: the
    message once, where the row repeats it; else up to its first `|`), None when `line` is not
    one."""
    m = _CLOUDWATCH.match(line)
    if m is None:
        return None
    rest = line[m.end():].rstrip()  # (the glued form's copy: ends in blanks of CloudWatch's)
    if m["bar"] is not None:
        return line[m.end():]  # trailing blanks too: they may be the line's (`3:  `)
    half = (len(rest) - 3) // 2
    if rest[half:half + 3] == " | " and rest[:half] == rest[half + 3:]:
        return rest[:half]
    return rest.partition("|")[0].rstrip()


def is_docker_record(line: str) -> bool:
    """`line` starts a docker json-file record (`{"log":...`): a line of output, JSON-wrapped."""
    return line.lstrip().startswith('{"log":')


def _plain(line: str) -> str:
    """`line` without ANSI colour sequences and CRs."""
    if "\x1b" in line or "\ufffd[" in line:
        line = ANSI.sub("", line)
    return line.replace("\r", "") if "\r" in line else line


def _peel(line: str, starts: frozenset[str],
          strip: Callable[[str, str], str | None]) -> str | None:
    """`line` with `strip` (one wrapper off, `line` itself when none, None when only wrapping)
    applied while its first non-blank character can start a wrapper: wrappers nest (a
    timestamp, a rank tag, a quote marker...), up to six deep."""
    for _ in range(6):
        head = line.lstrip()[:1]
        if not head or head not in starts:
            return line
        stripped = strip(line, head)
        if stripped is None or stripped is line:
            return stripped
        line = stripped
    return line


#: First characters (after blanks) that can start a transport wrapper (Unwrapper.transported).
_TRANSPORT_STARTS = frozenset("{[0123456789TSMFWtsmfw|>")
#: First characters (after blanks) that can start a wrapper rule; others skip every rule.
_STARTS = frozenset("[0123456789{|`>~$%#+(\x1b\ufffdWTSMFtsmfw…._/!" + "➜"
                    + "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")


@dataclass(slots=True)
class Unwrapper:
    """Unwraps lines one at a time, remembering where they came from."""

    timestamps: bool = True
    """Remove ISO timestamps before a line (False: the kernel-log parser reads them; a
    bracketed stamp or a CloudWatch row, which no kernel log format writes, is the shipper's
    and still removed)."""
    host_prefix: bool = False
    """Also remove a pdsh / MPIJob `host: ` prefix (`worker: `, `node-1: `; nccl-tests only:
    elsewhere `Name: value` is the tool's own line)."""
    keep_commands: bool = False
    comments: bool = False
    """Remove a `# ` or `//` comment marker before any line (a section quoted line by line into
    a script or a doc), for tools that never start a line with one (nvidia-smi). Elsewhere only
    a table's quoted lines (`# | ... |`) lose it: nccl-tests prints `#` lines of its own, fi_info
    `# FI_...` ones, and `# cmd` is a root prompt."""
    """Hand command lines on (with their prompt removed) instead of dropping them (the env
    parser reads `mpirun -x NAME=value` lines)."""
    commands: list[str] = field(default_factory=list)
    ranks: dict[str, None] = field(default_factory=dict)
    hosts: dict[str, None] = field(default_factory=dict)
    elided: int = 0
    """Author's `...` lines: the output was cut by hand."""
    continued: bool = False
    """The last command line ended in `\\`: the next line continues it."""
    rank: str | None = None
    """The rank of the last line unwrapped (None when it had no rank prefix)."""
    host: str | None = None
    """The `host: ` prefix of the last line unwrapped (host_prefix only; None without one)."""
    which_output: bool = False
    """The last command was `which`: the path lines after it are its output, not commands."""

    def unwrap(self, line: str) -> str | None:
        """The tool's line inside `line`, or None when `line` is only wrapping."""
        self.rank = self.host = None
        line = _plain(line)
        if self.which_output or self.continued:  # read inside the line's transport wrappers
            inner = self.transported(line)
            if inner is None:
                return None
            if self.which_output:
                if _PATH_WORD.match(inner):
                    return inner
                self.which_output = False
            if self.continued:  # the rest of a command continued with `\`
                text = inner.strip()
                self.continued = text.endswith("\\")
                self.commands[-1] = self.commands[-1].removesuffix("\\").rstrip() + " " + text
                return text if self.keep_commands else None
        return _peel(line, _STARTS, self._strip_once)

    def transported(self, line: str) -> str | None:
        """`line` inside the wrappers put around every line of a block (docker records, rank
        tags, kubectl prefixes, timestamps, CloudWatch columns, a markdown `> ` quote), the
        rules of a paste's single lines (prompts, fences, comments) not applied: what a
        continued command or a `which` prints looks the same under them. Colours and CRs are
        removed first."""
        return _peel(_plain(line), _TRANSPORT_STARTS, self._strip_transport)

    def _strip_transport(self, line: str, head: str) -> str | None:
        """`line` without its outermost transport wrapper (see transported); `line` itself
        when it has none; None when it is only wrapping."""
        if head == "{" and is_docker_record(line):
            return self._docker(line)
        if head in "[0123456789TSMFWtsmfw":
            if (m := RANK_PREFIX.match(line)) is not None:
                self._origin(self.ranks, m["srun"] or m["mpi"].partition(",")[2])
                return line[m.end():].removeprefix(" ") if m["mpi"] else line[m.end():]
            if head == "[" and (m := _KUBECTL.match(line)) is not None:
                self._origin(self.hosts, m["pod"])
                return line[m.end():]
            if (m := (_TIMESTAMP if self.timestamps else _BRACKETED).match(line)) is not None:
                rest = line[m.end():]
                return rest if rest.strip() else None
            if head == "W" and _SSH.match(line):
                return None
        if head == "|":
            return self._cloudwatch(line)
        if head == ">" and (m := _QUOTE.match(line)) is not None:
            return line[m.end():]
        return line

    def _strip_once(self, line: str, head: str) -> str | None:
        """`line` without its outermost wrapper; `line` itself when it has none; None when it
        is only wrapping."""
        if head in _TRANSPORT_STARTS:
            stripped = self._strip_transport(line, head)
            if stripped is not line or (head == "|" and self.timestamps):
                return stripped
        if head in "`~" and _FENCE.match(line):
            return None
        if head in "#/>" and (m := _TABLE_QUOTE.match(line)) is not None:
            return line[m.end():]
        if self.comments and head in "#/" and (m := _COMMENT.match(line)) is not None:
            return line[m.end():] if line[m.end():].strip() else None
        if head in "…." and _ELISION.match(line):
            self.elided += 1
            return None
        if head == "`" and (m := _BACKTICKS.match(line)) is not None:
            return self._command(m["cmd"], line)
        if head in "#+" and (m := _ROOT_PROMPT.match(line)) is not None:
            return self._command(m["cmd"], line) if command_program(m["cmd"], True) else line
        if (m := _PROMPT.match(line)) is not None and command_program(m["cmd"], True):
            return self._command(m["cmd"], line)
        if head == "$" and (m := _GLUED_PROMPT.match(line)) is not None and command_program(
                m["cmd"]):
            return self._command(m["cmd"], line)
        if command_program(line):
            return self._command(line.strip(), line)
        if self.host_prefix and (m := _HOST.match(line)) is not None:
            self._origin(self.hosts, m["host"])
            self.host = m["host"]
            return line[m.end():]
        return line

    def _command(self, command: str, line: str) -> str | None:
        if len(self.commands) < MAX_COMMANDS:
            self.commands.append(command.strip())
            self.continued = command.rstrip().endswith("\\")
        self.which_output = command_program(command, True) == "which"
        return command if self.keep_commands else None

    def _docker(self, line: str) -> str | None:
        return docker_line(line)

    def _cloudwatch(self, line: str) -> str:
        message = cloudwatch_message(line)
        return line if message is None else message

    def _origin(self, into: dict[str, None], name: str) -> None:
        self.rank = name if into is self.ranks else self.rank
        if len(into) < MAX_ORIGINS:
            into[name] = None

    def lines(self, lines: Iterable[str]) -> Iterator[str]:
        """Every tool line inside `lines` (wrapping-only lines dropped). In a list (a reader's
        batch) only the lines that may carry a wrapper (`candidates`, one regex pass over the
        batch) go through the rules; the others are handed on as they are."""
        if not isinstance(lines, list):
            return self._unwrapped(lines)
        text = "\n" + "\n".join(lines)
        if "\x1b" in text or "\r" in text or "\ufffd[" in text:
            return self._unwrapped(lines)
        found = candidates(self.timestamps, self.host_prefix, self.comments).finditer(text)
        first = next(found, None)
        if first is None and not (self.continued or self.which_output):
            self.rank = self.host = None
            return iter(lines)
        return self._sparse(lines, text, first, found)

    def candidates(self, batch: list[str], joined: str | None = None) -> set[int] | None:
        """The indices of the lines of `batch` that may carry a wrapper (one regex pass,
        `candidates`); the others are their own text as long as no command continues into
        them (`continued`, `which_output`: check before each line). None: every line may (a
        colour or a CR in the batch). For parsers that unwrap line by line (they count lines).
        `joined`: `"\\n".join(batch)`, when the caller has it already."""
        text = "\n" + ("\n".join(batch) if joined is None else joined)
        if "\x1b" in text or "\r" in text or "\ufffd[" in text:
            return None
        found: set[int] = set()
        newlines, seen = 0, 0
        for m in candidates(self.timestamps, self.host_prefix, self.comments).finditer(text):
            newlines += text.count("\n", seen, m.start() + 1)
            seen = m.start() + 1
            found.add(newlines - 1)
        return found

    def pending(self) -> bool:
        """A command continues into the next line (or `which` prints paths): unwrap it."""
        return self.continued or self.which_output

    def _sparse(self, batch: list[str], text: str, first: re.Match[str] | None,
                found: Iterator[re.Match[str]]) -> Iterator[str]:
        """`batch` unwrapped: the candidate lines (`first`, then `found`) and the lines a
        command continues into go through `unwrap`, the runs between them are yielded as
        they are."""
        unwrap = self.unwrap
        done = 0  # lines of batch handed on
        newlines = 0  # `\n`s of text before `seen`
        seen = 0
        match = first
        while True:
            if match is None:
                index = len(batch)
            else:
                newlines += text.count("\n", seen, match.start() + 1)
                seen = match.start() + 1
                index = newlines - 1  # text starts with the `\n` before line 0
            while done < len(batch) and (self.continued or self.which_output):
                line = unwrap(batch[done])
                done += 1
                if line is not None:
                    yield line
            if index >= done:
                if index > done:
                    self.rank = self.host = None
                    yield from batch[done:index]
                if index >= len(batch):
                    return
                line = unwrap(batch[index])
                done = index + 1
                if line is not None:
                    yield line
            match = next(found, None)

    def _unwrapped(self, lines: Iterable[str]) -> Iterator[str]:
        unwrap = self.unwrap
        for line in lines:
            text = unwrap(line)
            if text is not None:
                yield text

    def ranks_sorted(self) -> list[str]:
        """The ranks seen, in numeric order."""
        return sorted(self.ranks, key=lambda r: (len(r), r))

    def context(self) -> dict[str, object]:
        """What the wrapping said, for a parser's result: `commands_seen`, `ranks_seen`,
        `hosts_seen`, `elided`."""
        return {"commands_seen": list(self.commands),
                "ranks_seen": self.ranks_sorted()[:64],
                "hosts_seen": list(self.hosts)[:64],
                "elided": self.elided > 0}


def table_line(line: str) -> str:
    """`line` without a comment or quote marker before a table line (`# | Memory | Pass |`)."""
    m = _TABLE_QUOTE.match(line) if line.lstrip()[:1] in "#/>" else None
    return line if m is None else line[m.end():]
