"""`preflight inspect env` redacts its result once (issue 32): inspect_env redacts against the
dump's secrets and this process's, and cmd_inspect prints that record as it is. No secret of
either kind reaches any channel (JSON, plain, the --fail-on lines)."""

from __future__ import annotations

import io
import json

import pytest

from harness.base.redact import Redactor
from harness.base.redact_shapes import REDACTED
from harness.cli import main
from harness.parsers import inspect_kind
from harness.parsers.env import inspect_env
from harness.profiles.table import get_profile

#: Set in the script itself (the dump's secret) and in this process's environment only.
SCRIPT_SECRET = "hf_scriptSecretABCDEFGHIJKLMNOPQRSTUV"
PROCESS_SECRET = "process-only-passphrase-0123456789"

SCRIPT = (
    "#!/bin/bash\n"
    f"export HF_TOKEN={SCRIPT_SECRET}\n"
    # the secrets inside values that are shown: one known from the script, one from the process
    f"export NCCL_DEBUG_FILE=/fsx/{SCRIPT_SECRET}/nccl.%h\n"
    f"export FI_EFA_PATH_NOTE=/opt/{PROCESS_SECRET}/x\n"
    f"mpirun -x NCCL_SOCKET_IFNAME=eth0 -x LD_LIBRARY_PATH=/opt/{PROCESS_SECRET}:$LD_LIBRARY_PATH"
    " ./train\n"
    "export FI_PROVIDER=sockets\n"  # judged harmful on p5: its value in a finding
)


@pytest.fixture
def script(tmp_path, monkeypatch):
    monkeypatch.setenv("MY_DB_PASSWORD", PROCESS_SECRET)
    path = tmp_path / "job.sh"
    path.write_text(SCRIPT)
    return path


@pytest.mark.parametrize("plain", [False, True])
def test_no_secret_of_the_script_or_the_process_reaches_inspect_output(script, capsys, plain):
    argv = ["inspect", "env", str(script), "--profile", "p5.48xlarge"]
    main([*argv] if plain else [*argv, "--json"])
    out, err = capsys.readouterr()
    assert "NCCL_DEBUG_FILE" in out and "LD_LIBRARY_PATH" in out  # the values are shown ...
    assert REDACTED in out  # ... with the secrets in them redacted
    for secret in (SCRIPT_SECRET, PROCESS_SECRET):
        assert secret not in out and secret not in err


def test_the_result_is_redacted_whole_a_second_pass_changes_nothing(script, monkeypatch):
    """What cmd_inspect no longer does (Redactor().obj) would change nothing: inspect_env's
    record is the redacted one, against the process's secrets as well."""
    monkeypatch.setenv("MY_DB_PASSWORD", PROCESS_SECRET)
    inspect = inspect_kind("env")
    assert getattr(inspect, "redacted", False)  # cmd_inspect takes it as it is
    result = inspect(io.StringIO(SCRIPT), profile=get_profile("p5.48xlarge"))
    assert Redactor().obj(result) == result
    text = json.dumps(result)
    assert SCRIPT_SECRET not in text and PROCESS_SECRET not in text
    assert f"/opt/{REDACTED}/x" == result["relevant"]["FI_EFA_PATH_NOTE"]


def test_a_secret_only_the_process_knows_is_redacted_by_inspect_env_itself(monkeypatch):
    """The pass cmd_inspect skips is inspect_env's: without the process's secret in the
    environment it is kept (it is no secret), with it it is redacted."""
    profile = get_profile("p5.48xlarge")
    text = f"export NCCL_DEBUG_FILE=/x/{PROCESS_SECRET}\n"
    monkeypatch.delenv("MY_DB_PASSWORD", raising=False)
    assert PROCESS_SECRET in json.dumps(inspect_env(io.StringIO(text), profile=profile))
    monkeypatch.setenv("MY_DB_PASSWORD", PROCESS_SECRET)
    assert PROCESS_SECRET not in json.dumps(inspect_env(io.StringIO(text), profile=profile))
