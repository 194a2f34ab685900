"""The two device-check steps that launch the distributed worker:

- `worker`: the production launch (harness.fixtures.worker.WorkerSession, as a preflight of
  this machine plans it) with every part (compute, sdc, links, bandwidth, train) and NCCL's INIT and
  NET lines at INFO: start-up per rank (import, init, first collective), each part's figures,
  and what the NCCL log says.
- `train`: one launch running the training step for every recipe the machine supports, 3 seeds
  each, then once with one rank's gradients perturbed, which the reference comparison must
  catch (a perturbed run that passes fails the step).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from harness.base.jsontypes import JSONMapping, JSONObject
from harness.devicecheck.context import Context
from harness.devicecheck.record import Expected, Figure, StepResult, figure_key, settle
from harness.fixtures.worker import WorkerSession, bandwidth_args
from harness.worker.launch import PartOutcome, PartSpec, run_worker, schema_records

__all__ = ["PERTURB", "SEEDS", "nccl_log_figures", "perturbed_scale", "startup_figures",
           "train_figures", "train_steps", "worker_step"]

#: Seeds of every recipe's runs: three, so a tolerance is set from a spread, not one draw.
SEEDS = (1234, 1235, 1236)
#: The fault of the perturbed run (its scale is `perturbed_scale`).
PERTURB = "grad-perturb,rank=-1"


def _size_of(text: str) -> int:
    from harness.worker.bandwidth import parse_size

    return parse_size(text)


def _arg(argv: Sequence[str], name: str, default: str) -> str:
    prefix = f"--{name}="
    return next((a[len(prefix):] for a in reversed(argv) if a.startswith(prefix)), default)


# --------------------------------------------------------------------------- the worker launch

def startup_figures(output: str, nproc: int) -> tuple[list[Figure], list[Expected]]:
    """Per rank: import, process-group init and first-collective seconds (the worker's `ready`
    lines), and the launch's start-up (torchrun start to the last rank ready)."""
    figures, expected = [], []
    ready = [r for r in schema_records(output)
             if r.get("part") == "worker" and r.get("event") == "ready"]
    for r in sorted(ready, key=lambda r: int(r.get("rank", 0))):
        for name in ("import_s", "init_s", "first_collective_s"):
            if isinstance(r.get(name), int | float):
                figures.append(Figure(name, float(r[name]), "s", where=f"rank {r['rank']}"))
    for rank in range(nproc):
        expected += [figure_key(n, f"rank {rank}")
                     for n in ("import_s", "init_s", "first_collective_s")]
    walls = [float(r["wall"]) for r in ready if isinstance(r.get("wall"), int | float)]
    launched = [float(r["launched"]) for r in ready if r.get("launched")]
    if walls and launched:
        figures.append(Figure("startup_s", round(max(walls) - launched[0], 3), "s"))
    expected.append(figure_key("startup_s"))
    return figures, expected


def _compute(record: JSONMapping | None, nproc: int, cuda: bool) -> tuple[list[Figure],
                                                                           list[Expected]]:
    figures, expected = [], []
    for i, r in enumerate(record.get("ranks", []) if record else []):
        where = f"GPU {r.get('device')}" if cuda else f"rank {i}"
        n = r.get("n")
        figures.append(Figure("matmul_tflops", r.get("tflops"), "TFLOP/s",
                              size_bytes=2 * n * n if isinstance(n, int) else None, where=where))
        figures.append(Figure("hbm_copy_gb_s", r.get("copy_gb_s"), "GB/s",
                              size_bytes=r.get("copy_bytes"), where=where))
    for i in range(nproc):
        where = f"GPU {i}" if cuda else f"rank {i}"
        expected.append(("matmul_tflops", where, None))
        expected.append(("hbm_copy_gb_s", where, None))
    return figures, expected  # sizes come from the record: worker_expected


