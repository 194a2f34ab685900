"""An emulated nccl-tests binary for the tests: a small Python script put on PATH that prints a
recorded output, writes the -J JSON file, hangs, aborts, prints garbage or exits non-zero."""

from __future__ import annotations

import stat
import sys
from pathlib import Path

DATA = Path(__file__).parent / "data" / "nccl_tests"

OLD_HELP = "USAGE: all_reduce_perf \n\t[-t,--nthreads <num threads>] \n\t[-g,--ngpus <gpus>] \n"
NEW_HELP = OLD_HELP + "\t[-T,--timeout <time in seconds>] \n\t[-J,--output_file <file>] \n"

TOOL = """#!{python}
import os, signal, sys, time
args = sys.argv[1:]
mode, data, helptext = {mode!r}, {data!r}, {helptext!r}
if "--help" in args or "-h" in args:
    print(helptext); sys.exit(0)
with open({log!r}, "a") as log:
    log.write(" ".join(args) + "\\n")
with open({pids!r}, "a") as pids:
    pids.write(f"{{os.getpid()}}\\n")
if {mpi_aware!r} and os.environ.get("OMPI_COMM_WORLD_RANK", "0") != "0":
    # An MPI build prints from rank 0 only; the other ranks work silently.
    if mode == "hang":
        time.sleep(600)
    sys.exit(0)
text = open(data).read() if data else ""
if mode == "json" and "-J" in args:
    open(args[args.index("-J") + 1], "w").write(open({json_data!r}).read())
if mode == "hang":
    lines = text.splitlines()
    print("\\n".join(lines[:30]), flush=True)
    time.sleep(600)
if mode == "abort":
    print("\\n".join(text.splitlines()[:40]), flush=True)
    os.kill(os.getpid(), signal.SIGABRT)
if mode == "garbage":
    print("\\x1b[31mlibcudart.so.12: cannot open shared object file\\x1b[0m 42 17 3.5")
    sys.exit(0)
print(text, end="")
sys.exit({exit_code})
"""


def make_tool(tmp_path, mode="print", data="current_2node_h100.txt", exit_code=0,
              helptext=OLD_HELP, name="all_reduce_perf", mpi_aware=True):
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    tool = bindir / name
    tool.write_text(TOOL.format(
        python=sys.executable, mode=mode, data=str(DATA / data) if data else "",
        helptext=helptext, log=str(tmp_path / "calls.log"), exit_code=exit_code,
        json_data=str(DATA / "json_constructed.json"), pids=str(tmp_path / "pids"),
        mpi_aware=mpi_aware))
    tool.chmod(tool.stat().st_mode | stat.S_IEXEC)
    return tool


MPIRUN = """#!{python}
import os, sys
args = sys.argv[1:]
with open({log!r}, "a") as log:
    log.write("mpirun " + " ".join(args) + "\\n")
i = next(i for i, a in enumerate(args) if a.endswith(("_perf", "_perf_mpi")))
os.execv(args[i], args[i:])
"""


def make_mpirun(tmp_path):
    """A stand-in `mpirun` that logs its options and execs the test binary once."""
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    tool = bindir / "mpirun"
    tool.write_text(MPIRUN.format(python=sys.executable, log=str(tmp_path / "calls.log")))
    tool.chmod(tool.stat().st_mode | stat.S_IEXEC)
    return tool
