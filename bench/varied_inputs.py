"""Inputs whose lines do not repeat (issue 32 item 3): bench_inspect.py's generators cycle the
recorded samples, so a 20 MB input repeats each line thousands of times and every memo of lines
read before pays. A real log does not repeat: an `nvidia-smi -q -l 1` loop prints a new
timestamp, temperature, power and throughput every time, a kernel log new timestamps, PIDs and
devices, an NCCL log new PIDs, comm ids, hosts and ranks, nccl-tests new times and bandwidths.

Each generator here cycles the same samples as its repeated twin in bench_inspect.py, but every
repetition `i` has its numbers changed the way a real loop changes them, by rules that keep the
format valid (the same width inside fixed-width tables, zero stays zero: an error count of 0 is
not turned into a fault; figures move by a few per cent: no threshold is crossed), so the
varied input reads as the repeated one does (same kind of result, same problems; checked by
`bench_line_kinds.py --vary --check`).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from pathlib import Path

from bench_inspect import DATA, _one_table_rows, _repeat, generators

#: (pattern, how to change each digit run in its group 1, from the run and the repetition)
Rule = tuple[re.Pattern[str], Callable[[str, int], str]]


def scramble(digits: str, i: int) -> str:
    """Another value of the same width (an id, a PID, a time's digits): 0 stays 0."""
    if not digits.strip("0"):
        return digits
    n = len(digits)
    x = (int(digits) * 1_000_003 + i * 7_919 + 12_345) % 10**n
    if digits[0] != "0" and x < 10 ** (n - 1):
        x += 10 ** (n - 1)
    return f"{x:0{n}d}"


def scramble_hex(digits: str, i: int) -> str:
    """scramble for a hex id (its case kept)."""
    n = len(digits)
    x = (int(digits, 16) * 1_000_003 + i * 7_919 + 12_345) % 16**n
    out = f"{x:0{n}x}"
    return out.upper() if digits.isupper() else out


def jitter(number: str, i: int) -> str:
    """A figure moved up or down by up to 5% (at least by a unit of its last digit), its width
    and decimal point kept; 0 stays 0 and single digits stay as they are (counts, indices)."""
    digits = number.replace(".", "")
    v = int(digits)
    if v < 10:
        return number
    step = (i * 7 + v) % max(3, v // 20)
    new = v + step if len(str(v + step)) <= len(str(v)) else v - step
    out = f"{new:0{len(digits)}d}"
    dot = number.find(".")
    return out if dot < 0 else out[:len(out) - (len(number) - dot - 1)] + "." + out[
        len(out) - (len(number) - dot - 1):]


_NUM = re.compile(r"\d+(?:\.\d+)?$")


def _decimals(token: str) -> int:
    return len(token) - token.find(".") - 1 if "." in token else 0


def _scaled(token: str, factor: float) -> str:
    return f"{float(token) * factor:.{_decimals(token)}f}"


@functools.lru_cache(maxsize=64)
def bus_factor(text: str) -> float | None:
    """The table's busbw/algbw factor, from its row with the largest algbw, snapped to the
    nearest 1, (n-1)/n or 2(n-1)/n (n ranks): exact enough to print busbw from a new algbw."""
    best = (0.0, 0.0)
    for row in text.splitlines():
        cells = row.split()
        if len(cells) >= 10 and cells[0].isdigit() and all(_NUM.match(c) for c in cells[-8:]):
            best = max(best, (float(cells[-7]), float(cells[-6])))
    if best[0] < 1:
        return None
    ratio = best[1] / best[0]
    candidates = [1.0, *((n - 1) / n for n in range(2, 1025)), *(2 * (n - 1) / n for n in range(2, 1025))]
    return min(candidates, key=lambda f: abs(f - ratio))


def nccl_tests_row(row: str, i: int, factor: float | None) -> str:
    """An nccl-tests row whose two halves (time algbw busbw #wrong) are slower by 1-5%: the time
    up, algbw down, busbw printed again from it (algbw x the table's factor: the reader's check
    holds), #wrong kept; each cell right-aligned in its old width. Anything else (a banner, a row
    of another shape) is returned as it is."""
    spans = [m.span() for m in re.finditer(r"\S+", row)]
    cells = [row[a:b] for a, b in spans]
    if len(cells) < 10 or not all(_NUM.match(c) for c in cells[-8:]) or not cells[0].isdigit():
        return row
    m = 1 - ((i * 7 + len(row)) % 5 + 1) / 100
    new = {}
    for half in (len(cells) - 8, len(cells) - 4):
        new[half] = _scaled(cells[half], 1 / m)
        if factor is not None:
            new[half + 1] = _scaled(cells[half + 1], m)
            new[half + 2] = f"{float(new[half + 1]) * factor:.{_decimals(cells[half + 2])}f}"
    out, last = [], 0
    for n, (a, b) in enumerate(spans):
        if n in new:
            text = new[n]
            start = max(last + 1, b - len(text)) if n else a
            out.append(row[last:start] + text.rjust(b - start))
            last = b
    return "".join(out) + row[last:]


def nccl_tests_text(text: str, i: int) -> str:
    """Every row of one nccl-tests output through nccl_tests_row, with its table's factor."""
    factor = bus_factor(text)
    return "\n".join(nccl_tests_row(row, i, factor) for row in text.split("\n"))


def _clock(text: str, i: int) -> str:
    """hh:mm:ss advancing one second per repetition (an `-l 1` loop)."""
    t = 7 * 3600 + i
    return f"{t // 3600 % 24:02d}:{t // 60 % 60:02d}:{t % 60:02d}"


def vary(rules: list[Rule]) -> Callable[[str, int], str]:
    """A sample's text with every group 1 of every rule changed for repetition i."""
    def apply(text: str, i: int) -> str:
        for pattern, change in rules:
            text = pattern.sub(lambda m, change=change: m[0][:m.start(1) - m.start()]
                               + change(m[1], i)
                               + m[0][m.end(1) - m.start():], text)
        return text
    return apply


def _r(pattern: str, change: Callable[[str, int], str], flags: int = re.M) -> Rule:
    return re.compile(pattern, flags), change


_FLOAT = _r(r"(?<![\w.])(\d+\.\d+)(?![\w.])", jitter)

RULES: dict[str, list[Rule]] = {
    # many nodes' fi_info: each node's EFA GID (the p4d `fabric: EFA-fe80::...` lines)
    "fi-info": [_r(r"fe80::[0-9a-f]+:[0-9a-f]+:([0-9a-f]{2,4})", scramble_hex),
                _r(r"fe80::[0-9a-f]+:[0-9a-f]+:[0-9a-f]+:([0-9a-f]{2,4})", scramble_hex)],
    # each run: new PIDs and host numbers in the rank lines, new times and bandwidths
    # (the rows first: their table's factor is then read from the sample as recorded, once)
    "nccl-tests": [_r(r"\A([\s\S]*)\Z", nccl_tests_text),
                   _r(r"Pid +(\d+)", scramble), _r(r" on [A-Za-z-]*?(\d+)", scramble),
                   _r(r"(?:bus bandwidth|busbw)\s*:\s*(\d+\.\d+)", jitter)],
    # each `-q` print: its timestamp, temperatures, power and PCIe throughput
    "nvidia-smi": [_r(r"^Timestamp\s*: .*? (\d\d:\d\d:\d\d)", _clock),
                   _r(r"Current Temp\s*: (\d+) C", jitter),
                   _r(r"Power Draw\s*: (\d+\.\d+) W", jitter),
                   _r(r"[TR]x Throughput\s*: (\d+) KB/s", jitter),
                   _r(r"^\s+(?:Max|Min|Avg)\s*: (\d+\.\d+) W", jitter)],
    # each dcgmi run: its PIDs and the figures in its messages (cell widths kept)
    "dcgm": [_r(r"\((\d{2,})\)", scramble),
             _r(r"^\|.*\|.*?(?<![\w.])(\d{3,})(?![\w.])", jitter)],
    # each job: new PIDs/TIDs, comm ids, times and (64 at most) hosts
    "nccl-log": [_r(r"^(?:\S+ )?[\w.-]*?(\d+):\d+:\d+ \[", lambda d, i: str((int(d) + i) % 256)),
                 _r(r"^(?:\S+ )?[\w.-]+:(\d+):\d+ \[", scramble),
                 _r(r"^(?:\S+ )?[\w.-]+:\d+:(\d+) \[", scramble),
                 _r(r"0x([0-9a-f]{8,})", scramble_hex),
                 _r(r"T\d\d:\d\d:\d\d\.(\d+)", scramble)],
    # each run: PIDs, sequence numbers, times, losses and memory figures
    "train-step": [_r(r"\[(\d{3,})\]", scramble), _r(r"SeqNum=(\d+)", scramble),
                   _r(r"\d\d:\d\d:\d\d\.(\d+)", scramble), _FLOAT],
    # each job: another pair of nodes (the node count kept)
    "topology": [_r(r"node\[(\d+-\d+)\]", lambda d, i: "-".join(
        str(int(x) + 2 * (i % 500)) for x in d.split("-")))],
}
RULES["kernel-log"] = []  # its own block writer below


def _kernel_block(i: int) -> str:
    """bench_inspect's kernel block (97 ordinary lines and one Xid 48 on one of 8 GPUs), each
    ordinary line a new event: its module, port, device and interface differ."""
    ordinary = []
    for k in range(97):
        t = f"[{i * 10 + k // 10:>6}.{(k * 10_007 + i * 7_919) % 1_000_000:06d}]"
        n = i * 97 + k
        if k % 3 == 0:
            ordinary.append(f"{t} mlx5_core 0000:{n % 200 + 16:02x}:00.{n % 2}: Port module event: "
                            f"module {n % 32}, Cable plugged")
        elif k % 3 == 1:
            ordinary.append(f"{t} IPv6: ADDRCONF(NETDEV_CHANGE): veth{n * 2_654_435_761 % 16**7:07x}: "
                            "link becomes ready")
        else:
            ordinary.append(f"{t} docker0: port {n % 60 + 1}(veth{n * 40_503 % 16**7:07x}) entered "
                            "forwarding state")
    xid = (f"[{i * 10:>6}.500000] NVRM: Xid (PCI:0000:{i % 8 + 16:02x}:00): 48, pid={1000 + i}, "
           "name=python, An uncorrectable double bit error (DBE) has been detected on GPU.")
    return "\n".join([*ordinary[:50], xid, *ordinary[50:]]) + "\n"


def _storm_block(i: int) -> str:
    """100 lines of an EFA failure storm as aws-ofi-nccl prints it (the real sample
    real_efa_handshake_4126_torch_remote_error.log's WARN, and the endpoint and socket WARNs of
    the other samples): every line names its own request, domain or operation address, on one of
    64 hosts; one NCCL INFO line per block."""
    lines = [f"ip-10-0-{i % 64 // 8}-{i % 8}:{700 + i % 8}:800 [0] NCCL INFO NET/OFI Using transport "
             "protocol RDMA"]
    for k in range(99):
        n = (i * 99 + k) * 2_654_435_761 % (1 << 44) + (1 << 44)
        who = f"ip-10-0-{k % 64 // 8}-{k % 8}:{700 + k % 8}:{800 + k}"
        if k % 3 == 0:
            lines.append(f"{who} [{k % 8}] cm_req_handle_error_entry:46 NCCL WARN NET/OFI Request "
                         f"0x{n:x} completed with error. RC: 103. Error: 4126 (Unresponsive "
                         "receiver (reachable by EFA device but handshake failed)). Completed "
                         "length: 0")
        elif k % 3 == 1:
            lines.append(f"{who} [{k % 8}] nccl_net_ofi_domain_get_ep:969 NCCL WARN NET/OFI "
                         f"Creating new endpoint for domain 0x{n:x} failed: Invalid argument")
        else:
            lines.append(f"{who} [{k % 8}] NCCL WARN Socket recv failed while polling for "
                         f"opId=0x{n:x}")
    return "\n".join(lines) + "\n"


def varied_generators() -> dict[str, tuple[str, Callable[[Path, int], None]]]:
    """name -> (inspect kind, writer(path, size in bytes)), for every line kind but env."""
    out = {}
    for name, (kind, write) in generators().items():
        if kind == "env" or name.startswith("one 100 MB"):
            continue
        if kind == "kernel-log":
            write = _repeat(_kernel_block)
        elif name == "nccl-tests (one table)":
            factor = bus_factor((DATA / "nccl_tests" / "current_2node_h100.txt").read_text())
            write = _one_table_rows(lambda row, i, f=factor: nccl_tests_row(row, i, f))
        else:
            write = write.varied(vary(RULES[kind]))  # type: ignore[attr-defined]
        out[name] = (kind, write)
    out["nccl-log (WARN storm)"] = ("nccl-log", _repeat(_storm_block))
    return out

