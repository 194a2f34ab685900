"""Root cause first: the failed checks of a run grouped under what made them fail.

One missing thing fails many checks: with no GPU visible, every GPU, bandwidth, link, NCCL
and training check fails with the same reason; a tool that is not installed fails each check
that runs it; a peer that stopped answering fails what needed it. Said once per check, the
cause is buried (37 copies of "no GPU visible" above the ulimit failure they hide). Here each
cause is one line (what is wrong and its fix), the check that states it is its root, and the
others are folded under it as "blocked by" it, with their IDs. A failure that shares its cause
with no other check is a cause of its own, said as its message says it.

Terminal, logs, the failure file and report.json (`causes`) all render `find_causes`; a cause is
found from the messages the checks wrote (the one text every check has), by the rules below.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from harness.base.jsontypes import JSONObject

if TYPE_CHECKING:
    from harness.results import CheckResult

__all__ = ["Cause", "find_causes", "id_ranges", "shorten"]

#: `[PF-GPU-001] ` at the start of a check's message.
_ID_PREFIX = re.compile(r"^\[[A-Za-z0-9_.:/-]+\]\s*")
#: The probe's own sentence (harness.probes.gpu_visible.no_gpu_cause): the cause with its fix.
_NO_GPU_SENTENCE = re.compile(r"no NVIDIA GPU is visible in this container\b.*?"
                              r"(?=; start the container with the NVIDIA runtime| \(see |$)")
_NO_GPU = re.compile(r"no NVIDIA GPU is visible|NVML could not start|NVMLError_LibraryNotFound|"
                     r"NVML Shared Library Not Found")
#: "`fi_info -p efa` could not run: command not found", "all_reduce_perf is not installed".
_TOOL = re.compile(r"`([^`\s]+)[^`]*` could not run: command not found|"
                   r"\b([\w.+-]+) is not installed\b")
#: A GPU a message names (`GPU 3`): one failure on many GPUs is one line.
_GPU = re.compile(r"\bGPU \d+\b")
#: A peer that stopped answering, as the cluster step names it.
_PEER = re.compile(r"\b((?:node|rank) ?\w+)\b[^;|]{0,60}?\b(?:did not answer|stopped answering|"
                   r"did not report|never joined)")
#: No EFA device in the container: the device count, the device nodes, the RDMA class folder.
_NO_EFA = re.compile(r"EFA devices in /sys/class/infiniband 0 |EFA device nodes "
                     r"/dev/infiniband/uverbs\* 0 |/sys/class/infiniband does not exist")
#: The checks that state a cause themselves (they are its root when they failed with it).
_ROOTS = {"no-gpu": ("PF-GPU-001",), "no-efa": ("PF-NET-001",)}
#: Longest cause line (a cause quotes the fix; the details keep every message whole).
CAUSE_CHARS = 400


@dataclass(frozen=True, slots=True)
class Cause:
    """One cause: its line, the check that states it, and the failed checks it blocks."""

    key: str
    """`no-gpu`, `no-efa`, `tool:fi_info`, `peer:node3`; `check:PF-HOST-004` (a failure of its
    own) or `same:MESSAGE` (one message on several checks, no rule)."""
    text: str
    """What is wrong, on one line."""
    fix: str = ""
    """What to do about it ('' when the check named no remedy)."""
    root: str = ""
    """The check ID that states the cause."""
    blocked: tuple[str, ...] = ()
    """The other failed checks that follow from it, by ID."""
    outcome: str = "fail"

    @property
    def ids(self) -> tuple[str, ...]:
        return (self.root, *self.blocked)

    @property
    def own(self) -> bool:
        """A failure said as its checks said it (no rule found a cause shared with others)."""
        return self.key.startswith(("check:", "same:"))

    def line(self, width: int = CAUSE_CHARS) -> str:
        """`PF-HOST-004: text`, `PF-GPU-001..005: text` (one failure on several checks), or
        `text (PF-GPU-001); blocked by it: N checks: PF-BW-001, ...` (IDs as ranges)."""
        text = shorten(self.text, width)
        if self.own:
            return f"{id_ranges(list(self.ids))}: {text}"
        if not self.blocked:
            return f"{text} ({self.root})"
        return (f"{text} ({self.root}); blocked by it: {len(self.blocked)} checks: "
                f"{id_ranges(list(self.blocked))}")

    def brief(self, with_fix: bool = True, width: int = 10_000) -> str:
        """The failure file's: `[PF-GPU-001 and 35 checks blocked by it] text; fix: ...` (who
        first: a cut never loses it), the text shortened to `width` (0: left out)."""
        who = (f"{self.root} and {len(self.blocked)} checks blocked by it" if self.blocked
               and not self.key.startswith("same:") else id_ranges(list(self.ids)))
        fix = f"; fix: {self.fix}" if self.fix and with_fix else ""
        return f"[{who}] {shorten(self.text, width) if width else ''}{fix}"

    def to_dict(self) -> JSONObject:
        return {"cause": self.text, "fix": self.fix, "root": self.root,
                "blocked_by_it": list(self.blocked), "outcome": self.outcome}


def id_ranges(ids: list[str]) -> str:
    """`PF-GPU-001..005, PF-NET-003`: consecutive check IDs of one area compressed."""
    groups: dict[str, list[int]] = {}
    loose: list[str] = []
    for check_id in sorted(set(ids)):
        prefix, _, number = check_id.rpartition("-")
        if prefix and number.isdigit():
            groups.setdefault(prefix, []).append(int(number))
        else:
            loose.append(check_id)
    parts = []
    for prefix, numbers in groups.items():
        start = prev = numbers[0]
        for n in [*numbers[1:], None]:
            if n is not None and n == prev + 1:
                prev = n
                continue
            parts.append(f"{prefix}-{start:03d}" + (f"..{prev:03d}" if prev != start else ""))
            if n is not None:
                start = prev = n
    return ", ".join(parts + loose)


def shorten(text: str, width: int) -> str:
    """`text` on one line, cut to `width` characters with `...` where it was longer."""
    text = " ".join(str(text).split())
    return text if len(text) <= width else text[: width - 3] + "..."


def _key_of(message: str) -> tuple[str, str, str] | None:
    """(key, cause, fix) of the first rule the message matches; None: a cause of its own."""
    if _NO_GPU.search(message):
        from harness.base.gpu_actions import NO_GPU_FIX

        said = _NO_GPU_SENTENCE.search(message)
        text = said.group(0) if said else "no NVIDIA GPU is visible (NVML could not start)"
        return "no-gpu", text.replace(f"; {NO_GPU_FIX}", ""), NO_GPU_FIX
    if _NO_EFA.search(message):
        return "no-efa", "no EFA device is visible in this container (none in " \
            "/sys/class/infiniband)", ""
    if m := _TOOL.search(message):
        tool = m.group(1) or m.group(2)
        return (f"tool:{tool}", f"`{tool}` is not installed in this image (command not found)",
                f"install {tool} in the image, or put it on PATH")
    if m := _PEER.search(message):
        return f"peer:{m.group(1)}", f"{m.group(1)} stopped answering", ""
    return None


def _own(message: str, remedy: str, outcome: str) -> tuple[str, str]:
    """A check's own cause and fix: its message, split at its remedy where it ends with it;
    a failure's fix is its check's remedy (an error's only where it says so: a probe that could
    not run is not fixed by the remedy for what it would have found)."""
    if remedy and message.endswith(f"; {remedy}"):
        return message[: -len(remedy) - 2], remedy
    return message, remedy if outcome == "fail" else ""


@dataclass(slots=True)
class _Group:
    """The failed checks of one cause, while find_causes gathers them."""

    text: str
    fix: str
    own: tuple[str, str]
    """The first check's own (cause, fix): what a cause of one check says."""
    ids: list[str] = field(default_factory=list)
    outcomes: set[str] = field(default_factory=set)
    fixes: dict[str, str] = field(default_factory=dict)
    """check ID -> its own remedy."""
    gpus: list[str] = field(default_factory=list)


