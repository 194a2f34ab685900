"""Every PREFLIGHT_* variable has a rule (a range, a choice of words, a pattern) in the
registry, and `preflight run` refuses to start on a value that breaks it: exit 2 naming the
variable, nothing handed off, the report folder kept inside --report-dir. Generated over the
registry (harness.base.settings.SETTINGS), so a setting added without a rule, or one whose bad value
slips through, fails here. tests/e2e/test_e2e_run_guards.py does the same on the shipped wheel."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import test_cli

from harness import cli
from harness.base.settings import SETTINGS, Rule, SettingError, parse, problems, setting
from harness.base.tiers import TIERS
from harness.cluster.node import FAULTS
from harness.commands import EXIT_USAGE
from harness.probes.train_step import FAULT_KINDS
from harness.worker.parts import PARTS

# The neutral environment of a run and the recorded hand-off (tests/test_cli.py).
clean_env = test_cli.clean_env
execs = test_cli.execs


@pytest.mark.parametrize("spec", SETTINGS, ids=lambda s: s.name)
def test_every_setting_has_a_rule_that_refuses_its_bad_value_and_keeps_its_default(spec):
    assert isinstance(spec.rule, Rule) and spec.rule.what and spec.rule.bad
    with pytest.raises(SettingError, match=re.escape(f"{spec.name}=")):
        parse(spec, spec.rule.bad)
    parse(spec, None)  # the default keeps the rule


@pytest.mark.parametrize("spec", SETTINGS, ids=lambda s: s.name)
def test_a_bad_value_of_every_setting_stops_the_run_naming_it(spec, tmp_path, execs, monkeypatch,
                                                               capsys):
    monkeypatch.setenv(spec.name, spec.rule.bad)
    failure = tmp_path / "failure"
    rc = cli.main(["run", "--report-dir", str(tmp_path / "r"), "--failure-file", str(failure),
                   "--", "train"])
    err = capsys.readouterr().err
    assert rc == EXIT_USAGE, err
    assert f"preflight: error: {spec.name}=" in err
    assert execs == []
    assert spec.name in failure.read_text()


@pytest.mark.parametrize(("name", "bad", "good"), [
    ("PREFLIGHT_NUM_NODES", "-1", "1"), ("PREFLIGHT_NUM_NODES", "0", "65536"),
    ("PREFLIGHT_PORT", "99999", "65535"), ("PREFLIGHT_PORT", "0", "1"),
    ("PREFLIGHT_K8S_MARK", "bogus", "label,taint"), ("PREFLIGHT_K8S_MARK", "label,drain", "hyperpod"),
    ("PREFLIGHT_JOIN_TIMEOUT_S", "0", "0.5"), ("PREFLIGHT_ISOLATION_ROUNDS", "4.5", "4.0"),
    ("PREFLIGHT_HOSTNAME", "../../etc", "algo-1"), ("PREFLIGHT_HOSTNAME", ".hidden", "gpu_st-p5-1"),
    ("PREFLIGHT_HOSTNAME", "a/b", "ip-10-0-1-7.ec2.internal"),
    ("PREFLIGHT_CW_FORMAT", "EMF", "metrics"), ("PREFLIGHT_TIER", "certified", "diagnose"),
])
def test_edges_of_the_rules(name, bad, good):
    assert problems({name: bad}) and problems({name: good}) == {}
    assert problems({name: "  "}) == {}  # blank is unset: its default


def test_rules_that_mirror_a_constant_elsewhere_match_it():
    """The registry imports nothing (tests/test_layers.py): where a rule lists the words another
    module defines, they must be the same words."""
    from harness.report.kube import KINDS

    assert setting("PREFLIGHT_TIER").rule.choices == TIERS
    assert setting("PREFLIGHT_SELFTEST_FAULT").rule.choices == FAULTS
    assert setting("PREFLIGHT_WORKER_HANG").rule.choices == PARTS
    assert KINDS == ("label", "condition", "taint", "hyperpod")
    pattern = setting("PREFLIGHT_TRAIN_FAULT").rule.pattern or ""
    assert all(re.fullmatch(pattern, f"{kind},rank=1") for kind in FAULT_KINDS)


def test_several_bad_values_are_all_named_at_once(tmp_path, execs, capsys, monkeypatch):
    monkeypatch.setenv("PREFLIGHT_NUM_NODES", "-1")
    monkeypatch.setenv("PREFLIGHT_PORT", "99999")
    assert cli.main(["run", "--report-dir", str(tmp_path / "r"), "--", "train"]) == 2
    err = capsys.readouterr().err
    assert "PREFLIGHT_NUM_NODES='-1'" in err and "PREFLIGHT_PORT='99999'" in err


def test_a_hostname_cannot_take_the_report_folder_out_of_report_dir(tmp_path, execs, monkeypatch,
                                                                     capsys):
    """`../../etc` was a report folder two levels above --report-dir."""
    reports = tmp_path / "a" / "b"
    monkeypatch.setenv("PREFLIGHT_HOSTNAME", "../../etc")
    assert cli.main(["run", "--report-dir", str(reports), "--", "train"]) == 2
    assert not (tmp_path / "etc").exists() and not (tmp_path / "a" / "etc").exists()
    assert "PREFLIGHT_HOSTNAME='../../etc' is not a host name" in capsys.readouterr().err
    written = [p for p in tmp_path.rglob("report.json")]
    assert written and all(reports in p.parents for p in written)  # the early report: inside


def test_a_node_name_from_elsewhere_that_cannot_name_a_folder_is_refused(tmp_path, execs,
                                                                          monkeypatch, capsys):
    """SageMaker's current_host (and the kernel's hostname) name the folder too."""
    import harness.commands.run as run

    monkeypatch.delenv("PREFLIGHT_HOSTNAME")
    monkeypatch.setattr(run, "hostname", lambda env: "../x")
    assert cli.main(["run", "--report-dir", str(tmp_path / "r"), "--", "train"]) == 2
    assert "this node's name '../x' cannot name its report folder" in capsys.readouterr().err
    assert not (tmp_path / "x").exists() and execs == []


def test_other_commands_name_a_bad_value_they_read(monkeypatch, capsys):
    monkeypatch.setenv("PREFLIGHT_SYSROOT", "/tmp/a\nb")
    assert cli.main(["profiles", "--derive"]) == EXIT_USAGE
    assert "PREFLIGHT_SYSROOT=" in capsys.readouterr().err


def test_unset_rules_never_apply_to_a_default(tmp_path: Path):
    assert problems({}) == {}
    assert problems({s.name: "" for s in SETTINGS}) == {}
