"""Capacity planning: simulate candidate fleets (and what-ifs) and pick the cheapest meeting queue targets.

A candidate is a fleet mix from a grid (`h100:0/256/512;tpu-v5e:512/1024`: every combination of chips per
pool), optionally under a what-if: a stage moved to another accelerator, or another checkpoint interval.
Each candidate is simulated with the same jobs, policy and seed; it meets the targets when every targeted
stage's queue time at the chosen percentile is within its target. Fleet cost is chips x price per hour.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from crossrail.core import format_duration
from crossrail.errors import CrossrailError, Problem, ProblemCode, SpecError
from crossrail.sim.checkpointing import CheckpointModel, IntervalKind
from crossrail.sim.failures import FailureSpec
from crossrail.sim.fleets import build_fleet, parse_pools
from crossrail.sim.records import SimResult
from crossrail.sim.simulation import Simulation
from crossrail.sim.workload import SimJob
from crossrail.spec import Stage

WHERE = "crossrail plan"


@dataclass(frozen=True)
class PlanCandidate:
    label: str
    pools: tuple[tuple[str, int], ...]
    """(pool, chips) of the mix; pools at 0 chips are left out of the fleet."""
    move: tuple[str, str] | None = None
    """(stage, accelerator) the stage's jobs are moved to, or None."""
    interval: str | None = None
    """A checkpoint interval what-if: `daly`, `young`, `adaptive` or a fixed duration."""


@dataclass(frozen=True)
class Outcome:
    candidate: PlanCandidate
    result: SimResult | None
    cost_per_hour: float
    queue_s: dict[str, float | None]
    """Targeted stage -> its queue time at the percentile (None: no job of the stage started)."""
    meets: bool
    why: str


def grid(text: str) -> list[tuple[tuple[str, int], ...]]:
    """`name:a/b/c;name2:x/y` -> every combination, in order; SpecError for a malformed axis."""
    axes, problems = [], []
    for part in filter(None, (p.strip() for p in text.split(";"))):
        name, _, options = part.partition(":")
        try:
            values = [int(v) for v in options.split("/")]
            if not name or not values or min(values) < 0:
                raise ValueError
        except ValueError:
            problems.append(
                Problem(
                    WHERE,
                    f"--grid {part}",
                    "write name:chips/chips/...",
                    fix="e.g. h100:0/256/512",
                    code=ProblemCode.BAD_VALUE,
                )
            )
            continue
        axes.append([(name, v) for v in values])
    if problems or not axes:
        raise SpecError(
            problems
            or [
                Problem(
                    WHERE,
                    "--grid",
                    "no pools",
                    fix="e.g. --grid 'h100:256/512;tpu:512'",
                    code=ProblemCode.MISSING_FIELD,
                )
            ]
        )
    return [tuple(combo) for combo in itertools.product(*axes) if any(c for _, c in combo)]


def targets(items: Sequence[str]) -> dict[str, float]:
    """`STAGE=DURATION` items -> stage -> seconds."""
    from crossrail.core import parse_duration

    out, problems = {}, []
    stages = {s.value for s in Stage}
    for item in items:
        stage, _, raw = item.partition("=")
        try:
            if stage not in stages:
                raise ValueError(f"unknown stage {stage!r}; stages are {', '.join(sorted(stages))}")
            out[stage] = parse_duration(raw)
        except ValueError as exc:
            problems.append(Problem(WHERE, f"--target {item}", str(exc), code=ProblemCode.BAD_VALUE))
    if problems:
        raise SpecError(problems)
    return out


def moved(jobs: Sequence[SimJob], stage: str, accelerator: str) -> list[SimJob]:
    """The what-if: `stage`'s jobs may run only on `accelerator` pools."""
    return [dataclasses.replace(j, accelerators=(accelerator,)) if j.stage == stage else j for j in jobs]


def with_interval(spec: CheckpointModel, interval: str) -> CheckpointModel:
    from crossrail.core import parse_duration

    kinds: dict[str, IntervalKind] = {"daly": "daly", "young": "young", "adaptive": "adaptive"}
    if interval in kinds:
        return dataclasses.replace(spec, interval=kinds[interval], interval_s=None)
    return dataclasses.replace(spec, interval="fixed", interval_s=parse_duration(interval))


