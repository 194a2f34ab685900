"""container/slurm/gpu-preflight-slurm.sh against a fake `scontrol` and a fake `preflight`:
drain only on a node verdict (exit 1), NHC-style reasons, resume only what it drained."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "container" / "slurm" / "gpu-preflight-slurm.sh"

# The fake scontrol: `show node X` prints the reason held in $FAKE/reason (X = gpu7) or
# $FAKE/reason-X (as Slurm prints it, with the "[user@time]" suffix); `show hostnames` prints
# $FAKE_HOSTS one a line; `update` and `requeuehold` append their argv to $FAKE/calls, and
# `update` sets the node's reason.
SCONTROL = r"""#!/bin/bash
# The node's reason file: $FAKE/reason for gpu7 (this node in most tests), $FAKE/reason-NAME else.
rf() { if [ "$1" = gpu7 ]; then echo "$FAKE/reason"; else echo "$FAKE/reason-$1"; fi; }
if [ "$1" = show ] && [ "$2" = hostnames ]; then
    for h in ${FAKE_HOSTS:-gpu7}; do echo "$h"; done
    exit 0
fi
if [ "$1" = show ]; then
    echo "NodeName=$3 Arch=x86_64 CoresPerSocket=48"
    echo "   State=IDLE ThreadsPerCore=2"
    f="$(rf "$3")"
    [ -s "$f" ] && echo "   Reason=$(cat "$f") [root@2026-12-01T10:00:00]"
    exit 0
fi
printf '%s\n' "$*" >>"$FAKE/calls"
target=gpu7
for a in "$@"; do case "$a" in nodename=*) target="${a#nodename=}" ;; esac; done
for a in "$@"; do
    case "$a" in reason=*) printf '%s' "${a#reason=}" >"$(rf "$target")" ;;
                 state=resume) : >"$(rf "$target")" ;; esac
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


# --- the blast-radius cap (issue 30 item 4) -----------------------------------------------------

HOSTS = "gpu1 gpu2 gpu3 gpu4"


def _node_env(fake: Path, name: str, **env: str) -> dict[str, str]:
    return {"SLURMD_NODENAME": name, "PREFLIGHT_SLURM_DIR": str(fake / f"log-{name}"),
            "FAKE_HOSTS": HOSTS, "SLURM_JOB_NODELIST": "gpu[1-4]", **env}


def test_concurrent_prologs_drain_at_most_the_cap_with_a_shared_folder(fake):
    """Four prologs of one job fail at the same moment (real processes): with a folder they
    share, exactly floor(0.5 x 4) = 2 drain; the other two say the run is suspect, leave their
    node in service (exit 0: a failed prolog would make Slurm drain it) and hold the job."""
    shared = fake / "shared"
    env = {"PATH": f"{fake / 'bin'}:/usr/bin:/bin", "FAKE": str(fake), "FAKE_RC": "1",
           "PREFLIGHT_BIN": str(fake / "bin" / "preflight"), "SLURM_JOB_ID": "42",
           "SLURM_JOB_GPUS": "0,1,2,3,4,5,6,7", "PREFLIGHT_SLURM_SHARED_DIR": str(shared)}
    procs = {h: subprocess.Popen(["bash", str(SCRIPT), "prolog"], env={**env, **_node_env(
        fake, h)}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for h in HOSTS.split()}
    codes = {h: p.wait(timeout=60) for h, p in procs.items()}
    drained = sorted(c.split()[1].removeprefix("nodename=") for c in calls(fake)
                     if "state=drain" in c)
    held = [c for c in calls(fake) if c.startswith("requeuehold")]
    assert len(drained) == 2 and held == ["requeuehold 42", "requeuehold 42"]
    assert sorted(codes.values()) == [0, 0, 1, 1]
    assert {h for h, rc in codes.items() if rc == 1} == set(drained)
    spared = [h for h in codes if h not in drained]
    for h in spared:
        text = (fake / f"log-{h}" / "job-42" / "suspect").read_text()
        assert text.startswith("suspect run: more than 2 of job 42's 4 nodes failed "
                               "(PREFLIGHT_DRAIN_CAP 0.5): likely a shared cause")
    assert sorted((shared / "job-42" / f"drain-{i}" / "node").read_text().strip()
                  for i in (1, 2)) == drained


def test_without_a_shared_folder_the_jobs_drained_nodes_are_counted(fake):
    """Two of the job's nodes already drained by this script (or by Slurm for a failed
    prolog): a third failing node is spared; with one drained, it is drained."""
    (fake / "reason-gpu1").write_text("NHC: gpu-preflight: FAILED on gpu1")
    (fake / "reason-gpu2").write_text("Prolog error")
    result = run(fake, "prolog", 1, **_node_env(fake, "gpu3"))
    assert result.returncode == 0
    assert calls(fake) == ["requeuehold 42"]
    assert "suspect run: more than 2 of job 42's 4 nodes failed" in (fake / "syslog").read_text()
    (fake / "reason-gpu2").write_text("")
    (fake / "calls").unlink()
    result = run(fake, "prolog", 1, **_node_env(fake, "gpu3"))
    assert result.returncode == 1
    assert [c.split()[:3] for c in calls(fake)] == [["update", "nodename=gpu3", "state=drain"]]


def test_a_cap_of_one_drains_every_failing_node_and_healthcheck_is_never_capped(fake):
    """The removal test: PREFLIGHT_DRAIN_CAP=1 lets the same node be drained; healthcheck mode
    (one node's own periodic run) is not a job's run and is never capped."""
    (fake / "reason-gpu1").write_text("NHC: gpu-preflight: FAILED on gpu1")
    (fake / "reason-gpu2").write_text("NHC: gpu-preflight: FAILED on gpu2")
    assert run(fake, "prolog", 1, **_node_env(fake, "gpu3", PREFLIGHT_DRAIN_CAP="1")
               ).returncode == 1
    assert "state=drain" in calls(fake)[0]
    assert run(fake, "healthcheck", 1, **_node_env(fake, "gpu4")).returncode == 0
    assert "nodename=gpu4 state=drain" in calls(fake)[1]
