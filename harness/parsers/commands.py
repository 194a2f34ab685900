"""What the command lines pasted with an output say about it (harness.parsers.unwrap finds them).

`./build/alltoall_perf -b 8 -e 1024M -f 2 -g 2` above an nccl-tests table names the collective
and, with the launcher's own options (`mpirun -np 2`, `srun --nodes=2 --ntasks-per-node=8`), the
number of ranks, when the banner and the rank lines were not pasted. Options are read as the
tools define them: nccl-tests `-g/--ngpus` GPUs per process (nccl-tests src/common.cu, `-g,
--ngpus <GPUs per thread>`, with `-t/--nthreads`); Open MPI `-np/-n/--np` processes; Slurm
`-n/--ntasks`, or `-N/--nodes` x `--ntasks-per-node`.
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
            procs = _option(launcher, ("-np", "-n", "--np"))
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
