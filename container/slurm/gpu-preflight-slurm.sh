#!/bin/bash
# gpu-preflight for Slurm, in two modes (docs/container.md, "Slurm"):
#   prolog       slurm.conf Prolog=: check the node before a GPU job; drain it on a node
#                verdict (exit 1) and fail the prolog (Slurm requeues the job).
#   healthcheck  slurm.conf HealthCheckProgram=: check periodically; drain on a node verdict,
#                resume a node this script drained once it passes again.
# A usage error (2), a harness error (3), a timeout or a signal is logged (syslog, tag
# gpu-preflight) and never drains: a broken install must not take the whole cluster out.
# Blast-radius cap (harness/base/blast.py, docs/container.md): a job's prologs drain at most
# floor(PREFLIGHT_DRAIN_CAP x the job's nodes) of them (default 0.5, at least 1); a node failing
# past it is not drained: the run is suspect (likely a shared cause), said in syslog and in
# $dir/suspect, the prolog exits 0 (a failed prolog would make Slurm drain the node itself) and
# the job is requeued and held (`scontrol requeuehold`) so it runs nowhere until someone looks.
# Drain reasons follow LBNL NHC's convention ("NHC: ..."; NHC resumes only nodes whose reason
# starts with "NHC:", https://github.com/mej/nhc README.md), and a marker file records what this
# script drained, so that it resumes only those (never a node an operator drained).
set -u
mode="${1:-prolog}"
preflight="${PREFLIGHT_BIN:-/opt/gpu-preflight/venv/bin/preflight}"
node="${SLURMD_NODENAME:-$(hostname -s)}"
base="${PREFLIGHT_SLURM_DIR:-/var/log/gpu-preflight}"
limit_s="${PREFLIGHT_SLURM_TIMEOUT:-600}"
tag="NHC: gpu-preflight"
marker="$base/drained-by-gpu-preflight"
cap="${PREFLIGHT_DRAIN_CAP:-0.5}"
shared="${PREFLIGHT_SLURM_SHARED_DIR:-}"

log() { logger -t gpu-preflight -- "$*" 2>/dev/null; echo "gpu-preflight-slurm: $*" >&2; }

case "$mode" in
    prolog)
        [ -n "${SLURM_JOB_GPUS:-}${CUDA_VISIBLE_DEVICES:-}" ] || exit 0   # GPU jobs only
        dir="$base/job-${SLURM_JOB_ID:-unknown}" ;;
    healthcheck) dir="$base/healthcheck" ;;
    *) echo "usage: $0 prolog|healthcheck" >&2; exit 2 ;;
esac

# A node's current drain reason (default: this node's), without Slurm's trailing " [user@time]".
reason_now() {
    scontrol show node "${1:-$node}" 2>/dev/null \
        | sed -n 's/^[[:space:]]*Reason=\(.*\)$/\1/p' | sed 's/ \[[^]]*\]$//' | head -n 1
}

# May this prolog drain its node under the cap? With PREFLIGHT_SLURM_SHARED_DIR (a folder every
# node of the job sees) a drain takes one of the job's slots by mkdir, which is atomic: the cap
# holds however many prologs fail at the same moment. Without it, the job's nodes this script
# (or Slurm, for a prolog it failed) has drained are counted through scontrol (prologs failing at the same moment can each
# count fewer: set the shared folder where that matters). Sets $suspect when it may not.
may_drain() {
    local nodes allowed i taken=0 h slots
    [ "$mode" = prolog ] || return 0
    nodes="$(scontrol show hostnames "${SLURM_JOB_NODELIST:-$node}" 2>/dev/null | wc -l)"
    [ "$nodes" -ge 1 ] 2>/dev/null || nodes=1
    allowed="$(awk -v n="$nodes" -v f="$cap" \
        'BEGIN { a = int(n * f + 1e-9); print (a < 1 ? 1 : a) }')"
    if [ -n "$shared" ]; then
        slots="$shared/job-${SLURM_JOB_ID:-unknown}"
        mkdir -p "$slots" 2>/dev/null
        for i in $(seq 1 "$allowed"); do
            if mkdir "$slots/drain-$i" 2>/dev/null; then
                printf '%s\n' "$node" >"$slots/drain-$i/node"
                return 0
            fi
        done
    else
        for h in $(scontrol show hostnames "${SLURM_JOB_NODELIST:-}" 2>/dev/null); do
            [ "$h" = "$node" ] && continue
            # ours, or Slurm's own reason for a prolog that failed (it replaces ours)
            case "$(reason_now "$h")" in "$tag"*|"Prolog error") taken=$((taken + 1)) ;; esac
        done
        [ "$taken" -lt "$allowed" ] && return 0
    fi
    suspect="suspect run: more than $allowed of job ${SLURM_JOB_ID:-?}'s $nodes nodes failed"
    suspect="$suspect (PREFLIGHT_DRAIN_CAP $cap): likely a shared cause (the image or driver,"
    suspect="$suspect a fabric event), not that many bad nodes; $node not drained, the job held"
    return 1
}

drain() {
    local now msg reason
    now="$(reason_now)"
    if [ -n "$now" ] && [ "${now#NHC:}" = "$now" ] && [ ! -e "$marker" ]; then
        log "$node already drained by someone else ($now): left as it is"
        return
    fi
    msg="$(head -n 1 "$dir/failure" 2>/dev/null | tr -d '"\r' | cut -c 1-200)"
    msg="${msg#gpu-preflight }"
    reason="$tag: ${msg:-failed (rc=1), see $dir}"
    scontrol update nodename="$node" state=drain reason="$reason" || log "scontrol drain failed"
    mkdir -p "$base" && printf '%s\n' "$reason" >"$marker"
    log "drained $node: $reason"
}

resume_own() {
    local now
    [ -e "$marker" ] || return 0
    now="$(reason_now)"
    # Ours: our NHC tag, or Slurm's own reason for the prolog that we failed.
    if [ "${now#"$tag"}" != "$now" ] || [ "$now" = "Prolog error" ]; then
        scontrol update nodename="$node" state=resume && log "resumed $node (passed again)"
    elif [ -n "$now" ]; then
        log "$node drained since by someone else ($now): not resumed"
    fi
    rm -f "$marker"
}

mkdir -p "$dir"
export PREFLIGHT_JOB_ID="${SLURM_JOB_ID:-healthcheck}" PREFLIGHT_CLUSTER="${SLURM_CLUSTER_NAME:-slurm}"
timeout --kill-after=30 "$limit_s" "$preflight" run --tier "${PREFLIGHT_TIER:-preflight}" \
    --report-dir "$dir" --failure-file "$dir/failure" >"$dir/preflight.log" 2>&1
rc=$?
case "$rc" in
    0) [ "$mode" = healthcheck ] && resume_own; exit 0 ;;
    1) if may_drain; then
           drain; [ "$mode" = prolog ] && exit 1; exit 0
       fi
       log "$suspect"
       printf '%s\n' "$suspect" >"$dir/suspect"
       scontrol requeuehold "${SLURM_JOB_ID:-}" || log "scontrol requeuehold failed"
       exit 0 ;;
    *) log "preflight exit $rc on $node (2 usage, 3 harness error, 124/137 timeout, 128+N" \
           "signal): not a node verdict, node left in service; see $dir/preflight.log"
       exit 0 ;;
esac
