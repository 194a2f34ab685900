"""The smaller helps of issue 29: `did you mean` for a mistyped profile or check ID, `explain
--json`, `selftest --json`, and `inspect` saying to pass --profile when its verdicts are n/a."""

from __future__ import annotations

import json
from pathlib import Path

from harness.base.suggest import did_you_mean
from harness.cli import main

SAMPLES = Path(__file__).parent / "data"


def test_did_you_mean_names_the_closest_first():
    assert did_you_mean("p5.48xl", ["p5.48xlarge", "p4d.24xlarge", "local-cpu"]) == \
        "; did you mean 'p5.48xlarge'?"
    assert did_you_mean("PF-NTE-009", ["PF-NET-009", "PF-GPU-001"]).startswith(
        "; did you mean 'PF-NET-009'")
    assert did_you_mean("zzz", ["p5.48xlarge"]) == ""


def test_a_mistyped_profile_and_check_id_get_a_suggestion(capsys):
    assert main(["profiles", "p5.48xlarg"]) == 2
    assert "unknown profile 'p5.48xlarg'; did you mean 'p5.48xlarge'" in capsys.readouterr().err
    assert main(["explain", "PF-NTE-009"]) == 2
    assert "unknown check 'PF-NTE-009'; did you mean 'PF-NET-009'" in capsys.readouterr().err


def test_explain_json_holds_what_explain_prints(capsys):
    assert main(["explain", "pf-net-009", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["id"] == "PF-NET-009" and data["title"] and data["why"] and data["remedy"]
    assert data["tier"] == "preflight" and data["suite"] == "built-in"


def test_inspect_without_profile_says_to_pass_one(capsys):
    sample = SAMPLES / "nccl_tests" / "alltoall_na_in_place.txt"
    assert main(["inspect", "nccl-tests", str(sample), "--json"]) == 0
    out, err = capsys.readouterr()
    assert [v["status"] for v in json.loads(out)["verdicts"]] == ["n/a", "n/a"]
    assert "2 verdicts are n/a against local-cpu (no --profile given): pass --profile NAME" in err
    assert main(["inspect", "nccl-tests", str(sample), "--profile", "p5.48xlarge",
                 "--json"]) == 0
    assert "--profile" not in capsys.readouterr().err


def test_selftest_json_is_one_object_of_the_outcome(tmp_path, capsys, monkeypatch):
    from harness.cluster import selftest

    def fake_run(cfg, base_env=None, echo=True):
        assert echo is False  # --json: the table is not printed
        nodes = [selftest.NodeOutcome(rank=r, host=f"node{r}", fault="", exit_code=1,
                                      executed=False, verdict="fail", bad_nodes=["node1"],
                                      failure_text="gpu-preflight FAILED ...\n\nDetails:")
                 for r in range(2)]
        return selftest.SelftestResult(nodes, 3.0, 228.0)

    monkeypatch.setattr("harness.cluster.selftest.run_selftest", fake_run)
    assert main(["selftest", "cluster", "--nodes", "2", "--work-dir", str(tmp_path),
                 "--json"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert data["verdict"] == "fail" and data["bad_nodes"] == ["node1"]
    assert data["failure_reason"] == "gpu-preflight FAILED ..."
    assert [n["host"] for n in data["nodes"]] == ["node0", "node1"]
    assert data["tier"] == "preflight" and data["num_nodes"] == 2