def find_causes(checks: Iterable[CheckResult]) -> list[Cause]:
    """The causes of the failed (fail/error) checks of `checks` (a report.json's `checks` are
    read with harness.results.results first): those that block other checks first (most
    first), then the rest, measured failures before errors, each in check-ID order.
    Every failed check is in exactly one cause."""
    groups: dict[str, _Group] = {}
    for c in checks:
        outcome, cid = c.outcome, c.id or "?"
        if not c.failed:
            continue
        message = _ID_PREFIX.sub("", " ".join((c.message or outcome).split()))
        own = _own(message, " ".join(c.remedy.split()), outcome)
        # No rule: one message on several checks or GPUs (`GPU 3` -> `GPU N`) is one failure.
        same = _GPU.sub("GPU N", own[0])
        key, text, fix = _key_of(message) or (f"same:{same}", *own)
        group = groups.setdefault(key, _Group(text, fix, own))
        group.fixes.setdefault(cid, own[1])
        group.gpus.extend(g for g in _GPU.findall(own[0]) if g not in group.gpus)
        if key.startswith("same:") and text != group.text:  # several GPUs: said as GPU N
            group.text = key.removeprefix("same:") + " (GPU N: " + ", ".join(
                n.removeprefix("GPU ") for n in group.gpus) + ")"
        if cid not in group.ids:
            group.ids.append(cid)
        group.outcomes.add(outcome)
    causes = []
    for key, g in groups.items():
        ids = sorted(g.ids)
        if len(ids) == 1:  # one check: said as it said it (on several GPUs: as GPU N)
            if not key.startswith("same:"):
                g.text, g.fix = g.own
            key = f"check:{ids[0]}"
        root = next((r for r in _ROOTS.get(key, ()) if r in ids), ids[0])
        fix = g.fix or g.fixes.get(root, "")  # else the root check's own remedy
        causes.append(Cause(key=key, text=g.text, fix=fix, root=root,
                            blocked=tuple(i for i in ids if i != root),
                            outcome="fail" if "fail" in g.outcomes else "error"))
    return sorted(causes, key=lambda c: (-len(c.blocked), c.outcome != "fail", c.root))
