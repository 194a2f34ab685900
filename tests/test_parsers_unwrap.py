"""The one per-line unwrapper (harness.parsers.unwrap) and the command-line context
(harness.parsers.commands). Each wrapper below is one seen in real output (docs/parsers.md)."""

from __future__ import annotations

import pytest

from harness.parsers.commands import command_collective, command_nranks
from harness.parsers.fi_info import parse_fi_info
from harness.parsers.unwrap import Unwrapper

LINE = "host:79:79 [0] NCCL INFO Using network Socket"


@pytest.mark.parametrize(("wrapped", "rank", "host"), [
    (f"[1,3]<stdout>:{LINE}", "3", None),
    (f"        [1,3]<stderr>: {LINE}", "3", None),  # a Go test's log, indented
    (f"Thu Jun 18 14:28:58 2020[1,3]<stdout>:{LINE}", "3", None),  # --timestamp-output
    (f"3: {LINE}", "3", None),  # srun --label
    (f"[pod/worker-1/main] {LINE}", None, "worker-1"),  # kubectl logs --prefix
    (f"2024-06-25T18:45:27.095437505Z {LINE}", None, None),  # kubectl logs --timestamps
    (f"[2026-01-02 10:24:27] {LINE}", None, None),
    (f"  | 2025-05-16T16:39:51.208-07:00 | {LINE}", None, None),  # CloudWatch console copy
    (f"  | 2025-05-16T16:39:51.208-07:00{LINE} | {LINE}", None, None),  # its glued copy
    ('{"log":"' + LINE + '\\r\\n","stream":"stdout","time":"2020-02-08T14:35:22Z"}', None, None),
    (f"\x1b[36m{LINE}\x1b[0m", None, None),
    (f"\ufffd[36m{LINE}\ufffd[0m", None, None),  # the ESC byte read as U+FFFD
    (f"> {LINE}", None, None),
    (f"2024-06-25T18:45:27Z [1,3]<stdout>:{LINE}\r", "3", None),
])
def test_wrappers_are_removed_and_origins_kept(wrapped: str, rank: str | None, host: str | None):
    u = Unwrapper()
    assert u.unwrap(wrapped) == LINE
    assert u.ranks_sorted() == ([rank] if rank else [])
    assert list(u.hosts) == ([host] if host else [])


@pytest.mark.parametrize("line", [
    "```", "```bash", "    ```log", "~~~",
    "Warning: Permanently added '10.0.1.2' (ED25519) to the list of known hosts.",
    "...", "... 16 NICs in 8 groups ...", "2024-06-25T18:45:27Z",
])
def test_wrapping_only_lines_are_dropped(line: str):
    assert Unwrapper().unwrap(line) is None


@pytest.mark.parametrize(("line", "command"), [
    ("root@autodl-container-1:~/nccl-tests# ./build/alltoall_perf -b 8 -g 2",
     "./build/alltoall_perf -b 8 -g 2"),
    ("$ nvidia-smi -q -d ECC", "nvidia-smi -q -d ECC"),
    ("adsk1@ZimaOS-AI:~ ➜ $ nvidia-smi -i 2 -q -d ECC", "nvidia-smi -i 2 -q -d ECC"),
    ("# dmesg  | grep Xid", "dmesg  | grep Xid"),
    ("+ mpirun -np 2 python train.py", "mpirun -np 2 python train.py"),
    ("`OMPI_X=1 srun --nodes=2 all_reduce_perf_mpi -g 1`",
     "OMPI_X=1 srun --nodes=2 all_reduce_perf_mpi -g 1"),
    ("fi_info -p efa", "fi_info -p efa"),
    ("!nvidia-smi -q", "!nvidia-smi -q"),
    ("$./build/libfabric/bin/fi_info --fabric efa", "./build/libfabric/bin/fi_info --fabric efa"),
    ("# which fi_info", "which fi_info"),
    # A bare relative path (NVIDIA/nccl issue #318): a line starting with `.` is a command too,
    # not only a `...` elision (before: output, and the collective unknown).
    ("./build/all_reduce_perf -b 8 -e 4G -f 2 -g 8", "./build/all_reduce_perf -b 8 -e 4G -f 2 -g 8"),
])
def test_command_lines_are_context_not_output(line: str, command: str):
    u = Unwrapper()
    assert u.unwrap(line) is None
    assert u.commands == [command]


