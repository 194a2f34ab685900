"""The NCCL debug log's line grammar: what the byte scanner of harness.parsers.nccl_log finds in
each chunk, and the patterns harness.parsers.nccl_log_payloads reads each distinct payload with.
Every pattern cites the source that prints its line.
"""

from __future__ import annotations

import re

__all__ = [
    "ANSI_BYTES", "DEV_INDEX", "DOCKER_LINE", "GDR_DISABLED", "IB_DEVS", "LIBFABRIC_WARN", "LOADED",
    "LOADED_VERSION", "MAIN", "NRANKS", "OFI_LITERALS", "OFI_RULES", "OLD_PLUGIN", "OLD_PLUGIN_LITERAL",
    "PLUGIN_FAILED", "RANK_LINE", "RETRY", "SOCKET_DEVS", "USING_NETWORK", "VERSION", "WATCHDOG",
    "WATCHDOG_END", "WATCHDOG_FIELDS", "first_line", "line_after", "line_of", "payload_text",
    "segments_with",
]

# --- Scanning --------------------------------------------------------------------------------
# Whole chunks are searched with two literal-prefixed regexes (C speed); the matched lines
# are de-duplicated with a dict (every rank prints the same ones), so each distinct line is
# interpreted (and each distinct channel line counted) once in Python. CR and everything after
# a `|` (a CloudWatch console copy, `| ts | line | line`) are cut off later, per distinct payload.

# Candidate lines: WARN, the INFO payloads whose first letter can start a fact (NET/..., NCCL
# version, Using network, comm/ncclCommInitRank/Init timings (nranks), Failed to initialize,
# socketPollConnect retries, GPU Direct RDMA verdicts per GPU and NIC),
# Channel/Ring lines that go `via NET/` (not the P2P/SHM ones: many, and distinct per rank) and
# CollNet connection lines that go `via COLLNET/` (harness.parsers.nccl_log_payloads.COLLNET),
# torch's `NCCL error`, and PyTorch's watchdog lines (ProcessGroupNCCL.cpp / WorkNCCL(SeqNum).
# A cheap first-letter filter beats a full alternation in sre; Python sorts out the rest, once
# per distinct line. Finding the NET channel lines in this pass costs less than a second pass.
# `[^\n]*` rather than `.*` (same match without DOTALL): sre runs it ~35% faster.
MAIN = re.compile(
    rb"NCCL[ .(](?:INFO (?:[NUcnIFsG]|[CR][^\n]*via (?:NET|COLLNET)/)|WARN|error|version|cpp:|SeqNum)"
    rb"[^\n]*")
#: harness.parsers.unwrap.ANSI for bytes (the ESC forms: a chunk is searched for ESC by memchr
#: first, so an uncoloured log pays nothing).
ANSI_BYTES = re.compile(rb"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07\n]*\x07")
#: A docker json-file record at a line's start (harness.parsers.unwrap.docker_line decodes it).
DOCKER_LINE = re.compile(rb"(?m)^[ \t]*\{\"log\":")
#: libfabric's own warnings (`libfabric:85:...:fi_getinfo_():1392<warn> fi_getinfo: provider efa
#: output empty list`): one more pass over each chunk.
LIBFABRIC_WARN = re.compile(rb"<warn> ([^\n]*)")
#: aws-ofi-nccl's own logger (its test binaries; plugins NCCL did not load): `INFO: Function:
#: ofi_init Line: 1076: NET/OFI ...`. Searched only in chunks without NCCL lines.
OLD_PLUGIN_LITERAL = b"Function: "
OLD_PLUGIN = re.compile(r"(INFO|WARN): Function: \w+ Line: [0-9]+: (NET/OFI .*)")


def payload_text(raw: bytes) -> str:
    """A payload as text: cut at `|` (CloudWatch copies), without CR and outer blanks."""
    return raw.partition(b"|")[0].decode("utf-8", "replace").strip()


