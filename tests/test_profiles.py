"""Profiles (data, overrides) and the detection chain, one test per provider."""

from __future__ import annotations

import http.server
import json
import socket
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from harness.detect import instance as detect
from harness.profiles.model import ProfileError
from harness.profiles.table import BUILTIN_PROFILES, get_profile, load_profile_file

EXPECTED = {"local-cpu", "p4d.24xlarge", "p4de.24xlarge", "p5.48xlarge", "p5e.48xlarge",
            "p5en.48xlarge", "p6-b200.48xlarge"}


def test_builtin_profiles_cover_the_instance_types():
    # The full list is checked against SageMaker's own enums in tests/test_profiles_data.py.
    assert set(BUILTIN_PROFILES) >= EXPECTED
    assert not [name for name in BUILTIN_PROFILES if name.startswith("_")]  # families stay hidden


@pytest.mark.parametrize(
    ("name", "gpus", "efa", "model"),
    [("p4d.24xlarge", 8, 4, "A100"), ("p5.48xlarge", 8, 32, "H100"),
     ("p5en.48xlarge", 8, 16, "H200"), ("p6-b200.48xlarge", 8, 8, "B200"),
     ("local-cpu", 0, 0, None)],
)
def test_profile_facts_match_domain_facts(name, gpus, efa, model):
    p = get_profile(name)
    assert (p.num_gpus, p.num_efa_devices, p.gpu_model) == (gpus, efa, model)


def test_every_gpu_threshold_has_a_source():
    for p in BUILTIN_PROFILES.values():
        if not p.has_gpus:
            continue
        for field in ("nvlink_busbw_gb_s_min", "net_busbw_gb_s_min", "min_bf16_tflops",
                      "min_hbm_copy_gb_s", "num_gpus", "gdr_required"):
            assert p.sources.get(field), f"{p.name}.{field} has no source"


def test_ml_prefix_is_ignored_and_unknown_lists_known():
    assert get_profile("ml.p5.48xlarge").name == "p5.48xlarge"
    with pytest.raises(ProfileError,
                       match=r"unknown profile 'p9.huge'; known profiles: g5.12xlarge, .*local-cpu,"):
        get_profile("p9.huge")


def test_profile_file_overrides_and_adds(tmp_path):
    f = tmp_path / "site.toml"
    f.write_text(
        '[profiles."p5.48xlarge"]\nnet_busbw_gb_s_min = 400\n'
        'run_budget_s = { preflight = 60.0 }\n\n'
        '[profiles."p5-half"]\nbase = "p5.48xlarge"\nnum_gpus = 4\n'
        'weakened_because = "half a p5 per job"\n'
    )
    profiles = load_profile_file(f)
    assert profiles["p5.48xlarge"].net_busbw_gb_s_min == 400
    assert profiles["p5.48xlarge"].run_budget_s["preflight"] == 60.0
    assert profiles["p5.48xlarge"].run_budget_s["certify"] == 7200.0  # merged, not replaced
    assert profiles["p5.48xlarge"].sources["net_busbw_gb_s_min"] == f"profile file {f}"
    half = profiles["p5-half"]
    assert (half.num_gpus, half.num_efa_devices, half.gpu_model) == (4, 32, "H100")
    assert (half.weakened, half.weakened_because) == (("num_gpus 8 -> 4",), "half a p5 per job")
    assert profiles["p5.48xlarge"].weakened == ()  # a raised floor weakens nothing
    assert BUILTIN_PROFILES["p5.48xlarge"].net_busbw_gb_s_min == 370.0  # built-ins untouched


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("not toml [", "bad.toml, line 1: not valid TOML"),
        ("[other]\nx = 1\n", 'has no [profiles."NAME"] tables'),
        ('[profiles."p5.48xlarge"]\nnum_gpu = 4\n', "unknown field 'num_gpu' (known:"),
        ('[profiles."p5.48xlarge"]\nnum_gpus = "eight"\n', "num_gpus = 'eight' must be an integer"),
        ('[profiles."x"]\nbase = "p99"\n', "base 'p99' is not a known profile"),
        ('[profiles."p5.48xlarge"]\ngdr_required = 1\n', "gdr_required = 1 must be true or false"),
    ],
)
def test_profile_file_errors_name_the_problem(tmp_path, text, error):
    f = tmp_path / "bad.toml"
    f.write_text(text)
    with pytest.raises(ProfileError, match=error.replace("[", r"\[").replace("(", r"\(")):
        load_profile_file(f)


def test_missing_profile_file(tmp_path):
    with pytest.raises(ProfileError, match="cannot read profile file"):
        load_profile_file(tmp_path / "nope.toml")


# --- Detection chain -------------------------------------------------------------------------

NO_IMDS = {"AWS_EC2_METADATA_DISABLED": "true"}


def test_option_wins(tmp_path):
    env = {"PREFLIGHT_PROFILE": "p4d.24xlarge", "PREFLIGHT_OPT_ML": str(tmp_path)}
    found = detect.detect_instance_type("p5.48xlarge", env, sysroot=tmp_path)
    assert found == detect.Detection("p5.48xlarge", "--profile")


def test_env_var_next(tmp_path):
    env = {"PREFLIGHT_PROFILE": "p4d.24xlarge", "PREFLIGHT_OPT_ML": str(tmp_path)}
    assert detect.detect_instance_type("auto", env, tmp_path) == detect.Detection(
        "p4d.24xlarge", "PREFLIGHT_PROFILE")


