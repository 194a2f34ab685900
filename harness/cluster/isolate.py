"""Bad node / bad link isolation by pairwise bandwidth rounds (pure: the measurements come from
a callback, so the same code runs on a real cluster and in a simulated one).

Round 1 pairs every node at random (a perfect matching: every node in one pair, all pairs at
once). A pair that passes clears both nodes. A node of a failed pair becomes a suspect and is
re-tested against known-good nodes (Google's approach, domain-facts.md) until it either passes
(it is good; if both ends of a failed pair are good, the link between them is re-tested) or has
failed against `confirmations` distinct nodes that were known good when measured (it is bad).
One bad node among 1024 is confirmed in three rounds; a healthy node becomes a false positive
only if its measurements flake `confirmations` times against good partners. A failed pair whose
two nodes both passed later, and whose link was not confirmed bad, is `flaky` (issue 30: failed,
then passed; both figures kept): a warning, never a bad node. `confirmations` is 2 where the
profile confirms the `isolation` family, else 1 (condemned on the first failure with a good peer).

Its wire form (`IsolationResult.to_json`, read back once by `from_dict`: every field required,
an error naming the one missing or malformed, harness.cluster.wire) is the one shape of every
isolation the snapshot carries: the cluster's pairwise rounds (`isolation`) and a failing job
group's own (`groups.results[i].isolation`, harness.cluster.group_wire).
"""

from __future__ import annotations

import random
import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from harness.base.jsontypes import JSONMapping, JSONObject
from harness.cluster.wire import NUMBER, OPT_NUMBER, OPT_STR, SnapshotError, items, required
from harness.profiles.model import Profile

__all__ = ["IsolationResult", "MeasurePairs", "PairResult", "confirmations", "isolate"]


@dataclass(frozen=True, slots=True)
class PairResult:
    """One pair's measurement in one round: busbw in GB/s, or the error that stopped it."""

    a: int
    b: int
    busbw_gb_s: float | None
    error: str | None = None

    @property
    def pair(self) -> tuple[int, int]:
        return (min(self.a, self.b), max(self.a, self.b))

    def other(self, node: int) -> int:
        return self.b if node == self.a else self.a

    @classmethod
    def from_dict(cls, d: JSONMapping, where: str = "a pair") -> PairResult:
        return cls(a=required(d, "a", int, where), b=required(d, "b", int, where),
                   busbw_gb_s=required(d, "busbw_gb_s", OPT_NUMBER, where),
                   error=required(d, "error", OPT_STR, where))

    def to_json(self) -> JSONObject:
        return {"a": self.a, "b": self.b, "busbw_gb_s": self.busbw_gb_s, "error": self.error}


#: Runs every pair of one round (disjoint pairs, in parallel) and returns one result per pair.
MeasurePairs = Callable[[Sequence[tuple[int, int]]], Iterable[PairResult]]


