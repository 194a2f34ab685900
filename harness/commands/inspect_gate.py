"""`preflight inspect KIND FILE --fail-on problem|harmful`: the inspect result as a CI gate.

`problems(kind, result)` lists, in words, what the parsed output shows wrong; `inspect` exits 1
when the list is not empty (0 otherwise; 2 when nothing was recognised, as before). Unknown is
never a pass: a dcgmi run whose verdict is unknown (a table cut short) is a problem, and so is
an nccl-tests sweep that did not finish. The judging is the checks' own where they have one:
GPU health is harness.base.gpu.health_problems (the `problems` nvidia-smi's inspect lists) and a
fact shown without a value is harness.base.gpu_facts.unread_facts (its `unread`), the env
rules are harness.judges.env.evaluate (the `harmful`/`required` inspect env lists), an Xid's action
is harness.base.gpu_actions.xid_action (kernel-log's `action`), and the network and bandwidth checks'
verdicts (harness.judges.network: provider, Socket fallback, GPUDirect, NIC count, WARN lines, busbw vs
the floor) are the `verdicts` the fi-info, nccl-log and nccl-tests kinds list: a verdict that
fails or is unknown is a problem.

`--fail-on harmful` (env) fails only on the harmful rules: a CI step that lints a job's env file
without the profile's required variables.
"""

from __future__ import annotations

from collections.abc import Callable

from harness.base.jsontypes import JSONMapping, JSONObject, JSONValue

__all__ = ["FAIL_ON", "problems"]

#: What `--fail-on` accepts.
FAIL_ON = ("problem", "harmful")


def _items(result: JSONMapping, key: str) -> list[JSONValue]:
    """`result[key]`, a list (missing or not a list: empty)."""
    value = result.get(key)
    return value if isinstance(value, list) else []


def _records(result: JSONMapping, key: str) -> list[JSONObject]:
    """The objects in the list `result[key]`."""
    return [item for item in _items(result, key) if isinstance(item, dict)]


def _named(items: list[JSONValue], what: str) -> list[str]:
    return [f"{what}: {item.get('name', item) if isinstance(item, dict) else item}"
            for item in items]


def _env(result: JSONMapping, harmful_only: bool) -> list[str]:
    found = _named(_items(result, "harmful"), "harmful")
    if not harmful_only:
        found += _named(_items(result, "required"), "required but unset or wrong")
        found += [f"malformed: {m}" for m in _items(result, "malformed")]
    return found


def _nvidia_smi(result: JSONMapping) -> list[str]:
    # A fact the input showed without a value is the GPU checks' error: unknown is not a pass.
    return [*(f"GPU {p.get('gpu')}: {p.get('what')}" for p in _records(result, "problems")),
            *(f"not known: {u}" for u in _items(result, "unread"))]


def _nccl_log(result: JSONMapping) -> list[str]:
    found = [f"{e['cause']}: {e['line']}" for e in _records(result, "errors")]
    found += [f"watchdog timeout: {t['line']}" for t in _records(result, "timeouts")]
    found += [f"NCCL warning: {w}" for w in _items(result, "warnings")]
    return found


def _nccl_tests(result: JSONMapping) -> list[str]:
    found = [str(e) for e in _items(result, "errors")]
    if result.get("num_wrong"):
        found.append(f"{result['num_wrong']} wrong element(s)")
    if result.get("out_of_bounds"):
        found.append(f"{result['out_of_bounds']} out-of-bounds value(s)")
    if not result.get("completed"):
        found.append("the sweep did not finish (no `# Avg bus bandwidth` footer)")
    from harness.judges.bandwidth import unchecked_data  # (the judges: only for this kind)

    found += [f"not known ({check}): {why}" for check, why in unchecked_data(
        bool(result.get("rows")), result.get("num_wrong"), bool(result.get("completed")),
        result.get("out_of_bounds"))]
    return found


def _dcgm(result: JSONMapping) -> list[str]:
    found = [f"{t.get('test')}: {t.get('message')}" for t in _records(result, "failed_tests")]
    if result.get("passed") is not True and not found:
        found.append("no verdict: the diagnostic's results are incomplete (unknown is not a pass)")
    found += [f"not known: GPU {g} has no result (DCGM detected it and did not test it)"
              for g in _items(result, "untested_gpus")]
    return found


def _kernel_log(result: JSONMapping) -> list[str]:
    found = [f"Xid {e.get('xid')} on {e.get('pci')}: {e.get('action')}"
             for e in _records(result, "xid_events")]
    found += [f"SXid {e.get('sxid')} on {e.get('switch') or e.get('pci')}"
              for e in _records(result, "sxid_events") if e.get("fatal") is not False]  # unknown too
    if result.get("cut"):  # PF-GPU-006 / 018 error on a log cut mid-line
        found.append(f"not known: {result['cut']}")
    return found


def _fi_info(result: JSONMapping) -> list[str]:
    code = result.get("error_code")
    return [] if code is None else [f"fi_info failed with {code}"]


def _train_step(result: JSONMapping) -> list[str]:
    found = [str(e) for e in _items(result, "errors")]
    # What the training checks would error on (harness.parsers.train_step.unread_in_result).
    found += [f"not known: the result has no {u}" for u in _items(result, "unread")]
    failure = result.get("failure")
    if failure:
        found.append(str(failure.get("message", failure) if isinstance(failure, dict) else failure))
    return found


_BY_KIND: dict[str, Callable[[JSONMapping], list[str]]] = {
    "nvidia-smi": _nvidia_smi, "nccl-log": _nccl_log, "nccl-tests": _nccl_tests,
    "dcgm": _dcgm, "kernel-log": _kernel_log, "fi-info": _fi_info, "train-step": _train_step,
}


def problems(kind: str, result: JSONObject, fail_on: str = "problem") -> list[str]:
    """What `result` (an `inspect KIND` result) shows wrong; `fail_on="harmful"` keeps only the
    env kind's harmful settings. A kind without judgement (topology) has none."""
    if fail_on not in FAIL_ON:
        raise ValueError(f"--fail-on {fail_on!r}: one of {', '.join(FAIL_ON)}")
    if kind == "env":
        return _env(result, harmful_only=fail_on == "harmful")
    if fail_on == "harmful":
        return []
    judge = _BY_KIND.get(kind)
    found = judge(result) if judge is not None else [str(e) for e in _items(result, "errors")]
    # The checks' verdicts for the profile (harness.judges.network): what would fail or error the run.
    found += [f"{v['check']} {v['status']}: {v['message']}" for v in _records(result, "verdicts")
              if v.get("status") in ("fail", "unknown")]
    return found
