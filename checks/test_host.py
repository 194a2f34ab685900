"""Host readiness: /dev/shm, checkpoint/output paths, mounts that answer, the open-files limit,
processes stuck in D state and clock sync. Every profile, local-cpu included (docs/host.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from harness.base.errors import ProbeError
from harness.checking import check, expect, expect_none, fail, measure, not_applicable, warn
from harness.fixtures.host import (
    OUTPUT_PATHS_ENV,
    REQUIRED_MOUNTS_ENV,
    ClockState,
    MountAnswer,
    OutputPath,
)
from harness.parsers.host import mount_kind

if TYPE_CHECKING:  # types only: the probes and parsers load in the fixtures that read (start-up)
    from harness.probes.host import PathSpace, Stuck
    from harness.profiles.model import Profile

GIB = 1024**3
#: |clock offset| past which AWS rejects signed requests (SigV4: a request must reach AWS within
#: 5 minutes of its time stamp; S3 answers RequestTimeTooSkewed): checkpoint uploads then fail.
SIGV4_SKEW_S = 300.0
REMEDY_SHM = ("run the container with `--shm-size=1g` or more (docker), or mount an "
              "`emptyDir: {medium: Memory}` volume at /dev/shm (Kubernetes)")


def _gib(n: int | None) -> float:
    return round((n or 0) / GIB, 2)


@check(
    "PF-HOST-001",
    title="/dev/shm has the profile's free space and is writable",
    why="NCCL's SHM transport and its proxy allocate segments in /dev/shm ('failed to extend "
    "/dev/shm/nccl-XXXX', 'posix_fallocate failed'), and DataLoader workers pass tensors "
    "through it; Docker's default /dev/shm is 64 MB.",
    remedy=REMEDY_SHM,
)
def test_shm_size(profile: Profile, shm_space: PathSpace):
    if shm_space.problem:
        raise ProbeError(f"/dev/shm: {shm_space.problem}")
    measure("/dev/shm size", _gib(shm_space.total_bytes), "GiB", name="dev_shm_size")
    if shm_space.writable is False:
        fail(f"/dev/shm is not writable: {shm_space.write_error}")
    free = _gib(shm_space.free_bytes)
    if profile.has_gpus:
        expect("/dev/shm free", free, ">=", profile.min_shm_free_gib, "GiB", name="dev_shm_free")
    elif free < profile.min_shm_free_gib:
        measure("/dev/shm free", free, "GiB", op=">=", threshold=profile.min_shm_free_gib,
                ok=False, name="dev_shm_free")
        warn(f"/dev/shm free {free} GiB < {profile.min_shm_free_gib} GiB (a GPU profile fails "
             "here; DataLoader workers may still fail)", remedy=REMEDY_SHM)
    else:
        measure("/dev/shm free", free, "GiB", op=">=", threshold=profile.min_shm_free_gib, ok=True,
                name="dev_shm_free")


def _path_problem(entry: OutputPath, profile: Profile) -> str | None:
    space = entry.space
    where = f"{entry.path} ({entry.origin})"
    if not entry.exists:
        return f"{where}: does not exist"
    if space is None or space.problem:
        return f"{where}: {space.problem if space else 'not read'}"
    if space.readonly:
        return f"{where}: mounted read-only"
    if space.writable is not True:
        return f"{where}: not writable ({space.write_error})"
    free = _gib(space.free_bytes)
    if free < profile.min_output_free_gib:
        return f"{where}: {free} GiB free < {profile.min_output_free_gib} GiB"
    return None


@check(
    "PF-HOST-002",
    title="Checkpoint and output paths exist, are writable and have free space",
    why="A job that cannot write its checkpoint fails hours in (or loses them): a full disk, a "
    "read-only or missing /opt/ml/checkpoints, a configured path that is not mounted.",
    remedy=f"free space or grow the volume; mount the paths named writable; {OUTPUT_PATHS_ENV} "
    "lists the paths judged",
)
def test_output_paths_writable(profile: Profile, output_paths: list[OutputPath]):
    problems = []
    for entry in output_paths:
        problem = _path_problem(entry, profile)
        if problem:
            problems.append(problem)
            continue
        space = entry.space
        assert space is not None
        measure(f"{entry.path} free", _gib(space.free_bytes), "GiB", op=">=",
                threshold=profile.min_output_free_gib, ok=True, name="output_path_free")
        used = space.used_pct
        if used is not None and used > profile.max_output_used_pct:
            warn(f"{entry.path} ({entry.origin}) is {used:.0f}% full (> "
                 f"{profile.max_output_used_pct:g}%)", remedy="free space before it fills")
    expect_none("checkpoint/output paths not usable", problems,
                name="checkpoint_output_paths_not_usable")


@check(
    "PF-HOST-003",
    title="Required mounts are present and every network mount answers within the bound",
    why="A missing FSx for Lustre / EFS / NFS mount makes the job read nothing or write to the "
    "container's disk; a hung one blocks every process that touches it (D state) and the job "
    "hangs instead of failing.",
    remedy=f"mount the filesystems named ({REQUIRED_MOUNTS_ENV} lists the required ones); for "
    "a hung one check the server, the security group (NFS 2049, Lustre 988) and `dmesg`",
)
def test_mounts_answer(profile: Profile, mount_answers: list[MountAnswer]):
    if not mount_answers:
        not_applicable(f"no network mount and none required ({REQUIRED_MOUNTS_ENV})")
    problems = []
    for answer in mount_answers:
        kind = mount_kind(answer.mount) if answer.mount else "required mount"
        where = f"{answer.point} ({kind})"
        if answer.mount is None:
            problems.append(f"{where}: not mounted")
            continue
        space = answer.space
        if space is None or space.problem:
            why = f"{where}: {space.problem if space else 'not read'}"
            if answer.required:
                problems.append(why)
            else:
                warn(f"network mount {why} (not required by {REQUIRED_MOUNTS_ENV})")
            continue
        measure(f"{answer.point} statvfs time", round(space.duration_s, 3), "s", op="<",
                threshold=profile.mount_timeout_s, ok=True, name="mount_statvfs_time")
        if answer.required and _gib(space.free_bytes) < profile.min_output_free_gib:
            problems.append(f"{where}: {_gib(space.free_bytes)} GiB free < "
                            f"{profile.min_output_free_gib} GiB")
    expect_none("mounts missing, hung or full", problems, name="mounts_missing_hung_or_full")


@check(
    "PF-HOST-004",
    title="Open-files limit (ulimit -n) is high enough",
    why="NCCL raises its soft open-files limit to the hard one, then opens sockets and files "
    "per peer: a 1024 limit fails at 4+ nodes ('Too many open files'); launchers that do not "
    "raise it hit the soft limit first.",
    remedy="run the container with `--ulimit nofile=1048576:1048576` (or raise LimitNOFILE / "
    "/etc/security/limits.conf)",
)
def test_open_files_limit(profile: Profile, nofile_limits: tuple[int | None, int | None]):
    soft, hard = nofile_limits
    if hard is None:
        measure("open-files hard limit", "unlimited", ok=True, name="open_files_hard_limit_ulimit_hn")
    else:
        expect("open-files hard limit (ulimit -Hn)", hard, ">=", profile.min_nofile,
               name="open_files_hard_limit_ulimit_hn")
    if soft is not None and soft < profile.min_nofile:
        measure("open-files soft limit (ulimit -Sn)", soft, op=">=", threshold=profile.min_nofile,
                ok=False, name="open_files_soft_limit_ulimit_sn")
        warn(f"open-files soft limit {soft} < {profile.min_nofile} (NCCL raises it to the hard "
             "limit; other libraries in the job may not)", remedy="`ulimit -n` to the hard "
             "limit in the entrypoint")


@check(
    "PF-HOST-005",
    title="No process stuck in uninterruptible sleep (D state)",
    why="A process in D state for minutes waits on a kernel call that does not return: a hung "
    "NFS/Lustre mount, a GPU driver call, a failing disk; the job will block on the same thing.",
    remedy="find what it waits on (`cat /proc/PID/stack`, `dmesg`), fix the mount or device; "
    "drain the node if it persists",
)
def test_no_dstate_processes(profile: Profile, stuck_processes: tuple[list[Stuck], int]):
    stuck, seen = stuck_processes
    if not seen:
        raise ProbeError("no process could be read under /proc (a PID namespace still shows "
                         "this one): D state unknown")
    measure("processes read", seen, name="processes_read")
    named = [f"pid {s.pid} ({s.command}) for {s.age_s:.0f} s" for s in stuck]
    if profile.has_gpus:
        expect_none(f"processes in D state longer than {profile.max_dstate_s:g} s", named,
                    name="processes_in_d_state_longer_than_s")
    elif named:
        warn(f"processes in D state longer than {profile.max_dstate_s:g} s: " + "; ".join(named))


@check(
    "PF-HOST-006",
    title="The clock is synchronised (and close to NTP time where chrony tells)",
    why="Unsynchronised clocks misorder logs across nodes and, once off by minutes, make AWS "
    "reject signed requests (S3 checkpoint uploads: RequestTimeTooSkewed).",
    remedy="run chronyd (Amazon Time Sync Service: 169.254.169.123) or systemd-timesyncd on "
    "the host",
)
def test_clock_synchronised(profile: Profile, tier: str, host_clock: ClockState):
    tracking = host_clock.chrony
    if host_clock.kernel is None and tracking is None:
        message = (f"clock state unknown: adjtimex: {host_clock.kernel_problem}; chronyc: "
                   f"{host_clock.chrony_problem}")
        if tier != "preflight":
            raise ProbeError(message)
        warn(message, remedy="allow adjtimex (seccomp) or install chrony in the image; "
             "`--tier certify` treats this as an error")
        return
    if host_clock.kernel is not None:
        kernel = host_clock.kernel
        measure("kernel clock synchronised (adjtimex)", kernel.synchronized,
                op="==", threshold=True, ok=kernel.synchronized,
                name="kernel_clock_synchronised_adjtimex")
        measure("kernel clock max error", round(kernel.maxerror_us / 1e6, 3), "s",
                name="kernel_clock_max_error")
        if not kernel.synchronized:
            warn("the kernel says the clock is not synchronised (adjtimex STA_UNSYNC)")
    if tracking is None:
        return
    offset = getattr(tracking, "offset_s", None)
    if not getattr(tracking, "synchronized", False):
        warn(f"chronyc: not synchronised (reference {getattr(tracking, 'reference', '?')}, "
             f"leap status {getattr(tracking, 'leap_status', '?')})")
    if offset is None:
        return
    expect("|clock offset from NTP| (chronyc)", abs(offset), "<", SIGV4_SKEW_S, "s",
           detail="AWS SigV4 rejects requests 5 minutes off", name="clock_offset_from_ntp_chronyc")
    if abs(offset) > profile.max_clock_offset_s:
        warn(f"clock offset from NTP {offset:+.3f} s (|offset| > {profile.max_clock_offset_s:g} s)")
