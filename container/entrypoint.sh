#!/usr/bin/env bash
# gpu-preflight's container entrypoint: the preflight runs first and, on a pass, the training
# command (the container's arguments) replaces it: `preflight run -- CMD` execs CMD (same PID,
# same environment). The exit status is preflight's (1 failed, 2 usage, 3 harness error) or,
# after the hand-off, the trainer's.
#
#   docker run IMAGE torchrun --nproc-per-node=8 train.py  ->  preflight run -- torchrun ...
#   docker run IMAGE                                       ->  preflight run (checks only)
#   SageMaker (`docker run IMAGE train`)                   ->  preflight run, then the SageMaker
#       training toolkit's `train` (through the DLC's start_with_right_hostname.sh when present),
#       which runs SAGEMAKER_PROGRAM / the `sagemaker_program` hyperparameter as the DLC would.
#       With no program (the job `preflight launch` starts), the preflight is the whole job.
#
# PREFLIGHT_ARGS adds options to `preflight run` (e.g. "--tier certify -v"); the tier, report
# folder, S3 URI ... can also come from PREFLIGHT_* variables (docs/container.md).
set -euo pipefail

preflight="${PREFLIGHT_BIN:-preflight}"
opt_ml="${PREFLIGHT_OPT_ML:-/opt/ml}"
dlc_entry="${PREFLIGHT_DLC_ENTRY:-/usr/local/bin/start_with_right_hostname.sh}"
extra=()
if [ -n "${PREFLIGHT_ARGS:-}" ]; then
    read -r -a extra <<< "${PREFLIGHT_ARGS}"
fi

# `dcgmi diag` needs DCGM's host engine; start it when DCGM is installed and none is running
# (it daemonises and stays beside the trainer: a few MB, idle).
if command -v nv-hostengine >/dev/null 2>&1 && ! pgrep -x nv-hostengine >/dev/null 2>&1; then
    nv-hostengine >/dev/null 2>&1 || echo "preflight-entrypoint: nv-hostengine did not start" >&2
fi

has_sagemaker_program() {
    [ -n "${SAGEMAKER_PROGRAM:-}" ] && return 0
    local hyperparameters="${opt_ml}/input/config/hyperparameters.json"
    [ -f "${hyperparameters}" ] && grep -q '"sagemaker_program"' "${hyperparameters}"
}

if [ "${1:-}" = "train" ]; then
    shift
    if ! has_sagemaker_program; then
        echo "preflight-entrypoint: SageMaker 'train' with no SAGEMAKER_PROGRAM: running the" \
             "checks only" >&2
        exec "${preflight}" run "${extra[@]}"
    fi
    if [ -f "${dlc_entry}" ]; then
        exec "${preflight}" run "${extra[@]}" -- bash -m "${dlc_entry}" train "$@"
    fi
    exec "${preflight}" run "${extra[@]}" -- train "$@"
fi

if [ "$#" -eq 0 ]; then
    exec "${preflight}" run "${extra[@]}"
fi
exec "${preflight}" run "${extra[@]}" -- "$@"