@dataclass(frozen=True, slots=True)
class IsolationResult:
    """What the rounds found. `threshold_gb_s` is the busbw under which a pair failed."""

    nodes: tuple[int, ...]
    rounds: tuple[tuple[PairResult, ...], ...]
    threshold_gb_s: float
    bad_nodes: tuple[int, ...]
    bad_links: tuple[tuple[int, int], ...]
    suspects: tuple[int, ...]
    """Failed a pair but neither cleared nor confirmed within the round limit."""
    found_in_round: tuple[int, ...] = ()
    """For each of `bad_nodes`, the round (1-based) that confirmed it."""
    flaky: tuple[tuple[PairResult, tuple[PairResult, ...]], ...] = ()
    """(a failed pair, the later passing pairs of its nodes): both nodes passed later and the
    link was not confirmed bad, so the failure did not stand."""

    def evidence(self, node: int) -> list[PairResult]:
        """Every pair measurement that involved `node`, in round order."""
        return [r for rnd in self.rounds for r in rnd if node in (r.a, r.b)]

    def to_json(self) -> JSONObject:
        """The wire form (the snapshot's, and report.json's `cluster.isolation`):
        `from_dict(r.to_json()) == r`, key for key. `num_rounds` is said for the report's
        readers; `from_dict` checks it against `rounds`."""
        return {
            "nodes": list(self.nodes),
            "num_rounds": len(self.rounds),
            "threshold_gb_s": self.threshold_gb_s,
            "bad_nodes": list(self.bad_nodes),
            "bad_links": [list(p) for p in self.bad_links],
            "suspects": list(self.suspects),
            "found_in_round": list(self.found_in_round),
            "flaky": [{"first": first.to_json(), "again": [r.to_json() for r in again]}
                      for first, again in self.flaky],
            "rounds": [[r.to_json() for r in rnd] for rnd in self.rounds],
        }

    @classmethod
    def from_dict(cls, d: JSONMapping, where: str = "the isolation rounds") -> IsolationResult:
        """Every field required and of its type (SnapshotError naming it otherwise)."""
        rounds = tuple(tuple(PairResult.from_dict(p, f"{where}'s round {k}, pair {i}")
                             for i, p in enumerate(rnd, 1))
                       for k, rnd in enumerate(items(d, "rounds", list, where), 1))
        if required(d, "num_rounds", int, where) != len(rounds):
            raise SnapshotError(f"{where}'s 'num_rounds' is {d['num_rounds']}, but 'rounds' "
                                f"holds {len(rounds)}")
        bad, found = items(d, "bad_nodes", int, where), items(d, "found_in_round", int, where)
        if len(found) != len(bad):
            raise SnapshotError(f"{where}'s 'found_in_round' holds {len(found)} rounds for "
                                f"{len(bad)} bad nodes")
        links = items(d, "bad_links", list, where)
        if not all(len(p) == 2 and all(isinstance(n, int) and not isinstance(n, bool)
                                       for n in p) for p in links):
            raise SnapshotError(f"{where}'s 'bad_links' holds a value that is not a pair of "
                                "ranks")
        flaky = []
        for i, f in enumerate(items(d, "flaky", dict, where), 1):
            fw = f"{where}'s flaky pair {i}"
            flaky.append((PairResult.from_dict(required(f, "first", dict, fw), f"{fw}'s first"),
                          tuple(PairResult.from_dict(a, f"{fw}'s again")
                                for a in items(f, "again", dict, fw))))
        return cls(nodes=tuple(items(d, "nodes", int, where)), rounds=rounds,
                   threshold_gb_s=required(d, "threshold_gb_s", NUMBER, where),
                   bad_nodes=tuple(bad), bad_links=tuple((a, b) for a, b in links),
                   suspects=tuple(items(d, "suspects", int, where)),
                   found_in_round=tuple(found), flaky=tuple(flaky))


@dataclass(slots=True)
class _State:
    good: set[int] = field(default_factory=set)
    bad: dict[int, int] = field(default_factory=dict)
    """bad node -> the round that confirmed it."""
    failed_with: dict[int, set[int]] = field(default_factory=dict)
    """node -> partners it failed a pair with."""
    failed_vs_good: dict[int, set[int]] = field(default_factory=dict)
    """node -> partners, known good when measured, it failed with."""
    link_failures: dict[tuple[int, int], int] = field(default_factory=dict)
    tried: dict[int, set[int]] = field(default_factory=dict)
    """node -> every partner it has been measured with."""
    met_good: dict[int, set[int]] = field(default_factory=dict)
    """node -> partners it was measured with while they were known good."""


def confirmations(profile: Profile) -> int:
    """Good peers a node must fail with to be bad: 2 where the profile confirms the `isolation`
    family (a failure is measured again before it is condemned), else 1."""
    return 2 if "isolation" in profile.confirm_families else 1


