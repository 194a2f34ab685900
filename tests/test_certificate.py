"""Certification reuse (harness.memory.certificate, harness.memory.identity): the decision on recorded
identities, the identity read from a fake sysroot and an emulated nvidia-smi, and real
`preflight run` processes: a certify pass writes the certificate (folder and S3 store), a
job-start run reuses it, and a certificate of another node, an edited one, an old one or none
is a full run with the reason said."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import boto3
import pytest

from harness.memory.certificate import REUSABLE, issue, look_up, parse_age, seal
from harness.memory.identity import NodeIdentity, gather
from harness.memory.store import Store
from harness.profiles.table import BUILTIN_PROFILES
from harness.results import CheckResult
from tests.fake_tools import make_tool

ROOT = Path(__file__).resolve().parent.parent
H100_XML = ROOT / "tests/data/nvidia_smi/real_xml-580-h100x8-k8s-test-infra.xml"
CLEAN_LOG = ROOT / "tests/data/kernel_log/real_dev-kmsg-clean-nvswitch.txt"
XID_LOG = ROOT / "tests/data/kernel_log"


@pytest.mark.parametrize(("text", "seconds"), [("90m", 5400), ("6h", 21600), ("2d", 172800),
                                               ("3600", 3600), ("1.5h", 5400), ("30s", 30)])
def test_parse_age(text: str, seconds: float) -> None:
    assert parse_age(text) == seconds


@pytest.mark.parametrize("text", ["", "0", "6 hours", "-1h", "h", "6w"])
def test_parse_age_refuses(text: str) -> None:
    with pytest.raises(ValueError, match="not an age"):
        parse_age(text)


def _identity(**changes: object) -> NodeIdentity:
    fields = {"host": "n1", "boot_id": "b1", "driver": "580.105.08", "image": "sha256:aa",
              "gpus": [{"uuid": "GPU-1", "serial": "165"}], "profile_sha256": "p"}
    return NodeIdentity(fields={**fields, **changes}, events={"xid_lines_since_boot": 0})


def _passed(*ids: str) -> list[CheckResult]:
    return [CheckResult(id=i, nodeid=i, title=i, tier="preflight", outcome="pass") for i in ids]


def _store_cert(tmp_path: Path, cert: dict[str, object]) -> Store:
    store = Store.of(str(tmp_path / "store"))
    store.put("certificates/n1.json", json.dumps(cert).encode())
    return store


def _look(tmp_path: Path, cert: dict[str, object], now_identity: NodeIdentity, *,
          max_age_s: float = 3600, multi_node: bool = False, now: float = 1000.0):
    return look_up(store=_store_cert(tmp_path, cert), report_dir=tmp_path / "r", host="n1",
                   identity=now_identity, max_age_s=max_age_s, selected=REUSABLE,
                   multi_node=multi_node, now=now)


def _cert(identity: NodeIdentity | None = None, ids: tuple[str, ...] = (
        "PF-GPU-013", "PF-ENV-001", "PF-TRAIN-001")) -> dict[str, object]:
    return issue(tier="certify", host="n1", identity=identity or _identity(),
                 checks=_passed(*ids), report_dir=Path("/r"), now=900.0)


def test_matching_identity_reuses_only_reusable_passed_checks(tmp_path: Path) -> None:
    found = _look(tmp_path, _cert(), _identity())
    assert found.ids == ["PF-GPU-013", "PF-TRAIN-001"]  # PF-ENV-001 always runs
    assert found.age_s == 100.0 and found.to_dict()["used"] is True
    multi = _look(tmp_path, _cert(), _identity(), multi_node=True)
    assert multi.ids == ["PF-GPU-013"]  # the training step feeds the cluster's comparison


def test_not_applicable_is_reused_a_warning_is_not(tmp_path: Path) -> None:
    checks = [CheckResult(id="PF-BW-001", nodeid="a", title="t", tier="preflight",
                          outcome="skip", message="CPU profile: no NVLink floor"),
              CheckResult(id="PF-GPU-013", nodeid="b", title="t", tier="preflight",
                          outcome="warn", message="slow-ish")]
    cert = issue(tier="certify", host="n1", identity=_identity(), checks=checks,
                 report_dir=Path("/r"), now=900.0)
    found = _look(tmp_path, cert, _identity())
    assert found.ids == ["PF-BW-001"]
    reused = found.to_dict()["checks"][0]  # type: ignore[index]
    assert (reused["certified_outcome"], reused["certified_message"]) == (
        "skip", "CPU profile: no NVLink floor")


@pytest.mark.parametrize(("now_identity", "reason"), [
    (_identity(env={"NCCL_PROTO": "Simple"}), "environment: env null (certificate) != "
                                               "{\"NCCL_PROTO\": \"Simple\"} (now)"),
    (_identity(host="n2"), "another node, image, profile or NCCL/FI environment: host n1 "
                           "(certificate) != n2 (now)"),
    (_identity(image="sha256:bb"), "image sha256:aa (certificate) != sha256:bb (now)"),
    (_identity(boot_id="b2"), "boot_id b1 (certificate) != b2 (now)"),
    (_identity(gpus=[{"uuid": "GPU-9", "serial": "999"}]), "gpus"),
    (_identity(driver="590.1"), "driver 580.105.08 (certificate) != 590.1 (now)"),
])
def test_identity_mismatch_is_a_full_run(tmp_path: Path, now_identity: NodeIdentity,
                                         reason: str) -> None:
    found = _look(tmp_path, _cert(), now_identity)
    assert found.ids == [] and reason in found.reason


def test_new_event_since_certificate_is_a_full_run(tmp_path: Path) -> None:
    now_identity = _identity()
    now_identity.events["xid_lines_since_boot"] = 1
    found = _look(tmp_path, _cert(), now_identity)
    assert not found.ids
    assert "new ECC, row-remapping or XID events" in found.reason
    assert "xid_lines_since_boot: 0 at certification, 1 now" in found.reason


def test_unread_identity_is_a_full_run(tmp_path: Path) -> None:
    now_identity = _identity()
    now_identity.unread.append("GPUs: cannot read the GPUs")
    assert "could not be read: GPUs" in _look(tmp_path, _cert(), now_identity).reason


@pytest.mark.parametrize(("edit", "reason"), [
    (lambda c: {**c, "tier": "preflight"}, "cut or edited"),  # edited, not resealed
    (lambda c: seal({**c, "tier": "preflight"}), "of tier preflight, not certify"),
    (lambda c: {**c, "schema": "x"}, "is not a gpu-preflight.certificate/v1"),
])
def test_edited_or_wrong_certificate_is_a_full_run(tmp_path: Path, edit, reason: str) -> None:
    assert reason in _look(tmp_path, edit(_cert()), _identity()).reason


def test_age_bounds(tmp_path: Path) -> None:
    assert "older than the 1 min allowed" in _look(tmp_path, _cert(), _identity(),
                                                   max_age_s=60).reason
    assert "in the future" in _look(tmp_path, _cert(), _identity(), now=10.0).reason


def test_no_certificate_says_where_it_looked(tmp_path: Path) -> None:
    found = look_up(store=Store.of(str(tmp_path / "empty")), report_dir=tmp_path / "r",
                    host="n1", identity=_identity(), max_age_s=60, selected=REUSABLE,
                    multi_node=False)
    assert not found.ids and found.reason.startswith("no certificate found: none in ")
    assert str(tmp_path / "r" / "certificate.json") in found.reason


def _sysroot(tmp_path: Path) -> Path:
    root = tmp_path / "root"
    (root / "proc/sys/kernel/random").mkdir(parents=True)
    (root / "proc/sys/kernel/random/boot_id").write_text("b2a16ed4-0000\n")
    (root / "sys/devices/virtual/dmi/id").mkdir(parents=True)
    (root / "sys/devices/virtual/dmi/id/board_asset_tag").write_text("i-0123456789abcdef0\n")
    for name, guid in (("rdmap16s27", "0e5e:f5ff:fe11:2233"), ("rdmap32s27", "0e5e:f5ff:fe44:5566")):
        (root / "sys/class/infiniband" / name).mkdir(parents=True)
        (root / "sys/class/infiniband" / name / "node_guid").write_text(guid + "\n")
    return root


def _fake_smi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bin_dir = tmp_path / "bin"
    make_tool(bin_dir, "nvidia-smi", f'case "$*" in *-x*) cat "{H100_XML}";; *) exit 9;; esac')
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")


def test_identity_from_sysroot_and_nvidia_smi(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_smi(tmp_path, monkeypatch)
    env = {**os.environ, "PREFLIGHT_KERNEL_LOG": str(CLEAN_LOG),
           "PREFLIGHT_IMAGE_DIGEST": "sha256:feed"}
    ident = gather(BUILTIN_PROFILES["p5.48xlarge"], "n1", env, _sysroot(tmp_path))
    assert ident.unread == []
    f = ident.fields
    assert (f["instance_id"], f["boot_id"], f["driver"], f["image"]) == (
        "i-0123456789abcdef0", "b2a16ed4-0000", "580.105.08", "sha256:feed")
    assert len(f["gpus"]) == 8 and f["gpus"][0] == {  # type: ignore[index, arg-type]
        "uuid": "GPU-00000000-0000-0000-0000-000000000000", "serial": "1650000000001"}
    assert [n["guid"] for n in ident.nics] == ["0e5e:f5ff:fe11:2233", "0e5e:f5ff:fe44:5566"]
    assert ident.events["xid_lines_since_boot"] == 0
    assert ident.events["GPU GPU-00000000-0000-0000-0000-000000000000 ECC"][  # type: ignore[index]
        "uncorrected_aggregate"] == 0


def test_identity_unread_parts_are_said(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No boot id, no nvidia-smi on a GPU profile, no kernel log: each named, none guessed."""
    monkeypatch.setenv("PATH", str(tmp_path / "nothing"))
    root = _sysroot(tmp_path)
    (root / "proc/sys/kernel/random/boot_id").unlink()
    ident = gather(BUILTIN_PROFILES["p5.48xlarge"], "n1",
                   {"PREFLIGHT_KERNEL_LOG": str(tmp_path / "no-such-log")}, root)
    assert [u.split(":")[0] for u in ident.unread] == ["boot id", "GPUs", "kernel log"]


