"""No canary secret (tests/secret_canaries.py) reaches any channel, in process: a check
session's pytest output, junit.xml and results.jsonl (harness.run.session_redaction); every output
the CLI renders from a report (report.json, the summaries, the failure file, junit, metrics,
Kubernetes, the termination log, EMF events and S3); and the sweep of the report folder. The
run as users install it: tests/e2e/test_e2e_redaction.py."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from secret_canaries import CANARIES, ENV_CANARIES, SURVIVORS, leaks, survivors_missing

from harness.commands import run_outputs
from harness.report.failure import failure_reason
from harness.report.model import Report, redact_outputs, write_report
from harness.report.plain_output import print_plain_summary
from harness.report.summary import print_summary
from harness.results import CheckResult, Measurement
from harness.run.interrupted import failure_text
from harness.run.junit import write_junit
from tests.conftest import run_checks

SECRETS = [c.secret for c in CANARIES] + list(ENV_CANARIES.values())
ALL_TEXT = "\n".join(c.text for c in CANARIES)
ENV_TEXT = " ".join(f"saw {v} in the log" for v in ENV_CANARIES.values())
SURVIVING = " ".join(SURVIVORS)
#: A check ID with a secret in it (a site check parametrized with a token).
SECRET_ID = f"site/test_site.py::test_repo[{CANARIES[14].secret}]"

SESSION_CHECKS = f'''
import os, sys, warnings
import pytest
from harness.checking import check

TEXT = {ALL_TEXT + chr(10) + ENV_TEXT!r}

@check("PF-T-801", title="prints, warns and fails", why="w", remedy="r")
def test_prints_warns_and_fails():
    print(TEXT)
    print({SURVIVING!r})
    print(os.environ["DB_PASSWORD"], file=sys.stderr)
    warnings.warn("warned: " + TEXT)
    assert False, TEXT + " " + os.environ["AWS_SECRET_ACCESS_KEY"]

def test_plain_assert_shows_the_value():
    secret = os.environ["HF_TOKEN"]
    assert secret == "something else"

@pytest.fixture
def broken():
    raise RuntimeError(TEXT)

@check("PF-T-802", title="its fact fails", why="w", remedy="r")
def test_fixture_error(broken):
    pass

@check("PF-T-803", title="skips", why="w", remedy="r")
def test_skips():
    pytest.skip("not here: " + TEXT)
'''


def test_a_check_session_redacts_its_output_junit_and_results(suite, monkeypatch) -> None:
    for name, value in ENV_CANARIES.items():
        monkeypatch.setenv(name, value)
    suite.makepyfile(test_site=SESSION_CHECKS)
    junit = suite.path / "junit.xml"
    res, by_id = run_checks(suite, "--preflight-profile", "p5.48xlarge", f"--junitxml={junit}")
    assert {by_id[i]["outcome"] for i in ("PF-T-801", "PF-T-802")} == {"fail", "error"}
    outputs = {"pytest output": res.stdout.str() + res.stderr.str(), "junit.xml": junit.read_text(),
               "results.jsonl": (suite.path / "results.jsonl").read_text()}
    assert "warned: " in outputs["pytest output"]  # the warnings summary is there, redacted
    assert leaks(outputs, SECRETS) == []
    assert survivors_missing(outputs["junit.xml"]) == []


def _report() -> Report:
    """A failed run whose every kind of text holds every canary."""
    cut = "x" * 262 + " " + CANARIES[14].secret  # straddles the failure file's 300-character cut
    checks = [
        CheckResult(id="PF-T-900", nodeid="t::a", title="a check", outcome="fail",
                    message=f"[PF-T-900] {ALL_TEXT}\n{ENV_TEXT} {SURVIVING}",
                    warnings=(ALL_TEXT,), remedy=ENV_TEXT,
                    measurements=(Measurement(what=f"busbw {CANARIES[11].text}", value=1.0,
                                              unit="GB/s", op=">=", threshold=2.0, ok=False,
                                              collective="all_reduce"),)),
        CheckResult(id="PF-GPU-001", nodeid="t::b", title="cut", outcome="fail", message=cut),
        CheckResult(id=SECRET_ID, nodeid=SECRET_ID, title="a site check", outcome="error",
                    message="[site] " + ENV_TEXT),
    ]
    return Report(host="node-a", profile="p5.48xlarge", profile_source="x", tier="preflight",
                  checks=checks, harness_errors=[ALL_TEXT], exit_code=1,
                  command=["train.py", "--hf-token", CANARIES[14].secret, ENV_TEXT],
                  environment={"NCCL_DEBUG_FILE": CANARIES[8].text},
                  extra={"cluster": {"verdict": "fail", "text": ALL_TEXT}})


def _env(tmp_path: Path) -> dict[str, str]:
    log = tmp_path / "termination-log"
    log.write_text("")
    return {**ENV_CANARIES, "PREFLIGHT_TERMINATION_LOG": str(log),
            "PREFLIGHT_NODE_NAME": "ip-10-0-0-7"}


def _report_json(report: Report, tmp: Path, env: dict[str, str]) -> str:
    return write_report(report, tmp, env).read_text()


def _failure_file(report: Report, tmp: Path, env: dict[str, str]) -> str:
    run_outputs.write_failure(tmp / "failure", failure_reason(report, env=env), env)
    return (tmp / "failure").read_text()


def _interrupted_failure_file(report: Report, tmp: Path, env: dict[str, str]) -> str:
    report.interrupted = {"signal": "SIGTERM", "finished": [], "not_finished": []}
    run_outputs.write_failure(tmp / "failure", failure_text(report, env), env)
    return (tmp / "failure").read_text()


def _plain_summary(report: Report, tmp: Path, env: dict[str, str]) -> str:
    out = io.StringIO()
    print_plain_summary(report, file=out, env=env)
    return out.getvalue()


def _terminal_table(report: Report, tmp: Path, env: dict[str, str]) -> str:
    out = io.StringIO()  # 80 columns: a long secret would be folded over lines
    print_summary(report, file=out, verbose=True, env=env)
    return out.getvalue()


def _json_summary(report: Report, tmp: Path, env: dict[str, str]) -> str:
    out = io.StringIO()
    run_outputs.print_run_summary(report, tmp, env, out, verbose=False)
    return out.getvalue()


def _junit(report: Report, tmp: Path, env: dict[str, str]) -> str:
    write_junit(report, tmp, env=env)
    return (tmp / "junit.xml").read_text()


def _metrics(report: Report, tmp: Path, env: dict[str, str]) -> str:
    run_outputs.write_metrics(str(tmp / "metrics.prom"), report, env)
    return (tmp / "metrics.prom").read_text()


def _kubernetes(report: Report, tmp: Path, env: dict[str, str]) -> str:
    """What the node's label, taint and condition requests carry (a fake API server), what
    is said on stderr, and the termination log."""
    import threading

    from test_kube import FakeApi

    server = FakeApi()
    threading.Thread(target=server.serve_forever, daemon=True).start()
    said = io.StringIO()
    try:
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr("sys.stderr", said)
            run_outputs.write_kubernetes(report, None, {
                **env, "PREFLIGHT_K8S_MARK": "label,condition,taint",
                "PREFLIGHT_K8S_API": f"http://127.0.0.1:{server.server_address[1]}"})
    finally:
        server.shutdown()
        server.server_close()
    assert len(server.requests) == 3, said.getvalue()
    return (said.getvalue() + Path(env["PREFLIGHT_TERMINATION_LOG"]).read_text()
            + json.dumps(server.requests))


def _peers(report: Report, tmp: Path, env: dict[str, str]) -> str:
    """What this node publishes to the others of a multi-node job (its NCCL/FI variables too)."""
    from harness.cluster.snapshot import node_summary

    env = {**env, "NCCL_DEBUG_FILE": CANARIES[8].text, "FI_PROVIDER": CANARIES[14].secret}
    return json.dumps(node_summary(report, rank=0, facts={}, env=env).to_json())


CHANNELS = {"report.json": _report_json, "failure file": _failure_file,
            "interrupted failure file": _interrupted_failure_file,
            "plain summary (stdout in a log)": _plain_summary,
            "terminal table": _terminal_table, "--format json": _json_summary,
            "junit.xml written from the report": _junit, "metrics file": _metrics,
            "Kubernetes messages and termination log": _kubernetes,
            "the control plane (what the peers quote)": _peers}


@pytest.mark.parametrize("channel", CHANNELS)
def test_no_canary_reaches_a_channel_rendered_from_the_report(channel, tmp_path) -> None:
    env = _env(tmp_path)
    out = CHANNELS[channel](_report(), tmp_path, env)
    assert out.strip(), "the channel wrote nothing"
    assert leaks({channel: out}, SECRETS) == []


@pytest.mark.parametrize("channel", ["report.json", "plain summary (stdout in a log)",
                                     "failure file"])
def test_non_secrets_reach_the_channels(channel, tmp_path) -> None:
    out = CHANNELS[channel](_report(), tmp_path, _env(tmp_path))
    if channel == "report.json":
        out = json.loads(out)["checks"][0]["message"]
    assert survivors_missing(" ".join(out.split())) == []


def test_emf_events_and_s3_uploads_carry_no_canary(aws_env, tmp_path) -> None:
    import boto3

    from harness.report.publish import publish

    env = {**aws_env, **ENV_CANARIES, "PREFLIGHT_CW_FORMAT": "emf",
           "PREFLIGHT_CW_LOG_GROUP": "/pf/redaction"}
    folder = tmp_path / "node-a"
    write_report(_report(), folder, env)
    (folder / "pytest-output.txt").write_text(ALL_TEXT)
    redact_outputs(folder, env)
    s3 = boto3.client("s3")
    s3.create_bucket(Bucket="pf-redaction")
    uploads = publish(_report(), folder, env, s3_uri="s3://pf-redaction/r/",
                      namespace="PreflightTest/redaction", warn=lambda text: None)
    assert uploads["s3"]["ok"] and uploads["cloudwatch"]["ok"], uploads
    events = boto3.client("logs").get_log_events(logGroupName="/pf/redaction",
                                                 logStreamName="node-a")["events"]
    outputs = {f"EMF event {i}": e["message"] for i, e in enumerate(events)}
    for key in uploads["s3"]["files"]:
        outputs[f"s3 {key}"] = s3.get_object(Bucket="pf-redaction", Key=key)["Body"].read()
    assert len(outputs) >= 4
    assert leaks(outputs, SECRETS) == []


def test_the_sweep_redacts_every_file_in_the_report_folder_but_report_json(tmp_path) -> None:
    folder = tmp_path / "node-a"
    report_json = write_report(_report(), folder, ENV_CANARIES).read_text()
    files = {"pytest-output.txt": ALL_TEXT, "junit.xml": ENV_TEXT, "a-new-output.log": ALL_TEXT,
             "nested/deeper.txt": ENV_TEXT + " " + SURVIVING}
    for name, text in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text)
    redact_outputs(folder, ENV_CANARIES)
    outputs = {name: (folder / name).read_text() for name in files}
    assert leaks(outputs, SECRETS) == []
    assert survivors_missing(outputs["nested/deeper.txt"]) == []
    assert (folder / "report.json").read_text() == report_json  # its counts stay numbers