def isolate(
    nodes: Sequence[int],
    measure: MeasurePairs,
    *,
    floor_gb_s: float = 0.0,
    relative: float = 0.5,
    confirmations: int = 2,
    max_rounds: int = 5,
    seed: int = 0,
) -> IsolationResult:
    """Find the nodes (and links) whose pairs run below the threshold: the larger of
    `floor_gb_s` and `relative` x the upper-quartile busbw of round 1 (the random matching:
    healthy pairs, as long as fewer than 3/4 of them hold a bad node). A node is bad after
    failing with `confirmations` distinct good nodes."""
    if confirmations < 1 or max_rounds < 1:
        raise ValueError(f"confirmations({confirmations}) and max_rounds({max_rounds}) "
                         "must be >= 1")
    nodes = tuple(dict.fromkeys(nodes))
    rng = random.Random(seed)
    order = list(nodes)
    rng.shuffle(order)
    plan = [(order[i], order[i + 1]) for i in range(0, len(order) - 1, 2)]
    st = _State()
    rounds: list[tuple[PairResult, ...]] = []
    threshold = floor_gb_s
    untested = set(order[len(plan) * 2:])
    while plan and len(rounds) < max_rounds:
        results = _complete(plan, measure(plan))
        rounds.append(results)
        if len(rounds) == 1:
            measured = [r.busbw_gb_s for r in results if r.busbw_gb_s is not None and not r.error]
            if measured:
                threshold = max(floor_gb_s, relative * _upper_quartile(measured))
        _record(st, results, threshold)
        _judge(st, nodes, confirmations, len(rounds))
        untested -= {n for p in plan for n in p}
        plan = _next_plan(st, nodes, untested, confirmations, rng)
    suspects = [n for n in nodes if n not in st.good and n not in st.bad
                and (st.failed_with.get(n) or n in untested)]
    links = sorted(p for p, k in st.link_failures.items()
                   if k >= confirmations and p[0] in st.good and p[1] in st.good)
    return IsolationResult(nodes=nodes, rounds=tuple(rounds), threshold_gb_s=threshold,
                           bad_nodes=tuple(sorted(st.bad)), bad_links=tuple(links),
                           suspects=tuple(sorted(suspects)),
                           found_in_round=tuple(st.bad[n] for n in sorted(st.bad)),
                           flaky=_flaky(rounds, st, set(links), threshold))


def _flaky(rounds: Sequence[tuple[PairResult, ...]], st: _State, bad_links: set[tuple[int, int]],
           threshold: float) -> tuple[tuple[PairResult, tuple[PairResult, ...]], ...]:
    """Failed pairs of two nodes that both passed later, on a link not confirmed bad: each with
    the later passing pairs of its nodes (its second figures)."""
    out = []
    for k, rnd in enumerate(rounds):
        for r in rnd:
            if (_passed(r, threshold) or r.a not in st.good or r.b not in st.good
                    or r.pair in bad_links):
                continue
            again = tuple(x for later in rounds[k + 1:] for x in later
                          if _passed(x, threshold) and {x.a, x.b} & {r.a, r.b})
            out.append((r, again))
    return tuple(out)


def _upper_quartile(values: Sequence[float]) -> float:
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=4, method="inclusive")[2]


def _complete(plan: Sequence[tuple[int, int]], results: Iterable[PairResult]
              ) -> tuple[PairResult, ...]:
    """One result per planned pair, in plan order; a pair the callback left out is an error."""
    by_pair = {r.pair: r for r in results}
    out = []
    for a, b in plan:
        r = by_pair.get((min(a, b), max(a, b)))
        out.append(r if r is not None else PairResult(a, b, None, "no result reported"))
    return tuple(out)


def _passed(r: PairResult, threshold: float) -> bool:
    return r.error is None and r.busbw_gb_s is not None and r.busbw_gb_s >= threshold