# --- real `preflight run` processes on a tiny suite whose checks leave a mark when they run ---

SUITE = '''
import os
from pathlib import Path
from harness.checking import check, measure

def _ran(name):
    Path(os.environ["MARKS"], name).write_text("ran")

@check("PF-GPU-013", title="stand-in for the matmul check", why="w", remedy="r")
def test_matmul():
    _ran("PF-GPU-013")
    measure("TFLOP/s", 700.0, op=">=", threshold=600.0, ok=True)

@check("PF-ENV-001", title="stand-in for the env check", why="w", remedy="r")
def test_env():
    _ran("PF-ENV-001")
'''


def _run(tmp_path: Path, *args: str, env: dict[str, str]) -> tuple[subprocess.CompletedProcess[str],
                                                                    dict[str, object], set[str]]:
    marks = tmp_path / "marks"
    for mark in marks.glob("*"):
        mark.unlink()
    res = subprocess.run([sys.executable, "-m", "harness", "run", "--profile", "local-cpu",
                          "--report-dir", str(tmp_path / "r"), *args], cwd=tmp_path,
                         env={**env, "MARKS": str(marks)}, capture_output=True, text=True,
                         timeout=600)
    report = json.loads((tmp_path / "r/n1/report.json").read_text())
    return res, report, {m.name for m in marks.glob("*")}


