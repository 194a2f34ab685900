"""No secret reaches any channel of a run of the installed `preflight` (issue 26, items 1-2).

Canaries in every shape harness.base.redact recognises (tests/secret_canaries.py) are placed where
secrets come from in a real job: the environment (secret-named variables, and secret-shaped
values in variables the report keeps: NCCL_*, SM_*, FI_PROVIDER), a tool's output (dcgmi fails
printing them), a site check's assertion, print, warning, fixture error and parameter
(--extra-checks), and the training command's arguments. Then every byte the run writes is
scanned: stdout and stderr, every file it created or changed under the node's folder (the
report folder: report.json, results.jsonl, junit*.xml, pytest-output.txt, profile.json; the
failure file, the termination log, temporary files), the Kubernetes API requests (a fake API
server), the CloudWatch EMF events and the S3 objects (a moto server). The non-secrets that
must survive are checked in the same outputs.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest
from aws_server import aws_test_env
from secret_canaries import CANARIES, ENV_CANARIES, SURVIVORS, leaks, survivors_missing

_BY_SHAPE = {c.shape: c for c in CANARIES}
ALL_TEXT = "\n".join(c.text for c in CANARIES)
ENV_TEXT = " ".join(f"saw {v}" for v in ENV_CANARIES.values())
SURVIVING = " ".join(SURVIVORS)
#: What a failing tool prints (its last line is quoted in the check's message): every
#: one-line canary in one line (a YAML or INI line, a PEM block are lines of their own).
TOOL_LINE = " | ".join(c.text for c in CANARIES
                       if "\n" not in c.text and not c.shape.startswith(("YAML", "INI")))
#: The run's own credentials (AWS, for moto) and a training argument, besides the canaries.
MORE_SECRETS = ["ASIACANARY0000000009", "canaryAwsSessionToken0", "canary arg pass"]
SECRETS = [c.secret for c in CANARIES] + list(ENV_CANARIES.values()) + MORE_SECRETS
#: What the test wrote before the run (the site check and the fake tools' configuration hold
#: the canaries): everything else under the test's folder is the run's output.
INPUTS = ("site/", "node0/fake-config.json")

SITE = f'''
import os, sys, warnings
import pytest

TEXT = {ALL_TEXT + chr(10) + ENV_TEXT!r}


def test_site_prints_warns_and_fails():
    """A site check that prints, warns and asserts with secrets in every shape"""
    print(TEXT)
    print(os.environ["DB_PASSWORD"], os.environ["MY_SERVICE_AUTH"], file=sys.stderr)
    warnings.warn("warned: " + TEXT)
    assert False, {SURVIVING!r} + chr(10) + TEXT + " " + os.environ["AWS_SECRET_ACCESS_KEY"]


def test_site_compares_a_secret():
    assert os.environ["HF_TOKEN"] == "not the token"


@pytest.fixture
def vault():
    raise RuntimeError("vault answered: " + TEXT)


def test_site_fact_errors(vault):
    pass


@pytest.mark.parametrize("repo", [{_BY_SHAPE["Hugging Face token"].secret!r}])
def test_site_parametrized_with_a_token(repo):
    assert repo
'''


class _Api:
    """A fake Kubernetes API server that keeps every request (tests/test_kube.py's)."""

    def __enter__(self) -> _Api:
        from test_kube import FakeApi

        self.server = FakeApi()
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


def _written(root: Path) -> dict[str, bytes]:
    """Every file under `root` but the test's INPUTS."""
    files = {str(p.relative_to(root)): p for p in root.rglob("*") if p.is_file()}
    return {name: path.read_bytes() for name, path in sorted(files.items())
            if not name.startswith(INPUTS)}


@pytest.mark.smoke
def test_no_canary_reaches_any_channel_of_a_run(run_node, moto_endpoint, tmp_path) -> None:
    import boto3

    site = tmp_path / "site"
    site.mkdir()
    (site / "test_canary_site.py").write_text(SITE)
    failure, termination = tmp_path / "failure", tmp_path / "termination-log"
    termination.write_text("")
    aws = {**aws_test_env(moto_endpoint, tmp_path), "PREFLIGHT_CW_FORMAT": "emf",
           "PREFLIGHT_CW_LOG_GROUP": "/pf/e2e-redaction",
           "AWS_ACCESS_KEY_ID": "ASIACANARY0000000009",
           "AWS_SECRET_ACCESS_KEY": ENV_CANARIES["AWS_SECRET_ACCESS_KEY"],
           "AWS_SESSION_TOKEN": "canaryAwsSessionToken0"}
    s3 = boto3.client("s3", endpoint_url=moto_endpoint, region_name="us-east-1",
                      aws_access_key_id="x", aws_secret_access_key="x")
    s3.create_bucket(Bucket="pf-e2e-redaction")
    command = ["/bin/sh", "-c", "exit 0", "sh", "--hf-token", _BY_SHAPE["OpenAI key"].secret,
               "--password", "canary arg pass", "--lr", "3e-4"]
    with _Api() as api:
        env = {**ENV_CANARIES, **aws, "MAX_TOKENS": "4096", "TOKENIZERS_PARALLELISM": "false",
               "AUTHOR": "survivor-author",
               # Secret-shaped values in variables the report keeps and the env checks judge
               "FI_PROVIDER": _BY_SHAPE["GitHub fine-grained token"].secret,
               "NCCL_DEBUG_FILE": _BY_SHAPE["URL userinfo password"].text,
               "SM_HPS": _BY_SHAPE["JSON value under a secret key, with spaces"].text,
               "PREFLIGHT_TERMINATION_LOG": str(termination), "PREFLIGHT_K8S_API": api.url,
               "PREFLIGHT_K8S_MARK": "label,condition,taint",
               "PREFLIGHT_NODE_NAME": "ip-10-0-0-7"}
        _node, run = run_node(
            ["-v", "-k", "PF-ENV or test_dcgm_diag_passes or site", "--extra-checks", str(site),
             "--failure-file", str(failure), "--s3-uri", "s3://pf-e2e-redaction/runs/",
             "--cloudwatch-namespace", "PreflightE2E/redaction", "--", *command],
            handoff=False, extra_env=env,
            faults={"dcgmi": "exit"}, variant={"error_text": {"dcgmi": TOOL_LINE}})
        requests = list(api.server.requests)
    why = run.describe()
    assert run.returncode == 1, why
    outcomes = run.outcomes()
    # Each canary source reached a result: the env check, the failing tool, every site check.
    assert outcomes.get("PF-ENV-001") == "fail" and outcomes.get("PF-GPU-012") == "error", outcomes
    site_outcomes = sorted(o for i, o in outcomes.items() if i.startswith("site/"))
    assert site_outcomes == ["error", "fail", "fail", "pass"], outcomes

    outputs: dict[str, str | bytes] = {"stdout+stderr": run.output}
    outputs.update({f"file {name}": data for name, data in _written(tmp_path).items()})
    logs = boto3.client("logs", endpoint_url=moto_endpoint, region_name="us-east-1",
                        aws_access_key_id="x", aws_secret_access_key="x")
    events = logs.get_log_events(logGroupName="/pf/e2e-redaction",
                                 logStreamName="e2e-node")["events"]
    outputs.update({f"EMF event {i}": e["message"] for i, e in enumerate(events)})
    for obj in s3.list_objects_v2(Bucket="pf-e2e-redaction").get("Contents", []):
        outputs[f"s3 {obj['Key']}"] = s3.get_object(Bucket="pf-e2e-redaction",
                                                    Key=obj["Key"])["Body"].read()
    outputs["Kubernetes API requests"] = json.dumps(requests)
    written = {name.removeprefix("file ") for name in outputs}
    report_dir = "node0/reports/e2e-node/"
    for name in ("report.json", "results.jsonl", "junit.xml", "pytest-output.txt"):
        assert report_dir + name in written, sorted(written)
    assert {"failure", "termination-log"} <= written, sorted(written)
    assert events and len(requests) == 3 and any(k.startswith("s3 ") for k in outputs), outputs.keys()

    assert leaks(outputs, SECRETS) == [], why

    # What is not a secret is still there: in the failing site check's message (report.json
    # and the stdout summary), the environment section, the recorded command.
    report = run.report
    message = next(c["message"] for c in report["checks"]
                   if c["id"].endswith("test_site_prints_warns_and_fails"))
    assert survivors_missing(message) == [] and survivors_missing(" ".join(run.output.split())) == []
    assert report["command"] == [*command[:5], "***REDACTED***", "--password", "***REDACTED***",
                                 "--lr", "3e-4"]
    assert report["environment"]["NCCL_DEBUG"] == "WARN"
    assert "warned: " in outputs[f"file {report_dir}pytest-output.txt"].decode()
