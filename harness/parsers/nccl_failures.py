"""The known-failure catalogue for NCCL debug logs: line pattern -> cause -> remedy, as data.

`harness.parsers.nccl_log` searches WARN lines, NET/OFI lines (INFO too: aws-ofi-nccl >= 1.19 prints
`No eligible providers were found` at INFO), libfabric `<warn>` lines and torch `NCCL error` lines
with these patterns; the first (most specific) match explains the line.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["FAILURES", "KnownFailure"]


@dataclass(frozen=True, slots=True)
class KnownFailure:
    """One entry of the known-failure catalogue: a line pattern, its cause and the remedy."""

    pattern: str
    """Regular expression searched in WARN lines, NET/OFI lines, libfabric warnings and torch
    NCCL errors (case-sensitive)."""
    cause: str
    remedy: str
    source: str = ""
    warn_only: bool = False
    """Explains WARN lines only: an INFO line that matches it is not a failure by itself."""
    last_resort: bool = False
    """Reported only where no other entry explains a line of the log: the line is the
    consequence of a failure another line names (torch's `NCCL error in:` after NCCL's WARN)."""


#: The known-failure catalogue, most specific first; a line is attributed to its first match.
#: Sources: aws/aws-ofi-nccl src/nccl_ofi_net.cpp, src/platform-aws.cpp; NVIDIA/nccl src/init.cc;
#: the GitHub issues named (see tests/data/nccl_log/SOURCES.md).
FAILURES: tuple[KnownFailure, ...] = (
    KnownFailure(
        r"FI_EHOSTUNREACH|[Ss]ecurity [Gg]roup|Unable to insert remote address|"
        r"strerror: No route to host",
        "EFA packets between the nodes are dropped: the security group does not allow all "
        "traffic to and from itself",
        "add inbound AND outbound rules 'All traffic' whose source/destination is the security "
        "group itself (EC2 EFA user guide)",
        "aws/aws-ofi-nccl PR #1294, issues #663, #156",
    ),
    KnownFailure(
        r"Error: 4126\b|Unresponsive receiver \(reachable by EFA device but handshake failed",
        "the EFA handshake with a peer got no answer (EFA error 4126): the security group does "
        "not allow all traffic to and from itself (the outbound rule too), or the peer process "
        "never started or already exited",
        "check the security group's inbound AND outbound 'All traffic' rules to itself, then the "
        "peer rank's own log (did it start, did it crash?)",
        "ofiwg/libfabric prov/efa/src/efa_errno.h (UNESTABLISHED_RECV_UNRESP)",
    ),
    KnownFailure(
        r"Error: 4124\b|Unresponsive receiver \(connection previously established",
        "an EFA peer that had answered stopped responding (EFA error 4124): its process died or "
        "its instance or NIC failed",
        "find the peer's host id on the line and check that node (its own log, EFA health); "
        "replace it if the hardware failed",
        "ofiwg/libfabric prov/efa/src/efa_errno.h (ESTABLISHED_RECV_UNRESP)",
    ),
    KnownFailure(
        r"No eligible providers were found|provider efa output empty list",
        "libfabric offers no EFA provider: the EFA devices are not visible in this container "
        "or the EFA software is missing",
        "expose /dev/infiniband/uverbs* to the container (docker --device, EKS "
        "vpc.amazonaws.com/efa resource) and check `fi_info -p efa`",
        "aws/aws-ofi-nccl src/nccl_ofi_net.cpp; issue #889",
    ),
    KnownFailure(
        r"fi_getinfo\(\) call failed",
        "libfabric's fi_getinfo found no usable EFA interface (usually -61 No data available: "
        "no EFA device in the container)",
        "expose /dev/infiniband/uverbs* to the container and check `fi_info -p efa`",
        "aws/aws-ofi-nccl issue #1020",
    ),
    KnownFailure(
        r"EFA provider requires at least libfabric version",
        "the libfabric in the image is too old for this aws-ofi-nccl",
        "install a current EFA installer (libfabric >= 1.22) or use the libfabric the plugin "
        "was built against (LD_LIBRARY_PATH)",
        "aws/aws-ofi-nccl src/nccl_ofi_net.cpp",
    ),
    KnownFailure(
        r"GDR disabled on GDR-supported instance type",
        "GPUDirect RDMA is not available to EFA on an instance type that requires it",
        "load nvidia_peermem (or use a driver with DMA-BUF support), do not set "
        "FI_EFA_USE_DEVICE_RDMA=0 or FI_HMEM_DISABLE_P2P=1",
        "aws/aws-ofi-nccl src/nccl_ofi_net.cpp (domain-facts.md)",
    ),
    KnownFailure(
        r"Need to force simple protocol: GDR not supported",
        "GPUDirect RDMA is not available to EFA here: aws-ofi-nccl forces the Simple protocol "
        "and stages GPU buffers through host memory (required on p4d/p5/p6; normal on instance "
        "types without GDR, such as g5)",
        "on p4d/p5/p6: load nvidia_peermem (or use a driver with DMA-BUF support), do not set "
        "FI_EFA_USE_DEVICE_RDMA=0 or FI_HMEM_DISABLE_P2P=1",
        "aws/aws-ofi-nccl src/nccl_ofi_net.cpp (domain-facts.md)",
    ),
    KnownFailure(
        r"Unable to find a protocol that worked",
        "aws-ofi-nccl could not start either of its transport protocols (RDMA, SENDRECV)",
        "check the EFA devices, libfabric version and the lines before this one",
        "aws/aws-ofi-nccl src/nccl_ofi_net.cpp",
    ),
    KnownFailure(
        r"Couldn'?t find any optimal provider|Could not find any optimal provider|"
        r"Only EFA provider is supported",
        "an old aws-ofi-nccl (<= 1.5) found no EFA provider",
        "expose the EFA devices to the container and upgrade aws-ofi-nccl",
        "NVIDIA/nccl issue #229; aws/aws-ofi-nccl issue #67",
    ),
    KnownFailure(
        r"Failed to initialize NET plugin|aws-ofi-nccl initialization failed|"
        r"OFI plugin initNet\(\) failed",
        "the aws-ofi-nccl NET plugin failed to initialize, so NCCL fell back to another network "
        "(usually TCP sockets)",
        "read the NET/OFI lines before it; check /dev/infiniband/uverbs* in the container, "
        "`fi_info -p efa`, and LD_LIBRARY_PATH for the plugin and libfabric",
        "NVIDIA/nccl src/init.cc; aws/aws-ofi-nccl src/nccl_ofi_net.cpp",
    ),
    KnownFailure(
        r"Failed to initialize any NET plugin",
        "no NET plugin initialised, and NCCL_NET (or NCCL_NET_PLUGIN) names a network, so NCCL "
        "stops instead of falling back (the job fails with 'invalid usage')",
        "read the plugin's lines before it (its devices missing in the container, the library "
        "not on LD_LIBRARY_PATH, a plugin built for another NCCL); check NCCL_NET and "
        "NCCL_NET_PLUGIN",
        "NVIDIA/nccl src/plugin/net.cc",
    ),
    KnownFailure(
        r"Attribute \w+ of node \w+ not found",
        "NCCL could not read the topology (NCCL_TOPO_FILE, set by aws-ofi-nccl or by hand, does "
        "not match this NCCL version or instance)",
        "use an aws-ofi-nccl release that supports this NCCL version; unset a hand-set "
        "NCCL_TOPO_FILE",
        "aws/aws-ofi-nccl issue #476",
    ),
    KnownFailure(
        r"no socket interface found|No usable listening interface found",
        "NCCL found no network interface for its bootstrap and socket traffic: "
        "NCCL_SOCKET_IFNAME names an interface that does not exist in this container, or "
        "excludes every one",
        "set NCCL_SOCKET_IFNAME to an interface the container has (`ip -br link`: eth0, ens5, "
        "...) or unset it",
        "NVIDIA/nccl src/bootstrap.cc, src/misc/socket.cc",
    ),
    KnownFailure(
        r"NVLink SHARP|nvls\.cc:\d+.*Cuda failure",
        "NCCL could not set up NVLink SHARP (NVLS) multicast memory on the NVSwitches: the "
        "fabric manager is not running or was restarted without a GPU reset (or IMEX is not "
        "provisioned)",
        "check `systemctl status nvidia-fabricmanager` and `nvidia-smi -q` (Fabric State "
        "Completed, Status Success); after a fabric manager restart reset the GPUs or reboot; "
        "NCCL_NVLS_ENABLE=0 only works around it",
        "NVIDIA/nccl src/transport/nvls.cc; issues #1338, #1488 (maintainers: fabric manager "
        "restart); NVIDIA/DCGM issue #304",
    ),
    KnownFailure(
        r"Cuda failure '?out of memory|CUDA error: out of memory|Cuda failure 2 ",
        "a GPU ran out of memory while NCCL allocated its buffers",
        "free GPU memory before NCCL init (another process on the GPU?), or lower "
        "NCCL_BUFFSIZE / the number of communicators",
        "NVIDIA/nccl src/include/checks.h",
    ),
    KnownFailure(
        r"uncorrectable ECC error",
        "a GPU hit an uncorrectable ECC error (CUDA's cudaErrorECCUncorrectable): its memory "
        "returned corrupted data, and the job on it cannot go on",
        "take the node out of the job: `nvidia-smi -q -d ECC` (volatile uncorrected count) and "
        "`-d ROW_REMAPPER` (a pending remap needs a GPU reset); an uncorrected error that comes "
        "back after the reset means replacing the GPU",
        "CUDA runtime API (cudaErrorECCUncorrectable); shared/domain-facts.md (ECC / memory); "
        "pytorch/pytorch issue #113128",
    ),
    KnownFailure(
        r"watchdog thread terminated with exception: CUDA error",
        "a CUDA error reached PyTorch's NCCL watchdog (it polls each collective's completion "
        "event): a kernel on this GPU failed; `unknown error` is often a GPU fault (Xid)",
        "check the node's `dmesg` for Xid and `nvidia-smi -q` for ECC errors; rerun with "
        "CUDA_LAUNCH_BLOCKING=1 to find the kernel",
        "pytorch torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp (the watchdog); "
        "deepspeedai/DeepSpeed issue #4648",
    ),
    KnownFailure(
        r"Cuda failure|unhandled cuda error|ncclUnhandledCudaError",
        "a CUDA call inside NCCL failed (the `Cuda failure '...'` WARN line names it): a GPU in "
        "a bad state, a driver/CUDA mismatch, or CUDA used before a fork",
        "read the `Cuda failure` line; check `nvidia-smi` and `dmesg` for Xid errors; rerun on "
        "a healthy node",
        "NVIDIA/nccl src/include/checks.h",
    ),
    KnownFailure(
        r"ibv_reg_mr|Cannot allocate memory|memory registration failed",
        "memory registration failed: the locked-memory limit is too low",
        "run the container with `--ulimit memlock=-1:-1` (ulimit -l unlimited)",
        "aws/aws-ofi-nccl issue #803 (docker run --ulimit memlock=-1:-1)",
    ),
    KnownFailure(
        r"/dev/shm|shmutils",
        "NCCL could not allocate shared memory: /dev/shm is too small in this container",
        "run the container with --shm-size=1g or more (or --ipc=host)",
        "NVIDIA/nccl src/misc/shmutils.cc",
    ),
    KnownFailure(
        r"unhandled system error",
        "NCCL hit a failing system call (often /dev/shm too small, a missing device or a "
        "network interface it cannot use)",
        "rerun with NCCL_DEBUG=INFO and read the WARN line before it; give the container "
        "--shm-size or --ipc=host, check NCCL_SOCKET_IFNAME",
        "NVIDIA/nccl src/include/socket.h, src/transport/shm.cc",
    ),
    KnownFailure(
        r"Got completion (?:from peer \S+ )?with (?:error 4,|status=4 )",
        "an InfiniBand/RoCE transfer failed with a local protection error (IB error 4): GPUDirect "
        "RDMA is broken on this node, usually by PCIe ACS being enabled",
        "disable PCIe ACS (BIOS/setpci) and check nvidia_peermem or DMA-BUF; NCCL_NET_GDR_LEVEL=0 "
        "confirms it (the error goes away, bandwidth drops)",
        "NVIDIA/nccl issues #928 (maintainer: 'IB error 4 is usually due to ACS'), #214",
    ),
    KnownFailure(
        r"Got completion (?:from peer \S+ )?with (?:error 12,|status=12 )",
        "an InfiniBand/RoCE transfer timed out (IB error 12, retry count exceeded): the NICs "
        "cannot reach each other over RDMA (link, cable or switch fault, a dead peer, or on RoCE "
        "a wrong GID index / traffic class)",
        "run ib_write_bw between the two nodes; check ibstat and the switch; on RoCE set "
        "NCCL_IB_GID_INDEX to the RoCE v2 GID (show_gids)",
        "NVIDIA/nccl issues #426 (maintainer: 'an error 12 is a timeout'), #1405, #1814",
    ),
    KnownFailure(
        r"Call to ibv_modify_qp failed",
        "NCCL could not connect an InfiniBand/RoCE queue pair to its peer (no route to the peer's "
        "GID: RoCE GID index or routing, or a rail-only fabric where only NICs of the same rail "
        "reach each other)",
        "set NCCL_IB_GID_INDEX to the RoCE v2 GID (show_gids), restrict NCCL_IB_HCA to connected "
        "ports; on rail-only fabrics set NCCL_CROSS_NIC=0",
        "NVIDIA/nccl-tests issue #185; NVIDIA/nccl issues #2013, #925",
    ),
    KnownFailure(
        r"NET/IB ?: Got completion",
        "an InfiniBand/RoCE transfer completed with an error",
        "read the error number on the line (4: GPUDirect RDMA/ACS, 12: timeout, 5: flushed after "
        "an earlier error); check ibstat and both nodes' links",
        "NVIDIA/nccl src/transport/net_ib.cc",
    ),
    KnownFailure(
        r"remote process exited or there was a network error|Connection closed by remote peer|"
        r"Connection reset by peer|failed : Broken pipe",
        "a peer rank died or the network between the nodes failed",
        "find the first rank that failed (its own log) and check that node",
        "NVIDIA/nccl src/proxy.cc, src/misc/socket.cc (`Call to recv from ... failed : Broken "
        "pipe`: issue #795)",
    ),
    KnownFailure(
        r"Duplicate GPU detected",
        "two ranks on this node use the same GPU",
        "map LOCAL_RANK to the device (torch.cuda.set_device(local_rank)) and check "
        "CUDA_VISIBLE_DEVICES",
        "NVIDIA/nccl src/init.cc",
    ),
    KnownFailure(
        r"completed with error|Couldn'?t open AV",
        "a transfer of the aws-ofi-nccl plugin failed in libfabric (peer gone, address vector "
        "or endpoint error): over EFA, or over HPE Slingshot's cxi provider",
        "read the whole line (RC/prov_errno: RC 113 is no route to the host); check both "
        "nodes' NICs (EFA: health and the security group; Slingshot: the cxi links)",
        "aws/aws-ofi-nccl issues #24, #161; NVIDIA/nccl issue #1928 (cxi `Error: 2 "
        "(UNDELIVERABLE)`)",
    ),
    KnownFailure(
        # torch's `DistBackendError: NCCL error in: <file>:<line>, internal error - please
        # report this issue to the NCCL developers, NCCL version 2.18.6` that no entry above
        # explains (tests/data/nccl_log/real_ray_vllm_internal_error_last_error_topology.log):
        # an error all the same, never "no problem".
        r"NCCL error in: ",
        "a call PyTorch made into NCCL returned an error (its class is on the line: internal "
        "error, unhandled system error, invalid usage...): the collective or the communicator "
        "failed",
        "read torch's `Last error:` line after it and the NCCL WARN lines before it (they say "
        "why); with neither, rerun with NCCL_DEBUG=WARN (NCCL 2.18 reports network errors as "
        "internal errors)",
        "pytorch torch/csrc/distributed/c10d/NCCLUtils.hpp (C10D_NCCL_CHECK); NVIDIA/nccl "
        "issues #1092 (maintainer: 2.18 network errors read 'Internal Error'), #1247",
        last_resort=True,
    ),
    KnownFailure(
        # torch's watchdog, `ProcessGroupNCCL.cpp:630] [Rank 0] Some NCCL operations have failed
        # or timed out. ... we are taking the entire process down.` where the copy kept no
        # line naming the collective (NVIDIA/nccl issue #1610).
        r"Some NCCL operations have failed or timed out",
        "PyTorch's NCCL watchdog found a collective that failed or timed out and took the "
        "process down (the watchdog's own line, `Watchdog caught collective operation timeout` "
        "or the NCCL error, names the collective and the rank)",
        "find the watchdog's line of the first rank that failed (its SeqNum and OpType) and "
        "that rank's own log; check the node it ran on",
        "pytorch torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp (the watchdog's abort); "
        "NVIDIA/nccl issue #1610",
        last_resort=True,
    ),
    KnownFailure(
        r"watchdog thread terminated with exception",
        "PyTorch's NCCL watchdog stopped on an exception (named on the line after `with "
        "exception:`), and with it the process",
        "read the exception on the line and the traceback after it; check the node's GPUs "
        "(`dmesg` Xid, `nvidia-smi -q`) and the other ranks' logs",
        "pytorch torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp (the watchdog)",
        last_resort=True,
    ),
    KnownFailure(
        r"Test (?:NCCL|CUDA) failure",
        "nccl-tests stopped on an NCCL or CUDA error (the quoted text is the error NCCL or CUDA "
        "returned): the collective never ran to completion",
        "read the quoted error and the NCCL WARN / NET/OFI lines before and after it (they say "
        "why); with none, rerun with NCCL_DEBUG=INFO",
        "NVIDIA/nccl-tests src/common.h (NCCLCHECK / CUDACHECK); nccl-tests issues #166, #252",
    ),
    KnownFailure(
        r"\*\*\* Process received signal \*\*\*",
        "a process of the job was killed by a signal (Open MPI's crash banner; the `Signal:` "
        "line after it names it, e.g. Segmentation fault): the run cannot complete",
        "read the backtrace under the banner: its top frames name the library that crashed "
        "(libnccl, the NET plugin, the application); rerun with NCCL_DEBUG=INFO for NCCL's "
        "last lines before it",
        "Open MPI (opal/util/stacktrace.c); NVIDIA/nccl issue #1669 (a crash in NCCL's RAS "
        "thread)",
    ),
    KnownFailure(
        r"NET/OFI",
        "the aws-ofi-nccl plugin reported an error",
        "read the line and the NET/OFI lines before it; check the plugin, libfabric and EFA "
        "versions",
        "aws/aws-ofi-nccl",
        warn_only=True,
    ),
)