def test_certify_then_reuse_on_real_runs(tmp_path: Path, aws_env: dict[str, str]) -> None:
    boto3.client("s3").create_bucket(Bucket="pf-certs")
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "test_stand_in.py").write_text(SUITE)
    (tmp_path / "marks").mkdir()
    env = {**aws_env, "PYTHONPATH": str(ROOT), "PREFLIGHT_SUITE": str(suite),
           "PREFLIGHT_HOSTNAME": "n1", "PREFLIGHT_CERT_STORE": "s3://pf-certs/fleet"}
    res, report, ran = _run(tmp_path, "--tier", "certify", env=env)
    assert res.returncode == 0, res.stdout + res.stderr
    assert ran == {"PF-GPU-013", "PF-ENV-001"}
    cert = json.loads((tmp_path / "r/n1/certificate.json").read_text())
    stored = boto3.client("s3").get_object(Bucket="pf-certs", Key="fleet/certificates/n1.json")
    assert json.loads(stored["Body"].read()) == cert
    assert report["certificate"]["id"] == cert["id"]  # type: ignore[index]

    # Job start: the certificate stands for PF-GPU-013, which does not run and is not reported.
    (tmp_path / "r/n1/certificate.json").unlink()  # from the store alone
    res, report, ran = _run(tmp_path, "--reuse-certified", "2h", env=env)
    assert res.returncode == 0, res.stdout + res.stderr
    assert ran == {"PF-ENV-001"}
    assert [c["id"] for c in report["checks"]] == ["PF-ENV-001"]  # type: ignore[index, union-attr]
    reused = report["reused"]
    assert reused["used"] is True and reused["certificate"] == cert["id"]  # type: ignore[index]
    assert [c["id"] for c in reused["checks"]] == ["PF-GPU-013"]  # type: ignore[index]
    assert reused["checks"][0]["certified_measurements"][0]["value"] == 700.0  # type: ignore[index]
    assert f"reusing certificate {cert['id'][:12]}" in res.stdout
    assert "1 checks not run this time (PF-GPU-013)" in res.stdout

    # A certificate another node wrote under this node's name: full run, the reason said.
    forged = seal({**cert, "identity": {**cert["identity"], "boot_id": "another-boot",
                                        "host": "n9"}})
    boto3.client("s3").put_object(Bucket="pf-certs", Key="fleet/certificates/n1.json",
                                  Body=json.dumps(forged).encode())
    res, report, ran = _run(tmp_path, "--reuse-certified", "2h", env=env)
    assert res.returncode == 0 and ran == {"PF-GPU-013", "PF-ENV-001"}
    assert report["reused"]["used"] is False  # type: ignore[index]
    assert "host n9 (certificate) != n1 (now)" in report["reused"]["reason"]  # type: ignore[index]
    assert "full run: no certificate reused (the certificate at s3://pf-certs/fleet/" in res.stdout

    # Too old (PREFLIGHT_REUSE_CERTIFIED), then none at all: full runs.
    boto3.client("s3").put_object(Bucket="pf-certs", Key="fleet/certificates/n1.json",
                                  Body=json.dumps(cert).encode())
    res, report, ran = _run(tmp_path, env={**env, "PREFLIGHT_REUSE_CERTIFIED": "0.01s"})
    assert ran == {"PF-GPU-013", "PF-ENV-001"} and "older than" in report["reused"]["reason"]  # type: ignore[index]
    res, report, ran = _run(tmp_path, "--reuse-certified", "2h",
                            env={**env, "PREFLIGHT_CERT_STORE": str(tmp_path / "empty")})
    assert ran == {"PF-GPU-013", "PF-ENV-001"}
    assert report["reused"]["reason"].startswith("no certificate found")  # type: ignore[index, union-attr]


