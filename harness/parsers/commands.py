"""What the command lines pasted with an output say about it (harness.parsers.unwrap finds them).

`./build/alltoall_perf -b 8 -e 1024M -f 2 -g 2` above an nccl-tests table names the collective
and, with the launcher's own options (`mpirun -np 2`, `srun --nodes=2 --ntasks-per-node=8`), the
number of ranks, when the banner and the rank lines were not pasted. Options are read as the
tools define them: nccl-tests `-g/--ngpus` GPUs per process (nccl-tests src/common.cu, `-g,
--ngpus <GPUs per thread>`, with `-t/--nthreads`); Open MPI `-np/-n/--np` processes, else one per
slot of `-H/-host/--host host1:8,host2:8` (mpirun(1), Open MPI 4.1: without -np "Open MPI will
automatically execute a copy of the program on each process slot"; a host's slots are its `:N`
suffix, "N defaults to 1 if not provided"), or `-npernode/-N` per host; a hostfile cannot be read
from the paste: unknown; Slurm `-n/--ntasks`, or `-N/--nodes` x `--ntasks-per-node`.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable

from harness.parsers.values import ascii_int

__all__ = ["command_collective", "command_nranks", "split_command"]

_PERF = re.compile(r"(?:^|/)([a-z_]+?)_perf(?:_mpi)?$")


def split_command(command: str) -> list[str]:
    """The words of a command line (shell quoting honoured; an unbalanced quote: blanks)."""
    try:
        return shlex.split(command, comments=False)
    except ValueError:
        return command.split()


def command_collective(commands: Iterable[str]) -> str | None:
    """The collective of the first nccl-tests binary a command runs (`alltoall_perf` ->
    `alltoall`), else None."""
    for command in commands:
        for word in split_command(command):
            if (m := _PERF.search(word)) is not None:
                return m[1]
    return None


def _option(words: list[str], names: tuple[str, ...]) -> int | None:
    """The integer value of the first of `names` in `words` (`-np 2`, `--nodes=2`, `-g1`)."""
    for i, word in enumerate(words):
        for name in names:
            if word == name and i + 1 < len(words):
                return ascii_int(words[i + 1])
            if name.startswith("--") and word.startswith(name + "="):
                return ascii_int(word[len(name) + 1:])
            if len(name) == 2 and word.startswith(name) and word[2:].isdigit():
                return ascii_int(word[2:])
    return None


_HOST_OPTIONS = ("-H", "-host", "--host")
#: Options whose processes cannot be counted from the command line (the slots are in a file, or a
#: mapping policy places them): with them and without -np the rank count is unknown.
_UNCOUNTABLE = ("-hostfile", "--hostfile", "-machinefile", "--machinefile", "--default-hostfile",
                "--map-by", "-map-by")


def _mpirun_procs(words: list[str]) -> int | None:
    """Open MPI processes: -np (it wins); else -npernode x the distinct hosts of the -H lists,
    or the sum of their slots (several -H options add up; `host` alone is 1 slot, so `-H a,a`
    is 2); None when a hostfile or a mapping policy decides, or a host entry cannot be read (a
    bare `$HOSTS` may expand to a list)."""
    procs = _option(words, ("-np", "-n", "--np", "-c", "--n"))
    if procs is not None:
        return procs
    if any(w == name or w.startswith(name + "=") for w in words for name in _UNCOUNTABLE):
        return None
    entries = [e for i, w in enumerate(words[:-1]) if w in _HOST_OPTIONS
               for e in words[i + 1].split(",")]
    entries += [e for w in words if w.startswith("--host=") for e in w[7:].split(",")]
    if not entries:
        return None
    slots = 0
    for entry in entries:
        host, sep, count = entry.partition(":")
        n = ascii_int(count) if sep else 1
        if not host or n is None or n < 1 or (not sep and "$" in host):
            return None
        slots += n
    per_node = _option(words, ("-npernode", "--npernode", "-N"))
    if per_node is not None:
        hosts = {e.partition(":")[0] for e in entries}
        return per_node * len(hosts) if per_node > 0 else None
    return slots


def command_nranks(commands: Iterable[str]) -> int | None:
    """Ranks an nccl-tests command launches: processes (mpirun/srun options; 1 without a
    launcher) x threads (`-t`) x GPUs per thread (`-g`); None when no command runs nccl-tests."""
    for command in commands:
        words = split_command(command)
        perf = next((i for i, w in enumerate(words) if _PERF.search(w)), None)
        if perf is None:
            continue
        launcher, test = words[:perf], words[perf + 1:]
        gpus = _option(test, ("-g", "--ngpus")) or 1
        threads = _option(test, ("-t", "--nthreads")) or 1
        programs = {w.rsplit("/", 1)[-1] for w in launcher}
        if programs & {"mpirun", "mpiexec"}:
            procs = _mpirun_procs(launcher)
        elif "srun" in programs:
            procs = _option(launcher, ("-n", "--ntasks"))
            if procs is None:
                nodes = _option(launcher, ("-N", "--nodes"))
                per_node = _option(launcher, ("--ntasks-per-node",))
                procs = nodes * per_node if nodes and per_node else None
        else:
            procs = 1
        return procs * threads * gpus if procs else None
    return None