def test_sagemaker_resourceconfig_strips_ml(tmp_path):
    cfg = tmp_path / "input" / "config"
    cfg.mkdir(parents=True)
    (cfg / "resourceconfig.json").write_text(json.dumps(
        {"current_host": "algo-1", "hosts": ["algo-1"], "current_instance_type": "ml.p5en.48xlarge"}))
    env = {"PREFLIGHT_OPT_ML": str(tmp_path), **NO_IMDS}
    assert detect.detect_instance_type(None, env, tmp_path) == detect.Detection(
        "p5en.48xlarge", "SageMaker resourceconfig.json")
    assert detect.hostname(env) == "algo-1"


def test_corrupt_resourceconfig_is_ignored(tmp_path):
    cfg = tmp_path / "input" / "config"
    cfg.mkdir(parents=True)
    (cfg / "resourceconfig.json").write_text("{truncated")
    env = {"PREFLIGHT_OPT_ML": str(tmp_path), **NO_IMDS}
    assert detect.detect_instance_type(None, env, tmp_path).name == "local-cpu"


class _Imds(http.server.BaseHTTPRequestHandler):
    def do_PUT(self):
        assert self.path == "/latest/api/token"
        assert self.headers["X-aws-ec2-metadata-token-ttl-seconds"]
        self._send(b"TOKEN123")

    def do_GET(self):
        if self.headers.get("X-aws-ec2-metadata-token") != "TOKEN123":
            self.send_response(401)
            self.end_headers()
            return
        assert self.path == "/latest/meta-data/instance-type"
        self._send(b"p4de.24xlarge")

    def _send(self, body: bytes) -> None:
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def imds_server():
    server = http.server.HTTPServer(("127.0.0.1", 0), _Imds)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_imdsv2_token_then_instance_type(tmp_path, imds_server):
    env = {"PREFLIGHT_OPT_ML": str(tmp_path), "AWS_EC2_METADATA_SERVICE_ENDPOINT": imds_server}
    assert detect.detect_instance_type(None, env, tmp_path) == detect.Detection(
        "p4de.24xlarge", "EC2 instance metadata (IMDSv2)")


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_unreachable_imds_falls_through_quickly(tmp_path):
    env = {"PREFLIGHT_OPT_ML": str(tmp_path),
           "AWS_EC2_METADATA_SERVICE_ENDPOINT": f"http://127.0.0.1:{_closed_port()}"}
    start = time.monotonic()
    found = detect.detect_instance_type(None, env, tmp_path)
    assert found == detect.Detection("local-cpu", "inspection (no GPU found)")
    assert time.monotonic() - start < 1.0


def test_silent_imds_is_bounded_by_the_timeout(tmp_path):
    """An endpoint that accepts connections and never answers must not slow the run."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    try:
        env = {"PREFLIGHT_OPT_ML": str(tmp_path),
               "AWS_EC2_METADATA_SERVICE_ENDPOINT":
                   f"http://127.0.0.1:{listener.getsockname()[1]}"}
        start = time.monotonic()
        assert detect.imds_instance_type(env, tmp_path) is None
        assert time.monotonic() - start < detect.IMDS_TIMEOUT_S + 0.7
    finally:
        listener.close()


def test_imds_not_contacted_off_ec2(tmp_path, monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("IMDS must not be contacted without an EC2 DMI signature")

    monkeypatch.setattr(urllib.request.OpenerDirector, "open", refuse)
    assert detect.imds_instance_type({}, sysroot=tmp_path) is None


def test_ec2_dmi_signature(tmp_path):
    dmi = tmp_path / "sys/devices/virtual/dmi/id"
    dmi.mkdir(parents=True)
    (dmi / "sys_vendor").write_text("Amazon EC2\n")
    assert detect._on_ec2(tmp_path)
    assert not detect._on_ec2(tmp_path / "elsewhere")


def test_imds_disabled_by_env(tmp_path, imds_server):
    env = {"AWS_EC2_METADATA_SERVICE_ENDPOINT": imds_server, "AWS_EC2_METADATA_DISABLED": "true"}
    assert detect.imds_instance_type(env, tmp_path) is None


def test_gpu_machine_without_a_type_is_undetected(tmp_path):
    (tmp_path / "dev").mkdir()
    (tmp_path / "dev" / "nvidia0").write_text("")
    env = {"PREFLIGHT_OPT_ML": str(tmp_path / "none"), **NO_IMDS}
    assert detect.detect_instance_type(None, env, Path(tmp_path)) is None


def test_judges_thresholds_are_profile_fields_shown_with_their_source():
    """PF-GPU-019's window and PF-CLUSTER-006's limits are Profile fields; `preflight profiles
    NAME` (threshold_rows) shows each with a source."""
    from harness.profiles.table import get_profile, threshold_rows

    rows = {f: (v, src) for f, v, src in threshold_rows(get_profile("p5.48xlarge"))}
    for name, value in [("xid_window_h", "2.0"), ("straggler_z_max", "3.5"),
                        ("straggler_min_nodes", "4"), ("straggler_min_rel_dev", "0.05")]:
        assert rows[name][0] == value
        assert rows[name][1], f"{name} has no source"
