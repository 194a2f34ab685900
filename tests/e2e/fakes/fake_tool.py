"""One stand-in for every external tool the checks run (nvidia-smi, dcgmi, fi_info,
all_reduce_perf, mpirun, dmesg, journalctl), installed on PATH as `exec python fake_tool.py NAME`.

A healthy answer is a recorded real output where one fits (tests/data) or output built the way
the tool prints it; `$FAKE_CONFIG` (JSON written by the test) picks a fault per tool and
variants of the healthy answer. Every process of a fake (the tool, its children, a detached
grandchild) records `pid starttime` under `$FAKE_STATE/pids/`, so a test can prove that nothing
the run started is left running (starttime guards against a reused PID).

Faults: hang, hang-ignore-term (SIGTERM ignored: only SIGKILL stops it), signal (dies of
SIGSEGV), exit (a realistic error line, or the config's `error_text` for the tool, non-zero
status), garbage (exit 0), truncated (the
healthy output cut mid-way, exit 0), flood (200 MB of output, exit 0), setsid (prints half its
output, leaves a detached `setsid` grandchild holding stdout, exits 0).
"""

from __future__ import annotations

import json
import os
import random
import re
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

DATA = Path(__file__).resolve().parents[2] / "data"
#: p5.48xlarge GPU bus ids (as in tests/fake_nvml.py).
P5_BUS_IDS = ("53", "64", "75", "86", "97", "A8", "B9", "CA")
FLOOD_BYTES = 200 * 1024 * 1024
HANG_S = 3600.0

#: What each tool prints when it fails with a non-zero status (what the real ones print).
EXIT_ERRORS = {
    "nvidia-smi": (9, "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA "
                      "driver. Make sure that the latest NVIDIA driver is installed and running."),
    "dcgmi": (255, "Error: unable to establish a connection to the specified host: localhost"),
    "fi_info": (127, "fi_info: error while loading shared libraries: libfabric.so.1: cannot "
                     "open shared object file: No such file or directory"),
    "all_reduce_perf": (1, "Failed: Cuda error common.cu:1047 'no CUDA-capable device is "
                           "detected'"),
    "mpirun": (1, "mpirun was unable to launch the specified application as it could not "
                  "access or execute an executable"),
    "dmesg": (1, "dmesg: read kernel buffer failed: Operation not permitted"),
    "journalctl": (1, "Failed to get journal fields: Permission denied"),
}


def config() -> dict:
    path = os.environ.get("FAKE_CONFIG")
    return json.loads(Path(path).read_text()) if path else {}


def record_pid() -> None:
    """`pid starttime` of this process under $FAKE_STATE/pids/ (starttime: /proc/PID/stat 22)."""
    state = os.environ.get("FAKE_STATE")
    if not state:
        return
    pids = Path(state) / "pids"
    pids.mkdir(parents=True, exist_ok=True)
    start = Path(f"/proc/{os.getpid()}/stat").read_text().rsplit(")", 1)[1].split()[19]
    (pids / f"{TOOL}.{os.getpid()}").write_text(f"{os.getpid()} {start}\n")


def log_call(argv: list[str]) -> None:
    state = os.environ.get("FAKE_STATE")
    if state:
        with open(Path(state) / "calls.log", "a") as fh:
            fh.write(json.dumps([TOOL, *argv]) + "\n")


# ---------------------------------------------------------------------------- healthy answers

def nvidia_smi_q() -> str:
    """`nvidia-smi -q` of eight healthy H100s: the recorded 565 block, once per p5 bus id."""
    text = (DATA / "nvidia_smi" / "real_q-565-h100-sxm.txt").read_text()
    head, _, block = text.partition("GPU 00000000:18:00.0\n")
    out = [head]
    for i, bus in enumerate(P5_BUS_IDS):
        gpu = block.replace("1654423001593", f"16549220{i:05d}")
        gpu = gpu.replace("GPU-b42dd28e-ffdd-8720-1df0-98bd8cdc05b1",
                          f"GPU-5b3e2a41-7f0c-4c1e-9a77-2f1f0c3d9e{i:02d}")
        gpu = re.sub(r"(Minor Number\s+: )\d+", rf"\g<1>{i}", gpu)
        gpu = gpu.replace("00000000:18:00.0", f"00000000:{bus}:00.0")
        out.append(f"GPU 00000000:{bus}:00.0\n{gpu.rstrip()}\n\n")
    return "".join(out)


#: A healthy H100's answer per `--query-gpu` field (nvidia-smi's csv,noheader,nounits form).
CSV_VALUES = {
    "name": "NVIDIA H100 80GB HBM3", "driver_version": "565.57.01", "memory.total": "81559",
    "ecc.mode.current": "Enabled", "temperature.gpu": "31", "power.draw": "70.52",
    "persistence_mode": "Enabled", "pstate": "P0", "pcie.link.gen.current": "5",
    "pcie.link.gen.max": "5", "pcie.link.width.current": "16", "pcie.link.width.max": "16",
    "retired_pages.pending": "No",
}


