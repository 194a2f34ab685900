"""`preflight inspect topology`: what a node would detect from a saved launcher environment
(`env` dump, `KEY=value` lines) or a SageMaker resourceconfig.json, without joining anything."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, TextIO

from harness.base.jsontypes import JSONObject
from harness.parsers import ParseError
from harness.parsers.env import parse_env_dump
from harness.parsers.reader import Input, as_input
from harness.topology.model import TopologyError
from harness.topology.providers import detect_topology

if TYPE_CHECKING:
    from harness.profiles.model import Profile

__all__ = ["INSPECT", "inspect_topology"]


def inspect_topology(stream: TextIO | Input, *, profile: Profile | None) -> JSONObject:
    """Keys: num_nodes, node_rank, local_rank, master_addr, port, source, hosts (null on a
    single node, which `notes` then says), error (the TopologyError message, else null).
    ParseError when the input is neither an environment nor a resourceconfig.json."""
    source = as_input(stream)
    env: dict[str, str] = {}
    resourceconfig: dict[str, object] | None = None
    data = None
    if source.head(4096).lstrip()[:1] == "{":
        text = source.document()  # a resourceconfig.json is a few KB; a huge one is not one
        try:
            data = json.loads(text) if text is not None else None
        except (ValueError, RecursionError):
            data = None
    if isinstance(data, dict):
        if not {"current_host", "hosts"} & data.keys():
            raise ParseError("a JSON object without current_host or hosts: not a SageMaker "
                             "resourceconfig.json (keys: " + ", ".join(list(data)[:8]) + ")")
        resourceconfig = data
    else:
        env = parse_env_dump(source).variables
        if not env:
            raise ParseError("no KEY=value lines and no JSON object (resourceconfig.json) found")
    result: JSONObject = dict.fromkeys(
        ("num_nodes", "node_rank", "local_rank", "master_addr", "port", "source", "hosts",
         "error"))
    try:
        topo = detect_topology(env, resourceconfig)
    except TopologyError as exc:
        result["error"] = str(exc)
        return result
    if topo is not None:
        result.update(num_nodes=topo.num_nodes, node_rank=topo.node_rank,
                      local_rank=topo.local_rank, master_addr=topo.master_addr, port=topo.port,
                      source=topo.source, hosts=list(topo.hosts))
    else:  # read, and nothing multi-node in it: say so, rather than leave every key null
        result["notes"] = [f"no multi-node launcher in the {len(env)} variable(s) read "
                           "(Slurm, torchrun, Open MPI, SageMaker, PREFLIGHT_NNODES): a "
                           "single-node job" if resourceconfig is None else
                           "the resourceconfig.json names a single host: a single-node job"]
    return result


INSPECT = {"topology": inspect_topology}
