"""Benchmark: redaction is linear in its input.

1. The run's environment with three 120 KB values (SageMaker's SM_TRAINING_ENV, SM_HPS and
   SM_USER_ARGS can be that large), in three shapes: JSON of hex ids, one long hex string, one
   long run of letters (the shape that made the old URL pattern quadratic): `Redactor(env).env(env)`
   as the report's environment section runs it.
2. One 250 KB line (and `inspect env` of a file where it is an NCCL variable's value: parse,
   redact the value it shows, redact the result as the CLI does).
3. A size sweep: redacting 1, 4 and 16 MB of text (a training log with NAME=value pairs, URLs,
   flags and long values), time per MB at each size and the ratio to the 1 MB figure (1.00:
   linear).
4. A 1 MiB PATH-like value (the `LD_LIBRARY_PATH` the env scripts of bench_line_kinds grow to
   its cap: directories, `$(python3 -c '...os.path...')`, no credential's name), as it is and
   with a secret assignment at its end: `Redactor(env).text`.

Medians of --runs runs (default 5).

    .venv/bin/python bench/bench_redact.py [--runs 5]
"""

from __future__ import annotations

import argparse
import io
import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from harness.base.redact import Redactor  # noqa: E402

KB = 1000
MB = 1_000_000


def median_s(fn: Callable[[], object], runs: int) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def hex_json(rng: random.Random, size: int) -> str:
    parts, n = [], 0
    while n < size:
        parts.append(f'"{"".join(rng.choices("abcdefghij_", k=12))}":"{rng.getrandbits(256):064x}"')
        n += len(parts[-1]) + 1
    return "{" + ",".join(parts) + "}"


def environments(rng: random.Random) -> dict[str, dict[str, str]]:
    base = {"PATH": "/opt/conda/bin:/usr/bin:/bin", "PWD": "/opt/ml/code", "NCCL_DEBUG": "INFO",
            "HF_TOKEN": "hf_" + "a1" * 17, "SM_HOSTS": '["algo-1","algo-2"]'}
    size = 120 * KB
    return {
        "JSON values": {**base, "SM_TRAINING_ENV": hex_json(rng, size),
                        "SM_HPS": hex_json(rng, size), "SM_USER_ARGS": hex_json(rng, size)},
        "hex strings": {**base, **{k: f"{rng.getrandbits(size * 4):0{size}x}"
                                   for k in ("SM_TRAINING_ENV", "SM_HPS", "SM_USER_ARGS")}},
        "letter runs": {**base, **{k: "".join(rng.choices("abcdefghijklmnopqrstuvwxyz", k=size))
                                   for k in ("SM_TRAINING_ENV", "SM_HPS", "SM_USER_ARGS")}},
    }


def log_text(rng: random.Random, size: int) -> str:
    lines = [
        "ip-10-1-2-3:4242:4300 [0] NCCL INFO NET/OFI Selected provider is efa, fabric is efa-direct",
        "export NCCL_DEBUG=INFO FI_PROVIDER=efa WANDB_API_KEY=0123456789abcdef0123",
        "python train.py --lr 0.1 --hf-token hf_abcdefghijklmnopqrstuvwxyz0123456789 --epochs 3",
        "pip install git+https://user:pass@git.example.com/org/repo.git",
        f"SM_HPS={hex_json(rng, 2000)}",
        "".join(rng.choices("abcdefghijklmnopqrstuvwxyz0123456789.-", k=4000)),
        'File "/opt/ml/code/train.py", line 12, in <module>',
        # the shapes issue 26 added: headers of every scheme, escaped JSON, config lines,
        # temporary AWS ids, JWTs, provider keys, pytest's shortened strings
        "curl -H 'Authorization: Basic dXNlcjpwYXNzd29yZA==' -H 'X-Api-Key: abc' https://h/x",
        'E       {\\"password\\": \\"two words\\"} Authorization: Digest username="u", response="r"',
        "  api_key: two words  # from vault",
        "aws_access_key_id=ASIAIOSFODNN7EXAMPLE token=eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ4In0.c2ln",
        "assert 'hf_abcdefghijkl...uvwxyz0123' == 'x'; sk-proj-Ab3dEfGh1jKlMn0pQrStUvWx; Loading...",
    ]
    out, n = [], 0
    while n < size:
        line = lines[rng.randrange(len(lines))]
        out.append(line)
        n += len(line) + 1
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    rng = random.Random(7)

    print("1. environment with 3 x 120 KB values: Redactor(env).env(env)")
    for name, env in environments(rng).items():
        seconds = median_s(lambda env=env: Redactor(env).env(env), args.runs)
        print(f"   {name:12s} {seconds * 1000:10.1f} ms")

    print("2. one 250 KB line")
    line = "".join(rng.choices("abcdefghijklmnopqrstuvwxyz", k=250 * KB))
    seconds = median_s(lambda: Redactor({}).text(line), args.runs)
    print(f"   Redactor.text            {seconds * 1000:10.1f} ms")
    from harness.parsers.env import inspect_env
    from harness.profiles.table import get_profile

    profile = get_profile("p5.48xlarge")
    dump = f"NCCL_DEBUG=INFO\nNCCL_DEBUG_SUBSYS={line}\n"  # a relevant variable: its value is shown

    def inspect() -> object:
        return Redactor().obj(inspect_env(io.StringIO(dump), profile=profile))

    print(f"   inspect env (+ redaction) {median_s(inspect, args.runs) * 1000:9.1f} ms")

    print("3. size sweep: Redactor.text on a training log")
    base = None
    for mb in (1, 4, 16):
        text = log_text(rng, mb * MB)
        seconds = median_s(lambda text=text: Redactor({}).text(text), max(1, args.runs // 2))
        per_mb = seconds / (len(text) / MB)
        base = base or per_mb
        print(f"   {mb:3d} MB {seconds:8.3f} s  {per_mb * 1000:7.1f} ms/MB  ratio to 1 MB "
              f"{per_mb / base:5.2f}")

    print("4. a 1 MiB PATH-like value: Redactor(env).text")
    for name, value in path_values(rng).items():
        redactor = Redactor({"LD_LIBRARY_PATH": value})
        seconds = median_s(lambda value=value, r=redactor: r.text(value), args.runs)
        print(f"   {name:24s} {seconds * 1000:10.1f} ms")


def path_values(rng: random.Random) -> dict[str, str]:
    """A value like the env scripts' LD_LIBRARY_PATH at its 1 MiB cap, without and with a
    credential's assignment at its end."""
    parts, n = [], 0
    while n < 1 << 20:
        i = rng.randrange(100_000)
        parts.append(rng.choice((
            f"/opt/amazon/efa/lib:{i}/usr/local/cuda/lib64", f"${{NCCL_LIB}}:/opt/lib{i}",
            f"$(python3 -c 'import os; print(os.path.join(\"/opt/nvshmem{i}\", \"lib\"))')")))
        n += len(parts[-1]) + 1
    value = ":".join(parts)
    return {"no credential's name": value, "HF_TOKEN=... at its end": f"{value}:HF_TOKEN=hf_x1"}


if __name__ == "__main__":
    main()
