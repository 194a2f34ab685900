"""NCCL debug log parser: wrappers, streaming/chunking invariance, the failure catalogue and the
inspect command (the facts of each recorded log under tests/data/nccl_log are in its X.expect.json,
checked by tests/test_parsers_samples.py)."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from harness.cli import main
from harness.parsers import nccl_log
from harness.parsers.nccl_failures import FAILURES
from harness.parsers.nccl_log import parse_nccl_log, parse_nccl_log_stream

DATA = Path(__file__).parent / "data" / "nccl_log"


def _json(name: str) -> dict:
    return parse_nccl_log((DATA / name).read_text(encoding="utf-8")).to_json()


def test_json_has_exactly_the_documented_keys():
    assert list(_json("composed_ofi_1.16_efa_direct_p5_srun.log")) == [
        "nccl_version", "plugin", "plugin_version", "network", "provider", "fabric", "num_nics",
        "protocol", "gdr", "gdr_evidence", "network_evidence", "libfabric_version", "platform",
        "num_net_channels", "num_gdr_channels", "num_collnet_channels",
        "num_collnet_gdr_channels", "gdr_gpus", "gdr_gpus_enabled", "nranks", "env_added",
        "warnings", "errors", "timeouts", "commands_seen",
    ]


PAYLOADS = [
    "NCCL INFO NET/Plugin: Loaded net plugin Libfabric (v9)",
    "NCCL INFO NET/OFI Initializing aws-ofi-nccl 1.16.3",
    "NCCL INFO NET/OFI Selected provider is efa, fabric is efa-direct (found 32 nics)",
    "NCCL INFO Using network Libfabric",
    "NCCL INFO Channel 00/0 : 0[0] -> 8[0] [send] via NET/Libfabric/0/GDRDMA",
    "NCCL INFO Channel 01/0 : 8[0] -> 0[0] [receive] via NET/Libfabric/1/GDRDMA",
]
WRAPPERS = [
    "ip-10-0-0-1:79:2500 [0] {}",
    "[1,3]<stdout>:ip-10-0-0-1:79:2500 [3] {}",
    "3: ip-10-0-0-1:79:2500 [3] {}",
    "Mar  4 10:12:22 ip-10-0-0-1 python[79]: ip-10-0-0-1:79:2500 [0] {}",
    "2025-06-01T12:00:00.123456Z ip-10-0-0-1:79:2500 [0] {}",
    "[2025-10-16 22:16:08] ip-10-0-0-1:79:2500 [0] {}",
    "  | 2025-05-16T16:39:51.208-07:00 | ip-10-0-0-1:79:79 [0] {}",
    "  | 2025-05-16T16:39:51.208-07:00ip-10-0-0-1:79:79 [0] {0} | ip-10-0-0-1:79:79 [0] {0}",
]


@pytest.mark.parametrize("wrapper", WRAPPERS)
@pytest.mark.parametrize("eol", ["\n", "\r\n"])
def test_every_wrapper_and_line_ending_gives_the_same_facts(wrapper: str, eol: str):
    text = eol.join(wrapper.format(p) for p in PAYLOADS) + eol + eol
    got = parse_nccl_log(text).to_json()
    assert (got["plugin_version"], got["network"], got["provider"], got["fabric"],
            got["num_nics"], got["gdr"], got["num_net_channels"]) == (
        "1.16.3", "Libfabric", "efa", "efa-direct", 32, True, 2)


def test_the_network_used_wins_over_the_plugin_loaded():
    text = "\n".join([
        "h:1:1 [0] NCCL INFO NET/Plugin: Loaded net plugin Libfabric (v9)",
        "h:1:1 [0] NCCL INFO NET/OFI Selected provider is efa, fabric is efa (found 4 nics)",
        "h:1:1 [0] NCCL INFO Using network IB",
        "h:1:1 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/RoCE [RO]; OOB ib0:1<0>",
        "h:1:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 8[0] [send] via NET/IB/0/GDRDMA",
    ])
    s = parse_nccl_log(text)
    assert (s.network, s.provider, s.num_nics, s.fabric) == ("IB", "ib", 2, None)


def test_an_ofi_line_with_two_facts_gives_both():
    # aws-ofi-nccl 1.4-1.11 print the platform and the variable it sets on one line.
    s = parse_nccl_log("h:1:1 [0] NCCL INFO NET/OFI Running on p4d.24xlarge platform, Setting "
                       "NCCL_TOPO_FILE environment variable to /opt/x/p4d-24xl-topo.xml\n")
    assert (s.platform, s.env_added) == (
        "p4d.24xlarge", {"NCCL_TOPO_FILE": "/opt/x/p4d-24xl-topo.xml"})


def test_gdr_disabled_on_a_nic_of_another_network_is_no_evidence():
    text = ("h:1:1 [0] NCCL INFO NET/IB : GPU Direct RDMA Disabled for HCA 0 'mlx5_0'\n"
            "h:1:1 [0] NCCL INFO Using network Libfabric\n")
    assert parse_nccl_log(text).gdr is None


def test_one_rank_on_sockets_makes_the_job_socket_bound():
    text = ("a:1:1 [0] NCCL INFO Using network Libfabric\n"
            "b:2:2 [1] NCCL INFO Using network Socket\n")
    assert parse_nccl_log(text).network == "Socket"


def test_a_channel_line_printed_twice_counts_once():
    lines = ["h:1:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 8[0] [send] via NET/Libfabric/0/GDRDMA",
             "h:1:1 [0] NCCL INFO Channel 01/0 : 0[0] -> 8[0] [send] via NET/Libfabric/1"]
    # The same communicator created twice, the second time in another chunk.
    data = ("\n".join(lines + ["h:1:1 [0] NCCL INFO comm 0x1 rank 0 nranks 16"] * 30 + lines)
            + "\n").encode()
    for chunk_bytes in (97, 1 << 20):
        s = parse_nccl_log_stream(io.BytesIO(data), chunk_bytes=chunk_bytes)
        assert (s.num_net_channels, s.num_gdr_channels, s.gdr) == (2, 1, False), chunk_bytes


def test_streaming_and_chunking_do_not_change_the_result():
    for path in sorted(DATA.glob("*.log")):
        if not path.stat().st_size:
            continue
        whole = parse_nccl_log(path.read_text(encoding="utf-8"))
        lines = parse_nccl_log(iter(path.read_text(encoding="utf-8").splitlines(keepends=True)))
        tiny = parse_nccl_log_stream(io.BytesIO(path.read_bytes()), chunk_bytes=97)
        assert lines == whole == tiny, path.name
        # Every explained failure says what to do and which line it read (the causes of each
        # recorded log are in its X.expect.json).
        assert all(e.remedy and e.line for e in whole.errors), path.name


def test_several_rank_logs_parse_as_one():
    p5 = (DATA / "composed_ofi_1.16_efa_direct_p5_srun.log").read_bytes()
    fallback = (DATA / "composed_socket_fallback_syslog.log").read_bytes()
    s = parse_nccl_log_stream([io.BytesIO(p5), io.BytesIO(fallback)])
    assert s.network == "Libfabric" and "Socket" in s.networks_seen
    assert s.plugin_failed


def test_seen_cap_reset_keeps_counts_and_facts(monkeypatch: pytest.MonkeyPatch):
    path = DATA / "composed_ofi_1.16_efa_direct_p5_srun.log"
    want = parse_nccl_log_stream(io.BytesIO(path.read_bytes()), chunk_bytes=200)
    monkeypatch.setattr(nccl_log, "SEEN_CAP", 3)
    assert parse_nccl_log_stream(io.BytesIO(path.read_bytes()), chunk_bytes=200) == want


def test_warnings_are_capped(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(nccl_log, "MAX_KEPT", 5)
    text = "".join(f"h:1:1 [0] NCCL WARN NET/OFI Request 0x{i:x} failed\n" for i in range(50))
    s = parse_nccl_log(text)
    assert len(s.warnings) == 5 and len(s.errors) == 5


@pytest.mark.parametrize(("line", "cause"), [
    ("NCCL WARN NET/OFI Request 0x1 (send) completed with error: err: 113, flags: 0, "
     "prov_errno: 13, strerror: No route to host, len: 0", "security group"),
    ("NCCL WARN NET/OFI Unable to insert remote address into address vector for device 1",
     "security group"),
    ("NCCL WARN NET/OFI No eligible providers were found", "offers no EFA provider"),
    ("NCCL WARN NET/OFI OFI fi_getinfo() call failed: No data available", "fi_getinfo found no"),
    ("NCCL WARN NET/OFI EFA provider requires at least libfabric version 1.22.0.",
     "libfabric in the image is too old"),
    ("NCCL WARN NET/OFI GDR disabled on GDR-supported instance type p5.48xlarge",
     "GPUDirect RDMA is not available"),
    ("NCCL WARN NET/OFI Unable to find a protocol that worked", "transport protocols"),
    ("NCCL WARN NET/OFI Couldn't find any optimal provider", "old aws-ofi-nccl"),
    ("NCCL WARN NET/OFI Only EFA provider is supported", "old aws-ofi-nccl"),
    ("NCCL WARN NET/OFI aws-ofi-nccl initialization failed", "failed to initialize"),
    ("NCCL WARN Cuda failure 'out of memory'", "ran out of memory"),
    ("NCCL WARN Call to ibv_reg_mr failed with error Cannot allocate memory", "locked-memory"),
    ("NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled system error (run with NCCL_DEBUG=INFO "
     "for details), NCCL version 2.21.5", "failing system call"),
    ("NCCL WARN Net : Connection closed by remote peer 10.0.0.2<52938>", "peer rank died"),
    ("NCCL WARN Duplicate GPU detected : rank 1 and rank 0 both on CUDA device 10000",
     "same GPU"),
    ("NCCL WARN NET/OFI Something new went wrong", "plugin reported an error"),
    ("NCCL INFO NET/OFI No eligible providers were found", "offers no EFA provider"),
    ("torch.distributed.DistBackendError: NCCL error in: /var/lib/jenkins/workspace/torch/csrc/"
     "distributed/c10d/NCCLUtils.cpp:93, unhandled cuda error (run with NCCL_DEBUG=INFO for "
     "details), NCCL version 2.29.3", "a CUDA call inside NCCL failed"),
    ("misc/cudawrap.cc:33 NCCL WARN Cuda failure 'initialization error'",
     "a CUDA call inside NCCL failed"),
    ("[Rank 0] Collective WorkNCCL(SeqNum=89, OpType=ALLREDUCE, NumelIn=67108864, NumelOut="
     "67108864, Timeout(ms)=90000) raised the following async exception: NCCL error: remote "
     "process exited or there was a network error, NCCL version 2.22.3", "peer rank died"),
    ("NCCL WARN NET/OFI Request 0x1 completed with error. RC: 103. Error: 4124 (Unresponsive "
     "receiver (connection previously established) My EFA addr: fi_addr_efa://[fe80::1]:0:1)",
     "stopped responding (EFA error 4124)"),
    ("plugin/net.cc:379 NCCL WARN Failed to initialize any NET plugin", "instead of falling back"),
    ("transport/net_ib.cc:839 NCCL WARN NET/IB : Got completion with error 12, opcode 1, len 0, "
     "vendor err 129", "IB error 12"),
    ("ib_plugin.c:1007 NCCL WARN NET/IB : Got completion from peer 10.1.32.3<54891> with error 5, "
     "opcode 0, len 0, vendor err 249", "completed with an error"),
    ("ibvwrap.c:262 NCCL WARN Call to ibv_modify_qp failed with 110 Connection timed out, on dev "
     "mlx_x:1, curr state INIT, next state RTR", "queue pair"),
])
def test_catalogue_explains_each_failure(line: str, cause: str):
    s = parse_nccl_log(f"ip-10-0-0-1:79:2500 [0] {line}\n")
    assert s.errors and cause in s.errors[0].cause, [e.cause for e in s.errors]


def test_every_catalogue_entry_has_a_cause_a_remedy_and_a_source():
    for failure in FAILURES:
        assert failure.cause and failure.remedy and failure.source, failure.pattern


def test_an_info_line_of_the_plugin_is_no_failure_by_itself():
    s = parse_nccl_log("h:1:1 [0] NCCL INFO NET/OFI Creating one domain per process\n"
                       "h:1:1 [0] NCCL INFO NET/OFI Some new informational line\n")
    assert not s.errors


def test_ib_plugin_init_failure_on_efa_is_not_an_error():
    s = parse_nccl_log("h:1:1 [0] NCCL INFO Failed to initialize NET plugin IB\n"
                       "h:1:1 [0] NCCL INFO Using network Libfabric\n")
    assert not s.errors and not s.plugin_failed


@pytest.mark.parametrize(("name", "line"), [
    ("composed_ofi_1.16_efa_direct_p5_srun.log",
     "NET/Libfabric: aws-ofi-nccl 1.16.3, provider efa (fabric efa-direct, 32 NICs), "
     "GDRDMA on 16/16 NET channels"),
    ("composed_socket_fallback_syslog.log",
     "NET/Socket: aws-ofi-nccl loaded but failed to initialise (libfabric offers no EFA "
     "provider: the EFA devices are not visible in this container or the EFA software is "
     "missing); traffic goes over TCP sockets"),
    ("real_socket_no_plugin.log",
     "NET/Socket: aws-ofi-nccl did not load (check LD_LIBRARY_PATH, the plugin library); "
     "traffic goes over TCP sockets"),
    ("composed_loaded_but_unused_iso.log",
     "NET/Socket: aws-ofi-nccl loaded but NCCL used sockets (NCCL_NET=Socket?); traffic goes "
     "over TCP sockets"),
    ("real_ib_no_gdr.log", "NET/IB: provider ib (1 NICs), GDRDMA on 0/4 NET channels"),
    ("real_roce_gdr_disabled_hca.log", "NET/IB: provider ib (2 NICs), GDR not available"),
    ("real_cloudwatch_gdr_disabled_socket.log",
     "NET/Socket: aws-ofi-nccl loaded but failed to initialise (GPUDirect RDMA is not available "
     "to EFA on an instance type that requires it); traffic goes over TCP sockets"),
    ("real_old_plugin_tcp_provider.log",
     "no `Using network` line; aws-ofi-nccl selected provider tcp;ofi_rxm"),
])
def test_describe_is_one_explaining_line(name: str, line: str):
    assert parse_nccl_log((DATA / name).read_text(encoding="utf-8")).describe() == line


def test_inspect_cli_prints_the_json(capsys: pytest.CaptureFixture[str]):
    assert main(["inspect", "nccl-log", str(DATA / "composed_socket_fallback_syslog.log"),
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert (out["network"], out["provider"], out["gdr"]) == ("Socket", "socket", False)


@pytest.mark.parametrize("name", ["garbage.txt", "empty.log"])
def test_inspect_cli_garbage_exits_2_with_json_error(name: str,
                                                     capsys: pytest.CaptureFixture[str]):
    assert main(["inspect", "nccl-log", str(DATA / name), "--json"]) == 2
    assert "nothing recognised" in json.loads(capsys.readouterr().out)["error"]


def test_inspect_cli_reads_stdin(monkeypatch: pytest.MonkeyPatch,
                                 capsys: pytest.CaptureFixture[str]):
    text = (DATA / "real_ib_gdrdma.log").read_text(encoding="utf-8")
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(text.encode())))
    assert main(["inspect", "nccl-log", "-", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["num_gdr_channels"] == 8


class _ReadOnly:
    """A stream with read() but no readinto() (pipes wrapped by some log shippers)."""

    def __init__(self, data: bytes) -> None:
        self._io = io.BytesIO(data)

    def read(self, n: int = -1) -> bytes:
        return self._io.read(n)


def test_streams_without_readinto_give_the_same_result():
    path = DATA / "composed_ofi_1.16_efa_direct_p5_srun.log"
    data = path.read_bytes()
    assert (parse_nccl_log_stream(_ReadOnly(data), chunk_bytes=97)
            == parse_nccl_log_stream(io.BytesIO(data), chunk_bytes=97)
            == parse_nccl_log(data.decode()))


def test_pasted_command_gives_the_rank_count_when_the_log_does_not():
    """NVIDIA/nccl-tests#293: the mpirun command above an excerpt without `nranks` lines."""
    log = ("root@test1:/hpcx# mpirun --allow-run-as-root -np 2 -H a:1,b:1 -x NCCL_DEBUG=INFO "
           "/nccl-tests/build/all_reduce_perf -b 8 -e 1G -f 2 -g 1\n"
           "test1:1:1 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB ; OOB ens1:10.0.0.1<0>\n")
    s = parse_nccl_log(log)
    assert s.nranks == 2 and s.commands[0].startswith("mpirun --allow-run-as-root -np 2")
    assert parse_nccl_log(log.replace("-np 2", "-np 4")).nranks == 4
    assert parse_nccl_log(log.splitlines()[1]).nranks is None