def _sdc(record: JSONMapping | None, nproc: int, cuda: bool) -> tuple[list[Figure],
                                                                       list[Expected]]:
    """The SDC part: each rank's seconds, and how many ranks agree with the majority digest
    (all of them on a healthy node: the claim docs/gpu.md makes for one SKU and driver)."""
    from harness.probes.sdc import majority

    ranks = list(record.get("ranks", []) if record else [])
    figures = [Figure("sdc_seconds", r.get("seconds"), "s",
                      where=f"GPU {r.get('device')}" if cuda else f"rank {i}")
               for i, r in enumerate(ranks)]
    if ranks:
        good, odd = majority({str(r.get("rank")): str(r.get("digest")) for r in ranks})
        figures.append(Figure("sdc_ranks_agreeing", len(ranks) - len(odd) if good else 0,
                              "ranks", where=f"of {len(ranks)}"))
    expected: list[Expected] = [("sdc_seconds", f"GPU {i}" if cuda else f"rank {i}", None)
                                for i in range(nproc)]
    return figures, [*expected, ("sdc_ranks_agreeing", f"of {nproc}", None)]


def _rows(result: JSONMapping | None, name: str, value_key: str, unit: str,
          where: str = "") -> list[Figure]:
    out = []
    for row in (result or {}).get("rows", []):
        out.append(Figure(name, row.get(value_key), unit, size_bytes=row.get("size_bytes"),
                          where=where))
        spread = row.get("time_us_spread")
        if spread is not None and value_key == "time_us":
            out.append(Figure(name + "_spread", spread, unit, size_bytes=row.get("size_bytes"),
                              where=where))
    return out


def _links(record: JSONMapping | None, lat_sizes: Iterable[int], cuda: bool,
           host_sizes: Iterable[int], nproc: int) -> tuple[list[Figure], list[Expected]]:
    figures = _rows((record or {}).get("latency"), "allreduce_latency_us", "time_us", "us")
    expected: list[Expected] = [("allreduce_latency_us", "", s) for s in lat_sizes]
    for h in (record or {}).get("host", []):
        figures.append(Figure(f"host_{h.get('direction')}_gb_s", h.get("gb_s"), "GB/s",
                              size_bytes=h.get("size_bytes"), where=f"GPU {h.get('device')}"))
    for p in (record or {}).get("p2p", []):
        figures.append(Figure("p2p_gb_s", p.get("gb_s"), "GB/s", size_bytes=p.get("size_bytes"),
                              where=f"GPU {p.get('src')} -> GPU {p.get('dst')}"))
    if cuda:
        expected += [(f"host_{d}_gb_s", f"GPU {g}", s) for g in range(nproc) for s in host_sizes
                     for d in ("h2d", "d2h")]
    return figures, expected


def _result_figures(result: JSONMapping, where: str = "") -> list[Figure]:
    """The training step's figures from its result line."""
    losses = result.get("losses") or []
    out = [Figure("loss_first", losses[0] if losses else None, "", where=where),
           Figure("loss_final_over_first",
                  losses[-1] / losses[0] if len(losses) > 1 and losses[0] else None, "",
                  where=where)]
    judged = result.get("comparison") or result
    for key in ("loss_max_rel_diff", "update_rel_diff", "param_max_abs_diff"):
        out.append(Figure(key, judged.get(key), "", where=where))
    tolerance = judged.get("tolerance") or {}
    out.append(Figure("tolerance_update_rel", tolerance.get("update_rel"), "", where=where))
    if result.get("comparison"):  # the FP8/MXFP8 step's own gap (same recipe both sides)
        for key in ("loss_max_rel_diff", "update_rel_diff"):
            out.append(Figure(f"stack_{key}", result.get(key), "", where=where))
    out.append(Figure("step_time_s", result.get("step_time_s"), "s", where=where))
    out.append(Figure("peak_mem_mib", result.get("peak_mem_mib"), "MiB", where=where))
    return [f for f in out if f.value is not None]


def _train_expected(where: str = "") -> list[Expected]:
    return [figure_key(n, where) for n in ("loss_first", "loss_final_over_first",
                                           "loss_max_rel_diff", "update_rel_diff",
                                           "step_time_s")]