def sweep(
    candidates: Sequence[PlanCandidate],
    template: Sequence[Mapping[str, object]],
    jobs: Sequence[SimJob],
    goals: Mapping[str, float],
    *,
    policy: str = "fifo",
    seed: int = 0,
    percentile: int = 95,
    failures: FailureSpec | None = None,
    checkpoint: CheckpointModel | None = None,
    done: Callable[[Outcome], None] | None = None,
) -> list[Outcome]:
    """Simulate every candidate; outcomes sorted cheapest first (those meeting the targets before the rest)."""
    shapes = {str(p["name"]): p for p in template}
    outcomes = []
    for i, cand in enumerate(candidates):
        pools = [{**shapes[name], "chips": chips} for name, chips in cand.pools if chips]
        fleet = build_fleet(pools, name=f"candidate-{i}")
        price = sum(float(str(p.get("cost_per_chip_hour", 0.0))) * int(str(p["chips"])) for p in pools)
        cand_jobs = moved(jobs, *cand.move) if cand.move else list(jobs)
        spec = with_interval(checkpoint or CheckpointModel(), cand.interval) if cand.interval else checkpoint
        try:
            sim = Simulation(fleet, cand_jobs, policy=policy, failures=failures, checkpoint=spec, seed=seed)
        except CrossrailError as exc:  # a candidate that cannot run some job fails its own row only
            outcome = Outcome(cand, None, price, {}, False, str(exc).splitlines()[0])
        else:
            outcome = judge(cand, sim.run(), price, goals, percentile)
        outcomes.append(outcome)
        if done is not None:
            done(outcome)
    return sorted(outcomes, key=lambda o: (not o.meets, o.cost_per_hour, o.candidate.label))


def judge(cand: PlanCandidate, result: SimResult, price: float, goals: Mapping[str, float], percentile: int) -> Outcome:
    by = result.per_stage
    queue: dict[str, float | None] = {}
    misses = []
    for stage, goal in goals.items():
        s = by.get(stage)
        value = None if s is None else (s.queue_p95_s if percentile == 95 else s.queue_p50_s)
        queue[stage] = value
        if value is None or value > goal:
            misses.append(f"{stage} p{percentile} {format_duration(value)} > {format_duration(goal)}")
    if result.finished < result.jobs:
        misses.append(f"{result.jobs - result.finished} jobs unfinished")
    return Outcome(cand, result, price, queue, not misses, "; ".join(misses) or "meets every target")


def candidates(
    text: str, template: Sequence[Mapping[str, object]], *, moves: Sequence[str] = (), intervals: Sequence[str] = ()
) -> list[PlanCandidate]:
    """Grid mixes, each alone and under each what-if."""
    names = {str(p["name"]) for p in template}
    mixes = grid(text)
    unknown = sorted({n for mix in mixes for n, _ in mix} - names)
    if unknown:
        raise SpecError(
            [Problem(WHERE, "--grid", f"pools {', '.join(unknown)} are not in --pools", code=ProblemCode.BAD_VALUE)]
        )
    parsed_moves = []
    for item in moves:
        stage, _, kind = item.partition("=")
        if stage not in {s.value for s in Stage} or kind not in ("tpu", "gpu"):
            raise SpecError(
                [Problem(WHERE, f"--move {item}", "write STAGE=tpu or STAGE=gpu", code=ProblemCode.BAD_VALUE)]
            )
        parsed_moves.append((stage, kind))
    out = []
    for mix in mixes:
        label = "+".join(f"{n}:{c}" for n, c in mix if c)
        out.append(PlanCandidate(label, mix))
        out += [PlanCandidate(f"{label} ({s}->{k})", mix, move=(s, k)) for s, k in parsed_moves]
        out += [PlanCandidate(f"{label} (ckpt {i})", mix, interval=i) for i in intervals]
    return out


def template_pools(text: str) -> list[dict[str, object]]:
    """Pool shapes and prices from `--pools` (their chip counts are what the grid replaces)."""
    return parse_pools(text)
