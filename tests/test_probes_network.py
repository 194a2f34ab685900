"""Network probes against an emulated `fi_info` on PATH, fake sysfs/proc/dev trees, fake plugin
libraries, and a real 2-process gloo collective through the same torchrun launcher."""

from __future__ import annotations

import os
import resource
import stat
from pathlib import Path

import pytest

from harness.base.proc_result import ProcResult
from harness.parsers import ParseError
from harness.probes import nccl_collective, network

DATA = Path(__file__).parent / "data"


def _tool(bin_dir: Path, name: str, body: str) -> None:
    bin_dir.mkdir(parents=True, exist_ok=True)
    path = bin_dir / name
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(path.stat().st_mode | stat.S_IEXEC)


@pytest.fixture
def fake_bin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}/usr/bin{os.pathsep}/bin")
    return bin_dir


def test_fi_info_recorded_output(fake_bin: Path):
    recorded = DATA / "fi_info" / "composed_p5_efa_direct_32.txt"
    _tool(fake_bin, "fi_info", f'[ "$1 $2" = "-p efa" ] || exit 3\ncat "{recorded}"')
    probe = network.query_fi_info("efa")
    assert probe.problem is None and probe.info is not None
    assert probe.info.efa and len(probe.info.efa_devices) == 32


def test_fi_info_minus_61_is_a_fact_not_a_probe_failure(fake_bin: Path):
    _tool(fake_bin, "fi_info", "echo -61\nexit 195")  # what `fi_info -p efa` does without EFA
    probe = network.query_fi_info("efa")
    assert probe.problem is None and probe.info is not None
    assert (probe.info.efa, probe.info.error_code, probe.result.returncode) == (False, -61, 195)


def test_fi_info_newer_error_format_on_stderr(fake_bin: Path):
    _tool(fake_bin, "fi_info", "echo 'fi_getinfo: -61' >&2\nexit 1")
    probe = network.query_fi_info("efa")
    assert probe.info is not None and probe.info.error_code == -61


def test_fi_info_hang_is_killed_at_the_timeout(fake_bin: Path):
    _tool(fake_bin, "fi_info", "sleep 30")
    probe = network.query_fi_info("efa", timeout_s=1.0)
    assert probe.info is None
    assert probe.problem == ("`fi_info -p efa` did not finish within 1 s and was killed; "
                             "it printed nothing")
    assert probe.result.duration_s < 10


def test_fi_info_garbage(fake_bin: Path):
    _tool(fake_bin, "fi_info", "echo 'Segmentation fault (core dumped)'; exit 139")
    probe = network.query_fi_info("efa")
    assert probe.info is None
    assert "printed no provider list or error code" in probe.problem
    assert "Segmentation fault" in probe.problem


def test_fi_info_missing(fake_bin: Path):
    probe = network.query_fi_info("efa")
    assert probe.info is None
    assert probe.problem == "`fi_info -p efa` could not run: command not found"


def test_libfabric_version_from_emulated_fi_info(fake_bin: Path):
    _tool(fake_bin, "fi_info", "echo 'fi_info: 2.1.0amzn3.0'; echo 'libfabric: 2.1.0amzn3.0'; "
          "echo 'libfabric api: 2.1'")
    assert network.libfabric_version() == "2.1.0amzn3.0"


def _sysroot(tmp_path: Path) -> Path:
    root = tmp_path / "root"
    ib = root / "sys/class/infiniband"
    for name in ("rdmap16s27", "rdmap17s27", "efa_2"):
        (ib / name).mkdir(parents=True)
    (ib / "mlx5_0" / "device").mkdir(parents=True)
    (ib / "mlx5_0" / "device" / "vendor").write_text("0x15b3\n")
    (ib / "custom0" / "device").mkdir(parents=True)
    (ib / "custom0" / "device" / "vendor").write_text("0x1d0f\n")
    dev = root / "dev/infiniband"
    dev.mkdir(parents=True)
    for name in ("uverbs0", "uverbs1", "rdma_cm"):
        (dev / name).write_text("")
    return root


def test_efa_devices_from_a_fake_tree(tmp_path: Path):
    found = network.efa_devices(_sysroot(tmp_path))
    assert found.sysfs == ("custom0", "efa_2", "rdmap16s27", "rdmap17s27")
    assert found.uverbs == ("uverbs0", "uverbs1")


def test_efa_devices_absent(tmp_path: Path):
    """sysfs mounted without /sys/class/infiniband: no RDMA device registered, a count of 0."""
    (tmp_path / "sys/class/net").mkdir(parents=True)
    assert network.efa_devices(tmp_path) == network.EfaDevices((), ())


def test_efa_devices_unread_is_never_zero(tmp_path: Path):
    """No sysfs at all, or a directory that cannot be listed: the count is unread (issue 25)."""
    found = network.efa_devices(tmp_path)
    assert found.sysfs == () and found.sysfs_problem == (
        f"{tmp_path / 'sys/class'} is not there (sysfs not mounted)")
    assert found.uverbs_problem is None  # /dev/infiniband is absent: no device node, a fact
    (tmp_path / "sys/class/infiniband").mkdir(parents=True)
    (tmp_path / "dev").mkdir()
    (tmp_path / "dev/infiniband").write_text("")  # there, but no directory to list
    found = network.efa_devices(tmp_path)
    assert found.sysfs_problem is None
    assert found.uverbs_problem == (f"cannot list {tmp_path / 'dev/infiniband'}: Not a "
                                    "directory")


