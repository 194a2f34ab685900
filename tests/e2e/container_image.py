"""The image the container-runtime tests run (tests/e2e/test_e2e_container.py), built with podman.

The DLC base (CUDA, NCCL, EFA; registry login) and the nccl-tests and DCGM layers cannot be had
here; what the tests are about can: container/Dockerfile's own harness install step and
entrypoint, verbatim, on a Debian base (debootstrap, then `podman import`), with the Python
dependencies from a wheelhouse built on the host (the image build reaches no registry:
PIP_NO_INDEX, PIP_FIND_LINKS). torch is left out, as in the Dockerfile (`aws` extra only).

    python -m tests.e2e.container_image prepare    # scripts/test, in the background

Cached: the debootstrap base as a tarball under ~/.cache/gpu-preflight-tests/container (keyed by
the suite and packages) and in podman's store; the wheelhouse keyed by pyproject.toml and
constraints.txt; the image keyed by a hash of its whole build context.
"""

from __future__ import annotations

import functools
import hashlib
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from tests.dockerfile import DOCKERFILE, Instruction, parse_dockerfile
from tests.e2e.shipped import _install_wheel_module, _locked, cache_root

REPO = Path(__file__).resolve().parents[2]
#: podman as this machine allows it: root, no systemd (cgroupfs), runc. The store is the tests'
#: own (not /var/lib/containers: a store keeps the driver it was made with).
PODMAN = ["podman", "--runtime", "runc", "--cgroup-manager", "cgroupfs"]
STORAGE_ENV = "PREFLIGHT_TEST_PODMAN_STORAGE"
SUITE = "bookworm"
MIRROR = os.environ.get("PREFLIGHT_TEST_DEBIAN_MIRROR", "http://deb.debian.org/debian")
#: The base: Python 3.11 (the host's minor version: the wheelhouse is built here) with venv,
#: procps (pgrep, as in the DLC), coreutils' env --block-signal (bookworm: 9.1).
PACKAGES = ("python3", "python3-venv", "procps")
#: Where the base's Python lives, first on PATH: `python3` is that venv's, with pip, as the
#: DLC's conda Python is (Debian's own refuses `pip install`: PEP 668).
BASE_PYTHON = "/opt/python"
SRC_IN_IMAGE = "/opt/gpu-preflight/src"
#: The Dockerfile's layer after the install that runs nccl-tests; here only the harness part.
NCCL_TESTS_PROBE = " && all_reduce_perf -h >/dev/null"


@functools.cache
def storage_driver() -> str:
    """overlay where the kernel mounts it here (a container start in well under a second),
    else vfs (every start copies the whole image: 7-20 s measured on a loaded 2-core VM);
    $PREFLIGHT_TEST_PODMAN_STORAGE chooses."""
    if chosen := os.environ.get(STORAGE_ENV):
        return chosen
    with tempfile.TemporaryDirectory(prefix="gpu-preflight-ovl-") as tmp:
        dirs = {name: Path(tmp) / name for name in ("lower", "upper", "work", "merged")}
        for path in dirs.values():
            path.mkdir()
        options = f"lowerdir={dirs['lower']},upperdir={dirs['upper']},workdir={dirs['work']}"
        mounted = subprocess.run(["mount", "-t", "overlay", "overlay", "-o", options,
                                  str(dirs["merged"])], capture_output=True, check=False)
        if mounted.returncode != 0:
            return "vfs"
        subprocess.run(["umount", str(dirs["merged"])], capture_output=True, check=False)
    return "overlay"


def podman_argv() -> list[str]:
    """podman with this machine's global options and the tests' own store."""
    driver = storage_driver()
    store = cache_root() / "container" / f"storage-{driver}"
    return [*PODMAN, "--storage-driver", driver, "--root", str(store / "root"),
            "--runroot", f"/run/gpu-preflight-tests/{driver}"]


def podman(*args: str, timeout: float = 900, check: bool = True,
           **kwargs: object) -> subprocess.CompletedProcess[str]:
    """`podman ARGS` with podman_argv()'s options; output captured as text."""
    return subprocess.run([*podman_argv(), *args], capture_output=True, text=True,
                          timeout=timeout, check=check, **kwargs)  # type: ignore[call-overload]


