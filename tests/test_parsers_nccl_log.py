"""NCCL debug log parser: a table over recorded logs (tests/data/nccl_log, sources in SOURCES.md),
wrappers, streaming/chunking invariance, the failure catalogue and the inspect command."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from harness.cli import main
from harness.parsers import ParseError, nccl_log
from harness.parsers.nccl_log import FAILURES, parse_nccl_log, parse_nccl_log_stream

DATA = Path(__file__).parent / "data" / "nccl_log"

# file -> expected subset of the inspect JSON
EXPECTED = {
    "composed_ofi_1.16_efa_direct_p5_srun.log": dict(
        nccl_version="2.23.4+cuda12.4", plugin="aws-ofi-nccl", plugin_version="1.16.3",
        network="Libfabric", provider="efa", fabric="efa-direct", num_nics=32, protocol="RDMA",
        gdr=True, num_net_channels=16, num_gdr_channels=16, nranks=16,
        env_added={"NCCL_BUFFSIZE": "8388608", "NCCL_P2P_NET_CHUNKSIZE": "524288"},
        warnings=[], errors=[], timeouts=[]),
    "composed_ofi_1.9_aws_libfabric_openmpi.log": dict(
        nccl_version="2.18.5+cuda12.2", plugin_version="1.9.1-aws", network="AWS Libfabric",
        provider="efa", fabric=None, num_nics=4, gdr=True, num_net_channels=4, nranks=16),
    "real_p5en_found16.log": dict(
        plugin="aws-ofi-nccl", network="Libfabric", provider="efa", num_nics=16, gdr=None,
        nranks=2),
    "real_ofi_1.3_sagemaker.log": dict(
        nccl_version="2.10.3+cuda11.3", plugin_version="1.3.0aws", network="AWS Libfabric",
        provider="efa", num_nics=None, env_added={"FI_EFA_FORK_SAFE": "1"}),
    "real_ofi_1.4_p4d.log": dict(plugin_version="1.4.0aws", network="AWS Libfabric",
                                 provider="efa"),
    "composed_socket_fallback_syslog.log": dict(
        plugin="aws-ofi-nccl", plugin_version="1.11.0-aws", network="Socket", provider="socket",
        fabric=None, num_nics=2, gdr=False, num_net_channels=4, num_gdr_channels=0, nranks=2),
    "composed_loaded_but_unused_iso.log": dict(
        plugin="aws-ofi-nccl", network="Socket", provider="socket", protocol=None, num_nics=1,
        gdr=False),
    "real_socket_no_plugin.log": dict(
        nccl_version="2.19.3+cuda12.3", plugin=None, network="Socket", provider="socket",
        num_nics=1, nranks=1),
    "real_no_plugin_socket_2.4.log": dict(nccl_version="2.4.8+cuda10.1", plugin=None,
                                          network="Socket", provider="socket"),
    "real_ib_gdrdma.log": dict(network="IB", provider="ib", gdr=True, num_net_channels=8,
                               num_gdr_channels=8),
    "real_ib_no_gdr.log": dict(nccl_version="2.4.7+cuda10.0", network="IB", provider="ib",
                               num_nics=1, gdr=False, num_net_channels=4, num_gdr_channels=0),
    "real_ibext_v8.log": dict(network="IBext_v8", provider="ib", gdr=False, num_net_channels=5),
    "composed_efa_no_gdr_crlf.log": dict(
        nccl_version="2.21.5+cuda12.4", plugin_version="1.14.2", network="Libfabric",
        provider="efa", fabric="efa", num_nics=1, protocol="SENDRECV", gdr=False,
        num_net_channels=4, num_gdr_channels=0),
    "composed_truncated.log": dict(plugin_version="1.15.0", provider="efa", num_nics=16,
                                   gdr=True, num_net_channels=1, num_gdr_channels=1),
    "real_openmpi_ring_av_error.log": dict(network="AWS Libfabric", gdr=False,
                                           num_net_channels=3,
                                           warnings=["NET/OFI Couldn't open AV. RC: -22, "
                                                     "ERROR: Invalid argument"]),
    "real_cloudwatch_fi_getinfo.log": dict(nccl_version="2.21.5+cuda12.8", network=None,
                                           provider=None, gdr=None),
    "real_fi_getinfo_failed_1.14.log": dict(plugin="aws-ofi-nccl", network=None,
                                            warnings=["NET/OFI OFI fi_getinfo() call failed: "
                                                      "No data available"]),
    "real_old_function_format.log": dict(plugin="aws-ofi-nccl", network=None,
                                         env_added={"NCCL_TOPO_FILE": "/home/deepspeed/aws-ofi-"
                                                    "nccl/install/share/aws-ofi-nccl/xml/p4d-"
                                                    "24xl-topo.xml", "RDMAV_FORK_SAFE": "1"}),
    "real_old_plugin_tcp_provider.log": dict(nccl_version="2.4.6+cuda10.0",
                                             plugin="aws-ofi-nccl", network=None,
                                             provider="tcp;ofi_rxm", gdr=None),
    "real_p5_topology_xml_error.log": dict(network=None, warnings=[
        "Attribute arch of node cpu not found"]),
    "real_watchdog_timeout.log": dict(network=None, timeouts=[
        dict(rank=0, seq_num=1580, op_type="ALLREDUCE", timeout_ms=600000, ran_for_ms=600060),
        dict(rank=4, seq_num=1580, op_type="ALLREDUCE", timeout_ms=600000, ran_for_ms=600067)]),
    "real_g7e_ofi_1.18_sendrecv_no_gdr.log": dict(
        nccl_version="2.29.2+cuda12.8", plugin="aws-ofi-nccl", plugin_version="1.18.0",
        network="Libfabric", provider="efa", fabric="efa", num_nics=1, protocol="SENDRECV",
        gdr=False, num_net_channels=8, num_gdr_channels=0, nranks=2,
        env_added={"FI_EFA_FORK_SAFE": "1", "NCCL_BUFFSIZE": "8388608",
                   "NCCL_P2P_NET_CHUNKSIZE": "524288", "NCCL_PROTO": "simple",
                   "NCCL_TUNER_PLUGIN": "libnccl-net.so"}),
    "real_cloudwatch_gdr_disabled_socket.log": dict(
        plugin="aws-ofi-nccl", network="Socket", provider="socket", num_nics=1, gdr=False,
        num_net_channels=0),
    "real_sagemaker_ofi_1.11_p4d_ts_lines.log": dict(
        plugin="aws-ofi-nccl", plugin_version="1.11.0-aws", network="AWS Libfabric",
        provider="efa", fabric=None, num_nics=4, protocol="SENDRECV", gdr=True,
        num_net_channels=6, num_gdr_channels=6,
        env_added={"FI_EFA_FORK_SAFE": "1", "NCCL_NVLSTREE_MAX_CHUNKSIZE": "512KiB",
                   "NCCL_NVLS_CHUNKSIZE": "512KiB",
                   "NCCL_TOPO_FILE": "/usr/local/share/aws-ofi-nccl/xml/p4d-24xl-topo.xml",
                   "NCCL_PROTO": "simple"},
        warnings=[], errors=[]),
    "real_ofi_1.6_cxi_slingshot.log": dict(
        plugin="aws-ofi-nccl", plugin_version="1.6.0", network="AWS Libfabric", provider="cxi",
        num_nics=8, gdr=None, nranks=2, errors=[]),
    "real_ofi_1.21_cxi_no_provider_any_net.log": dict(
        nccl_version="2.28.3+cuda12.9", plugin="aws-ofi-nccl", plugin_version="1.21.1",
        network=None, provider=None, num_nics=None, gdr=None),
    "real_ibext_hpcx_sharp_mpijob.log": dict(network="IBext", provider="ib", num_nics=1,
                                             gdr=None,
                                             warnings=["Cuda failure 'initialization error'"]),
    "real_nccl_2.28_ib_assigned_plugin.log": dict(plugin=None, network="IB", provider="ib",
                                                  num_nics=1, nranks=8, errors=[]),
    "real_roce_modify_qp_unreachable.log": dict(
        nccl_version="2.19.3+cuda12.3", plugin=None, network="IB", provider="ib", num_nics=2,
        gdr=None),
    "real_efa_handshake_4126_torch_remote_error.log": dict(
        nccl_version="2.27.3", plugin="aws-ofi-nccl", network="Libfabric", gdr=True,
        num_net_channels=4, num_gdr_channels=4),
    "real_gke_bad_socket_ifname.log": dict(nccl_version="2.22.3", network=None,
                                           warnings=["Bootstrap : no socket interface found"],
                                           timeouts=[]),
    "real_gke_node_loss_survivor.log": dict(nccl_version="2.22.3+cuda12.6", network=None,
                                            timeouts=[]),
    "real_roce_gdr_disabled_hca.log": dict(plugin=None, network="IB", provider="ib", num_nics=2,
                                           gdr=False, num_net_channels=0, nranks=16,
                                           errors=[]),
    "real_gke_socket_gdr_disabled_2.22.log": dict(
        nccl_version="2.22.3+cuda12.6", plugin=None, network="Socket", provider="socket",
        num_nics=1, gdr=False, num_net_channels=4, num_gdr_channels=0),
    # Only NCCL's IB transport (or an IB plugin) prints `NET/IB` WARN lines (issue 13).
    "real_ib_completion_error4.log": dict(network="IB", gdr=None),
    "real_ib_plugin_status12.log": dict(network="IB", gdr=None),
    "real_watchdog_ray_vllm.log": dict(timeouts=[
        dict(rank=1, seq_num=158046, op_type="GATHER", timeout_ms=600000, ran_for_ms=600027)]),
    "real_watchdog_wrapped_lines.log": dict(timeouts=[
        dict(rank=1, seq_num=4, op_type="BROADCAST", timeout_ms=None),
        dict(rank=2, seq_num=4, op_type=None, timeout_ms=None),
        dict(rank=3, seq_num=4, op_type=None, timeout_ms=None)]),
    "real_watchdog_what_progress_bar.log": dict(timeouts=[
        dict(rank=0, seq_num=96120, op_type="ALLREDUCE", ran_for_ms=25624887),
        dict(rank=0, seq_num=96117, op_type="ALLREDUCE", ran_for_ms=25625613),
        dict(rank=7, seq_num=64088, op_type="ALLREDUCE", ran_for_ms=25625251),
        dict(rank=5, seq_num=9141, op_type="_ALLGATHER_BASE", ran_for_ms=600020)]),
    "real_watchdog_old.log": dict(timeouts=[
        dict(rank=1, seq_num=469508, op_type="ALLREDUCE", timeout_ms=1800000,
             ran_for_ms=1802212),
        dict(rank=3, seq_num=469508, op_type="ALLREDUCE", timeout_ms=1800000,
             ran_for_ms=1802211)]),
}

# file -> the causes (substrings) its errors must name, in catalogue order
EXPECTED_CAUSES = {
    "composed_socket_fallback_syslog.log": ["libfabric offers no EFA provider",
                                            "NET plugin failed to initialize",
                                            "NET plugin failed to initialize"],
    "composed_security_group.log": ["security group"],
    "composed_init_failures.log": ["ran out of memory", "/dev/shm is too small",
                                   "failing system call"],
    "real_cloudwatch_fi_getinfo.log": ["libfabric offers no EFA provider"],
    "real_fi_getinfo_failed_1.14.log": ["fi_getinfo found no usable EFA"],
    "real_old_function_format.log": ["old aws-ofi-nccl", "plugin reported an error"],
    "real_openmpi_ring_av_error.log": ["EFA transfer failed"],
    "composed_efa_no_gdr_crlf.log": ["GPUDirect RDMA is not available"],
    "real_p5_topology_xml_error.log": ["could not read the topology"],
    "composed_ofi_1.16_efa_direct_p5_srun.log": [],
    "real_socket_no_plugin.log": [],
    "real_g7e_ofi_1.18_sendrecv_no_gdr.log": ["GPUDirect RDMA is not available"],
    "real_ofi_1.21_cxi_no_provider_any_net.log": ["libfabric offers no EFA provider",
                                                  "could not start either of its transport",
                                                  "NET plugin failed to initialize",
                                                  "NCCL stops instead of falling back",
                                                  "plugin reported an error",
                                                  "plugin reported an error"],
    "real_roce_modify_qp_unreachable.log": ["could not connect an InfiniBand/RoCE queue pair",
                                            "peer rank died"],
    "real_ib_completion_error4.log": ["local protection error", "local protection error"],
    "real_ib_plugin_status12.log": ["timed out (IB error 12", "timed out (IB error 12"],
    "real_sagemaker_ofi_1.11_p4d_ts_lines.log": [],
    "real_nvls_bind_failed_401.log": ["NVLink SHARP (NVLS)"],
    "real_nvls_cuda_failure_invalid_argument.log": ["NVLink SHARP (NVLS)"],
    "real_ibext_hpcx_sharp_mpijob.log": ["a CUDA call inside NCCL failed"],
    "real_gke_bad_socket_ifname.log": ["no network interface for its bootstrap"],
    "real_gke_node_loss_survivor.log": ["peer rank died"] * 4,
    "real_efa_handshake_4126_torch_remote_error.log": ["EFA handshake with a peer got no answer",
                                                       "EFA handshake with a peer got no answer",
                                                       "peer rank died"],
    "real_ofi_1.6_cxi_slingshot.log": [],
    "real_cloudwatch_gdr_disabled_socket.log": ["GPUDirect RDMA is not available",
                                                "NET plugin failed to initialize",
                                                "plugin reported an error",
                                                "plugin reported an error"],
}


def _json(name: str) -> dict:
    return parse_nccl_log((DATA / name).read_text(encoding="utf-8")).to_json()


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_recorded_logs_parse_to_expected_fields(name: str):
    got = _json(name)
    for key, want in EXPECTED[name].items():
        if key == "timeouts":
            assert [{k: t[k] for k in want[0]} for t in got[key]] == want
        else:
            assert got[key] == want, key


@pytest.mark.parametrize("name", sorted(EXPECTED_CAUSES))
def test_known_failures_are_explained_in_catalogue_order(name: str):
    causes = [e["cause"] for e in _json(name)["errors"]]
    assert len(causes) == len(EXPECTED_CAUSES[name]), causes
    for cause, want in zip(causes, EXPECTED_CAUSES[name], strict=True):
        assert want in cause
    for error in _json(name)["errors"]:
        assert error["remedy"] and error["line"]


def test_json_has_exactly_the_documented_keys():
    assert list(_json("composed_ofi_1.16_efa_direct_p5_srun.log")) == [
        "nccl_version", "plugin", "plugin_version", "network", "provider", "fabric", "num_nics",
        "protocol", "gdr", "gdr_evidence", "network_evidence", "libfabric_version", "platform",
        "num_net_channels", "num_gdr_channels", "num_collnet_channels",
        "num_collnet_gdr_channels", "nranks", "env_added",
        "warnings", "errors", "timeouts", "commands_seen",
    ]


@pytest.mark.parametrize("name", ["garbage.txt", "empty.log"])
def test_garbage_and_empty_input_raise(name: str):
    with pytest.raises(ParseError, match="nothing recognised as an NCCL debug log"):
        parse_nccl_log((DATA / name).read_text(encoding="utf-8", errors="replace"))


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


def test_gdr_not_supported_does_not_claim_the_instance_requires_gdr():
    # g7e (aws-ofi-nccl 1.18): the plugin only says GDR is not supported; whether the instance
    # type needs it is the profile's call (PF-NET-009), not the log's.
    (hit,) = _json("real_g7e_ofi_1.18_sendrecv_no_gdr.log")["errors"]
    assert "requires it" not in hit["cause"] and "Simple protocol" in hit["cause"]


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


@pytest.mark.parametrize(("log", "network", "gdr"), [
    ("h:1:1 [0] NCCL INFO Using network Socket\n", "Socket", False),
    ("NCCL INFO NET/FastSocket : Using [0]ibs108:10.0.19.12<0> [1]ibs109:10.0.19.13<0>\n",
     "FastSocket", False),
    # NCCL's own socket device line alone: the socket transport initialised, not proof of use.
    ("NCCL INFO NET/Socket : Using [0]eth0:10.0.0.1<0>\n", "Socket", None),
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
