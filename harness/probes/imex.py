"""The NVIDIA IMEX service of a multi-node NVLink domain: `nvidia-imex-ctl -q` (the local daemon's
state) and the nodes config `/etc/nvidia-imex/nodes_config.cfg`, read under a sysroot. It gathers
facts and judges nothing (checks/test_nvl_domain.py does).

- `nvidia-imex-ctl -q` prints the daemon's state, `READY` when it serves the domain (NVIDIA IMEX
  guide, "IMEX Service Command Service", docs.nvidia.com/multi-node-nvlink-systems/imex-guide/
  cmdservice.html; the NVIDIA DRA driver and NVIDIA's own node checks require exactly `READY`).
  The states are those DCGM reads from the same command (NVIDIA/DCGM dcgmlib/dcgm_fields.h,
  DCGM_FI_IMEX_DAEMON_STATUS): INITIALIZING, STARTING_AUTH_SERVER, WAITING_FOR_PEERS,
  WAITING_FOR_RECOVERY, INIT_GPU, READY, SHUTTING_DOWN, UNAVAILABLE.
- The nodes config lists the IP address of every node of the IMEX domain, one per line (IMEX guide,
  "IMEX Service Config Options", IMEX_NODE_CONFIG_FILE, default /etc/nvidia-imex/nodes_config.cfg).
  On EKS the NVIDIA DRA driver runs IMEX in its ComputeDomain pods: the training container then has
  neither the tool nor the file, only the channel device.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from harness.base import proc

__all__ = ["IMEX_STATES", "NODES_CONFIG", "ImexStatus", "query_imex"]

NODES_CONFIG = "etc/nvidia-imex/nodes_config.cfg"
IMEX_STATES = ("INITIALIZING", "STARTING_AUTH_SERVER", "WAITING_FOR_PEERS",
               "WAITING_FOR_RECOVERY", "INIT_GPU", "READY", "SHUTTING_DOWN", "UNAVAILABLE")
#: Bound of one `nvidia-imex-ctl -q`: it asks the local daemon over a socket and answers at once.
QUERY_TIMEOUT_S = 15.0
#: Longest nodes config read (an NVL72 domain has 18 trays; an NVL576 one 144).
MAX_CONFIG_BYTES = 1 << 20


@dataclass(frozen=True, slots=True)
class ImexStatus:
    tool: str | None
    """Path of nvidia-imex-ctl; None when it is not on PATH."""
    state: str | None
    """One of IMEX_STATES as the tool printed it; None when it gave no known state."""
    problem: str | None
    """Why the state is unknown (tool missing, hung, crashed, unrecognised output)."""
    config_path: str
    nodes: tuple[str, ...]
    """The node addresses of the nodes config (comments and blank lines left out)."""
    config_problem: str | None
    """Why the nodes config could not be read (missing, unreadable, too large)."""


def _nodes_config(sysroot: Path) -> tuple[tuple[str, ...], str | None]:
    path = sysroot / NODES_CONFIG
    try:
        with path.open("rb") as f:
            data = f.read(MAX_CONFIG_BYTES + 1)
    except FileNotFoundError:
        return (), f"{path} does not exist"
    except OSError as exc:
        return (), f"cannot read {path}: {exc.strerror}"
    if len(data) > MAX_CONFIG_BYTES:
        return (), f"{path} is larger than {MAX_CONFIG_BYTES} bytes: not a nodes config"
    lines = (ln.split("#", 1)[0].strip() for ln in data.decode(errors="replace").splitlines())
    return tuple(ln for ln in lines if ln), None


def _state_of(output: str) -> str | None:
    words = output.split()
    return words[-1] if len(words) == 1 and words[-1] in IMEX_STATES else None


def query_imex(sysroot: Path, env: Mapping[str, str] | None = None,
               timeout_s: float = QUERY_TIMEOUT_S) -> ImexStatus:
    """The local IMEX daemon's state and the domain's nodes config."""
    nodes, config_problem = _nodes_config(sysroot)
    config = str(sysroot / NODES_CONFIG)
    tool = proc.which("nvidia-imex-ctl", path=(env or os.environ).get("PATH"))
    if tool is None:
        return ImexStatus(None, None, "nvidia-imex-ctl is not on PATH", config, nodes,
                          config_problem)
    result = proc.run([tool, "-q"], timeout_s=timeout_s, env=env)
    state = _state_of(result.stdout)
    problem = None
    if result.timed_out or result.error is not None:
        problem = result.describe()
    elif state is None:
        problem = f"{result.describe()}: not one IMEX state ({', '.join(IMEX_STATES)})"
    elif result.returncode != 0 and state == "READY":
        problem = result.describe()
    return ImexStatus(tool, state if problem is None else None, problem, config, nodes,
                      config_problem)