def line_of(chunk: bytes, raw: bytes, end: int, anchor: bytes) -> str:
    """The line that ends in `raw` (its first occurrence in the chunk), from the `|`-separated
    segment that holds `anchor`: `MAIN` matched only the line's tail, and what stands before it
    matters (the rank before `WorkNCCL(SeqNum=`, the source file before `NCCL WARN Cuda failure`).
    Called once per distinct tail, for these rare tails only."""
    stop = chunk.find(raw, 0, end) + len(raw)
    line = bytes(chunk[chunk.rfind(b"\n", 0, stop) + 1:stop])
    cut = line.rfind(b"|", 0, max(line.find(anchor), 0)) + 1
    return line[cut:].decode("utf-8", "replace").strip()


def line_after(chunk: bytes, raw: bytes, end: int) -> str | None:
    """The line after the one that ends in `raw` (its first occurrence in chunk[:end]); None when
    that line is the chunk's last (the next one, if any, starts the next chunk)."""
    nl = chunk.find(b"\n", chunk.find(raw, 0, end) + len(raw), end)
    if nl < 0 or nl + 1 >= end:
        return None
    return first_line(chunk, end, nl + 1)


def first_line(chunk: bytes, end: int, start: int = 0) -> str:
    """The first line of chunk[start:end], as text."""
    stop = chunk.find(b"\n", start, end)
    return bytes(chunk[start:end if stop < 0 else stop]).decode("utf-8", "replace").strip()


def segments_with(chunk: bytes, literal: bytes, end: int) -> list[bytes]:
    """The `|`-separated segments of the lines of chunk[:end] that contain `literal`."""
    found = []
    pos = chunk.find(literal, 0, end)
    while pos >= 0:
        start = chunk.rfind(b"\n", 0, pos) + 1
        stop = chunk.find(b"\n", pos, end)
        stop = end if stop < 0 else stop
        found += [bytes(seg) for seg in chunk[start:stop].split(b"|") if literal in seg]
        pos = chunk.find(literal, stop, end)
    return found


OFI_RULES = (
    # (each with a literal its regex cannot match without: the regex is tried only where that
    # literal is, as PayloadFacts.info does: a storm of distinct WARN lines matches none)
    (re.compile(r"(?:Initializing|Using) aws-ofi-nccl (\S+)"), "version", " aws-ofi-nccl "),
    (re.compile(r"Selected [Pp]rovider is ([\w;-]+),?(?: fabric is (\S+))?"
                r"(?: \(found ([0-9]+) nics\))?"), "provider", "Selected "),
    (re.compile(r"Using transport protocol (\w+)"), "protocol", "Using transport protocol "),
    (re.compile(r"Adding (\w+)=(\S*) to environment"), "env", "Adding "),
    (re.compile(r"Setting (\w+) environment variable to (\S+?)\.?(?:\s|$)"), "env",
     " environment variable to "),
    (re.compile(r"Setting (NCCL_\w+) to (\S+)"), "env", "Setting NCCL_"),
    (re.compile(r"Skipping adding (\w+) to environment"), "skip", "Skipping adding "),
    (re.compile(r"Running on (\S+) platform"), "platform", "Running on "),
    # aws-ofi-nccl 1.16 on a platform without its tuner, and no `Running on` line (g6e):
    # `NCCL_OFI_TUNER is not available for platform : g6e.48xlarge, Fall back to NCCL's tuner`
    # (tests/data/nccl_log/real_nccl_2.27.3_ofi_1.16.2_g6e_efa_4_nics_no_gdr_4_pods.log).
    (re.compile(r"is not available for platform : ([\w.-]+)"), "platform",
     "is not available for platform : "),
    (re.compile(r"Using Libfabric version (\S+)"), "libfabric", "Using Libfabric version "),
    (re.compile(r"GDR disabled on GDR-supported|GDR not supported"), "nogdr", "GDR "),
    (re.compile(r"aws-ofi-nccl initialization failed"), "failed",
     "aws-ofi-nccl initialization failed"),
)
#: Each rule's literal, in OFI_RULES' order (harness.parsers._nccl_scan.holds_any's argument).
OFI_LITERALS = tuple(literal for _, _, literal in OFI_RULES)
# (Names are taken to the line's end and stripped in Python: a lazy group before `\s*$`
# rescanned a run of blanks from each of its characters.)
LOADED = re.compile(r"Loaded (?:net|NET) plugin (.+)$")
LOADED_VERSION = re.compile(r" \(v[0-9]+\)$")
PLUGIN_FAILED = re.compile(r"Failed to initialize NET plugin (.+)$")
USING_NETWORK = re.compile(r"Using network (.+)$")
#: `Init COMPLETE ... nranks 8` and, since NCCL 2.19, `comm 0x... rank 0 nRanks 8 nNodes 4 ...`.
NRANKS = re.compile(r"n[rR]anks ([0-9]+)")
#: A payload that says only a rank count: `comm 0x.. rank N nRanks N nNodes N ...` (NCCL 2.19+,
#: init.cc), `ncclCommInitRank(Config) comm 0x.. rank N nranks N cudaDev N ... - Init COMPLETE`.
#: Every rank prints its own (distinct: most of a many-rank log's payloads), so harness.parsers.
#: nccl_log reads these by one anchored match of the bytes (the rest of the line is NCCL's own
#: `name value` fields; a line with a `|` takes the general path, which cuts it there);
#: PayloadFacts.info reads the same count from them and from every other shape (and a count of
#: more than 9 digits, which is no rank count).
RANK_LINE = re.compile(
    rb"NCCL INFO (?:ncclCommInitRank(?:Config)? )?comm 0x[0-9a-f]+ rank [0-9]+ n[rR]anks ([0-9]{1,9})"
    rb"(?:[ \r][^|]*)?\Z")