def test_bad_max_age_is_a_usage_error(tmp_path: Path) -> None:
    res = subprocess.run([sys.executable, "-m", "harness", "run", "--profile", "local-cpu",
                          "--report-dir", str(tmp_path / "r"), "--reuse-certified", "soon"],
                         cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT)},
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 2
    assert "--reuse-certified / PREFLIGHT_REUSE_CERTIFIED: 'soon' is not an age" in res.stderr


def test_a_k_selection_reuses_nothing(tmp_path: Path) -> None:
    from harness.commands.memory import NodeMemory

    memory = NodeMemory.start(reuse_certified="6h", profile=BUILTIN_PROFILES["local-cpu"],
                              host="n1", tier="preflight", report_dir=tmp_path, env={},
                              sysroot=tmp_path, keyword="PF-GPU-013")
    assert memory.before(multi_node=False) == [
        "full run: no certificate reused (-k 'PF-GPU-013' names the checks to run: they run)"]
    assert memory.reused_ids == []


def test_an_unread_identity_certifies_nothing(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """A certify pass on a GPU profile whose GPUs cannot be read leaves no certificate, and
    says why (a certificate bound to an unknown identity would match nothing, or anything)."""
    from harness.commands.memory import NodeMemory
    from harness.report.model import Report

    monkeypatch.setenv("PATH", str(tmp_path / "no-tools"))
    memory = NodeMemory.start(reuse_certified=None, profile=BUILTIN_PROFILES["p5.48xlarge"],
                              host="n1", tier="certify", report_dir=tmp_path / "r",
                              env={"PREFLIGHT_KERNEL_LOG": str(CLEAN_LOG)},
                              sysroot=_sysroot(tmp_path))
    report = Report(host="n1", profile="p5.48xlarge", profile_source="test", tier="certify",
                    checks=_passed("PF-GPU-013"))
    lines = memory.after(report)
    assert lines[0].startswith("no certificate: this node's identity could not be read: GPUs:")
    assert report.extra["certificate"]["written"] is None
    assert not (tmp_path / "r" / "certificate.json").exists()
