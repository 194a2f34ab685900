"""--metrics-file: Prometheus text read back with prometheus_client's own parser."""

from __future__ import annotations

import json
import os

import test_cli
from prometheus_client.parser import text_string_to_metric_families

from harness import cli
from harness.commands import EXIT_FAILED, EXIT_OK
from harness.report.metrics import render, write_metrics_file
from harness.report.model import Report

# The neutral environment of a run and the recorded hand-off (tests/test_cli.py).
clean_env = test_cli.clean_env
execs = test_cli.execs

REPORT = {
    "host": "gpu-node-7", "profile": {"name": "p5.48xlarge", "source": "IMDS"}, "tier": "preflight",
    "verdict": "fail", "exit_code": 1, "duration_s": 41.5,
    "gpus": {"inventory": [{"index": 3, "uuid": "GPU-604ac76c-d9cf-fef3-62e9-d92044ab6e52"}]},
    "checks": [
        {"id": "PF-GPU-005", "outcome": "fail", "duration_s": 1.25, "measurements": [
            {"what": "GPU 3 temperature", "value": 91, "unit": "C", "op": "<=", "threshold": 85,
             "ok": False},
            {"what": "GPU 0 temperature", "value": 40, "unit": "C", "op": "<=", "threshold": 85,
             "ok": True}]},
        {"id": "PF-ENV-001", "outcome": "pass", "duration_s": 0.01, "measurements": [
            {"what": "NCCL_NET", "value": "AWS Libfabric", "unit": ""}]},
        {"id": "PF-NET-003", "outcome": "skip", "duration_s": None, "measurements": []},
    ],
}


def render_dict(data: dict, now: float | None = None) -> str:
    """The metrics of a report.json's data, read as the file edge reads it."""
    return render(Report.from_dict(data), now=now)


def _samples(text: str) -> dict[str, list]:
    return {f.name: f.samples for f in text_string_to_metric_families(text)}


def test_verdict_outcomes_and_labels():
    fams = _samples(render_dict(REPORT, now=1700000000.0))
    base = {"Hostname": "gpu-node-7", "profile": "p5.48xlarge", "tier": "preflight"}
    verdict = {s.labels["verdict"]: s.value for s in fams["preflight_verdict"]}
    assert verdict == {"pass": 0.0, "fail": 1.0, "error": 0.0, "interrupted": 0.0}
    assert fams["preflight_passed"][0].labels == base and fams["preflight_passed"][0].value == 0
    assert fams["preflight_last_run_timestamp_seconds"][0].value == 1700000000.0
    outcome = {(s.labels["check"], s.labels["outcome"]): s.value
               for s in fams["preflight_check_outcome"]}
    assert outcome[("PF-GPU-005", "fail")] == 1 and outcome[("PF-GPU-005", "pass")] == 0
    assert outcome[("PF-NET-003", "skip")] == 1
    durations = {s.labels["check"]: s.value for s in fams["preflight_check_duration_seconds"]}
    # PF-NET-003's duration was not measured (`None`): no sample, never a 0
    assert durations == {"PF-GPU-005": 1.25, "PF-ENV-001": 0.01}


def test_per_gpu_values_carry_dcgm_labels_and_units():
    fams = _samples(render_dict(REPORT))
    hot = [s for s in fams["preflight_measurement"] if s.labels["gpu"] == "3"]
    assert len(hot) == 1
    assert hot[0].value == 91 and hot[0].labels["unit"] == "C"
    assert hot[0].labels["UUID"] == "GPU-604ac76c-d9cf-fef3-62e9-d92044ab6e52"
    cool = next(s for s in fams["preflight_measurement"] if s.labels["gpu"] == "0")
    assert cool.labels["UUID"] == ""  # not known: left empty, never guessed
    assert {s.labels["op"] for s in fams["preflight_measurement_threshold"]} == {"<="}
    ok = {s.labels["gpu"]: s.value for s in fams["preflight_measurement_ok"]}
    assert ok == {"3": 0.0, "0": 1.0}
    # A text fact has no numeric sample (Prometheus values are numbers).
    assert all(s.labels["measurement"] != "nccl_net" for s in fams["preflight_measurement"])


