"""Which pasted line is a command line, and the program it runs (harness.parsers.unwrap drops
or keeps such lines and remembers them; harness.parsers.commands reads what they say).

A command line pasted above a tool's output is context, not output: `mpirun -np 2
./build/all_reduce_perf ...`, `FOO=1 nvidia-smi -q`, `!nvidia-smi` in a notebook. It is known by
its first word that is not a `NAME=value` assignment: a program of KNOWN_PROGRAMS, an nccl-tests
binary (`*_perf`, `*_perf_mpi`), or after a shell prompt one of PROMPTED_PROGRAMS.
"""

from __future__ import annotations

import re

__all__ = ["KNOWN_PROGRAMS", "PROMPTED_PROGRAMS", "command_program"]


_ASSIGN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=\S*$")
#: Programs whose command line, pasted above their output, is context and not output.
KNOWN_PROGRAMS = frozenset((
    "mpirun", "mpiexec", "srun", "torchrun", "python", "python3", "kubectl", "docker", "nvidia-smi",
    "dcgmi", "fi_info", "dmesg", "journalctl", "sudo", "env", "uv", "bash", "sh", "ssh", "grep",
    "cat", "tail", "head", "ibv_devinfo", "ibstat", "fi_pingpong", "sbatch", "salloc",
    "deepspeed", "accelerate", "horovodrun", "oc", "tee", "time", "numactl",
))
#: Programs taken as a command only after a shell prompt: as a line's first word they are also
#: English (`which is ...`).
PROMPTED_PROGRAMS = frozenset(("which",))


#: Open MPI's own messages start with the launcher's name and a verb (`mpirun detected that one
#: or more processes exited with non-zero status, thus causing`, `mpirun noticed that process
#: rank 0 ... exited on signal 9`, `mpirun has exited due to process rank ...`, as quoted in
#: tests/data/nccl_tests/crash_mid_table_host_prefixed.txt and the Open MPI users' list): output,
#: not a command line.
_LAUNCHER_SAYS = frozenset(("detected", "noticed", "has", "was", "could", "does", "did", "is"))


def command_program(command: str, prompted: bool = False) -> str | None:
    """The program a command line runs (leading `NAME=value` assignments skipped, path cut), when
    it is a known one or an nccl-tests binary (`*_perf`, `*_perf_mpi`), or after a prompt
    (`prompted`) one of PROMPTED_PROGRAMS; else None."""
    words = command.split(None, 32)[:32]  # a tool line's first words decide
    for i, word in enumerate(words):
        if _ASSIGN.match(word):
            continue
        name = word.rsplit("/", 1)[-1]
        if name.startswith("!"):  # a notebook cell: `!nvidia-smi -q`
            name = name[1:]
        if name in ("mpirun", "mpiexec") and words[i + 1:i + 2] and words[i + 1] in _LAUNCHER_SAYS:
            return None
        if (name in KNOWN_PROGRAMS or name.endswith(("_perf", "_perf_mpi"))
                or (prompted and name in PROMPTED_PROGRAMS)):
            return name
        return None
    return None
