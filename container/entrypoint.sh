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

# `dcgmi diag` needs DCGM's host engine. The node's own one is used when it answers: TCP
# 127.0.0.1:5555 (DCGM_HE_PORT_NUMBER; nv-hostengine binds 127.0.0.1 by default, reachable with
# the host's network namespace) or its unix socket mounted into the container (`nv-hostengine
# -d`, default /tmp/nv-hostengine; dcgmi then needs `--host unix://PATH`, passed on as
# PREFLIGHT_DCGM_HOST). Only when none answers is one started here (it daemonises and stays
# beside the trainer: a few MB, idle); pgrep sees only this container's processes, so it
# cannot tell whether the host runs one. PREFLIGHT_DCGM_HOST set: that engine, none started.
python="${PREFLIGHT_PYTHON:-python3}"
dcgm_port="${PREFLIGHT_DCGM_PORT:-5555}"
dcgm_socket="${PREFLIGHT_DCGM_SOCKET:-/tmp/nv-hostengine}"

hostengine_answers() {  # $1: HOST:PORT or unix://PATH; true when something accepts a connection
    "${python}" - "$1" >/dev/null 2>&1 <<'PY'
import socket, sys
target = sys.argv[1]
if target.startswith("unix://"):
    sock, address = socket.socket(socket.AF_UNIX), target[len("unix://"):]
else:
    host, _, port = target.rpartition(":")
    sock, address = socket.socket(), (host, int(port))
sock.settimeout(2)
sock.connect(address)
PY
}

if [ -z "${PREFLIGHT_DCGM_HOST:-}" ] && command -v nv-hostengine >/dev/null 2>&1; then
    if [ "${dcgm_port}" != 5555 ]; then
        export PREFLIGHT_DCGM_HOST="127.0.0.1:${dcgm_port}"  # dcgmi's default is port 5555
    fi
    if hostengine_answers "127.0.0.1:${dcgm_port}"; then
        echo "preflight-entrypoint: using the nv-hostengine at 127.0.0.1:${dcgm_port}" >&2
    elif [ -S "${dcgm_socket}" ] && hostengine_answers "unix://${dcgm_socket}"; then
        echo "preflight-entrypoint: using the nv-hostengine at unix://${dcgm_socket}" >&2
        export PREFLIGHT_DCGM_HOST="unix://${dcgm_socket}"
    elif ! pgrep -x nv-hostengine >/dev/null 2>&1; then
        nv-hostengine -p "${dcgm_port}" >/dev/null 2>&1 \
            || echo "preflight-entrypoint: nv-hostengine did not start" >&2
    fi
fi

# SIGTERM, SIGINT and SIGHUP held (blocked) from before the interpreter starts: one that comes
# while it loads stays pending until `preflight run` has its handlers in place and then gives
# the interrupted report and 128+N, never a bare kill (README "Signals"). env(1) of GNU
# coreutils >= 8.31; without it, preflight holds them from its own first instruction.
launch=("${preflight}")
if env --block-signal=TERM,INT,HUP true >/dev/null 2>&1; then
    launch=(env --block-signal=TERM,INT,HUP "${preflight}")
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
        exec "${launch[@]}" run "${extra[@]}"
    fi
    if [ -f "${dlc_entry}" ]; then
        exec "${launch[@]}" run "${extra[@]}" -- bash -m "${dlc_entry}" train "$@"
    fi
    exec "${launch[@]}" run "${extra[@]}" -- train "$@"
fi

if [ "$#" -eq 0 ]; then
    exec "${launch[@]}" run "${extra[@]}"
fi
exec "${launch[@]}" run "${extra[@]}" -- "$@"
