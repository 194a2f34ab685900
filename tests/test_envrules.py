"""Environment rules, table-driven: which rule fires for which env, profile and versions."""

from __future__ import annotations

import pytest

from harness.judges.env import RULES, Versions, evaluate, format_problems, ifname_problem, parse_version
from harness.profiles.table import get_profile

P5 = get_profile("p5.48xlarge")
CPU = get_profile("local-cpu")
CURRENT = Versions(ofi_nccl="1.16.3", libfabric="1.22.0amzn4.0")
OLD_15 = Versions(ofi_nccl="1.5.0", libfabric="1.15.1")
OLD_16 = Versions(ofi_nccl="1.6.0", libfabric="1.19.0")
UNKNOWN = Versions()


def _fired(env, profile, versions, kind):
    return sorted(f"{f.rule.name}={f.value}" for f in evaluate(env, profile, versions, [kind]))


@pytest.mark.parametrize(
    ("env", "profile", "versions", "kind", "expected"),
    [
        # harmful
        ({"NCCL_NET": "Socket"}, P5, CURRENT, "harmful", ["NCCL_NET=Socket"]),
        ({"NCCL_NET": "socket"}, P5, CURRENT, "harmful", ["NCCL_NET=socket"]),
        ({"NCCL_NET": "IB"}, P5, CURRENT, "harmful", ["NCCL_NET=IB"]),
        ({"NCCL_NET": "Libfabric"}, P5, CURRENT, "harmful", []),
        ({"NCCL_NET": "AWS Libfabric"}, P5, CURRENT, "harmful", []),
        ({"NCCL_NET": "aws libfabric"}, P5, CURRENT, "harmful", []),  # NCCL compares case-blind
        ({"NCCL_NET": "ofi"}, P5, CURRENT, "harmful", ["NCCL_NET=ofi"]),  # plugin file, not network
        ({"NCCL_NET": "Libfabric"}, P5, Versions(ofi_nccl="1.11.0-aws"), "harmful", ["NCCL_NET=Libfabric"]),
        ({"NCCL_NET": "AWS Libfabric"}, P5, Versions(ofi_nccl="1.11.0-aws"), "harmful", []),
        ({"NCCL_NET": "Libfabric"}, P5, UNKNOWN, "harmful", []),
        ({"NCCL_NET": "Socket"}, CPU, CURRENT, "harmful", []),
        ({"FI_PROVIDER": "tcp"}, P5, CURRENT, "harmful", ["FI_PROVIDER=tcp"]),
        ({"FI_PROVIDER": "efa"}, P5, CURRENT, "harmful", []),
        ({"NCCL_NET_GDR_LEVEL": "LOC"}, P5, CURRENT, "harmful", ["NCCL_NET_GDR_LEVEL=LOC"]),
        ({"NCCL_NET_GDR_LEVEL": "SYS"}, P5, CURRENT, "harmful", []),
        ({"FI_EFA_USE_DEVICE_RDMA": "0"}, P5, CURRENT, "harmful", ["FI_EFA_USE_DEVICE_RDMA=0"]),
        ({"RDMAV_FORK_SAFE": "1"}, P5, CURRENT, "harmful", ["RDMAV_FORK_SAFE=1"]),
        ({"NCCL_P2P_DISABLE": "1"}, P5, CURRENT, "harmful", ["NCCL_P2P_DISABLE=1"]),
        ({"NCCL_P2P_DISABLE": "1"}, CPU, CURRENT, "harmful", []),
        ({"TORCH_NCCL_ASYNC_ERROR_HANDLING": "0"}, P5, CURRENT, "harmful",
         ["TORCH_NCCL_ASYNC_ERROR_HANDLING=0"]),
        ({"NCCL_IB_DISABLE": "1"}, P5, CURRENT, "harmful", []),  # no IB on EFA instances
        # required, per plugin version
        ({}, P5, OLD_15, "required", ["FI_EFA_USE_DEVICE_RDMA=None", "FI_EFA_USE_DEVICE_RDMA=None",
                                      "NCCL_PROTO=None"]),
        ({"NCCL_PROTO": "simple", "FI_EFA_USE_DEVICE_RDMA": "1"}, P5, OLD_15, "required", []),
        ({}, P5, OLD_16, "required", ["FI_EFA_USE_DEVICE_RDMA=None"]),
        ({}, P5, CURRENT, "required", []),
        ({}, P5, UNKNOWN, "required", []),  # unknown version: never fail a healthy job
        # outdated, per plugin version
        ({"NCCL_PROTO": "simple"}, P5, CURRENT, "outdated", ["NCCL_PROTO=simple"]),
        ({"NCCL_PROTO": "simple"}, P5, OLD_15, "outdated", []),
        ({"NCCL_PROTO": "simple"}, P5, UNKNOWN, "outdated", ["NCCL_PROTO=simple"]),
        ({"FI_EFA_USE_DEVICE_RDMA": "1"}, P5, CURRENT, "outdated", ["FI_EFA_USE_DEVICE_RDMA=1"]),
        ({"FI_EFA_USE_DEVICE_RDMA": "1"}, P5, OLD_16, "outdated", []),
        ({"NCCL_ALGO": "Ring"}, P5, Versions(ofi_nccl="1.17.0"), "outdated", ["NCCL_ALGO=Ring"]),
        ({"NCCL_ALGO": "Ring"}, P5, Versions(ofi_nccl="1.16.0"), "outdated", []),
        ({"NCCL_LAUNCH_MODE": "PARALLEL"}, CPU, UNKNOWN, "outdated", ["NCCL_LAUNCH_MODE=PARALLEL"]),
        ({"NCCL_NET_SHARED_COMMS": "0"}, P5, CURRENT, "outdated", ["NCCL_NET_SHARED_COMMS=0"]),
        ({"NCCL_DEBUG": "TRACE"}, P5, CURRENT, "outdated", ["NCCL_DEBUG=TRACE"]),
        ({"FI_EFA_FORK_SAFE": "1"}, P5, CURRENT, "outdated", ["FI_EFA_FORK_SAFE=1"]),
        ({"FI_EFA_FORK_SAFE": "1"}, CPU, CURRENT, "outdated", []),
        ({"FI_EFA_ENABLE_SHM_TRANSFER": "1"}, P5, CURRENT, "outdated", ["FI_EFA_ENABLE_SHM_TRANSFER=1"]),
        ({"FI_EFA_ENABLE_SHM_TRANSFER": "0"}, P5, CURRENT, "outdated", []),
        ({"NCCL_SOCKET_NTHREADS": "8", "NCCL_NSOCKS_PERTHREAD": "8"}, P5, CURRENT, "outdated",
         ["NCCL_NSOCKS_PERTHREAD=8", "NCCL_SOCKET_NTHREADS=8"]),
        ({"NCCL_MIN_NCHANNELS": "8"}, P5, CURRENT, "outdated", ["NCCL_MIN_NCHANNELS=8"]),
        ({"NCCL_ASYNC_ERROR_HANDLING": "1"}, P5, CURRENT, "outdated", ["NCCL_ASYNC_ERROR_HANDLING=1"]),
        ({"NCCL_ASYNC_ERROR_HANDLING": "0"}, P5, CURRENT, "outdated", []),  # harmful instead
        ({"NCCL_BLOCKING_WAIT": "1"}, P5, CURRENT, "outdated", ["NCCL_BLOCKING_WAIT=1"]),
        # recommended
        ({}, P5, CURRENT, "recommended", ["NCCL_DEBUG=None"]),
        ({"NCCL_DEBUG": "WARN"}, P5, CURRENT, "recommended", []),
        ({}, CPU, CURRENT, "recommended", []),
    ],
)
def test_rule_table(env, profile, versions, kind, expected):
    assert _fired(env, profile, versions, kind) == expected