def run_options() -> list[str]:
    """Options every `podman run` needs here. podman sets RLIMIT_NOFILE and RLIMIT_NPROC to its
    own defaults, above what this VM lets a process without CAP_SYS_RESOURCE raise them to
    ("error setting rlimit type 6/7: operation not permitted"; conmon runs with nproc 32768,
    measured): ask for no more. No network: the tests need none."""
    return ["--ulimit", "nofile=1024:1024", "--ulimit", "nproc=32768:32768", "--network", "none"]


def unusable() -> str | None:
    """Why podman cannot run a container here, or None when it can."""
    if shutil.which("podman") is None:
        return "podman is not installed (apt-get install podman runc debootstrap)"
    if shutil.which("runc") is None:
        return "runc is not installed"
    try:
        info = podman("info", timeout=120, check=False)
    except subprocess.TimeoutExpired:
        return "`podman info` did not answer within 120 s"
    if info.returncode != 0:
        return f"`podman info` failed: {info.stderr.strip()[-500:]}"
    return None


def _digest(*parts: bytes) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(part + b"\0")
    return h.hexdigest()[:16]


def _image_exists(tag: str) -> bool:
    return podman("image", "exists", tag, check=False).returncode == 0


def base_image() -> str:
    """The Debian base in podman's store (debootstrap once; the tarball is cached)."""
    key = _digest(SUITE.encode(), " ".join(PACKAGES).encode(), BASE_PYTHON.encode())
    tag = f"localhost/gpu-preflight-test-base:{key}"
    cache = cache_root() / "container"
    tarball = cache / f"base-{key}.tar"
    with _locked(cache / "base.lock"):
        if _image_exists(tag):
            return tag
        if not tarball.is_file():
            if shutil.which("debootstrap") is None:
                raise RuntimeError("debootstrap is not installed (apt-get install debootstrap)")
            with tempfile.TemporaryDirectory(prefix="gpu-preflight-base-", dir=cache) as tmp:
                rootfs = Path(tmp) / "rootfs"
                subprocess.run(["debootstrap", "--variant=minbase", f"--include={','.join(PACKAGES)}",
                                SUITE, str(rootfs), MIRROR], check=True, capture_output=True,
                               timeout=1800)
                subprocess.run(["chroot", str(rootfs), "python3", "-m", "venv", BASE_PYTHON],
                               check=True, capture_output=True, timeout=300)
                shutil.rmtree(rootfs / "var/cache/apt/archives", ignore_errors=True)
                partial = tarball.with_suffix(".partial")
                subprocess.run(["tar", "-C", str(rootfs), "-cf", str(partial), "."], check=True)
                partial.rename(tarball)
        podman("import", "--change", f"ENV PATH={BASE_PYTHON}/bin:/usr/local/sbin:/usr/local/bin:"
               "/usr/sbin:/usr/bin:/sbin:/bin", str(tarball), tag)
    return tag


def wheelhouse(python: str = sys.executable) -> Path:
    """The harness's dependencies (`aws` extra, no torch) and its build backend as wheels, built
    here; the harness's own wheel is not in it (the image builds it from its sources)."""
    key = _digest(*(p.read_bytes() for p in (REPO / "pyproject.toml", REPO / "constraints.txt")),
                  sys.version.encode())
    cache = cache_root() / "container"
    out = cache / f"wheelhouse-{key}"
    with _locked(cache / "wheelhouse.lock"):
        if (out / ".complete").is_file():
            return out
        shutil.rmtree(out, ignore_errors=True)
        with tempfile.TemporaryDirectory(prefix="gpu-preflight-wh-") as tmp:
            wheel = _install_wheel_module().build_wheel(python, Path(tmp))
            pip = [python, "-m", "pip", "wheel", "-q", "-w", str(out), "-c",
                   str(REPO / "constraints.txt")]
            subprocess.run([*pip, f"{wheel}[aws]", "setuptools>=77"], check=True,
                           capture_output=True, timeout=900)
        for built in out.glob("gpu_preflight-*.whl"):
            built.unlink()
        (out / ".complete").write_text(key)
    return out


