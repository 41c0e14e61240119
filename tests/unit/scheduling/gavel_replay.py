"""A small discrete-time replay of a Gavel trace under a round-based policy (until the simulator drives it).

Every round the policy allocates; a job runs the whole round on the pool it got, at its matrix rate for
that pool's chip type, less `restore_s` whenever it (re)starts or moves (its checkpoint-restore cost);
it ends mid-round when its steps are done. JCT = end - arrival.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from crossrail.scheduling.gavel import GavelJob, Throughputs, load_throughputs, load_trace
from crossrail.scheduling.policies import ROUND_S, JobView, PoolView, get_policy

DATA = Path(__file__).resolve().parents[3] / "data" / "gavel"
CLUSTER = (PoolView("v100", "v100", 2, 2), PoolView("k80", "k80", 4, 4))
"""Gavel's artifact-evaluation cluster: 2 V100 and 4 K80."""


@dataclass
class _Job:
    run: str
    spec: GavelJob
    rates: dict[str, float]
    done: float = 0.0
    attained: dict[str, float] = field(default_factory=dict)
    pool: str | None = None
    end: float | None = None

    def view(self) -> JobView:
        return JobView(
            run=self.run,
            queue="gavel",
            priority=0,
            submitted_at=self.spec.arrival_s,
            chips=self.spec.scale_factor,
            attained_s=sum(self.attained.values()),
            throughput=self.rates,
            remaining=self.spec.total_steps - self.done,
            pool=self.pool,
            attained_by_type=dict(self.attained),
        )


@dataclass(frozen=True)
class Replay:
    policy: str
    jct_s: dict[str, float]
    moves: int
    rounds: int

    @property
    def average_jct_s(self) -> float:
        return sum(self.jct_s.values()) / len(self.jct_s)


def gavel_jobs() -> tuple[list[GavelJob], Throughputs]:
    return load_trace(DATA / "artifact_evaluation.trace"), load_throughputs(DATA / "simulation_throughputs.json")


def replay(
    policy_name: str,
    *,
    pools: tuple[PoolView, ...] = CLUSTER,
    round_s: float = ROUND_S,
    restore_s: float = 30.0,
    max_rounds: int = 20_000,
) -> Replay:
    trace, matrix = gavel_jobs()
    chip_types = sorted({p.chip_type for p in pools})
    jobs = [_Job(f"job-{i:02d}", spec, matrix.job_rates(spec, chip_types)) for i, spec in enumerate(trace)]
    policy, pool_type = get_policy(policy_name), {p.name: p.chip_type for p in pools}
    now, moves, rounds = 0.0, 0, 0
    while any(j.end is None for j in jobs):
        rounds += 1
        if rounds > max_rounds:
            raise RuntimeError(f"{policy_name}: jobs still running after {max_rounds} rounds")
        live = [j for j in jobs if j.end is None and j.spec.arrival_s <= now]
        placed = policy.allocate([j.view() for j in live], pools, now, round_s)
        for job in live:
            pool = placed.get(job.run)
            if pool is not None and job.pool is not None and pool != job.pool:
                moves += 1
            overhead = 0.0 if pool is not None and pool == job.pool else restore_s
            job.pool = pool
            if pool is not None:
                _advance(job, pool_type[pool], now, round_s, overhead)
        now += round_s
    return Replay(policy_name, {j.run: (j.end or 0.0) - j.spec.arrival_s for j in jobs}, moves, rounds)


def _advance(job: _Job, chip_type: str, now: float, round_s: float, overhead: float) -> None:
    rate = job.rates[chip_type]
    useful = max(round_s - overhead, 0.0)
    left = job.spec.total_steps - job.done
    ran = min(useful, left / rate)
    job.done += rate * ran
    job.attained[chip_type] = job.attained.get(chip_type, 0.0) + ran * job.spec.scale_factor
    if ran < useful or job.done >= job.spec.total_steps - 1e-9:
        job.end = now + overhead + ran
        job.pool = None
