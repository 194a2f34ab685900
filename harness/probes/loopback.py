"""Per-device RDMA loopback: server and client of one benchmark on this host, through one
device, bounded. EFA: fabtests `fi_rdm_pingpong -p efa -d <dev>-rdm` (what HyperPod-style
checks run: awsome-distributed-training `6-efa-loopback.sh` runs a fabtests pingpong to
localhost per device); InfiniBand: perftest `ib_write_bw -d <dev> --report_gbits` (Azure AzHC
runs it per HCA with client and server on the same host). The output is parsed by
harness.parsers.rdma_bench; a tool that is missing, fails, hangs or prints garbage says so."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from harness.base import proc
from harness.base.proc_result import ProcResult
from harness.parsers import ParseError
from harness.parsers.rdma_bench import parse_fabtests, parse_perftest

__all__ = ["LOOPBACK_TIMEOUT_S", "SERVER_START_S", "Loopback", "loopback", "tool_for"]

#: Bound of one device's server + client, s (awsome-distributed-training allows 120 s).
LOOPBACK_TIMEOUT_S = 60.0
#: Time the server is given to listen before the client connects, s.
SERVER_START_S = 1.0


@dataclass(frozen=True, slots=True)
class Loopback:
    device: str
    tool: str
    gbit_per_s: float | None = None
    latency_us: float | None = None
    problem: str | None = None


def tool_for(fabric: str) -> str:
    return "fi_rdm_pingpong" if fabric == "efa" else "ib_write_bw"


def _argv(fabric: str, device: str, port: int) -> list[str]:
    if fabric == "efa":
        return ["fi_rdm_pingpong", "-p", "efa", "-d", f"{device}-rdm", "-P", str(port)]
    return ["ib_write_bw", "-d", device, "--report_gbits", "-p", str(port)]


def loopback(fabric: str, device: str, *, port: int = 18515,
             timeout_s: float = LOOPBACK_TIMEOUT_S) -> Loopback:
    """Run the fabric's benchmark server and client on this host through `device`."""
    tool = tool_for(fabric)
    if proc.which(tool) is None:
        return Loopback(device, tool, problem=f"{tool} is not installed")
    server_argv = _argv(fabric, device, port)
    box: dict[str, ProcResult] = {}
    server = threading.Thread(
        target=lambda: box.setdefault("server", proc.run(server_argv, timeout_s=timeout_s)),
        name=f"preflight-loopback-{device}", daemon=True)
    start = time.monotonic()
    server.start()
    time.sleep(SERVER_START_S)
    left = max(1.0, timeout_s - (time.monotonic() - start))
    client = proc.run([*server_argv, "localhost"], timeout_s=left)
    server.join(left + 3 * proc.KILL_GRACE_S)
    if not client.ok:
        return Loopback(device, tool, problem=f"client: {client.describe()}")
    try:
        if fabric == "efa":
            table = parse_fabtests(client.stdout)
            return Loopback(device, tool, table.peak_gbit_per_s(), table.latency_us())
        result = parse_perftest(client.stdout)
        return Loopback(device, tool, result.avg_gbit_per_s())
    except ParseError as exc:
        return Loopback(device, tool, problem=f"{tool} output: {exc}")