VERSION = re.compile(r"NCCL version ([0-9][^\s|]*)")
IB_DEVS = re.compile(r"NET/IB ?: Using (.*?)(?:;|$)")
SOCKET_DEVS = re.compile(r"NET/(Socket|FastSocket) ?: Using (.*?)(?:;|$)")
#: `socketPollConnect: connect returned Connection refused, retrying (3/34) after sleep ...`
#: (NCCL 2.19+ src/misc/socket.cc): a peer that is not listening; one warning, the latest try.
RETRY = re.compile(r"(socketPollConnect: .*?retrying) \(([0-9]+)/([0-9]+)\)")
DEV_INDEX = re.compile(r"\[[0-9]+\]\S")
#: NCCL's own GDR verdict per NIC (2.12+): `NET/IB : GPU Direct RDMA Disabled for HCA 0 'mlx5_0'`.
GDR_DISABLED = re.compile(r"NET/(.+?) ?: GPU Direct RDMA Disabled for HCA")
#: NCCL's GDR verdict per GPU and NIC, logged at init while it computes the topology's paths,
#: on one node as on many (no NET channel needed): `GPU Direct RDMA Enabled for GPU 53000 / HCA
#: 0 (distance 4 <= 5), read 1 mode Default` (src/graph/paths.cc ncclTopoCheckGdr), `...
#: Disabled for GPU 81000 / HCA 1 (distance 9 > 5)`; older: `NET/IB : GPU Direct RDMA Enabled for
#: GPU 81000 / HCA 0 (distance 6 < 7), read 0` (src/transport/net.cc); newest `GPU 0[0]`.
GDR_PAIR = re.compile(r"GPU Direct RDMA (Enabled|Disabled) for GPU (\S+) / HCA ([0-9]+)")
#: PyTorch's watchdog line, found wherever it is in a payload (`ProcessGroupNCCL.cpp:607] [Rank 0]
#: Watchdog ...`, `what():  [PG 3 Rank 5] Process group watchdog thread terminated with exception:
#: [Rank 5] Watchdog ...`); each field is optional: a line cut short keeps what it has.
WATCHDOG = re.compile(r"(?:\[(?:PG [^\]]*)?Rank ([0-9]+)\] )?Watchdog caught collective operation timeout")
#: A watchdog record's last words: a record without them was hard-wrapped (a console copy,
#: tests/data/nccl_log/real_watchdog_wrapped_lines.log) when the next line holds them.
WATCHDOG_END = "before timing out"
WATCHDOG_FIELDS = (
    re.compile(r"SeqNum=([0-9]+)"),
    re.compile(r"OpType=(\w+)"),
    re.compile(r"Timeout\(ms\)=([0-9]+)"),
    re.compile(r"ran for ([0-9]+) ?m"),
)
