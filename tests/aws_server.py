"""A real S3/CloudWatch/SageMaker-compatible server (moto's standalone server) started on loopback
for the session, and the AWS environment pointing at it (fixtures imported by tests/conftest.py)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

#: Seconds the server gets to answer (it is ready in ~1 s on an idle machine).
MOTO_START_TIMEOUT_S = 30.0


def free_port() -> int:
    """A loopback port nothing listens on (for the server, or for 'server down' tests)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _moto_server() -> str | None:
    local = Path(sys.executable).with_name("moto_server")
    return str(local) if local.exists() else shutil.which("moto_server")


@pytest.fixture(scope="session")
def moto_endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """http://127.0.0.1:PORT of a moto server this session started (stopped at the end)."""
    exe = _moto_server()
    if exe is None:
        pytest.skip("moto_server is not installed (pip install 'moto[server]')")
    port = free_port()
    log = tmp_path_factory.mktemp("moto") / "server.log"
    with log.open("wb") as out:
        server = subprocess.Popen([exe, "-H", "127.0.0.1", "-p", str(port)], stdout=out,
                                  stderr=subprocess.STDOUT, start_new_session=True)
    endpoint = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + MOTO_START_TIMEOUT_S
    try:
        while True:
            if server.poll() is not None:
                pytest.fail(f"moto_server exited with {server.returncode}: {log.read_text()}")
            try:
                with urllib.request.urlopen(f"{endpoint}/moto-api/", timeout=1):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    pytest.fail(f"moto_server not ready after {MOTO_START_TIMEOUT_S} s: "
                                f"{log.read_text()}")
                time.sleep(0.2)
        yield endpoint
    finally:
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(timeout=10)


def aws_test_env(endpoint: str, tmp: Path) -> dict[str, str]:
    """Variables that point boto3 (and the sagemaker SDK) at `endpoint` with dummy credentials,
    and keep them away from this machine's AWS config and any metadata endpoint."""
    return {
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_REGION": "us-east-1",
        "AWS_EC2_METADATA_DISABLED": "true",
        "AWS_CONFIG_FILE": str(tmp / "aws-config"),
        "AWS_SHARED_CREDENTIALS_FILE": str(tmp / "aws-credentials"),
        "SAGEMAKER_VALIDATE_ROLE": "false",
        # The tests that read metrics back with GetMetricStatistics use PutMetricData;
        # tests/test_emf.py unsets it for the default (EMF log events).
        "PREFLIGHT_CW_FORMAT": "metrics",
    }


@pytest.fixture
def aws_env(moto_endpoint: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """The process environment set for the moto server (and returned, for subprocesses)."""
    env = aws_test_env(moto_endpoint, tmp_path)
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_DEFAULT_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return {**os.environ, **env}
