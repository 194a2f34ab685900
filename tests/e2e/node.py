"""A fake GPU node for the end-to-end tests: fake tools on PATH (fakes/fake_tool.py), a fake
NVML importable as `pynvml` (fakes/nvml), a sysroot with a p5.48xlarge's EFA devices, kernel
modules and limits (PREFLIGHT_SYSROOT), and a profile file with short deadlines, so that a
hang costs seconds. `FakeNode.env()` is the whole environment of a run: nothing of the test
process (its PYTHONPATH, its PATH) leaks into the installed preflight."""

from __future__ import annotations

import json
import os
import sys
import uuid
from dataclasses import dataclass, field
from pathlib import Path

FAKES = Path(__file__).resolve().parent / "fakes"
DATA = Path(__file__).resolve().parents[1] / "data"
#: Every tool the checks run that a fake stands in for.
TOOLS = ("nvidia-smi", "dcgmi", "fi_info", "all_reduce_perf", "mpirun", "dmesg")
#: Per-check deadline (pytest-timeout) and run budget of the fake node's profile, s: short, so
#: a hang costs seconds (the preflight tier's own are 120 s and 300 s). A real nvidia-smi -q or
#: dcgmi diag -r 1 answers in seconds: 15 s leaves room for a fallback and a loaded machine.
CHECK_TIMEOUT_S = 15.0
RUN_BUDGET_S = 60.0
#: p5.48xlarge's 32 EFA devices as rdma-core names them (PCI bus numbers of a real p5:
#: tests/data/fi_info/composed_p5_efa_direct_32.txt).
EFA_BUSES = (79, 80, 81, 82, 96, 97, 98, 99, 113, 114, 115, 116, 130, 131, 132, 133,
             147, 148, 149, 150, 164, 165, 166, 167, 181, 182, 183, 184, 198, 199, 200, 201)
#: Variables a p5 job sets (the EFA + aws-ofi-nccl settings PF-ENV-001..005 judge).
P5_ENV = {"FI_PROVIDER": "efa", "NCCL_DEBUG": "WARN", "NCCL_SOCKET_IFNAME": "eth0"}


#: Why a fake node's profile lowers PF-HOST-002's free-space floor: its report folder and
#: TMPDIR lie on the test machine's disk (CI's had 11 GiB free, under p5's 20 GiB floor, and the
#: healthy node failed). PF-HOST-002 itself is tested on statvfs answers (tests/test_host*).
DISK_WEAKENED_BECAUSE = "e2e: a fake node's paths lie on the test machine's disk"


def write_profile_file(path: Path, profile: str = "p5.48xlarge",
                       check_timeout_s: float = CHECK_TIMEOUT_S,
                       run_budget_s: float = RUN_BUDGET_S, extra: bytes = b"",
                       output_free_gib: float | None = None) -> Path:
    """`--profile-file` giving `profile` short deadlines in every tier (README "Profiles"),
    then `extra`: more lines of that table, as bytes (a test may write bytes that are not
    UTF-8). `output_free_gib`: PF-HOST-002's floor lowered to it, a weakening said why (the
    fake node's paths lie on the test machine's disk, whose free space is not the node's)."""
    tiers = ", ".join(f"{t} = {{v}}" for t in ("preflight", "certify", "diagnose"))
    disk = b"" if output_free_gib is None else (
        f"min_output_free_gib = {output_free_gib}\n"
        f'weakened_because = "{DISK_WEAKENED_BECAUSE}"\n').encode()
    path.write_bytes((
        f'[profiles."{profile}"]\n'
        f"check_timeout_s = {{{tiers.format(v=check_timeout_s)}}}\n"
        f"run_budget_s = {{{tiers.format(v=run_budget_s)}}}\n").encode() + extra + disk)
    return path


def make_sysroot(root: Path, num_efa: int = len(EFA_BUSES)) -> Path:
    """/sys, /dev, /proc and /opt of a p5.48xlarge container with `num_efa` EFA devices."""
    for i, bus in enumerate(EFA_BUSES[:num_efa]):
        dev = root / "sys/class/infiniband" / f"rdmap{bus}s27" / "device"
        dev.mkdir(parents=True)
        (dev / "vendor").write_text("0x1d0f\n")
        verbs = root / "sys/class/infiniband_verbs" / f"uverbs{i}"
        verbs.mkdir(parents=True)
        (verbs / "ibdev").write_text(f"rdmap{bus}s27\n")
        (root / "dev/infiniband").mkdir(parents=True, exist_ok=True)
        (root / "dev/infiniband" / f"uverbs{i}").write_text("")
        # PF-NET-012/013: the port's state and the counters judged on their delta
        port = root / "sys/class/infiniband" / f"rdmap{bus}s27" / "ports/1"
        (port / "hw_counters").mkdir(parents=True)
        (port / "state").write_text("4: ACTIVE\n")
        (port / "phys_state").write_text("5: LinkUp\n")
        for counter in ("rx_drops", "rdma_read_wr_err", "retrans_timeout_events"):
            (port / "hw_counters" / counter).write_text("0\n")
    for name in ("eth0", "lo"):
        (root / "sys/class/net" / name).mkdir(parents=True)
    (root / "proc/self").mkdir(parents=True)
    # PF-HOST-*: /dev/shm, the temporary directory, the mount table, uptime for D-state ages
    for path in ("dev/shm", "tmp"):
        (root / path).mkdir(parents=True, exist_ok=True)
    (root / "proc/self/mounts").write_text("overlay / overlay rw,relatime 0 0\n"
                                           "shm /dev/shm tmpfs rw,nosuid,nodev 0 0\n")
    (root / "proc/uptime").write_text("86400.00 0.00\n")
    # PF-HOST-005 reads every /proc/<pid>/stat: the container's init, sleeping (S).
    (root / "proc/1").mkdir(parents=True, exist_ok=True)
    (root / "proc/1/stat").write_text("1 (init) S 0 1 1 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 "
                                      "100 0 0\n")
    (root / "proc/modules").write_text(
        (DATA / "host" / "composed_proc_modules_efa_gdr.txt").read_text())
    (root / "proc/self/limits").write_text(
        (DATA / "host" / "real_proc_limits_unlimited_no_trailing_space.txt").read_text())
    lib = root / "opt/amazon/ofi-nccl/lib/x86_64-linux-gnu"
    lib.mkdir(parents=True)
    # What `strings libnccl-net.so` shows of aws-ofi-nccl (its PACKAGE_STRING, NET/OFI prefix).
    (lib / "libnccl-net.so").write_bytes(b"\x7fELF\0\0aws-ofi-nccl 1.16.3\0NET/OFI Initializing\0")
    return root


