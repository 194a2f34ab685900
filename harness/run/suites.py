"""What a run judges: the check suites (the built-in one, or its PREFLIGHT_SUITE replacement,
plus site checks added with --extra-checks / PREFLIGHT_EXTRA_CHECKS) and every environment
override that changes where the evidence comes from. Both are named in the run header and in
report.json: nothing changes what is judged silently."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from harness.base.settings import get_list, get_str, given

__all__ = [
    "BUILTIN_SUITE",
    "EXTRA_CHECKS_ENV",
    "OVERRIDES",
    "SUITE_ENV",
    "Override",
    "Suite",
    "SuiteError",
    "describe",
    "resolve_suites",
    "source_overrides",
]

#: The installed (or checked-out) check suite: `checks/` beside the `harness` package, in the
#: wheel's site-packages as in the checkout (found without importing it, so that an unrelated
#: top-level `checks` package of a user's project is never imported in its place).
BUILTIN_SUITE = Path(__file__).resolve().parent.parent.parent / "checks"
#: Environment: a check folder or file that REPLACES the built-in suite (tests, debugging).
SUITE_ENV = "PREFLIGHT_SUITE"
#: Environment: colon-separated folders or files of site checks ADDED beside the suite.
EXTRA_CHECKS_ENV = "PREFLIGHT_EXTRA_CHECKS"


class SuiteError(ValueError):
    """A suite path that does not exist or is not a check file/folder; str() names it."""


@dataclass(frozen=True, slots=True)
class Suite:
    """One root of checks the run collects."""

    name: str
    """Label in `preflight list` and reports: `built-in`, else the folder's (or file's) name."""
    path: Path
    kind: str
    """`built-in`, `replacement` (PREFLIGHT_SUITE) or `extra` (site checks)."""
    source: str
    """Where it came from: `installed package`, `PREFLIGHT_SUITE`, `--extra-checks`, ..."""

    def to_dict(self) -> dict[str, str]:
        return {"name": self.name, "path": str(self.path), "kind": self.kind, "source": self.source}

    def describe(self) -> str:
        how = {"built-in": "", "replacement": f", from {self.source}: REPLACES the built-in suite",
               "extra": f", added by {self.source}"}[self.kind]
        return f"{self.name} ({self.path}{how})"


def _checked(raw: str, source: str) -> Path:
    path = Path(raw).expanduser()
    if not path.exists():
        raise SuiteError(f"{source}: {raw} does not exist")
    if path.is_file() and path.suffix != ".py":
        raise SuiteError(f"{source}: {raw} is not a Python file or a folder of test_*.py files")
    return path.resolve()


def resolve_suites(extra: Sequence[str] = (), env: Mapping[str, str] | None = None) -> list[Suite]:
    """The suites a run collects, first the built-in one (or its PREFLIGHT_SUITE replacement),
    then every extra one (PREFLIGHT_EXTRA_CHECKS, then each --extra-checks), each path once."""
    if replacement := get_str(SUITE_ENV, env):
        path = _checked(replacement, SUITE_ENV)
        suites = [Suite(path.name, path, "replacement", SUITE_ENV)]
    else:
        suites = [Suite("built-in", BUILTIN_SUITE, "built-in", "installed package")]
    wanted = [(p, EXTRA_CHECKS_ENV) for p in get_list(EXTRA_CHECKS_ENV, env)]
    wanted += [(p, "--extra-checks") for p in extra]
    for raw, source in wanted:
        path = _checked(raw.strip(), source)
        if any(path == s.path for s in suites):
            continue
        names = {s.name for s in suites}
        name, n = path.name, 2
        while name in names:  # two site folders both called `checks`: checks, checks-2
            name, n = f"{path.name}-{n}", n + 1
        suites.append(Suite(name, path, "extra", source))
    return suites


@dataclass(frozen=True, slots=True)
class Override:
    """An environment variable or option in force that changes where evidence comes from."""

    name: str
    value: str
    effect: str

    def to_dict(self) -> dict[str, str]:
        return {"name": self.name, "value": self.value, "effect": self.effect}


#: Variables that change what a run judges (where it reads its evidence, which tool runs), and
#: what each one does. Each is read where its docs say (harness/probes, harness/fixtures,
#: harness/detect/instance.py); the report lists those in force.
OVERRIDES: dict[str, str] = {
    "PREFLIGHT_KERNEL_LOG": "XID/SXid evidence read from this file instead of journalctl/dmesg",
    "PREFLIGHT_XID_SINCE": "kernel log read since this time instead of since boot",
    "PREFLIGHT_SYSROOT": "/sys, /proc and /dev read under this root instead of /",
    "PREFLIGHT_OPT_ML": "SageMaker's /opt/ml read from this folder",
    "PREFLIGHT_DCGM_HOST": "DCGM diagnostics asked of this nv-hostengine instead of the local one",
    "PREFLIGHT_NCCL_TESTS_DIR": "nccl-tests binaries taken from this folder first",
    "PREFLIGHT_NCCL_FORCE_NET": "0: certify/diagnose add no NCCL collective forced through the NIC",
    "PREFLIGHT_NUM_NODES": "number of nodes taken from here instead of the job's topology",
    "PREFLIGHT_MPIRUN": "this mpirun launches the multi-node bandwidth run",
    "PREFLIGHT_NCCL_TESTS_LAUNCHER": "launcher of the bandwidth run chosen here",
}


def source_overrides(env: Mapping[str, str], profile_file: str | None = None) -> list[Override]:
    """Every override in force, in a stable order (profile file first, then OVERRIDES')."""
    found = []
    if profile_file:
        found.append(Override("--profile-file", str(profile_file),
                              "profiles and thresholds read from this file"))
    found += [Override(name, value, effect) for name, effect in OVERRIDES.items()
              if (value := given(name, env))]
    return found


def describe(suites: Sequence[Suite], overrides: Sequence[Override]) -> list[str]:
    """Header lines: the suites, then each override (none when nothing is overridden)."""
    lines = ["suites: " + "; ".join(s.describe() for s in suites)]
    lines += [f"override: {o.name}={o.value} ({o.effect})" for o in overrides]
    return lines