def _record(st: _State, results: Sequence[PairResult], threshold: float) -> None:
    good_before = set(st.good)
    for r in results:
        for n in (r.a, r.b):
            st.tried.setdefault(n, set()).add(r.other(n))
            if r.other(n) in good_before:
                st.met_good.setdefault(n, set()).add(r.other(n))
                if not _passed(r, threshold):
                    st.failed_vs_good.setdefault(n, set()).add(r.other(n))
    for r in results:
        if _passed(r, threshold):
            st.good.update((r.a, r.b))
            st.link_failures.pop(r.pair, None)
        else:
            st.failed_with.setdefault(r.a, set()).add(r.b)
            st.failed_with.setdefault(r.b, set()).add(r.a)
            st.link_failures[r.pair] = st.link_failures.get(r.pair, 0) + 1


def _judge(st: _State, nodes: Sequence[int], confirmations: int, round_no: int) -> None:
    """A node that never passed and failed with `confirmations` distinct good nodes is bad."""
    for n in nodes:
        if (n not in st.good and n not in st.bad
                and len(st.failed_vs_good.get(n, ())) >= confirmations):
            st.bad[n] = round_no


def _next_plan(st: _State, nodes: Sequence[int], untested: set[int], confirmations: int,
               rng: random.Random) -> list[tuple[int, int]]:
    """Suspects and untested nodes against good nodes they have not met; then failed links
    whose both ends are good (to confirm the link). Pairs are disjoint."""
    busy: set[int] = set()
    plan: list[tuple[int, int]] = []
    todo = [n for n in nodes if n not in st.good and n not in st.bad
            and (st.failed_with.get(n) or n in untested)]
    good = [n for n in nodes if n in st.good]
    rng.shuffle(good)
    for n in todo:
        partner = next((g for g in good if g not in busy and g not in st.met_good.get(n, set())),
                       None)
        if partner is None:
            continue
        plan.append((n, partner))
        busy.update((n, partner))
    if not good:  # no reference node yet (tiny clusters): suspects meet suspects not yet met
        free = [n for n in todo if n not in busy]
        for i, n in enumerate(free):
            if n in busy:
                continue
            partner = next((m for m in free[i + 1:] if m not in busy
                            and m not in st.tried.get(n, set())), None)
            if partner is not None:
                plan.append((n, partner))
                busy.update((n, partner))
    for (a, b), k in sorted(st.link_failures.items()):
        if (k < confirmations and a in st.good and b in st.good
                and a not in busy and b not in busy):
            plan.append((a, b))
            busy.update((a, b))
    return plan


def simulate_measure(
    *,
    healthy_gb_s: float = 100.0,
    bad_nodes: Mapping[int, float] | None = None,
    bad_links: Mapping[tuple[int, int], float] | None = None,
    noise: float = 0.05,
    flake_rate: float = 0.0,
    seed: int = 0,
    dead: Iterable[int] = (),
) -> MeasurePairs:
    """A cluster model: a pair's busbw is `healthy_gb_s` times the slowest factor of its nodes
    and link (bad_nodes / bad_links map to a factor, e.g. 0.3), with multiplicative noise;
    `flake_rate` of healthy pair measurements come out at a third; `dead` nodes error."""
    rng = random.Random(seed)
    bad_nodes = dict(bad_nodes or {})
    bad_links = {(min(a, b), max(a, b)): f for (a, b), f in (bad_links or {}).items()}
    dead = set(dead)

    def measure(pairs: Sequence[tuple[int, int]]) -> list[PairResult]:
        out = []
        for a, b in pairs:
            if a in dead or b in dead:
                gone = a if a in dead else b
                out.append(PairResult(a, b, None, f"rank {gone} did not answer"))
                continue
            factor = min(bad_nodes.get(a, 1.0), bad_nodes.get(b, 1.0),
                         bad_links.get((min(a, b), max(a, b)), 1.0))
            if factor == 1.0 and rng.random() < flake_rate:
                factor = 1 / 3
            value = healthy_gb_s * factor * (1 + rng.uniform(-noise, noise))
            out.append(PairResult(a, b, round(value, 3)))
        return out

    return measure