def test_every_rule_has_reason_remedy_and_source():
    for rule in RULES:
        assert rule.reason and rule.remedy and rule.source, rule.name


def test_finding_describes_value_reason_and_source():
    (finding,) = evaluate({"NCCL_NET": "Socket"}, P5, CURRENT, ["harmful"])
    assert finding.describe() == (
        "NCCL_NET=Socket: NCCL is told to use a network other than aws-ofi-nccl's (Libfabric): EFA "
        "goes unused, or init fails with 'network not found' (domain-facts.md, Environment variables)"
    )


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({"NCCL_DEBUG": "INFO"}, []),
        ({"NCCL_DEBUG": "verbose"}, ["NCCL_DEBUG='verbose' is not VERSION, WARN, INFO, ABORT or TRACE"]),
        ({"NCCL_DEBUG_SUBSYS": "INIT,NET"}, []),
        ({"NCCL_DEBUG_SUBSYS": "^INIT,ENV"}, []),
        ({"NCCL_DEBUG_SUBSYS": "INIT;NET"}, ["NCCL_DEBUG_SUBSYS='INIT;NET' is not a comma list"]),
        ({"NCCL_BUFFSIZE": "8388608"}, []),
        ({"NCCL_BUFFSIZE": "8M"}, ["NCCL_BUFFSIZE='8M' is not a positive integer (bytes)"]),
        ({"NCCL_PROTO": "LL,LL128,Simple"}, []),
        ({"NCCL_PROTO": "fast"}, ["NCCL_PROTO='fast' is not a comma list of LL, LL128, Simple"]),
        ({"FI_EFA_USE_DEVICE_RDMA": "maybe"}, ["FI_EFA_USE_DEVICE_RDMA='maybe' is not 0 or 1"]),
        ({"NCCL_SOCKET_IFNAME": "^lo,docker"}, []),
        ({"NCCL_SOCKET_IFNAME": "eth 0"}, ["NCCL_SOCKET_IFNAME='eth 0' is not a comma list"]),
    ],
)
def test_format_table(env, expected):
    problems = format_problems(env)
    assert len(problems) == len(expected)
    for problem, prefix in zip(problems, expected, strict=True):
        assert problem.startswith(prefix)


IFACES = ["lo", "eth0", "ens32", "docker0"]


@pytest.mark.parametrize(
    ("spec", "ok"),
    [("eth", True), ("eth0", True), ("=eth0", True), ("=eth", False), ("ib", False),
     ("ib,ens", True), ("^lo,docker", True), ("^lo,docker,eth,ens", False), ("^eth", True)],
)
def test_socket_ifname_selection(spec, ok):
    assert (ifname_problem(spec, IFACES) is None) == ok


def test_socket_ifname_problem_lists_interfaces():
    assert ifname_problem("ib0", IFACES) == (
        "NCCL_SOCKET_IFNAME=ib0 selects no interface on this node "
        "(interfaces: docker0, ens32, eth0, lo)"
    )


@pytest.mark.parametrize(
    ("text", "expected"),
    [("1.16.3", "1.16.3"), ("v1.13.2-aws", "1.13.2"), ("1.22.0amzn4.0", "1.22.0"),
     (None, None), ("unknown", None)],
)
def test_parse_version(text, expected):
    v = parse_version(text)
    assert (str(v) if v else None) == expected


def test_finding_says_when_a_needed_variable_has_the_wrong_value():
    (finding,) = evaluate({"NCCL_DEBUG": "WARNING"}, P5, CURRENT, ["recommended"])
    assert finding.describe().startswith("NCCL_DEBUG=WARNING (not a value that does it): without it")
