"""nccl-tests' all_reduce at the single-node gate's settings (the sweep PF-BW-001 runs in the
preflight tier, `-J` JSON where the build has it, NCCL's INIT,NET lines at INFO), and the same
again with NVLS alone (`NCCL_ALGO=NVLS`) where the machine has NVLS: the figures that settle
the estimated NVLink, PCIe and NVLS floors."""

from __future__ import annotations

from harness.devicecheck.context import Context
from harness.devicecheck.record import Figure, StepResult, figure_key, settle

__all__ = ["nccl_tests_step"]


def nccl_tests_step(ctx: Context, *, nvls: bool = False) -> StepResult:
    """One all_reduce_perf run on every GPU (one process, `-g N`) at the gate's sweep."""
    from harness.fixtures.bandwidth import nccl_info_env, nccl_log_verdict
    from harness.fixtures.sweep import sweep
    from harness.probes import nccl_tests as nt

    name = "nccl-tests-nvls" if nvls else "nccl-tests"
    step = StepResult(name, "all_reduce_perf at the single-node gate's sweep, -J, NCCL INFO"
                      + (", NCCL_ALGO=NVLS" if nvls else ""))
    if nvls and not ctx.nvls:
        step.outcome, step.reason = "skipped", "no NVLS on this machine (needs NVSwitch, sm90+)"
        return step
    binary = nt.find_binary("all_reduce_perf", ctx.env)
    if binary is None:
        step.outcome, step.reason = "skipped", ("all_reduce_perf is not installed (PATH, "
                                                "$PREFLIGHT_NCCL_TESTS_DIR, /opt/nccl-tests)")
        return step
    gate = ctx.profile.intra_gate_size_bytes
    planned = sweep(ctx.profile, "preflight", gate)
    env = nccl_info_env({**ctx.env, "PREFLIGHT_NUM_NODES": "1"})
    env.update(NCCL_DEBUG="INFO", NCCL_DEBUG_SUBSYS="INIT,NET")
    if nvls:
        env["NCCL_ALGO"] = "NVLS"
    plan = nt.plan_launch(env, gpus_per_node=ctx.nproc)
    workdir = ctx.logs / name
    workdir.mkdir(parents=True, exist_ok=True)
    run = nt.run_nccl_tests(binary, plan, planned, env=env, timeout_s=ctx.limit(240.0),
                            workdir=workdir, collective="all_reduce")
    (ctx.logs / f"{name}-output.txt").write_text(run.raw_output)
    ctx.note(name, f"{' '.join(run.command)}\n{run.proc.describe()}\n{run.raw_output[-4000:]}")
    result = run.result
    step.figures.append(Figure("json_output", bool(run.json_path), "", where="-J"))
    for row in result.rows if result else ():
        if row.busbw_gb_s is not None:
            step.figures.append(Figure("busbw_gb_s", round(row.busbw_gb_s, 2), "GB/s",
                                       size_bytes=row.size_bytes))
        if row.oop.time_us is not None:
            step.figures.append(Figure("time_us", row.oop.time_us, "us",
                                       size_bytes=row.size_bytes, where="out-of-place"))
        if row.wrong is not None:
            step.figures.append(Figure("wrong", row.wrong, "elements",
                                       size_bytes=row.size_bytes))
    if result is not None and result.nranks is not None:
        step.figures.append(Figure("nranks", result.nranks, "ranks"))
    verdict = nccl_log_verdict(run.raw_output)
    if verdict:
        step.figures.append(Figure("nccl_log", verdict, ""))
    if (problem := run.problem()) is not None:
        step.problems.append(problem)
    sizes = []
    size = planned.min_bytes
    while size <= planned.max_bytes:
        sizes.append(size)
        size *= planned.step_factor
    expected = [figure_key("busbw_gb_s", "", s) for s in sizes] + [figure_key("nranks")]
    return settle(step, expected)
