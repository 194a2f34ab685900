"""Confirm before condemn (issue 30 item 2), through `preflight run` (main(argv)) with real check
sessions: a site check declared in the `bandwidth` family reads the figure it "measures" from a
list, one per run (a file counts the runs), so a real second session is what sees the second
figure.

What these prove: a failure of a confirmed family is run once more in its own session within the
run's budget; failed twice stands (`confirmed`, both figures); failed then passed is a `flaky`
warning (both figures, counted in report.json and `preflight_flaky_total`, exit 0, never a
failure); a check of no family, or a profile that confirms nothing, is condemned at once; no time
left leaves the failure standing, `unconfirmed`, with why. What they cannot: that a real
bandwidth or compute figure varies as this list does (the families' own probes are not rerun
here: no GPU), nor the time a real GPU rerun takes."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from harness import cli
from harness.base import handoff
from harness.commands import EXIT_FAILED, EXIT_OK
from harness.report.metrics import render
from harness.report.model import Report
from tests.test_cli import clean_env  # noqa: F401 - the fixture, shared

SITE = '''
import time
from pathlib import Path

from harness.checking import check, expect

COUNT = Path(r"{count}")
FIGURES = [{figures}]
FIRST_RUN_S = {first_run_s}


@check("SITE-BW-001", title="site all_reduce busbw at its floor", why="w", remedy="check the "
       "fabric", family="{family}")
def test_site_busbw():
    runs = len(COUNT.read_text().splitlines()) if COUNT.exists() else 0
    with COUNT.open("a") as fh:
        fh.write("run\\n")
    if runs == 0:
        time.sleep(FIRST_RUN_S)
    expect("site busbw", FIGURES[min(runs, len(FIGURES) - 1)], ">=", 100.0, "GB/s")
'''


@pytest.fixture(autouse=True)
def _neutral(monkeypatch):
    """The hand-off recorded, not performed; test_cli's autouse `clean_env` (imported) gives
    the neutral environment (no NCCL/FI/PREFLIGHT settings, host node-a)."""
    monkeypatch.setattr(handoff, "_execvp", lambda file, argv: None)


def _run(tmp_path: Path, figures: str, *extra: str, family: str = "bandwidth",
         first_run_s: float = 0.0) -> tuple[int, dict]:
    site = tmp_path / "site"
    site.mkdir()
    (site / "test_site_bw.py").write_text(SITE.format(
        count=tmp_path / "count", figures=figures, family=family, first_run_s=first_run_s))
    rc = cli.main(["run", "--report-dir", str(tmp_path / "r"), "--extra-checks", str(site),
                   "-k", "SITE-BW-001 or PF-ENV-001", *extra])
    return rc, json.loads((tmp_path / "r" / "node-a" / "report.json").read_text())


def _runs(tmp_path: Path) -> int:
    return len((tmp_path / "count").read_text().splitlines())


def _site_check(report: dict) -> dict:
    return next(c for c in report["checks"] if c["id"] == "SITE-BW-001")


def test_failed_then_passed_is_a_flaky_warning_with_both_figures(tmp_path, capsys):
    rc, report = _run(tmp_path, "42.0, 180.0")
    assert rc == EXIT_OK and report["verdict"] == "pass"
    assert _runs(tmp_path) == 2
    site = _site_check(report)
    assert site["outcome"] == "warn"
    assert site["message"].startswith(
        "[SITE-BW-001] flaky: failed, then passed when run again (first: site busbw 42.0 GB/s "
        "(needs >= 100.0 GB/s); again: site busbw 180.0 GB/s (needs >= 100.0 GB/s)); not "
        "condemned")
    note = site["confirmation"]
    assert note["status"] == "flaky"
    assert [m["value"] for m in note["first"]["measurements"]] == [42.0]
    assert [m["value"] for m in note["again"]["measurements"]] == [180.0]
    assert [m["ok"] for m in site["measurements"]] == [True]  # no GPU/node named as failed
    section = report["confirmation"]
    assert (section["flaky"], section["flaky_total"], section["confirmed"]) == (
        ["SITE-BW-001"], 1, [])
    assert [p["phase"] for p in report["phases"]][-1] == "confirm"
    assert not (tmp_path / "r" / "node-a" / "junit-confirm.xml").exists()  # one junit.xml
    metrics = render(Report.from_dict(report))
    assert "preflight_flaky_total{" in metrics
    assert 'preflight_flaky_total{Hostname="node-a",profile="local-cpu",tier="preflight"} 1.0' \
        in metrics
    out = capsys.readouterr().out
    assert "which includes running a failed bandwidth, compute, links, training, isolation " \
           "check once more to confirm it before the verdict" in out
    assert "SITE-BW-001 failed: running it once more to confirm" in out


def test_failed_twice_is_a_confirmed_failure(tmp_path):
    rc, report = _run(tmp_path, "42.0, 37.5")
    assert rc == EXIT_FAILED and report["verdict"] == "fail"
    assert _runs(tmp_path) == 2
    site = _site_check(report)
    assert site["outcome"] == "fail"
    assert site["message"].endswith("(confirmed: failed again when run again: site busbw 37.5 "
                                    "GB/s (needs >= 100.0 GB/s))")
    assert site["confirmation"]["status"] == "confirmed"
    assert [m["value"] for m in site["measurements"]] == [42.0]
    assert report["confirmation"]["confirmed"] == ["SITE-BW-001"]
    assert report["confirmation"]["flaky_total"] == 0


def test_a_check_of_no_family_is_condemned_at_once(tmp_path):
    """The removal test: the same check without its family is never run again."""
    rc, report = _run(tmp_path, "42.0, 180.0", family="")
    assert rc == EXIT_FAILED
    assert _runs(tmp_path) == 1
    assert "confirmation" not in _site_check(report)
    assert report["confirmation"]["asked"] == []


def test_a_profile_that_confirms_nothing_condemns_at_once(tmp_path, capsys):
    profiles = tmp_path / "profiles.toml"
    profiles.write_text('[profiles.strict]\nbase = "local-cpu"\nconfirm_families = []\n')
    rc, report = _run(tmp_path, "42.0, 180.0", "--profile-file", str(profiles),
                      "--profile", "strict")
    assert rc == EXIT_FAILED
    assert _runs(tmp_path) == 1
    assert report["confirmation"]["families"] == []
    assert "no failure is run again before the verdict" in capsys.readouterr().out


def test_no_time_left_leaves_the_failure_standing_unconfirmed(tmp_path):
    """The first run took half of a 60 s budget: a second needs as long again plus a session's
    start, more than is left whatever the load (bounds, not times), so it is not started; the
    failure stands and says why."""
    profiles = tmp_path / "profiles.toml"
    profiles.write_text('[profiles.tight]\nbase = "local-cpu"\n'
                        '[profiles.tight.run_budget_s]\npreflight = 60.0\n')
    rc, report = _run(tmp_path, "42.0, 180.0", "--profile-file", str(profiles),
                      "--profile", "tight", first_run_s=30.0)
    assert rc == EXIT_FAILED
    site = _site_check(report)
    assert site["confirmation"]["status"] == "unconfirmed"
    assert re.search(r"\(not confirmed: \d+ s were left of the run's 60 s budget; running it "
                     r"again needs about \d+ s\)$", site["message"]), site["message"]
    assert report["confirmation"]["unconfirmed"] == ["SITE-BW-001"]
    assert _runs(tmp_path) == 1


def test_the_clusters_flaky_pairs_are_counted_in_the_total():
    from harness.run.confirm import add_isolation

    node = {"families": ["bandwidth"], "flaky": ["PF-BW-001"], "flaky_total": 1}
    isolation = {"flaky": [{"first": {"a": 0, "b": 3, "busbw_gb_s": 0.01, "error": None},
                            "again": []}]}
    assert add_isolation(node, isolation) == {**node, "isolation_flaky": 1, "flaky_total": 2}
    assert add_isolation(None, None) == {"isolation_flaky": 0, "flaky_total": 0}