def nvidia_smi_csv(fields: list[str]) -> str:
    rows = []
    for i, bus in enumerate(P5_BUS_IDS):
        values = {**CSV_VALUES, "index": str(i), "uuid": f"GPU-5b3e2a41-7f0c-4c1e-9a77-2f1f0c3d9e{i:02d}",
                  "serial": f"16549220{i:05d}", "pci.bus_id": f"00000000:{bus}:00.0"}
        rows.append(", ".join(values.get(f, "0" if "ecc.errors" in f else "Not Active")
                              for f in fields))
    return "\n".join(rows) + "\n"


def dcgmi_json(level: int) -> str:
    """`dcgmi diag -r LEVEL -j` of DCGM 4 passing on eight GPUs (the shape of the recorded
    dcgm4-r3-diagnostic-pass-excerpt.json)."""
    tests = [{"name": name, "results": [
        {"entity_group": "GPU", "entity_group_id": 1, "entity_id": i, "status": "Pass"}
        for i in range(8)], "test_summary": {"status": "Pass"}}
        for name in ("software", "pcie", "memory")[:max(1, level)]]
    doc = {"DCGM Diagnostic": {"test_categories": [{"category": "Deployment", "tests": tests}]},
           "metadata": {"version": "4.1.1", "driver_version_detected": "565.57.01"}}
    return "Successfully ran diagnostic for group.\n" + json.dumps(doc, indent=4) + "\n"


def fi_info(argv: list[str]) -> str:
    if "--version" in argv:
        return "fi_info: 1.22.0amzn4.0\nlibfabric: 1.22.0amzn4.0\nlibfabric api: 1.22\n"
    return (DATA / "fi_info" / "composed_p5_efa_direct_32.txt").read_text()


NCCL_TESTS_HELP = """USAGE: all_reduce_perf
\t[-t,--nthreads <num threads>]
\t[-g,--ngpus <gpus per thread>]
\t[-b,--minbytes <min size in bytes>]
\t[-e,--maxbytes <max size in bytes>]
\t[-i,--stepbytes <increment size>]
\t[-f,--stepfactor <increment factor>]
\t[-n,--iters <iteration count>]
\t[-m,--agg_iters <aggregated iteration count>]
\t[-w,--warmup_iters <warmup iteration count>]
\t[-p,--parallel_init <0/1>]
\t[-c,--check <check iteration count>]
\t[-o,--op <sum/prod/min/max/avg/mulsum/all>]
\t[-d,--datatype <nccltype/all>]
\t[-r,--root <root>]
\t[-z,--blocking <0/1>]
\t[-y,--stream_null <0/1>]
\t[-T,--timeout <time in seconds>]
\t[-G,--cudagraph <num graph launches>]
\t[-C,--report_cputime <0/1>]
\t[-a,--average <0/1/2/3> report average iteration time <0=RANK0/1=AVG/2=MIN/3=MAX>]
\t[-h,--help]
"""


def _bytes(text: str) -> int:
    units = {"K": 1024, "M": 1024**2, "G": 1024**3}
    return int(text[:-1]) * units[text[-1].upper()] if text[-1:].upper() in units else int(text)


def nccl_tests_help(cfg: dict) -> str:
    """The usage text; with `json_output` in the config, a newer build's that lists `-J`."""
    if not cfg.get("json_output"):
        return NCCL_TESTS_HELP
    return NCCL_TESTS_HELP.replace("\t[-h,--help]", "\t[-J,--output_file <file>]\n\t[-h,--help]")


def nccl_tests_json(rows: list[tuple[int, float, float, float, int]], opts: dict) -> str:
    """The `-J` document (version 2, the shape of tests/data/nccl_tests/json_constructed.json)
    of the rows printed: (size, time_us, algbw, busbw, wrong)."""
    def half(t: float, alg: float, bus: float, wrong: int) -> dict:
        return {"time": t, "alg_bw": alg, "bus_bw": bus, "nwrong": float(wrong)}

    results = [{"size": s, "count": s // 4, "type": "float", "redop": "sum", "root": "    -1",
                "out_of_place": half(t, a, b, w), "in_place": half(t, a, b, w),
                "actual_iterations": 20, "experiment_name": ""} for s, t, a, b, w in rows]
    avg = sum(r[3] for r in rows) / max(len(rows), 1)
    return json.dumps({"version": 2, "start_time": "2027-01-01 00:00:00", "args": [],
                       "env": [], "nccl_version": 22703,
                       "config": {"ngpus": int(opts.get("-g", "1")), "devices": [
                           {"rank": r, "group": 0, "pid": os.getpid(), "hostname": "ip-10-1-2-3",
                            "device": r % 8, "device_info": "NVIDIA H100 80GB HBM3"}
                           for r in range(int(os.environ.get("FAKE_NRANKS",
                                                             opts.get("-g", "1"))))]},
                       "results": results,
                       "out_of_bounds": {"count": 0, "okay": "true"},
                       "average_bus_bandwidth": {"bandwidth": avg, "okay": "unchecked"},
                       "errors": [], "end_time": "2027-01-01 00:00:09"})


