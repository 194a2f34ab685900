"""How long the GPU parsers take on node-sized inputs (medians of repeated runs).

    PYTHONPATH=. /work/venv/bin/python bench/bench_gpu_parsers.py

Inputs are built from the recorded samples in tests/data: an 8-GPU `nvidia-smi -q` dump (the
H100 block repeated with 8 bus ids), a 200,000-line kernel log with 1% Xid lines, and the
DCGM 3.3.9 text table.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from pathlib import Path

from harness.parsers.dcgm import parse_dcgm_diag
from harness.parsers.kernel_log import parse_kernel_log
from harness.parsers.nvidia_smi_query import parse_smi_query

DATA = Path(__file__).resolve().parent.parent / "tests" / "data"


def median_s(fn: Callable[[], object], repeat: int = 15) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def smi_dump(num_gpus: int) -> str:
    text = (DATA / "nvidia_smi/h100-550-constructed-faults.txt").read_text()
    head, rest = text.split("GPU 00000000:53:00.0", 1)
    block = "GPU 00000000:53:00.0" + rest.split("\nGPU 00000000:64:00.0", 1)[0] + "\n"
    buses = ("53", "64", "75", "86", "97", "A8", "B9", "CA")
    return head + "".join(block.replace(":53:00.0", f":{buses[i % 8]}:00.0")
                          for i in range(num_gpus))


def kernel_log(lines: int) -> str:
    xid = ("2024-10-01T09:14:40+0000 ip-10-1-33-7 kernel: NVRM: Xid (PCI:0000:53:00): 48, "
           "pid=41233, name=python, An uncorrectable double bit error (DBE) has been detected.")
    other = "2024-10-01T09:14:40+0000 ip-10-1-33-7 kernel: mlx5_core 0000:ab:00.0: Link ACTIVE"
    return "\n".join(xid if i % 100 == 0 else other for i in range(lines))


def main() -> None:
    smi1, smi8 = smi_dump(1), smi_dump(8)
    log = kernel_log(200_000)
    dcgm = (DATA / "dcgm/dcgmi-text-3.3.9-targeted-power-fail.txt").read_text()
    rows = [
        ("nvidia-smi -q, 8 GPUs", median_s(lambda: parse_smi_query(smi8), repeat=51)),
        ("nvidia-smi -q, 1 GPU", median_s(lambda: parse_smi_query(smi1), repeat=51)),
        ("kernel log, 200k lines", median_s(lambda: parse_kernel_log(log), repeat=5)),
        ("dcgmi text table", median_s(lambda: parse_dcgm_diag(dcgm))),
    ]
    for name, seconds in rows:
        print(f"{name:28s} median {seconds * 1000:8.2f} ms")
    print(f"8 GPUs / 1 GPU -q parse time ratio: {rows[0][1] / rows[1][1]:.1f}")


if __name__ == "__main__":
    main()
