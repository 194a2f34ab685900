"""What one tool did (`harness.base.proc.run`'s result) and the one line that says it."""

from __future__ import annotations

import shlex
import signal
from collections.abc import Sequence
from dataclasses import dataclass, field

__all__ = ["DEFAULT_OUTPUT_CAP", "ProcResult", "command_line"]

#: Bytes of each of stdout and stderr kept in a ProcResult: the first and the last half. The
#: largest outputs read whole are far below it (`nvidia-smi -q -x`: ~11 KB per GPU, so ~90 KB on
#: 8 GPUs; `fi_info` on a 32-EFA p5: ~12 KB; a rank's NCCL_DEBUG=INFO log: ~30 KB, a few MB for a
#: torchrun of 8 ranks: see tests/data), and what parsers need survives a cut (NCCL's init lines
#: at the head, the nccl-tests table and the error at the tail); 2 x 8 MiB keeps a 200 MB or
#: endless flood flat in memory.
DEFAULT_OUTPUT_CAP = 8 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class ProcResult:
    """What a tool did: its exit status, output, and whether it was stopped or never started."""

    argv: tuple[str, ...]
    returncode: int | None
    """Exit status; negative for a signal; None when it never started or was killed on timeout."""
    stdout: str = ""
    stderr: str = ""
    duration_s: float = 0.0
    timed_out: bool = False
    error: str | None = None
    """Why it could not run at all (binary missing, permission denied); None when it started."""
    timeout_s: float | None = field(default=None)
    """The timeout it ran under (after any shortening)."""
    requested_timeout_s: float | None = None
    """The caller's timeout, when a deadline shortened it (else None)."""
    shortened_by: str | None = None
    """The deadline that shortened it: "check PF-GPU-001's 120 s pytest-timeout"."""
    stdout_dropped: int = 0
    """Bytes of stdout dropped from the middle (over the cap); 0 when it all fitted."""
    stderr_dropped: int = 0
    output_cap: int = DEFAULT_OUTPUT_CAP
    leftovers: int = 0
    """Processes the tool left running when it exited (killed by the call)."""
    unkillable: tuple[int, ...] = ()
    """Pids that survived SIGKILL (D state: stuck in a kernel call); never waited for."""

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out and self.error is None

    @property
    def incomplete(self) -> bool:
        """Its output may not be all it had to say, though it may have exited 0: killed by a
        signal, bytes dropped over the cap, or detached children (holding its output open)
        killed. A listing read from such output is not evidence of what is absent from it."""
        return bool((self.returncode is not None and self.returncode < 0) or self.truncated
                    or self.leftovers)

    @property
    def output(self) -> str:
        """stdout then stderr, as a person would have seen them on a terminal (roughly)."""
        return self.stdout + (("\n" + self.stderr) if self.stderr else "")

    @property
    def truncated(self) -> bool:
        return bool(self.stdout_dropped or self.stderr_dropped)

    def describe(self) -> str:
        """One line saying what went wrong, for a check's error message."""
        cmd = command_line(self.argv)
        if self.error is not None:
            return f"`{cmd}` could not run: {self.error}"
        if self.timed_out:
            text = f"`{cmd}` did not finish within {_secs(self.timeout_s)} s and was killed"
            if self.shortened_by:
                text += (f" (its {_secs(self.requested_timeout_s)} s timeout was shortened to "
                         f"end before {self.shortened_by})")
            text += self._last_output()
        elif self.returncode is not None and self.returncode < 0:
            try:
                name = signal.Signals(-self.returncode).name
            except ValueError:
                name = str(-self.returncode)
            text = f"`{cmd}` was killed by signal {name}" + self._last_output()
        elif self.returncode == 0:
            text = f"`{cmd}` exited with status 0" + self._last_output()
        else:
            text = f"`{cmd}` exited with status {self.returncode}: {_last_line(self.stderr or self.stdout)}"
        return text + self._notes()

    def _last_output(self) -> str:
        lines = [(name, _last_line(text)) for name, text in (("stdout", self.stdout),
                                                            ("stderr", self.stderr))]
        lines = [(n, line) for n, line in lines if line]
        if not lines:
            return "; it printed nothing"
        # Quoted (repr) so that control characters and garbage from a broken tool stay readable.
        if len(lines) == 1:
            return f"; its last line: {lines[0][1]!r}"
        return "; its last lines: " + "; ".join(f"{n}: {line!r}" for n, line in lines)

    def _notes(self) -> str:
        notes = []
        for name, dropped in (("stdout", self.stdout_dropped), ("stderr", self.stderr_dropped)):
            if dropped:
                notes.append(f"{dropped:,} bytes of its {name} dropped from the middle (over "
                             f"the {self.output_cap:,}-byte cap: first and last halves kept)")
        if self.leftovers:
            notes.append(f"it exited but left {self.leftovers} process(es) running (detached "
                         "children that may have held its output open), killed: its output "
                         "may be incomplete")
        if self.unkillable:
            notes.append(f"{len(self.unkillable)} process(es) survived SIGKILL (pids "
                         f"{', '.join(map(str, self.unkillable))}: stuck in the kernel, D state)")
        return "".join(f"; {n}" for n in notes)


def command_line(argv: Sequence[str], arg_chars: int = 120) -> str:
    """The command as a shell would take it, each over-long argument (a `python -c` program)
    shortened."""
    return shlex.join(a if len(a) <= arg_chars else a[:arg_chars - 3] + "..." for a in argv)


def _secs(value: float | None) -> str:
    return "?" if value is None else f"{round(value, 1):g}"


def _last_line(text: str) -> str:
    tail = text[-4096:].strip().splitlines()[-1:] or [""]
    return tail[0].strip()[:300]