def test_series_are_keyed_by_the_stable_measurement_name_not_its_text():
    """A reworded `what` keeps every series (issue 29: dashboards keyed by the text broke); an
    older report without names gets the name derived from the text, GPU index dropped."""
    import copy

    named = copy.deepcopy(REPORT)
    for m in named["checks"][0]["measurements"]:
        m["name"] = "gpu_temperature"
        m["gpu_index"] = int(m["what"].split()[1])
    reworded = copy.deepcopy(named)
    for m in reworded["checks"][0]["measurements"]:
        m["what"] = f"temperature of GPU {m['gpu_index']} (NVML, °C)"

    def series(report: dict) -> dict:
        return {tuple(sorted(s.labels.items())): s.value
                for s in _samples(render_dict(report))["preflight_measurement"]}

    assert series(named) == series(reworded)
    assert {s.labels["measurement"] for s in _samples(render_dict(named))["preflight_measurement"]} \
        == {"gpu_temperature"}
    assert "what" not in _samples(render_dict(named))["preflight_measurement"][0].labels
    legacy = {s.labels["measurement"] for s in _samples(render_dict(REPORT))["preflight_measurement"]}
    assert legacy == {"gpu_temperature"}


def test_empty_or_broken_report_is_not_a_pass():
    fams = _samples(render_dict({"checks": "garbage"}))
    assert fams["preflight_passed"][0].value == 0
    assert {s.labels["verdict"] for s in fams["preflight_verdict"] if s.value} == {"error"}
    fams = _samples(render_dict({"checks": [None, {"id": "X"}]}))
    assert {s.labels["outcome"] for s in fams["preflight_check_outcome"] if s.value} == {"error"}


def test_write_is_atomic_and_replaces(tmp_path):
    path = tmp_path / "textfile" / "preflight.prom"
    write_metrics_file(Report.from_dict(REPORT), path)
    first = path.stat().st_ino
    write_metrics_file(Report.from_dict({**REPORT, "checks": REPORT["checks"][1:2]}), path)
    assert path.stat().st_ino != first  # renamed over, not rewritten in place
    assert os.listdir(path.parent) == ["preflight.prom"]  # no temp file left behind
    assert _samples(path.read_text())["preflight_passed"][0].value == 1


def test_run_writes_the_metrics_file_and_junit_json(tmp_path, execs, monkeypatch):
    prom = tmp_path / "prom" / "preflight.prom"
    monkeypatch.setenv("PREFLIGHT_METRICS_FILE", str(prom))
    monkeypatch.setenv("NCCL_NET", "Socket")
    rc = cli.main(["run", "--profile", "p5.48xlarge", "--report-dir", str(tmp_path / "r"),
                   "-k", "PF-ENV-001"])
    assert rc == EXIT_FAILED
    fams = _samples(prom.read_text())
    report = json.loads((tmp_path / "r" / "node-a" / "report.json").read_text())
    assert fams["preflight_exit_code"][0].value == report["exit_code"] == 1
    failed = {s.labels["check"] for s in fams["preflight_check_outcome"]
              if s.labels["outcome"] == "fail" and s.value == 1}
    assert failed == {"PF-ENV-001"}
    # The junit.xml property is JSON (it was a Python repr).
    import xml.etree.ElementTree as ET

    tree = ET.parse(tmp_path / "r" / "node-a" / "junit.xml")
    [prop] = [p for p in tree.iter("property") if p.get("name") == "preflight_result"]
    record = json.loads(prop.get("value"))
    assert (record["id"], record["outcome"]) == ("PF-ENV-001", "fail")


def test_unwritable_metrics_file_is_a_warning(tmp_path, execs, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("")
    rc = cli.main(["run", "--report-dir", str(tmp_path / "r"), "-k", "PF-ENV-001",
                   "--metrics-file", str(blocker / "x.prom")])
    assert rc == EXIT_OK
    assert "cannot write metrics file" in capsys.readouterr().err


def test_version(capsys):
    assert cli.main(["--version"]) == 0
    from harness import __version__

    assert capsys.readouterr().out.strip() == f"gpu-preflight {__version__}"