def test_a_watchdog_record_wrapped_mid_line_is_joined():
    """huggingface/open-r1#620: a console copy hard-wrapped the record at a column."""
    head = ("[rank2]:[E424 01:11:21.160832730 ProcessGroupNCCL.cpp:629] [Rank 2] Watchdog caught "
            "collective operation timeout: WorkNCCL(SeqNum=4, OpTy")
    tail = ("pe=BROADCAST, NumelIn=112, NumelOut=112, Timeout(ms)=1800000) ran for 1800010 "
            "milliseconds before timing out.")
    data = f"{head}\n{tail}\nh:1:1 [0] NCCL INFO Using network Socket\n".encode()
    for chunk_bytes in (len(head) // 2, len(head) + 1, 1 << 20):  # the tail in the next chunk too
        (t,) = parse_nccl_log_stream(io.BytesIO(data), chunk_bytes=chunk_bytes).timeouts
        assert (t.rank, t.seq_num, t.op_type, t.timeout_ms, t.ran_for_ms) == (
            2, 4, "BROADCAST", 1800000, 1800010), chunk_bytes
    # A record cut short, with no continuation after it, keeps what it has.
    for text in (head, f"{head}\nh:1:1 [0] NCCL INFO Using network Socket"):
        (t,) = parse_nccl_log(text).timeouts
        assert (t.rank, t.seq_num, t.op_type, t.timeout_ms) == (2, 4, None, None)


def test_the_reason_the_plugin_did_not_load_is_quoted():
    """awslabs/awsome-distributed-ai#292: the plugin's libfabric is too old for it."""
    why = ("libfabric.so.1: version `FABRIC_1.7' not found (required by "
           "/env/lib/libnccl-net.so)")
    line = f"h:1:1 [0] NCCL INFO NET/Plugin : dlerror={why} No plugin found (libnccl-net.so), "
    s = parse_nccl_log(line + "using internal implementation\n")
    assert s.plugin_dlerror == why and why in s.describe()
    sockets = parse_nccl_log("h:1:1 [0] NCCL INFO NET/Plugin: Plugin load returned 2 : "
                             "libnccl-net.so: cannot open shared object file: No such file or "
                             "directory : when loading libnccl-net.so\n"
                             "h:1:1 [0] NCCL INFO Using network Socket\n")
    assert "dlerror: libnccl-net.so: cannot open shared object file" in sockets.describe()


@pytest.mark.parametrize(("log", "network", "gdr"), [
    ("h:1:1 [0] NCCL INFO Using network Socket\n", "Socket", False),
    ("NCCL INFO NET/FastSocket : Using [0]ibs108:10.0.19.12<0> [1]ibs109:10.0.19.13<0>\n",
     "FastSocket", False),
    # NCCL's own socket device line alone: the socket transport initialised, not proof of use.
    ("NCCL INFO NET/Socket : Using [0]eth0:10.0.0.1<0>\n", "Socket", None),
    # ... with no plugin and no IB device (NCCL 2.4, no `Using network`): the only transport left.
    ("NCCL INFO NET/Plugin : No plugin found (libnccl-net.so).\nNCCL INFO NET/IB : No device "
     "found.\nNCCL INFO NET/Socket : Using [0]eth0:10.0.0.1<0>\n", "Socket", False),
    ("NCCL INFO NET/IB : No device found.\nNCCL INFO NET/Socket : Using [0]eth0:10.0.0.1<0>\n",
     "Socket", None),  # a plugin may have been loaded on a line not pasted
    ("h:1:1 [0] transport/net_ib.cc:1296 NCCL WARN NET/IB : Got completion from peer "
     "10.2.0.5<33092> with error 12, opcode 0, len 0, vendor err 129 (Recv)\n", "IB", None),
])
def test_certain_facts_are_derived(log: str, network: str, gdr: bool | None):
    s = parse_nccl_log(log)
    assert (s.network, s.gdr) == (network, gdr)
    assert (s.gdr_evidence is None) == (gdr is None)


@pytest.mark.parametrize(("lines", "gdr", "counts"), [
    # NCCL >= 2.12 (src/transport/coll_net.cc): `CollNet %02d/%1d : %d [send] via COLLNET/...`.
    (["CollNet 00/0 : 0 [send] via COLLNET/SHARP/1/GDRDMA",
      "CollNet 00/0 : 0 [receive] via COLLNET/SHARP/1/GDRDMA(PCI)"], True, (2, 2)),
    # Before 2.12 (`CollNet %02d : %d`) and the first CollNet releases (`Coll %02d : %d`).
    (["CollNet 00 : 1 [send] via COLLNET/SHARP/0/GDRDMA", "Coll 01 : 1 [receive] via COLLNET/SHARP/0"],
     False, (2, 1)),
    (["CollNet 00/0 : 0 [send] via COLLNET/SHA"], None, (0, 0)),  # a line cut short
])
def test_collnet_connection_lines_are_gdr_evidence(lines: list[str], gdr: bool | None,
                                                    counts: tuple[int, int]):
    log = "".join(f"h:1:1 [0] NCCL INFO {line}\n" for line in lines)
    s = parse_nccl_log("h:1:1 [0] NCCL INFO Using network IB\n" + log)
    assert (s.gdr, (s.num_collnet_channels, s.num_collnet_gdr_channels)) == (gdr, counts)
    assert s.num_net_channels == 0 and s.network == "IB"  # CollNet lines are not NET channels
    # One NET channel line without GDRDMA makes it False whatever CollNet says.
    plain = "h:1:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] [send] via NET/IB/0\n"
    assert parse_nccl_log(plain + log).gdr is False