@dataclass
class FakeNode:
    """One fake node under `root`: bin/ (the fakes), sysroot/, state/ (pids, calls), reports/."""

    root: Path
    tools: tuple[str, ...] = TOOLS
    faults: dict[str, str] = field(default_factory=dict)
    """tool -> fault (fakes/fake_tool.py)"""
    variant: dict[str, object] = field(default_factory=dict)
    """more FAKE_CONFIG keys: outputs (tool -> tests/data file), busbw_gb_s, wrong, kernel_log"""
    nvml: dict[str, object] = field(default_factory=dict)
    """FAKE_NVML: init_error, gpus {index: FakeGpu fields}"""
    num_efa: int = len(EFA_BUSES)
    extra_env: dict[str, str] = field(default_factory=dict)
    check_timeout_s: float = CHECK_TIMEOUT_S
    run_budget_s: float = RUN_BUDGET_S
    profile_extra: bytes = b""
    """More lines of the profile file's table (write_profile_file `extra`)."""
    output_free_gib: float | None = 0.5
    """PF-HOST-002's floor in the profile file (None: the profile's own, 20 GiB on p5): the
    test machine's free disk is not the fake node's (write_profile_file)."""
    token: str = field(default_factory=lambda: uuid.uuid4().hex)
    """In the environment of every process the run starts: what finds leftovers."""

    def __post_init__(self) -> None:
        self.bin = self.root / "bin"
        self.state = self.root / "state"
        self.reports = self.root / "reports"
        self.cwd = self.root / "cwd"
        self.marker = self.root / "handed-off"
        for d in (self.bin, self.state, self.reports, self.cwd):
            d.mkdir(parents=True, exist_ok=True)
        for tool in self.tools:
            wrapper = self.bin / tool
            wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" '
                               f'"{FAKES / "fake_tool.py"}" {tool} "$@"\n')
            wrapper.chmod(0o755)
        self.sysroot = make_sysroot(self.root / "sysroot", self.num_efa)
        # PF-HOST-002 judges TMPDIR (the node's root, below) under the sysroot, like every path.
        (self.sysroot / str(self.root).lstrip("/")).mkdir(parents=True, exist_ok=True)
        self.profile_file = write_profile_file(self.root / "profile.toml",
                                               check_timeout_s=self.check_timeout_s,
                                               run_budget_s=self.run_budget_s,
                                               extra=self.profile_extra,
                                               output_free_gib=self.output_free_gib)
        self.config = self.root / "fake-config.json"
        self.config.write_text(json.dumps({"faults": self.faults, **self.variant}))

    def env(self, venv_bin: Path) -> dict[str, str]:
        """The run's whole environment: fakes first on PATH, the fake NVML on PYTHONPATH."""
        env = {
            "PATH": f"{self.bin}{os.pathsep}{venv_bin}",
            "HOME": str(self.root), "LANG": "C.UTF-8", "TMPDIR": str(self.root),
            "PYTHONPATH": str(FAKES / "nvml"),
            "PREFLIGHT_SYSROOT": str(self.sysroot), "PREFLIGHT_HOSTNAME": "e2e-node",
            "AWS_EC2_METADATA_DISABLED": "true", "E2E_RUN_TOKEN": self.token,
            "FAKE_CONFIG": str(self.config), "FAKE_STATE": str(self.state),
            "FAKE_NVML": json.dumps(self.nvml), **P5_ENV, **self.extra_env,
        }
        return env

    def handoff(self) -> list[str]:
        """The training command: proves it ran by creating the marker file."""
        return ["/bin/sh", "-c", f': > "{self.marker}"']

    def calls(self) -> list[list[str]]:
        """Every fake tool call, in order: [tool, *argv]."""
        log = self.state / "calls.log"
        return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []

    def nvml_used(self) -> bool:
        return (self.state / "nvml-used").exists()