def nccl_log_figures(session: WorkerSession) -> list[Figure]:
    """What the launch's NCCL log says (the network checks' evidence): version, network,
    provider, NICs, GDR, warnings."""
    from harness.parsers import ParseError
    from harness.parsers.nccl_log import parse_nccl_log_stream

    files = session.nccl_logs()
    if not files:
        return []
    handles = [f.open("rb") for f in files]
    try:
        s = parse_nccl_log_stream(handles)
    except ParseError:
        return []
    finally:
        for h in handles:
            h.close()
    out = [Figure("nccl_version", s.nccl_version, ""), Figure("nccl_network", s.network, ""),
           Figure("nccl_provider", s.provider, ""), Figure("nccl_nics", s.num_nics, "NICs"),
           Figure("nccl_log_files", len(files), "files"),
           Figure("nccl_warnings", len(s.warnings), "lines")]
    if s.gdr_gpus:  # NCCL's init-time GDR verdict (PF-NET-009's evidence on one node)
        out.append(Figure("nccl_gdr_gpus_enabled", len(s.gdr_gpus_enabled), "GPUs",
                          where=f"of {len(s.gdr_gpus)} with GDR lines"))
    return [f for f in out if f.value is not None]


def worker_step(ctx: Context) -> StepResult:
    """The production worker launch, every part, NCCL at INFO."""
    from harness.worker.bandwidth import result_from_output
    from harness.worker.compute import COMPUTE_SCHEMA, find_record
    from harness.worker.links import LINKS_SCHEMA

    step = StepResult("worker", "the production worker launch: start-up per rank, compute, "
                      "sdc, links, bandwidth, train; NCCL INIT,NET at INFO")
    profile = ctx.profile
    environ = dict(ctx.env)
    if ctx.device == "cpu":
        environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    parts = ("compute", "sdc", "links", "bandwidth", "train")
    session = WorkerSession(profile, "preflight", environ, parts, bandwidth_args(profile,
                            "preflight"), log_dir=ctx.logs / "worker-nccl")
    bound = session.bound_s()
    session.limit_s = ctx.limit(bound)
    step.figures.append(Figure("launch_bound_s", round(bound, 1), "s"))
    session.ensure_launched()
    outcome = session.outcomes.get("train") or next(iter(session.outcomes.values()), None)
    output = outcome.output if outcome is not None and outcome.proc is not None else ""
    ctx.note("worker", f"{outcome.proc.describe() if outcome and outcome.proc else 'no launch'}"
             f"\n{output[-8000:]}")
    (ctx.logs / "worker-output.txt").write_text(output)
    expected: list[Expected] = [figure_key("launch_bound_s")]
    figs, exp = startup_figures(output, ctx.nproc)
    step.figures += figs
    expected += exp
    cuda = ctx.device == "cuda"
    figs, exp = _compute(find_record(output, COMPUTE_SCHEMA), ctx.nproc, cuda)
    step.figures += figs
    expected += exp
    from harness.probes.sdc import SDC_SCHEMA

    figs, exp = _sdc(find_record(output, SDC_SCHEMA), ctx.nproc, cuda)
    step.figures += figs
    expected += exp
    agree = next((f.value for f in figs if f.name == "sdc_ranks_agreeing"), None)
    if agree is not None and agree != ctx.nproc:
        step.problems.append(f"sdc: {agree} of {ctx.nproc} ranks agree on the digest (silent "
                             "data corruption, or the determinism docs/gpu.md claims does not "
                             "hold on this SKU)")
    extra = session.extra()
    lat = [_size_of(s) for s in _arg(extra, "lat-sizes", "8,64K").split(",") if s]
    host = [_size_of(s) for s in _arg(extra, "host-sizes", "256M").split(",") if s]
    figs, exp = _links(find_record(output, LINKS_SCHEMA), lat, cuda, host, ctx.nproc)
    step.figures += figs
    expected += exp
    if not cuda:
        step.not_measured.append("host and peer copies: no CUDA device (gloo rehearsal)")
    bench = result_from_output(output)
    step.figures += _rows(bench.to_dict() if bench else None, "allreduce_busbw_gb_s",
                          "busbw_gb_s", "GB/s")
    bw_sizes = [_size_of(s) for s in _arg(session.bw_args, "bw-sizes", "").split(",") if s]
    expected += [("allreduce_busbw_gb_s", "", s) for s in bw_sizes]
    train = _train_record(output)
    if train is not None:
        step.figures += _result_figures(train)
    expected += _train_expected()
    if cuda:
        nccl = nccl_log_figures(session)
        step.figures += nccl
        expected += [figure_key("nccl_version"), figure_key("nccl_network")]
    else:
        step.not_measured.append("NCCL log: gloo writes none (the NCCL log parser is tested "
                                 "on recorded logs)")
    for name, part in sorted(session.outcomes.items()):
        if part.status != "ok":
            step.problems.append(f"part {name}: {part.status}: {part.message or 'no detail'}")
    return settle(step, worker_expected(step.figures, expected))


