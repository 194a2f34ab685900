"""Run-wide signal handling. SIGTERM, SIGINT and SIGHUP (Slurm's prolog timeout, `docker stop`,
pod deletion, StopTrainingJob, Ctrl-C, a closed terminal) to `preflight run` or `preflight
selftest`: every process the run started is stopped, also those in their own sessions (the check
session, torchrun and its workers, mpirun, nccl-tests, dcgmi); the report (verdict
`interrupted`, naming the checks that finished and their results) and the failure file are
written; the process exits 128+N (143, 130, 129), within EXIT_WITHIN_S of the signal; the
training command is never exec'd after a signal.

How: the run's process is a subreaper (harness.base.proctree), so everything it started stays its
descendant. The signal's C-level handler writes to a wakeup pipe (signal.set_wakeup_fd), which a
watcher thread reads: the cleanup starts at once even while the main thread is stuck in C code
(a TCPStore connect, a hung collective), where a Python-level handler would wait for it
(measured: SIGTERM during a TCPStore connect with a 25 s timeout ran a Python handler 28 s
later, when the connect gave up; test_interrupt checks the join case). The
cleaner thread stops the tree, waits for the main thread to finish writing what it was writing
(`section`), runs the finalizer (the interrupted report) and calls os._exit; a timer makes the
exit happen by EXIT_WITHIN_S whatever the finalizer does. A second signal cuts the SIGTERM grace
short (SIGKILL at once); the report is still written. Before the guard is installed (while the
modules load), the console script holds the signals (harness.base.sigmask); `install` takes a held
one as if it had just come.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from types import FrameType
from typing import NoReturn, TypeAlias

from harness.base import proc, proctree, sigmask
from harness.base.sigmask import SIGNALS

__all__ = ["EXIT_WITHIN_S", "RunGuard", "install_session_handlers", "signal_name"]

#: A signal disposition as `signal.signal` returns it (a handler, SIG_DFL / SIG_IGN, or None
#: for one not installed from Python).
_Disposition: TypeAlias = Callable[[int, FrameType | None], object] | int | signal.Handlers | None

#: The bound the issue sets from signal to exit, s.
EXIT_WITHIN_S = 10.0
#: Seconds processes get to act on SIGTERM (the check session writes junit.xml and its last
#: results; torchrun stops its workers) before the tree is SIGKILLed. The wait ends as soon as
#: they are gone (~0.5 s); the full grace only for what ignores SIGTERM. 3 s was too short for a
#: check session on a 2-core machine at load 10 to finish junit.xml; 5 s + the SIGKILL wait +
#: the report stay inside EXIT_WITHIN_S.
TERM_GRACE_S = 5.0
#: Seconds to wait for SIGKILLed processes to die (longer: they are in D state; not waited for).
KILL_WAIT_S = 2.0
#: Seconds kept for the finalizer, and before the hard exit, within EXIT_WITHIN_S.
EXIT_MARGIN_S = 0.5


def signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


class RunGuard:
    """One run's signal handling (install / uninstall), the place its final outputs are written
    from (`section`), and the gate before the hand-off (`exec_gate`)."""

    def __init__(self, what: str = "preflight run", term_grace_s: float = TERM_GRACE_S) -> None:
        self.what, self.term_grace_s = what, term_grace_s
        self.signum: int | None = None
        self.received_at = 0.0
        self.stopped = 0
        """Processes the cleanup signalled."""
        self.unkillable: set[int] = set()
        self.active = False
        self._gate = threading.Lock()
        """Held by the watcher while it reads the wakeup pipe, and by exec_gate while it decides."""
        self._writing = threading.RLock()
        """Held by the main thread's `section` and by the finalizer: one writes the outputs."""
        self._hurry = threading.Event()
        self._finalizer: Callable[[int], None] | None = None
        self._old: dict[int, _Disposition] = {}
        self._old_wakeup = -1
        self._pipe: tuple[int, int] | None = None
        self._mine = proctree.descendants_of_self
        """What this command started (not what a process hosting it started before)."""
        self.during_startup = False
        """The signal arrived while the console script held it (harness.base.sigmask): during
        start-up, before the modules had loaded."""

    # --- install / uninstall ---
    def install(self) -> RunGuard:
        """Handle the signals from now on, and take the one the console script held during
        start-up, if one came (set the finalizer first: it may run at once). Only the main
        thread can (signal.signal's rule): elsewhere (a test calling main() from a thread) the
        guard stays inactive."""
        if threading.current_thread() is not threading.main_thread():
            return self
        proctree.become_subreaper()
        self._mine = proctree.started_since(proctree.now_ticks())
        r, w = os.pipe()
        os.set_blocking(w, False)
        os.set_blocking(r, False)
        self._pipe = (r, w)
        self._old_wakeup = signal.set_wakeup_fd(w, warn_on_full_buffer=False)
        for sig in SIGNALS:
            self._old[sig] = signal.signal(sig, self._on_signal)
        self.active = True
        threading.Thread(target=self._watch, name="preflight-signals", daemon=True).start()
        self.during_startup = sigmask.pending()
        sigmask.release()  # a held one reaches the handler (and the wakeup pipe) now
        if self.during_startup:  # taken here, not by the watcher later: the caller's next
            with self._gate:     # checkpoint parks, before it touches the report folder
                self._take(self._read())
        return self

    def uninstall(self) -> None:
        """Restore the previous handlers (a run that ended normally, in-process callers)."""
        if not self.active:
            return
        with self._gate:
            self.active = False
            for sig, old in self._old.items():
                signal.signal(sig, old)
            signal.set_wakeup_fd(self._old_wakeup)
            if self._pipe is not None:
                os.close(self._pipe[1])  # the watcher reads EOF and ends; it closes the read end

    def close(self) -> None:
        """The command is done: after a signal, park (the cleanup exits the process); else stop
        whatever is left (nothing the run started outlives it) and uninstall."""
        if self.signum is not None:
            self.park()
        self.sweep()
        self.uninstall()

    def set_finalizer(self, fn: Callable[[int], None]) -> None:
        """`fn(signum)` writes the interrupted report and the failure file (in the cleaner thread,
        after every process is stopped)."""
        self._finalizer = fn

    @staticmethod
    def _on_signal(signum: int, frame: FrameType | None) -> None:
        """The Python-level handler: nothing (the watcher acts on the wakeup byte). It must not
        raise: the main thread carries on until it reaches a `section`, where it parks."""

    # --- the main thread's side ---
    @contextlib.contextmanager
    def section(self) -> Iterator[None]:
        """Around the main thread's final outputs (report, failure file): after a signal it
        parks instead (the cleaner writes the interrupted ones); the cleaner waits for a section
        in progress before it writes."""
        with self._writing:
            interrupted = self.signum is not None
            if not interrupted:
                yield
        if interrupted:
            self.park()

    def checkpoint(self) -> None:
        """Where the main thread must not go on after a signal (into the cluster step, whose
        result the cleanup publishes instead): park."""
        if self.signum is not None:
            self.park()

    def park(self) -> NoReturn:
        """Wait for the cleaner's os._exit (bounded by EXIT_WITHIN_S)."""
        while True:
            time.sleep(60)

    def exec_gate(self, hand_off: Callable[[], int]) -> int:
        """Run `hand_off` (the exec) unless a signal came: the signals' default actions are
        restored first, so one arriving from then on stops the process before or after the exec,
        never lost; one that arrived before is still unread in the wakeup pipe (the watcher reads
        it only under the lock held here), so the hand-off does not happen and the cleaner runs.
        (What is left is the few instructions of a handler running in another thread.)"""
        if not self.active:
            return hand_off()
        with self._gate:
            if self.signum is None:
                for sig in SIGNALS:
                    signal.signal(sig, signal.SIG_DFL)
                self._take(self._read())  # one that came just before: the cleaner runs
                if self.signum is None:
                    self.sweep()
                    proctree.clear_subreaper()
                    return hand_off()
                for sig in SIGNALS:  # the cleaner runs: a second signal must not skip it
                    signal.signal(sig, self._on_signal)
        self.park()

    def _read(self) -> bytes | None:
        """What the wakeup pipe holds (b"" at EOF, None when empty); under the gate lock."""
        assert self._pipe is not None
        try:
            return os.read(self._pipe[0], 64)
        except BlockingIOError:
            return None

    def _take(self, data: bytes | None) -> None:
        """Act on signal numbers from the wakeup pipe: the first of ours starts the cleaner, the
        next ones hurry it. Others (pytest-timeout's SIGALRM, in-process callers) are not ours."""
        for signum in data or b"":
            if signum not in SIGNALS:
                continue
            if self.signum is None:
                self.signum, self.received_at = signum, time.monotonic()
                threading.Thread(target=self._clean, name="preflight-cleanup",
                                 daemon=True).start()
            else:
                self._hurry.set()
                _say(f"{self.what}: {signal_name(signum)} again: killing what is left now")

    def sweep(self) -> set[int]:
        """Stop whatever the run left running (nothing, normally); returns the unkillable."""
        stopper = proctree.Stopper(self._mine)
        if not stopper.running():
            return set()
        return stopper.stop(1.0, KILL_WAIT_S)

    # --- the signal's side ---
    def _watch(self) -> None:
        assert self._pipe is not None
        r = self._pipe[0]
        try:
            while True:
                select.select([r], [], [])
                with self._gate:  # exec_gate holds it while it decides (and may read first)
                    data = self._read()
                    if data == b"":  # uninstalled: the write end is closed
                        return
                    self._take(data)
        finally:
            os.close(r)

    def _clean(self) -> None:
        signum = self.signum
        assert signum is not None
        code = 128 + signum
        timer = threading.Timer(self.received_at + EXIT_WITHIN_S - EXIT_MARGIN_S
                                - time.monotonic(), _hard_exit, (code,))
        timer.daemon = True
        timer.start()
        proc.stop_starting(f"the run was interrupted by {signal_name(signum)}")
        _say(f"{self.what}: {signal_name(signum)} received: stopping every process it started, then "
             f"writing the report (exit {code})")
        stopper = proctree.Stopper(self._mine)
        self.unkillable = stopper.stop(self.term_grace_s, KILL_WAIT_S, wake=self._hurry.is_set)
        self.stopped = len(stopper.seen)
        if self.unkillable:
            _say(f"{self.what}: {len(self.unkillable)} process(es) survived SIGKILL (D state): "
                 f"{', '.join(map(str, sorted(self.unkillable)))}")
        left = self.received_at + EXIT_WITHIN_S - EXIT_MARGIN_S - time.monotonic()
        locked = self._writing.acquire(timeout=max(left / 2, 0.1))  # a section in progress
        try:
            if self._finalizer is not None:
                worker = threading.Thread(target=self._finalize, args=(signum,), daemon=True)
                worker.start()
                worker.join(max(self.received_at + EXIT_WITHIN_S - EXIT_MARGIN_S
                                - time.monotonic(), 0.1))
        finally:
            if locked:
                self._writing.release()
        _hard_exit(code)

    def _finalize(self, signum: int) -> None:
        assert self._finalizer is not None
        try:
            self._finalizer(signum)
        except Exception as exc:  # the report is best effort now; the exit code still says it
            _say(f"{self.what}: could not write the interrupted report: {type(exc).__name__}: "
                 f"{exc}")


def _say(message: str) -> None:
    with contextlib.suppress(OSError, ValueError):
        print(message, file=sys.stderr, flush=True)


def _hard_exit(code: int) -> NoReturn:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    os._exit(code)


def install_session_handlers() -> None:
    """In a check session: SIGTERM and SIGHUP end it as Ctrl-C does (KeyboardInterrupt), so that
    pytest writes junit.xml and the last results, and `proc.run` stops the running tool's tree on
    the way out. Only where they still have their default action."""
    if threading.current_thread() is not threading.main_thread():
        return
    for sig in (signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(sig) is signal.SIG_DFL:
            signal.signal(sig, _raise_interrupt)


def _raise_interrupt(signum: int, frame: FrameType | None) -> None:
    proc.stop_starting(f"the check session got {signal_name(signum)}")
    raise KeyboardInterrupt(f"{signal_name(signum)} received")