def harness_layers(instructions: list[Instruction]) -> list[str]:
    """container/Dockerfile's instructions that install the harness and set the entrypoint, as
    they are (the nccl-tests probe of the last RUN aside); an error when one is not found."""
    def one(what: str, pred) -> Instruction:
        found = [ins for ins in instructions if pred(ins)]
        if len(found) != 1:
            raise RuntimeError(f"container/Dockerfile: expected one {what}, found {len(found)}")
        return found[0]

    copies = [ins for ins in instructions if ins.name == "COPY"
              and shlex.split(ins.args)[-1].startswith(SRC_IN_IMAGE)]
    if not copies:
        raise RuntimeError(f"container/Dockerfile: no COPY into {SRC_IN_IMAGE}")
    install = one("install RUN", lambda i: i.name == "RUN" and "install_wheel.py" in i.args)
    entry_copy = one("entrypoint COPY", lambda i: i.name == "COPY" and "entrypoint.sh" in i.args)
    check = one("entrypoint RUN", lambda i: i.name == "RUN" and "preflight-entrypoint" in i.args)
    entrypoint = one("ENTRYPOINT", lambda i: i.name == "ENTRYPOINT")
    if NCCL_TESTS_PROBE not in check.args:
        raise RuntimeError(f"container/Dockerfile line {check.line}: no {NCCL_TESTS_PROBE!r}")
    probe = check.text().replace(NCCL_TESTS_PROBE, "")
    return [*(c.text() for c in copies), install.text(), entry_copy.text(), probe,
            entrypoint.text()]


def containerfile(base: str) -> str:
    layers = harness_layers(parse_dockerfile(DOCKERFILE.read_text()))
    return "\n".join([
        f"FROM {base}",
        "# The wheelhouse stands in for the registry: the build reaches none.",
        "COPY wheelhouse /wheelhouse",
        "ENV PIP_NO_INDEX=1 PIP_FIND_LINKS=/wheelhouse",
        "# container/Dockerfile from here on, verbatim:",
        *layers, ""])


def _context(base: str, wheels: Path, root: Path) -> Path:
    """The build context: what the Dockerfile copies (the files install_wheel ships, no caches
    nor built extensions), the wheelhouse and the Containerfile."""
    files = _install_wheel_module().source_files(REPO)
    for name in files:
        if name.parts[0] in ("harness", "checks") or str(name) in (
                "pyproject.toml", "setup.py", "README.md", "constraints.txt",
                "scripts/install_wheel.py", "container/entrypoint.sh"):
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, root / name)
    shutil.copytree(wheels, root / "wheelhouse", ignore=shutil.ignore_patterns(".complete"))
    (root / "Containerfile").write_text(containerfile(base))
    return root


def _tree_digest(root: Path) -> str:
    h = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        h.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
        h.update(oct(path.stat().st_mode).encode())
    return h.hexdigest()[:16]


def image() -> str:
    """The test image for the current sources (built when podman's store lacks it)."""
    base = base_image()
    wheels = wheelhouse()
    with tempfile.TemporaryDirectory(prefix="gpu-preflight-ctx-") as tmp:
        ctx = _context(base, wheels, Path(tmp))
        tag = f"localhost/gpu-preflight-test:{_tree_digest(ctx)}"
        with _locked(cache_root() / "container" / "image.lock"):
            if not _image_exists(tag):
                built = podman("build", "--isolation", "chroot", "-f", str(ctx / "Containerfile"),
                               "-t", tag, str(ctx), check=False, timeout=1200)
                if built.returncode != 0:
                    raise RuntimeError(f"podman build failed:\n{built.stdout[-3000:]}"
                                       f"\n{built.stderr[-3000:]}")
                _remove_older(tag)
    return tag


def _remove_older(tag: str) -> None:
    """Images built for earlier sources go (the store would grow by one image per change)."""
    repo = tag.rsplit(":", 1)[0]
    listed = podman("images", "--format", "{{.Repository}}:{{.Tag}}", repo, check=False)
    for other in listed.stdout.split():
        if other != tag:
            podman("rmi", "-f", other, check=False)
    podman("image", "prune", "-f", check=False)


def main(argv: list[str]) -> int:
    if argv != ["prepare"]:
        print("usage: python -m tests.e2e.container_image prepare", file=sys.stderr)
        return 2
    if (why := unusable()) is not None:
        print(f"container_image: {why}", file=sys.stderr)
        return 1
    print(image())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