def _train_record(output: str, run: str | None = None) -> JSONObject | None:
    from harness.probes.train_step import SCHEMA

    records = [r for r in schema_records(output, SCHEMA) if "error" not in r]
    if run is not None:
        records = [r for r in records if r.get("run") == run]
    return records[-1] if records else None


def worker_expected(figures: list[Figure], expected: list[Expected]) -> list[Expected]:
    """`expected` with sizes filled in from the figures where the plan left them open (the
    compute part's matrix and copy sizes are in its record, not in its arguments)."""
    sized = {(f.name, f.where): f.size_bytes for f in figures}
    return [(n, w, s if s is not None or (n, w) not in sized else sized[(n, w)])
            for n, w, s in expected]


# --------------------------------------------------------------------------- the training runs

def perturbed_scale(tolerance: float, nproc: int) -> float:
    """How much the perturbed rank's gradients are scaled: one rank of `nproc` scaling its
    gradients by (1 + s) moves the averaged gradient by about s / nproc, so s = 4 x nproc x the
    tolerance puts the update error near 4x the tolerance: a fault the check must catch, not
    one at the edge of its noise."""
    return round(4.0 * nproc * tolerance, 3)


def train_figures(records: Sequence[JSONMapping], recipe: str) -> list[Figure]:
    """Per seed the step's figures, and over the seeds the largest gaps (what a tolerance is
    set from)."""
    out: list[Figure] = []
    for r in records:
        out += _result_figures(r, where=f"{recipe} seed {r['model']['seed']}")
    for key in ("loss_max_rel_diff", "update_rel_diff"):
        values = [(r.get("comparison") or r).get(key) for r in records]
        values = [v for v in values if isinstance(v, int | float)]
        if values:
            out.append(Figure(f"{key}_max", max(values), "", where=f"{recipe}, {len(values)} "
                              "seeds"))
    return out