def all_reduce_perf(argv: list[str], cfg: dict) -> str:
    """nccl-tests 2.16 output for the sizes asked, on `-g` GPUs (or $FAKE_NRANKS ranks of one
    GPU each when a fake launcher started it); busbw ramps to `busbw_gb_s` at 1 GiB. With
    `json_output` in the config, `-J FILE` gets the JSON document too; with `nccl_info` and
    NCCL_DEBUG=INFO in the environment, NCCL's version line comes first, as NCCL prints it."""
    opts = dict(zip(argv[::2], argv[1::2], strict=False))
    lo, hi = _bytes(opts.get("-b", "8")), _bytes(opts.get("-e", "128M"))
    factor, gpus = int(opts.get("-f", "2")), int(opts.get("-g", "1"))
    nranks = int(os.environ.get("FAKE_NRANKS", gpus))
    peak = float(cfg.get("busbw_gb_s", 480.0))
    wrong = int(cfg.get("wrong", 0))
    lines = [
        f"# nThread 1 nGpus {gpus} minBytes {lo} maxBytes {hi} step: {factor}(factor) warmup "
        "iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0",
        "#", "# Using devices"]
    lines += [f"#  Rank {r:2d} Group  0 Pid {os.getpid():6d} on ip-10-1-2-3 device {r % 8:2d} "
              f"[0x{P5_BUS_IDS[r % 8].lower()}] NVIDIA H100 80GB HBM3" for r in range(nranks)]
    lines += [
        "#",
        "#                                                              out-of-place"
        "                       in-place          ",
        "#       size         count      type   redop    root     time   algbw   busbw #wrong"
        "     time   algbw   busbw #wrong",
        "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)       "
        "     (us)  (GB/s)  (GB/s)       "]
    size, total, rows = lo, 0.0, 0
    table = []
    while size <= hi:
        busbw = peak * min(1.0, size / 1024**3) ** 0.15
        algbw = busbw * nranks / (2 * (nranks - 1)) if nranks > 1 else busbw
        time_us = size / (algbw * 1e3)
        lines.append(f"{size:12d}  {size // 4:12d}     float     sum      -1  {time_us:7.1f}  "
                     f"{algbw:6.2f}  {busbw:6.2f}  {wrong:5d}  {time_us:7.1f}  {algbw:6.2f}  "
                     f"{busbw:6.2f}  {wrong:5d}")
        table.append((size, round(time_us, 1), round(algbw, 2), round(busbw, 2), wrong))
        total, rows = total + 2 * busbw, rows + 2
        size *= factor
    if cfg.get("json_output") and "-J" in opts:
        Path(opts["-J"]).write_text(nccl_tests_json(table, opts))
    if cfg.get("nccl_info") and os.environ.get("NCCL_DEBUG") == "INFO":
        lines.insert(0, "ip-10-1-2-3:4242:4242 [0] NCCL INFO NCCL version 2.27.3+cuda12.9")
    lines += ["# Out of bounds values : 0 OK", f"# Avg bus bandwidth    : {total / max(rows, 1):.4f} ",
              "#"]
    return "\n".join(lines) + "\n"


def kernel_log(cfg: dict) -> str:
    name = cfg.get("kernel_log", "real_dev-kmsg-clean-nvswitch.txt")
    return (DATA / "kernel_log" / name).read_text(errors="replace")


def healthy(argv: list[str], cfg: dict) -> str:
    """The tool's healthy output for `argv` (or the file the config names for it)."""
    if TOOL in cfg.get("outputs", {}):
        return (DATA / cfg["outputs"][TOOL]).read_text(errors="replace")
    if TOOL == "nvidia-smi":
        query = next((a for a in argv if a.startswith("--query-gpu=")), None)
        return nvidia_smi_csv(query.split("=", 1)[1].split(",")) if query else nvidia_smi_q()
    if TOOL == "dcgmi":
        level = int(argv[argv.index("-r") + 1]) if "-r" in argv else 1
        return dcgmi_json(level)
    if TOOL == "fi_info":
        return fi_info(argv)
    if TOOL == "all_reduce_perf":
        return nccl_tests_help(cfg) if ("--help" in argv or "-h" in argv) else all_reduce_perf(
            argv, cfg)
    if TOOL in ("dmesg", "journalctl"):
        return kernel_log(cfg)
    if TOOL == "mpirun":
        return launch(argv)
    raise SystemExit(f"fake_tool: no healthy answer for {TOOL}")