def test_tool_lines_that_look_like_prompts_stay():
    u = Unwrapper()
    for line in ("# nThread 1 nGpus 8 minBytes 8", "#  Rank  0 Group  0 Pid 1 on h device 0",
                 "    Product Name                          : NVIDIA H100",
                 "provider: efa", "NVRM: Xid (PCI:0000:52:00): 63, pid=1896",
                 # Open MPI's own messages name the launcher first: output, not commands.
                 "mpirun detected that one or more processes exited with non-zero status, thus "
                 "causing", "mpiexec noticed that process rank 3 with PID 0 on node n1 exited on "
                 "signal 9 (Killed).", "mpirun has exited due to process rank 0 with PID 1 on",
                 ".. ip-172-31-10-20 pid 23389: Test failure common.cu:496", "./README.md"):
        assert u.unwrap(line) == line
    assert u.commands == []


def test_what_which_prints_is_output():
    u = Unwrapper()
    lines = ["# which fi_info", "/opt/amazon/efa/bin/fi_info", "# fi_info -p efa",
             "which is how it goes", "provider: efa"]
    assert list(u.lines(lines)) == ["/opt/amazon/efa/bin/fi_info", "which is how it goes",
                                    "provider: efa"]
    assert u.commands == ["which fi_info", "fi_info -p efa"]


def test_continued_command_is_one_command():
    u = Unwrapper()
    lines = ["mpirun -np 1 \\", "  /usr/bin/env A=1 ./build/all_reduce_perf -g 1 \\",
             "  : -np 1 ./build/all_reduce_perf -g 1", "# nThread 1"]
    assert list(u.lines(lines)) == ["# nThread 1"]
    assert u.commands == ["mpirun -np 1 /usr/bin/env A=1 ./build/all_reduce_perf -g 1 : -np 1 "
                          "./build/all_reduce_perf -g 1"]


@pytest.mark.parametrize("wrap", [lambda s: f"[pod/w-0/main] {s}", lambda s: f"3: {s}",
                                  lambda s: f"\x1b[32m{s}\x1b[0m",
                                  lambda s: '{"log":"' + s.replace("\\", "\\\\") + '\\n"}',
                                  lambda s: f"> {s}", lambda s: f"> > 3: {s}"],
                         ids=["kubectl", "srun", "ansi", "docker", "quote", "quote-srun"])
def test_which_output_and_continued_commands_read_under_a_wrapper(wrap):
    """What `which` prints and a command's `\\` continuation are read inside the wrappers a
    launcher or shipper puts on every line (the continuation keeps none of them)."""
    u = Unwrapper()
    lines = ["$ which fi_info", "/opt/amazon/efa/bin/fi_info", "$ mpirun -np 2 \\",
             "   -x NCCL_DEBUG=INFO ./all_reduce_perf -g 1", "# nThread 1"]
    assert list(u.lines(wrap(line) for line in lines)) == ["/opt/amazon/efa/bin/fi_info",
                                                           "# nThread 1"]
    assert u.commands == ["which fi_info", "mpirun -np 2 -x NCCL_DEBUG=INFO ./all_reduce_perf -g 1"]


CLOUDWATCH = "  | 2025-05-16T16:39:51.208-07:00"


@pytest.mark.parametrize(("line", "inner"), [
    (f"{CLOUDWATCH} | |   0  NVIDIA H100 80GB HBM3    On  |   00000000:53:00.0 Off |",
     "|   0  NVIDIA H100 80GB HBM3    On  |   00000000:53:00.0 Off |"),
    (f"{CLOUDWATCH} | | Memory                    | Pass                            |",
     "| Memory                    | Pass                            |"),
    (f"{CLOUDWATCH}a | b | a | b", "a | b"),  # the glued row repeats its message once
    (f"{CLOUDWATCH}{LINE} | {LINE}", LINE),
    (f"{CLOUDWATCH}{LINE} | other", LINE),  # not a repeat: the first column
])
def test_a_cloudwatch_rows_message_keeps_its_bars(line: str, inner: str):
    """`| STAMP | message`: the message is the rest of the row, a table's `|`s and a command's
    pipe included (issue 32)."""
    assert Unwrapper().unwrap(line) == inner


