"""Environment variables the training command inherits: harmful, required, outdated, parseable."""

from __future__ import annotations

from harness.base.redact import Redactor
from harness.checking import check, expect_none, fail, not_applicable, warn
from harness.judges.env import Versions, evaluate, format_problems, ifname_problem
from harness.profiles.model import Profile


def _shown(env: dict[str, str], findings: list) -> list[str]:
    redactor = Redactor(env)
    return [redactor.text(f.describe()) for f in findings]


@check(
    "PF-ENV-001",
    title="No harmful NCCL / libfabric / torch variables for this profile",
    why="A single variable can silently move NCCL off EFA (NCCL_NET=Socket, FI_PROVIDER=tcp), "
    "disable GPUDirect RDMA or NVLink, or turn a dead rank into a hang instead of an error.",
    remedy="unset the variables named (image ENV, job environment, launcher script)",
)
def test_no_harmful_env_vars(environ: dict[str, str], profile: Profile, lib_versions: Versions):
    findings = evaluate(environ, profile, lib_versions, ["harmful"])
    expect_none("harmful environment variables", _shown(environ, findings),
                remedy="unset: " + ", ".join(sorted({f.rule.name for f in findings})),
                name="harmful_environment_variables")


@check(
    "PF-ENV-002",
    title="Variables required by this profile and plugin version are set",
    why="Old aws-ofi-nccl / libfabric releases need variables that current ones do not "
    "(NCCL_PROTO=simple for aws-ofi-nccl <= 1.5.0, FI_EFA_USE_DEVICE_RDMA=1 before 1.7.0).",
    remedy="set the variables named, or upgrade the EFA installer / aws-ofi-nccl",
)
def test_required_env_vars_set(environ: dict[str, str], profile: Profile, lib_versions: Versions):
    findings = evaluate(environ, profile, lib_versions, ["required"])
    expect_none("required environment variables missing or wrong", _shown(environ, findings),
                remedy="; ".join(dict.fromkeys(f.rule.remedy for f in findings)),
                name="required_environment_variables_missing_or_wrong")


@check(
    "PF-ENV-003",
    title="No outdated settings; recommended settings present (warnings)",
    why="2023-era advice (NCCL_PROTO=simple, FI_EFA_USE_DEVICE_RDMA=1) now costs performance; "
    "these are reported with the reason and the version they stopped mattering, never failed.",
    remedy="unset outdated variables; set the recommended ones",
)
def test_env_vars_current(environ: dict[str, str], profile: Profile, lib_versions: Versions):
    for line, finding in zip(
        _shown(environ, findings := evaluate(environ, profile, lib_versions,
                                             ["outdated", "recommended"])),
        findings, strict=True,
    ):
        warn(line, remedy=finding.rule.remedy)


@check(
    "PF-ENV-004",
    title="NCCL / FI / torch variables have values that parse",
    why="NCCL ignores or misreads malformed values (NCCL_DEBUG=verbose, NCCL_BUFFSIZE=8M) "
    "without failing, so the setting silently does nothing.",
    remedy="fix the values named (see the NCCL environment variable documentation)",
)
def test_env_values_parse(environ: dict[str, str]):
    expect_none("malformed environment values", [Redactor(environ).text(p)
                                                  for p in format_problems(environ)],
                name="malformed_environment_values")


@check(
    "PF-ENV-005",
    title="NCCL_SOCKET_IFNAME selects an interface that exists",
    why="NCCL bootstraps over the interfaces NCCL_SOCKET_IFNAME names; if none exists, init "
    "fails or NCCL picks another network.",
    remedy="set NCCL_SOCKET_IFNAME to an interface of this node (see `ip -br link`) or unset it",
)
def test_socket_ifname_exists(environ: dict[str, str], interfaces: list[str]):
    spec = environ.get("NCCL_SOCKET_IFNAME")
    if spec is None:
        not_applicable("NCCL_SOCKET_IFNAME is not set")
    problem = ifname_problem(spec, interfaces)
    if problem:
        fail(problem)