def train_steps(ctx: Context) -> list[StepResult]:
    """One launch: every supported recipe x SEEDS, then the perturbed run; one step result per
    recipe and one for the perturbed run."""
    from harness.probes.train_step import TOLERANCES, TeInfo, supported_recipes

    capability = ctx.facts.get("capability") if ctx.device == "cuda" else None
    te = TeInfo(bool(ctx.facts.get("te_version")), ctx.facts.get("te_version"))
    recipes = supported_recipes(tuple(capability) if capability else None, te)
    judge = "bf16" if "bf16" in recipes else "fp32"
    scale = perturbed_scale(TOLERANCES[judge].update_rel, ctx.nproc)
    perturbed = f"{judge}:{SEEDS[0]}:{PERTURB},scale={scale:g}"
    runs = [f"{r}:{seed}" for r in recipes for seed in SEEDS] + [perturbed]
    timeout = ctx.limit(60.0 + 25.0 * len(runs))
    extra = [f"--device={ctx.device}", f"--pg-timeout-s={max(10.0, timeout / 3):g}",
             *[f"--train-run={r}" for r in runs]]
    if ctx.profile.te_required:
        extra.append("--te-required")
    environ = dict(ctx.env)
    if ctx.device == "cpu":
        environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    run = run_worker(ctx.nproc, [PartSpec("train", timeout)], env=environ, extra=extra,
                     limit_s=ctx.limit(timeout + 60.0), max_launches=1)
    outcome: PartOutcome = run.parts["train"]
    output = outcome.output
    (ctx.logs / "train-output.txt").write_text(output)
    ctx.note("train", f"{outcome.proc.describe() if outcome.proc else outcome.message}\n"
             f"{output[-6000:]}")
    steps = []
    for recipe in recipes:
        step = StepResult(f"train-{recipe}", f"training step, {recipe}, on {ctx.nproc} ranks, "
                          f"seeds {', '.join(map(str, SEEDS))}")
        records = [r for seed in SEEDS
                   if (r := _train_record(output, f"{recipe}:{seed}")) is not None]
        step.figures = train_figures(records, recipe)
        for r in records:
            step.problems += [f"seed {r['model']['seed']}: {p}" for p in run_problems(r)]
        expected = [k for seed in SEEDS for k in _train_expected(f"{recipe} seed {seed}")]
        step.problems += _missing_runs(records, [f"{recipe}:{s}" for s in SEEDS], outcome)
        if ctx.nproc < 2:
            step.not_measured.append("the sharding tolerance: on 1 rank the sharded step and the "
                                     "reference are the same computation (needs >= 2 GPUs)")
        steps.append((step, expected))
    step = StepResult("train-perturbed", f"training step, {judge}, rank {ctx.nproc - 1}'s "
                      f"gradients x (1 + {scale:g}): the reference comparison must fail it")
    record = _train_record(output, perturbed)
    if record is not None:
        step.figures = _result_figures(record, where=f"{judge} perturbed x{1 + scale:g}")
        gaps = reference_gaps(record)
        step.figures.append(Figure("caught", bool(gaps), "", where="PF-TRAIN-005/006"))
        if not gaps:
            step.problems.append("the perturbed run passed the reference comparison: the check "
                                 "cannot see a corrupted gradient at this scale")
    else:
        step.problems += _missing_runs([], [perturbed], outcome)
    steps.append((step, [figure_key("caught", "PF-TRAIN-005/006")]))
    return [settle(s, e) for s, e in steps]


def reference_gaps(result: JSONMapping) -> list[str]:
    """The reference comparisons a result fails (PF-TRAIN-005, PF-TRAIN-006): each as
    `update_rel_diff 3.1e-02 > 5e-02`-style text; [] when it passes both."""
    judged = result.get("comparison") or result
    tolerance = judged.get("tolerance") or {}
    out = []
    for key, limit_key in (("loss_max_rel_diff", "loss_rel"), ("update_rel_diff", "update_rel")):
        value, limit = judged.get(key), tolerance.get(limit_key)
        if not isinstance(value, int | float) or not isinstance(limit, int | float):
            out.append(f"{key} {value!r} not comparable with {limit!r}")
        elif not value <= limit:  # NaN fails too
            out.append(f"{key} {value:.3g} > {limit:g}")
    return out


def run_problems(result: JSONMapping) -> list[str]:
    """What the PF-TRAIN checks would fail in an unperturbed run: a non-finite or
    non-decreasing loss, a reference gap, replicas that differ."""
    import math

    out = []
    losses = result.get("losses") or []
    if not losses or not all(isinstance(v, int | float) and math.isfinite(v) for v in losses):
        out.append(f"loss not finite: {losses}")
    elif not losses[-1] < losses[0]:
        out.append(f"loss did not decrease: {losses[0]:.4g} -> {losses[-1]:.4g}")
    out += reference_gaps(result)
    differ = [r.get("rank") for r in result.get("ranks", []) if r.get("max_abs_vs_rank0")]
    if differ:
        out.append(f"replicas differ from rank 0 on ranks {differ}")
    return out


def _missing_runs(records: list[JSONObject], wanted: list[str],
                  outcome: PartOutcome) -> list[str]:
    have = {r.get("run") for r in records}
    missing = [w for w in wanted if w not in have]
    if not missing:
        return []
    return [f"no result for run(s) {', '.join(missing)}: part {outcome.status}"
            + (f": {outcome.message}" if outcome.message else "")]