def test_a_cloudwatch_rows_command_keeps_its_pipe():
    u = Unwrapper()
    assert u.unwrap(f"{CLOUDWATCH} | $ nvidia-smi -q | grep -A 3 Fabric") is None
    assert u.commands == ["nvidia-smi -q | grep -A 3 Fabric"]


@pytest.mark.parametrize("line", [
    "| NVIDIA-SMI 570.86.15              Driver Version: 570.86.15      CUDA Version: 12.8     |",
    "|  0  NVIDIA H100 80GB HBM3    On  |", "| 2 | 3 |", "|    0   N/A  N/A      1234      C   python |",
    "# nThread 1 nGpus 8 minBytes 8", "#  Rank  0 Group  0 Pid 1 on h device 0",
    "# FI_LOG_LEVEL: String", ">>> import torch",
])
def test_tool_lines_with_bars_and_marks_stay(line: str):
    """Lines a tool prints itself (nvidia-smi's tables, nccl-tests' and fi_info's `#` lines)
    are no CloudWatch rows or quotes, bare or under a quote."""
    assert Unwrapper().unwrap(line) == line
    assert Unwrapper().transported(line) == line
    assert Unwrapper().unwrap(f"> {line}") == line


def test_indentation_is_kept_under_a_timestamp():
    assert Unwrapper().unwrap("2024-06-25T18:45:27Z         Pending : Yes") == "        Pending : Yes"


@pytest.mark.parametrize(("command", "collective", "nranks"), [
    ("./build/alltoall_perf -b 8 -e 1024M -f 2 -g 2", "alltoall", 2),
    ("mpirun --allow-run-as-root -np 2 -x NCCL_ALGO=Tree ./all_reduce_perf -b 2M -g 1",
     "all_reduce", 2),
    ("X=1 srun --exclusive --nodes=2 --ntasks-per-node=8 all_reduce_perf_mpi -b 512M -g 1",
     "all_reduce", 16),
    ("srun -n 16 ./build/all_gather_perf -g 1", "all_gather", 16),
    ("mpirun -np 4 ./build/reduce_scatter_perf -t 2 -g 1", "reduce_scatter", 8),
    # Open MPI without -np: one process per slot of -H (`host:N`; a bare host is 1 slot).
    ("mpirun -H host1:8,host2:8 ./all_reduce_perf -g 1", "all_reduce", 16),
    ("mpirun --host a,b,c ./all_reduce_perf -g 2", "all_reduce", 6),
    ("mpirun -host $pod0:4 -H $pod1:4 ./all_reduce_perf_mpi -g 1", "all_reduce", 8),
    ("mpirun --host=a:2,b:2 ./all_reduce_perf -g 1", "all_reduce", 4),
    ("mpirun -np 2 -H host1:8,host2:8 ./all_reduce_perf -g 1", "all_reduce", 2),  # -np wins
    ("mpirun -H host1:8,host2:8 -npernode 2 ./all_reduce_perf -g 1", "all_reduce", 4),
    ("mpirun --hostfile hosts -H a:8 ./all_reduce_perf -g 1", "all_reduce", None),  # in a file
    ("mpirun -hostfile hosts ./all_reduce_perf -g 1", "all_reduce", None),
    ("mpirun -H $HOSTS ./all_reduce_perf -g 1", "all_reduce", None),  # may be a list
    ("mpirun -H a:x ./all_reduce_perf -g 1", "all_reduce", None),
    ("kubectl logs -f launcher", None, None),
])
def test_commands_give_collective_and_rank_count(command, collective, nranks):
    assert command_collective([command]) == collective
    assert command_nranks([command]) == nranks