def test_loaded_modules(tmp_path: Path):
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc/modules").write_text(
        "efa 139264 0 - Live 0x0000000000000000\n"
        "nvidia_peermem 16384 0 - Live 0x0000000000000000 (POE)\n"
        "nvidia 56823808 2 nvidia_peermem, Live 0x0000000000000000 (POE)\n")
    assert network.loaded_modules(tmp_path) == {"efa", "nvidia_peermem", "nvidia"}
    with pytest.raises(OSError):
        network.loaded_modules(tmp_path / "missing")


@pytest.mark.parametrize(("soft", "hard", "want"), [
    ("unlimited", "unlimited", None),
    ("65536", "65536", 64),
    ("17179869184", "unlimited", 16 * 1024 * 1024),
])
def test_memlock_from_fake_limits(tmp_path: Path, soft: str, hard: str, want: int | None):
    (tmp_path / "proc/self").mkdir(parents=True)
    (tmp_path / "proc/self/limits").write_text(
        "Limit                     Soft Limit           Hard Limit           Units     \n"
        "Max stack size            8388608              unlimited            bytes     \n"
        f"Max locked memory         {soft:<20} {hard:<20} bytes     \n")
    assert network.memlock_kib(tmp_path) == want


def test_memlock_on_the_real_root_matches_getrlimit():
    soft = resource.getrlimit(resource.RLIMIT_MEMLOCK)[0]
    want = None if soft == resource.RLIM_INFINITY else soft // 1024
    assert network.memlock_kib(Path("/")) == want


def test_memlock_unreadable(tmp_path: Path):
    (tmp_path / "proc/self").mkdir(parents=True)
    (tmp_path / "proc/self/limits").write_text("Limit Soft Hard Units\n")
    with pytest.raises(ValueError, match="Max locked memory"):
        network.memlock_kib(tmp_path)


def test_plugin_version_from_the_library_strings(tmp_path: Path):
    lib = tmp_path / "opt/amazon/ofi-nccl/lib"
    lib.mkdir(parents=True)
    (lib / "libnccl-net-ofi.so").write_bytes(b"\x7fELF\x00\x00junk\x00aws-ofi-nccl 1.16.3\x00")
    found = network.find_ofi_nccl({}, tmp_path)
    assert found == network.OfiNcclLib(str(lib / "libnccl-net-ofi.so"), "1.16.3", "library")


@pytest.mark.parametrize("listing", [
    "# EFA installer version: 1.38.0\nlibfabric-aws-bin_2.0.0amzn2.0_amd64 "
    "libnccl-ofi_1.13.2-1_amd64 efa-config_1.17-1_all\n",
    "# EFA installer version: 1.38.0\nlibnccl-ofi-1.13.2-1.amzn2.x86_64\n",
])
def test_plugin_version_from_the_efa_installer_list(tmp_path: Path, listing: str):
    lib = tmp_path / "opt/amazon/ofi-nccl/lib64"
    lib.mkdir(parents=True)
    (lib / "libnccl-net.so").write_bytes(b"\x7fELF no version string here")
    (tmp_path / "opt/amazon/efa_installed_packages").write_text(listing)
    found = network.find_ofi_nccl({}, tmp_path)
    assert found is not None and found.version == "1.13.2"


def test_collective_logs_parse_as_one(tmp_path: Path):
    for i, name in enumerate(("composed_ofi_1.16_efa_direct_p5_srun.log",
                              "composed_truncated.log")):
        (tmp_path / f"nccl-host-{i}.log").write_bytes((DATA / "nccl_log" / name).read_bytes())
    run = nccl_collective.CollectiveRun(ProcResult(("x",), 0), tuple(
        sorted(tmp_path.glob("nccl-*.log"))), tmp_path)
    summary = run.summary()
    assert summary.num_net_channels == 17 and summary.provider == "efa"
    with pytest.raises(ParseError, match="wrote no NCCL debug log"):
        nccl_collective.CollectiveRun(run.result, (), tmp_path).summary()


def test_collective_runs_two_gloo_ranks(tmp_path: Path):
    pytest.importorskip("torch")
    run = nccl_collective.run_collective(2, env=dict(os.environ), workdir=tmp_path, timeout_s=120,
                                 backend="gloo", worker_args=("--size-mib", "1"))
    assert run.result.ok, run.result.describe() + "\n" + run.result.stdout[-2000:]
    log = (tmp_path / "torchrun.log").read_text()
    assert "nccl_worker rank 0/2 gloo: all_reduce ok" in log
    assert "nccl_worker rank 1/2 gloo: all_reduce ok" in log


def test_collective_with_a_stalled_rank_ends_within_the_timeout(tmp_path: Path):
    pytest.importorskip("torch")
    run = nccl_collective.run_collective(2, env=dict(os.environ), workdir=tmp_path, timeout_s=35,
                                 backend="gloo", worker_args=("--size-mib", "1",
                                                              "--stall-rank", "1"))
    assert not run.result.ok
    assert run.result.duration_s < 35 + 10
    assert "torch.distributed.run" in run.result.describe()


def test_fi_info_found_in_the_efa_installer_dir_when_not_on_path(tmp_path, monkeypatch):
    efa_bin = tmp_path / "efa" / "bin"
    efa_bin.mkdir(parents=True)
    _tool(efa_bin, "fi_info", "echo 'fi_info: 1.22.0amzn4.0'; echo 'libfabric: 1.22.0amzn4.0'")
    monkeypatch.setattr(network, "EFA_BIN", str(efa_bin))
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    assert network.fi_info_path() == str(efa_bin / "fi_info")
    assert network.libfabric_version() == "1.22.0amzn4.0"
