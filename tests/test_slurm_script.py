"""container/slurm/gpu-preflight-slurm.sh against a fake `scontrol` and a fake `preflight`:
drain only on a node verdict (exit 1), NHC-style reasons, resume only what it drained."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "container" / "slurm" / "gpu-preflight-slurm.sh"

# The fake scontrol: `show node` prints the reason held in $FAKE/reason (as Slurm prints it, with
# the "[user@time]" suffix); `update` appends its argv to $FAKE/calls and updates the reason.
SCONTROL = r"""#!/bin/bash
if [ "$1" = show ]; then
    echo "NodeName=$3 Arch=x86_64 CoresPerSocket=48"
    echo "   State=IDLE ThreadsPerCore=2"
    [ -s "$FAKE/reason" ] && echo "   Reason=$(cat "$FAKE/reason") [root@2026-12-01T10:00:00]"
    exit 0
fi
printf '%s\n' "$*" >>"$FAKE/calls"
for a in "$@"; do
    case "$a" in reason=*) printf '%s' "${a#reason=}" >"$FAKE/reason" ;;
                 state=resume) : >"$FAKE/reason" ;; esac
done
"""
PREFLIGHT = r"""#!/bin/bash
while [ $# -gt 0 ]; do [ "$1" = --failure-file ] && f="$2"; shift; done
head='gpu-preflight FAILED on gpu7 (p5.48xlarge, tier preflight): [PF-GPU-016] GPU 3 "lost"'
[ "$FAKE_RC" = 1 ] && printf '%s\n\nDetails:\n...\n' "$head" >"$f"
exit "$FAKE_RC"
"""


@pytest.fixture
def fake(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in (("scontrol", SCONTROL), ("preflight", PREFLIGHT),
                       ("logger", "#!/bin/sh\necho \"$*\" >>\"$FAKE/syslog\"\n")):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    return tmp_path


def run(fake: Path, mode: str, rc: int, **env: str) -> subprocess.CompletedProcess[str]:
    full = {"PATH": f"{fake / 'bin'}:/usr/bin:/bin", "FAKE": str(fake), "FAKE_RC": str(rc),
            "PREFLIGHT_BIN": str(fake / "bin" / "preflight"), "SLURMD_NODENAME": "gpu7",
            "PREFLIGHT_SLURM_DIR": str(fake / "log"), "SLURM_JOB_ID": "42",
            "SLURM_JOB_GPUS": "0,1,2,3,4,5,6,7", **env}
    return subprocess.run(["bash", str(SCRIPT), mode], env=full, capture_output=True, text=True,
                          timeout=60)


def calls(fake: Path) -> list[str]:
    path = fake / "calls"
    return path.read_text().splitlines() if path.exists() else []


def test_node_verdict_drains_with_an_nhc_reason_and_fails_the_prolog(fake):
    result = run(fake, "prolog", 1)
    assert result.returncode == 1
    [call] = calls(fake)
    assert call.startswith("update nodename=gpu7 state=drain reason=NHC: gpu-preflight: FAILED on "
                           "gpu7 (p5.48xlarge, tier preflight): [PF-GPU-016] GPU 3 lost")


@pytest.mark.parametrize("rc", [2, 3, 124, 137, 143])
def test_usage_harness_timeout_and_signal_never_drain(fake, rc):
    result = run(fake, "prolog", rc)
    assert result.returncode == 0
    assert calls(fake) == []
    assert f"preflight exit {rc} on gpu7" in (fake / "syslog").read_text()


def test_pass_in_prolog_touches_nothing(fake):
    assert run(fake, "prolog", 0).returncode == 0
    assert calls(fake) == []


def test_prolog_skips_jobs_without_gpus(fake):
    result = run(fake, "prolog", 1, SLURM_JOB_GPUS="")
    assert result.returncode == 0 and calls(fake) == []
    assert not (fake / "log").exists()


def test_healthcheck_resumes_only_what_it_drained(fake):
    assert run(fake, "healthcheck", 1).returncode == 0  # drains, but the program exits 0
    assert "state=drain" in calls(fake)[0]
    assert run(fake, "healthcheck", 0).returncode == 0
    assert calls(fake)[1] == "update nodename=gpu7 state=resume"
    assert run(fake, "healthcheck", 0).returncode == 0
    assert len(calls(fake)) == 2  # nothing left to resume


def test_resumes_after_slurm_replaced_the_reason_with_prolog_error(fake):
    run(fake, "prolog", 1)
    (fake / "reason").write_text("Prolog error")  # slurmctld's own reason for a failed prolog
    run(fake, "healthcheck", 0)
    assert calls(fake)[-1] == "update nodename=gpu7 state=resume"


def test_operator_drain_is_never_overwritten_nor_resumed(fake):
    (fake / "reason").write_text("bad DIMM, ticket 1234")
    run(fake, "healthcheck", 1)
    assert calls(fake) == []
    run(fake, "healthcheck", 0)
    assert calls(fake) == []
    assert (fake / "reason").read_text() == "bad DIMM, ticket 1234"


def test_operator_drain_after_ours_is_not_resumed(fake):
    run(fake, "healthcheck", 1)
    (fake / "reason").write_text("replacing NIC")
    run(fake, "healthcheck", 0)
    assert [c for c in calls(fake) if "resume" in c] == []


def test_script_is_executable_and_parses():
    assert os.access(SCRIPT, os.X_OK)
    subprocess.run(["bash", "-n", str(SCRIPT)], check=True)