# ---------------------------------------------------------------------------- faults

def child(mode: str, new_session: bool = False) -> None:
    """Start a child of this fake (`hang`: sleeps; `hold`: a detached holder of stdout)."""
    subprocess.Popen([sys.executable, __file__, f"--child={mode}", TOOL],
                     start_new_session=new_session, stdin=subprocess.DEVNULL)


def run_child(mode: str) -> None:
    record_pid()
    if mode == "hang-ignore-term":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    time.sleep(HANG_S)


def write(text: str | bytes) -> None:
    data = text.encode() if isinstance(text, str) else text
    sys.stdout.buffer.write(data)
    sys.stdout.buffer.flush()


def fault(kind: str, argv: list[str], cfg: dict) -> int:
    if kind in ("hang", "hang-ignore-term"):
        if kind == "hang-ignore-term":
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
        out = healthy(argv, cfg)
        write(out[: len(out) // 3])  # started printing, then stuck (a hung driver call)
        child(kind)  # a worker in the tool's process group, stuck too
        time.sleep(HANG_S)
        return 0
    if kind == "signal":
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # no core file in the test's cwd
        write(healthy(argv, cfg)[:200])
        signal.signal(signal.SIGSEGV, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGSEGV)
        time.sleep(5)
        return 1
    if kind == "exit":
        code, message = EXIT_ERRORS[TOOL]
        print(cfg.get("error_text", {}).get(TOOL, message), file=sys.stderr, flush=True)
        return code
    if kind == "garbage":
        rng = random.Random(TOOL)
        write(b"\x00\xff\xfe" + rng.randbytes(2048) + b"\n")
        write("".join(rng.choice("abcdefghij#|:=- \n") for _ in range(4096)))
        return 0
    if kind == "truncated":
        out = healthy(argv, cfg)
        write(out[: int(len(out) * 0.55)])
        return 0
    if kind == "flood":
        line = b"flood: this tool prints far more than any parser needs " + b"x" * 200 + b"\n"
        chunk = line * (1024 * 1024 // len(line) + 1)
        sent = 0
        while sent < FLOOD_BYTES:
            sys.stdout.buffer.write(chunk)
            sent += len(chunk)
        sys.stdout.buffer.flush()
        return 0
    if kind == "setsid":
        out = healthy(argv, cfg)
        write(out[: len(out) // 2])
        child("hold", new_session=True)  # `setsid worker &`: keeps our stdout open
        return 0
    raise SystemExit(f"fake_tool: unknown fault {kind!r}")


# ---------------------------------------------------------------------------- launchers

def launched(argv: list[str]) -> tuple[int, list[str]]:
    """A fake mpirun's (ranks, program): its own options skipped."""
    nranks, i = 1, 0
    takes_value = {"-np", "-n", "-x", "--bind-to", "--map-by", "-H", "--hostfile", "--mca"}
    while i < len(argv) and argv[i].startswith("-"):
        if argv[i] in ("-np", "-n"):
            nranks = int(argv[i + 1])
        i += 2 if argv[i] in takes_value else 1
    return nranks, argv[i:]


def launch(argv: list[str]) -> str:
    """What the ranks print: the program run once for all of them (the fake nccl-tests prints
    one table over $FAKE_NRANKS ranks, as an MPI build does under mpirun)."""
    nranks, program = launched(argv)
    if not program:
        raise SystemExit("mpirun: no program given")
    env = {**os.environ, "FAKE_NRANKS": str(nranks)}
    return subprocess.run(program, env=env, capture_output=True, text=True).stdout


def main() -> int:
    argv = sys.argv[2:]
    cfg = config()
    record_pid()
    log_call(argv)
    kind = cfg.get("faults", {}).get(TOOL)
    # nccl-tests prints its usage and exits before any CUDA call: faults act on real runs.
    if kind and not (TOOL == "all_reduce_perf" and ("--help" in argv or "-h" in argv)):
        return fault(kind, argv, cfg)
    write(healthy(argv, cfg))
    return int(cfg.get("exit_codes", {}).get(TOOL, 0))


if __name__ == "__main__":
    if sys.argv[1].startswith("--child="):
        TOOL = sys.argv[2]
        run_child(sys.argv[1].split("=", 1)[1])
        sys.exit(0)
    TOOL = sys.argv[1]
    sys.exit(main())
