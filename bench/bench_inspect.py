"""Benchmark: `preflight inspect KIND FILE` on large inputs: wall time and peak RSS per kind at two
(or more) sizes, to show that time grows linearly and memory stays flat.

Each input is what a real large file of that kind looks like: the recorded samples of
tests/data/<kind>/ concatenated as a long log would hold them (an `env` dump printed at every
restart, with SageMaker-sized JSON values; sbatch scripts; fi_info of many nodes; nccl-tests runs
of a script looping over collectives; a node's kernel log with Xid lines among ordinary ones; an
`nvidia-smi -q -l` loop; dcgmi tables; a training log; an NCCL log under rank wrappers), plus a
file that is one 100 MB line without a newline. Every run is a fresh `python -m harness inspect`
process measured by /usr/bin/time -v (peak RSS) with a timeout.

    .venv/bin/python bench/bench_inspect.py [--sizes 50,200] [--kinds env,nvidia-smi] \
        [--timeout 300] [--keep DIR]

Prints one row per kind and size (seconds, s/MB, peak RSS MB), then per kind the ratio of the
s/MB at the largest size to that at the smallest (1.0: linear) and the RSS growth.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data"
MB = 1_000_000


def _samples(kind: str, pattern: str = "*") -> list[str]:
    """The recorded samples of a kind, as a long log cycles them. Left out: garbage, and the
    `web-copy` samples, whose ` | |` / `- ` around every line is the stored web page's rendering
    (tests/data/*/SOURCES.md), a shape no real log or script has: cycled, it would make the
    input a different one (bench/README.md gives the env scripts' figure with it in)."""
    files = sorted(p for p in (DATA / kind).glob(pattern)
                   if p.is_file() and p.suffix not in (".md",) and "garbage" not in p.name
                   and not p.name.endswith(".expect.json")
                   and "web_copy" not in p.name.replace("-", "_"))
    return [p.read_text(encoding="utf-8", errors="replace") for p in files if p.stat().st_size]


def _json_blob(rng: random.Random, size: int) -> str:
    """A SageMaker SM_TRAINING_ENV / SM_HPS-like JSON value of about `size` characters."""
    parts = []
    n = 0
    while n < size:
        key = "".join(rng.choices("abcdefghijklmnopqrstuvwxyz_", k=14))
        value = "".join(rng.choices("abcdef0123456789", k=64))  # hashes, ids, hex blobs
        parts.append(f'"{key}":"{value}"')
        n += len(parts[-1]) + 1
    return "{" + ",".join(parts) + "}"


def _env_block(rng: random.Random, restart: int) -> str:
    base = {
        "PATH": "/opt/conda/bin:/usr/local/nvidia/bin:/usr/local/cuda/bin:/usr/bin:/bin",
        "LD_LIBRARY_PATH": "/opt/amazon/ofi-nccl/lib:/opt/amazon/efa/lib:/usr/local/cuda/lib64",
        "NCCL_DEBUG": "INFO", "NCCL_SOCKET_IFNAME": "^lo,docker", "FI_PROVIDER": "efa",
        "FI_EFA_USE_DEVICE_RDMA": "1", "NCCL_PROTO": "simple", "HOSTNAME": f"algo-{restart % 16}",
        "SM_CURRENT_HOST": f"algo-{restart % 16}", "SM_HOSTS": '["algo-1","algo-2"]',
        "PWD": "/opt/ml/code", "HF_TOKEN": "hf_" + "x" * 34, "CUDA_VISIBLE_DEVICES": "0,1,2,3,4,5,6,7",
        "SM_TRAINING_ENV": _json_blob(rng, 120_000),
        "SM_HPS": _json_blob(rng, 120_000),
        "SM_USER_ARGS": json.dumps(["--config", _json_blob(rng, 120_000)]),
    }
    return "".join(f"{k}={v}\n" for k, v in base.items())


def _repeat(make: Callable[[int], str]) -> Callable[[Path, int], None]:
    def write(path: Path, size: int) -> None:
        written = 0
        i = 0
        with path.open("w", encoding="utf-8") as fh:
            while written < size:
                block = make(i)
                fh.write(block)
                written += len(block)
                i += 1
    return write


def _cycle(samples: list[str], wrap: Callable[[str, int], str] = lambda s, i: s):
    """The samples cycled; its `.varied(change)` is the same with each repetition's text passed
    through change(text, i) first (varied_inputs.py: lines that do not repeat)."""
    def varied(change: Callable[[str, int], str]) -> Callable[[Path, int], None]:
        return _repeat(lambda i: wrap(change(samples[i % len(samples)], i), i).rstrip("\n") + "\n")
    write = varied(lambda s, i: s)
    write.varied = varied  # type: ignore[attr-defined]
    return write


def _kernel_block(i: int) -> str:
    ordinary = [f"[{i * 10 + k:>6}.{k:06d}] mlx5_core 0000:ab:00.0: Port module event: module 0, "
                "Cable plugged" for k in range(97)]
    xid = (f"[{i * 10:>6}.500000] NVRM: Xid (PCI:0000:{i % 8 + 16:02x}:00): 48, pid={1000 + i}, "
           "name=python, An uncorrectable double bit error (DBE) has been detected on GPU.")
    return "\n".join([*ordinary[:50], xid, *ordinary[50:]]) + "\n"


def _one_long_line(path: Path, size: int) -> None:
    with path.open("w", encoding="ascii") as fh:
        for _ in range(size // MB):
            fh.write("x" * MB)


def _one_table_rows(change: Callable[[str, int], str]) -> Callable[[Path, int], None]:
    """_one_table with each row passed through change(row, i) (varied_inputs.py)."""
    return lambda path, size: _one_table(path, size, change)


def _one_table(path: Path, size: int, change: Callable[[str, int], str] = lambda s, i: s) -> None:
    """One nccl-tests run whose table goes on for `size` bytes (current_2node_h100.txt's banner,
    its rows repeated, its footer): a soak run's single long table."""
    lines = (DATA / "nccl_tests" / "current_2node_h100.txt").read_text(encoding="utf-8").splitlines()
    head = [ln for ln in lines if ln.startswith("#") and "Out of" not in ln and "Avg bus" not in ln]
    rows = [ln for ln in lines if ln.strip() and not ln.startswith("#")]
    foot = [ln for ln in lines if "Out of" in ln or "Avg bus" in ln]
    with path.open("w", encoding="utf-8") as fh:
        written = fh.write("\n".join(head) + "\n")
        i = 0
        while written < size:
            written += fh.write(change(rows[i % len(rows)], i // len(rows)) + "\n")
            i += 1
        fh.write("\n".join(foot) + "\n")


def generators() -> dict[str, tuple[str, Callable[[Path, int], None]]]:
    """name -> (inspect kind, writer(path, size in bytes))."""
    rng = random.Random(12)
    env_blocks = [_env_block(rng, r) for r in range(4)]
    nccl_tests = _samples("nccl_tests", "*.txt")
    return {
        "env (env dumps)": ("env", _repeat(lambda i: env_blocks[i % 4])),
        "env (scripts)": ("env", _cycle(_samples("env", "*.sh"))),
        "fi-info": ("fi-info", _cycle(_samples("fi_info", "composed_p5*")
                                      + _samples("fi_info", "real_p4d*"))),
        "nccl-tests": ("nccl-tests", _cycle([s for s in nccl_tests if "Avg bus" in s])),
        "nccl-tests (one table)": ("nccl-tests", _one_table),
        "kernel-log": ("kernel-log", _repeat(_kernel_block)),
        "nvidia-smi": ("nvidia-smi", _cycle(_samples("nvidia_smi", "real_q-565*"))),
        # (dcgmi diag tables; `dcgmi mndiag`'s are its own row: a file holds one or the other)
        "dcgm": ("dcgm", _cycle(_samples("dcgm", "dcgmi-*.txt") + _samples("dcgm", "real_dcgmi*.txt"))),
        "dcgm (mndiag)": ("dcgm", _cycle(_samples("dcgm", "mndiag-text-*.txt"))),
        "nccl-log": ("nccl-log", _cycle(_samples("nccl_log", "*.log"),
                                        lambda s, i: re.sub(r"(?m)^", f"[1,{i % 64}]<stdout>:", s))),
        "train-step": ("train-step", _cycle(_samples("train_step", "*.txt"))),
        "topology": ("topology", _cycle(_samples("topology", "real_slurm_srun*"))),
        "one 100 MB line (env)": ("env", _one_long_line),
    }


def measure(kind: str, path: Path, timeout: float) -> tuple[float | None, float | None, int]:
    """(seconds or None on timeout, peak RSS in MB, exit code) of one inspect process."""
    cmd = ["/usr/bin/time", "-v", sys.executable, "-m", "harness", "inspect", kind, str(path),
           "--json"]
    start = time.perf_counter()
    with tempfile.TemporaryFile() as out:
        # Its own session, so that a timeout kills the parser too, not only /usr/bin/time.
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.PIPE, text=True, cwd=ROOT,
                                start_new_session=True)
        try:
            _, stderr = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            return None, None, -1
    seconds = time.perf_counter() - start
    m = re.search(r"Maximum resident set size \(kbytes\): (\d+)", stderr)
    if proc.returncode not in (0, 2):
        tail = stderr.strip().splitlines()[-3:]
        print(f"    ! {kind}: exit {proc.returncode}: {' | '.join(tail)}", flush=True)
    return seconds, int(m[1]) / 1024 if m else None, proc.returncode


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="50,200", help="input sizes in MB (comma-separated)")
    ap.add_argument("--kinds", default="", help="only these generator names / inspect kinds")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds per inspect run")
    ap.add_argument("--keep", default="", help="directory to keep (and reuse) the inputs in")
    args = ap.parse_args()
    sizes = [int(float(s) * MB) for s in args.sizes.split(",")]
    wanted = {k.strip() for k in args.kinds.split(",") if k.strip()}
    folder = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="bench-inspect-"))
    folder.mkdir(parents=True, exist_ok=True)
    print(f"{'input':24s} {'kind':11s} {'MB':>6s} {'seconds':>9s} {'s/MB':>7s} {'peak RSS MB':>12s} "
          "exit", flush=True)
    summary = []
    for name, (kind, write) in generators().items():
        if wanted and name not in wanted and kind not in wanted:
            continue
        rows = []
        for size in sizes:
            if name.startswith("one 100 MB") and size != sizes[0]:
                continue
            real = 100 * MB if name.startswith("one 100 MB") else size
            path = folder / f"{re.sub(r'[^a-z0-9]+', '-', name)}-{real // MB}MB.txt"
            if not path.exists() or path.stat().st_size < real:
                write(path, real)
            mb = path.stat().st_size / MB
            seconds, rss, code = measure(kind, path, args.timeout)
            shown = f">{args.timeout:.0f}" if seconds is None else f"{seconds:.1f}"
            per = "-" if seconds is None else f"{seconds / mb:.3f}"
            print(f"{name:24s} {kind:11s} {mb:6.0f} {shown:>9s} {per:>7s} "
                  f"{'-' if rss is None else f'{rss:.0f}':>12s} {code}", flush=True)
            rows.append((mb, seconds, rss))
            if not args.keep:
                path.unlink()
        done = [r for r in rows if r[1] is not None]
        if len(done) >= 2:
            (mb0, s0, r0), (mb1, s1, r1) = done[0], done[-1]
            summary.append(f"{name:24s} time per MB at {mb1:.0f} MB / at {mb0:.0f} MB = "
                           f"{(s1 / mb1) / (s0 / mb0):.2f}; peak RSS {r0:.0f} -> {r1:.0f} MB")
    if summary:
        print("\nscaling (1.00 = linear time; RSS flat when it does not grow with the size):")
        print("\n".join(summary))


if __name__ == "__main__":
    main()
