"""`preflight inspect KIND FILE --fail-on problem|harmful`: exit 1 on a problem, 0 without."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.cli import main
from harness.commands.inspect_gate import problems

DATA = Path(__file__).parent / "data"


@pytest.mark.parametrize(("args", "code"), [
    (["nccl-log", "nccl_log/real_ib_completion_error4.log"], 1),  # IB error 4
    (["nccl-log", "nccl_log/real_p5en_found16.log"], 0),
    (["nvidia-smi", "nvidia_smi/h100-550-constructed-faults.txt", "--profile", "p5.48xlarge"], 1),
    (["env", "env/real_mpirun_ofi67_p4d_efa_not_enabled.sh", "--profile", "p4d.24xlarge"], 1),
    (["env", "env/real_sbatch_fsdp_2023_comments.sh", "--profile", "p4d.24xlarge"], 0),
    (["nccl-tests", "nccl_tests/current_2node_h100.txt"], 0),
    (["nccl-tests", "nccl_tests/crash_mid_table_host_prefixed.txt"], 1),
])
def test_fail_on_problem_exit_codes(capsys, args: list[str], code: int):
    kind, name, *rest = args
    assert main(["inspect", kind, str(DATA / name), "--json", *rest,
                 "--fail-on", "problem"]) == code
    err = capsys.readouterr().err
    assert ("preflight inspect: problem:" in err) == bool(code)


def test_without_fail_on_a_problem_still_exits_0(capsys):
    assert main(["inspect", "nccl-log", str(DATA / "nccl_log/real_ib_completion_error4.log"),
                 "--json"]) == 0


def test_fail_on_harmful_ignores_other_findings():
    env = {"harmful": [], "required": [{"name": "FI_PROVIDER"}], "malformed": []}
    assert problems("env", env, "harmful") == []
    assert problems("env", env, "problem") == ["required but unset or wrong: FI_PROVIDER"]
    assert problems("env", {**env, "harmful": [{"name": "NCCL_P2P_DISABLE"}]}, "harmful") == [
        "harmful: NCCL_P2P_DISABLE"]
    assert problems("nccl-log", {"errors": [], "warnings": ["NET/IB : x"]}, "harmful") == []


def test_unknown_is_a_problem():
    # A dcgmi table cut short: no verdict is not a pass; an nccl-tests sweep without its footer.
    assert problems("dcgm", {"passed": None, "failed_tests": []})
    assert problems("nccl-tests", {"errors": [], "completed": False})
    assert not problems("dcgm", {"passed": True, "failed_tests": []})
    # An SXid read from its detail lines alone, of unknown severity; a non-fatal one is not.
    sxid = {"sxid": 24007, "switch": 1, "fatal": None}
    assert problems("kernel-log", {"sxid_events": [sxid]}) == ["SXid 24007 on 1"]
    assert problems("kernel-log", {"sxid_events": [{**sxid, "fatal": False}]}) == []


def test_unknown_fail_on_value_is_refused():
    with pytest.raises(ValueError, match="--fail-on"):
        problems("env", {}, "warning")