def test_fi_info_under_mpirun_tags_parses():
    """Issue 13: fi_info under `[1,N]<stdout>:` was "nothing recognised" (a constructed copy of
    the aws-ia EKS blueprint's p5 output shape: ssh warning, tagged lines, a fence)."""
    text = "\n".join([
        "```text",
        "Warning: Permanently added 'efa-worker-1' (ED25519) to the list of known hosts.",
        "[1,0]<stdout>:provider: efa", "[1,0]<stdout>:    fabric: efa",
        "[1,0]<stdout>:    domain: rdmap79s0-rdm", "[1,0]<stdout>:    version: 120.10",
        "[1,0]<stdout>:    type: FI_EP_RDM", "[1,0]<stdout>:    protocol: FI_PROTO_EFA",
        "[1,1]<stdout>:provider: efa", "[1,1]<stdout>:    fabric: efa",
        "[1,1]<stdout>:    domain: rdmap201s0-rdm", "[1,1]<stdout>:    type: FI_EP_RDM",
        "```"])
    info = parse_fi_info(text)
    assert info.efa and info.efa_devices == ["rdmap79s0", "rdmap201s0"]
    assert info.ranks == ("0", "1")


def _recorded_lines() -> list[tuple[str, list[str]]]:
    from pathlib import Path

    roots = (Path(__file__).parent / "data", Path(__file__).parent / "samples")
    return [(str(p), p.read_text(encoding="utf-8", errors="replace").splitlines())
            for root in roots for p in sorted(root.rglob("*"))
            if p.is_file() and p.suffix not in (".json", ".md")]


@pytest.mark.parametrize("flags", [(True, False, False), (False, False, False),
                                   (True, True, False), (False, True, False),
                                   (True, False, True)])  # the last: nvidia-smi's
def test_a_batch_unwraps_as_its_lines_one_by_one(flags):
    """The fast path (a batch's lines without a wrapper handed on untouched) is exact: every
    recorded sample, and each of the wrappers above inside a plain log, read in batches of 1,
    3, 50 and whole, gives the same lines, commands, ranks and hosts as `unwrap` on each line.
    A wrapper rule whose first characters `unwrap_candidates.candidates` lacks fails here."""
    timestamps, host_prefix, comments = flags
    opts = {"timestamps": timestamps, "host_prefix": host_prefix, "comments": comments}
    plain = ["    domain: rdmap79s27-rdm", "provider: efa", "  Product Name : NVIDIA H100"]
    wrapped = [[*plain, w, *plain] for w in [
        "[1,3]<stdout>:x", "3: x", "[pod/w-1/c] x", "2024-06-25T18:45:27Z x", "> x", "```",
        "  | 2025-05-16T16:39:51.208-07:00 | x", "$ nvidia-smi -q", "worker-1: x",
        "OMPI_X=1 srun all_reduce_perf_mpi -g 1 \\", "which fi_info", "... cut ...",
        "Thu Jun 18 14:28:58 2020[1,0]<stdout>:x", "(venv) $ python x.py", "+ mpirun -np 2 x",
        "root@box:~# ./build/alltoall_perf", '{"log":"x\\n","stream":"stdout"}', "`srun x`",
        "/usr/bin/fi_info", "!nvidia-smi -q", "x\x1b[0m", "x\r", "# x", "//     x", "#",
        "  # $ nvidia-smi -q", "#GPU 00000000:18:00.0", "Build/all_reduce_perf -b 8",
        "X_perf -g 1", "NCCL_DEBUG=INFO srun x", "Srun x", "0_perf x", '"a_perf x']]
    wrong = []
    for name, lines in [*_recorded_lines(), *(("wrapped", w) for w in wrapped)]:
        for size in (1, 3, 50, len(lines) or 1):
            one = Unwrapper(**opts)
            batched = Unwrapper(**opts)
            want = [x for x in map(one.unwrap, lines) if x is not None]
            got = [x for i in range(0, len(lines), size) for x in batched.lines(lines[i:i + size])]
            if (got, batched.commands, batched.ranks, batched.hosts, batched.elided) != (
                    want, one.commands, one.ranks, one.hosts, one.elided):
                wrong.append((name, size))
            # Unwrapper.candidates: a line it leaves out (no command pending) is its own text.
            by_line = Unwrapper(**opts)
            for i in range(0, len(lines), size):
                batch = lines[i:i + size]
                candidates = by_line.candidates(batch)
                for j, line in enumerate(batch):
                    skip = candidates is not None and j not in candidates and not by_line.pending()
                    if by_line.unwrap(line) != line and skip:
                        wrong.append((name, size, line))
    assert not wrong, wrong[:10]
