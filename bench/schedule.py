"""One scheduling cycle at 1k, 10k and 100k pending runs, against merely sorting the pending list.

The fleet: 64 pools (32 TPU with slice shapes, 32 GPU), 512 chips each, and 256 queues in 16 cohorts;
each cohort's 16 queues hold 32-chip quotas on the cohort's 4 pools and may borrow within the cohort.
Before each timed cycle the pools are filled to `--busy` of their chips with running work of the same
priority mix (the steady state of a loaded fleet), then N runs are queued with mixed sizes, priorities,
teams and preferences. The timed cycle is the first after that setup, so it also chooses every
preemption the queued higher-priority runs call for.
Only `Scheduler.cycle(now)` is timed; the baseline sorts the same N requests by (priority, time
queued, run) in the same process. Each size is repeated; medians are reported. The last line is the summary.

Start-time estimates, outside the cycle (scheduling/estimate.py, scheduling/plan.py), on the same state:
`estimate` times `estimate_starts` for the N pending runs, each on its planned pool, over the running work's
expected ends (what `crossrail queue` computes; aim < 2 s at 100k); `plan` times the whole placement plan
(a forward simulation over every pool each run's queue reaches, a choice per run, then the starts).
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import time

from rich.progress import Progress

from crossrail.core import priority_rank
from crossrail.scheduling import CycleResult, Request, Scheduler, SchedulerConfig
from crossrail.scheduling.estimate import Busy, PlacementWork, PoolInfo, Waiting, estimate_starts
from crossrail.scheduling.plan import plan
from crossrail.scheduling.quota import QuotaBook
from crossrail.spec import Fleet

POOLS, QUEUES, COHORTS, CHIPS = 64, 256, 16, 512
NOW = 1_767_225_600.0
AIMS_MS = {10_000: 50.0, 100_000: 500.0}
ESTIMATE_AIM_MS = {100_000: 2000.0}
SIZES = (1, 2, 4, 8, 16, 32)
PRIORITIES = ("low", "normal", "normal", "normal", "high", "critical")


def build_fleet() -> Fleet:
    pools = []
    for i in range(POOLS):
        if i % 2 == 0:
            shapes = ["2x2x1", "2x2x2", "2x2x4", "2x4x4", "4x4x4"]
            pools.append(_pool(f"tpu-{i}", "tpu", 4, topologies=shapes, cost_per_chip_hour=4.0 + i / 100))
        else:
            pools.append(_pool(f"gpu-{i}", "gpu", 8, cost_per_chip_hour=3.0 + i / 100))
    per_cohort = POOLS // COHORTS
    queues = []
    for q in range(QUEUES):
        cohort = q % COHORTS
        owned = [pools[cohort * per_cohort + k]["name"] for k in range(per_cohort)]
        quota = dict.fromkeys(owned, CHIPS * COHORTS // QUEUES)
        queues.append({"name": f"q{q}", "stage": "experiment", "team": f"t{q}", "quota": quota, "cohort": f"c{cohort}"})
    spec = {"pools": pools, "queues": queues}
    return Fleet.model_validate(
        {"apiVersion": "crossrail/v1", "kind": "Fleet", "metadata": {"name": "bench"}, "spec": spec}
    )


def _pool(name: str, kind: str, per_host: int, **extra: object) -> dict[str, object]:
    return {"name": name, "accelerator": kind, "chip_type": kind, "chips": CHIPS, "chips_per_host": per_host, **extra}


def request(rng: random.Random, run: str, queued_at: float) -> Request:
    chips = rng.choice(SIZES)
    return Request(
        run=run,
        queue=f"q{rng.randrange(QUEUES)}",
        chips=chips,
        priority=rng.choice(PRIORITIES),
        queued_at=queued_at,
        team=f"team-{rng.randrange(64)}",
        duration_s=rng.choice((None, 3600.0, 6 * 3600.0)),
        prefer=rng.choice(("tpu", "gpu", "any")),
    )


def prepared(fleet: Fleet, pending: list[Request], busy: float, rng: random.Random, progress: Progress) -> Scheduler:
    """A scheduler whose pools are `busy` full of running work and whose queues hold `pending`."""
    sched = Scheduler.from_fleet(fleet, SchedulerConfig.from_fleet(fleet, fallback_wait_s=600.0))
    task = progress.add_task(f"  setting up {len(pending):,} pending", total=POOLS + len(pending))
    cohort_of = {q.name: q.cohort for q in fleet.queues}
    by_cohort: dict[str, list[str]] = {}
    for name, cohort in cohort_of.items():
        by_cohort.setdefault(str(cohort), []).append(name)
    for i, pool in enumerate(fleet.pools):
        queues = by_cohort[f"c{i // (POOLS // COHORTS)}"]
        per_host, filled, k = pool.chips_per_host, 0, 0
        while filled + per_host <= busy * pool.chips:
            queue = queues[k % len(queues)]
            priority = rng.choice(PRIORITIES)
            name = f"running-{pool.name}-{k}"
            run = Request(name, queue, per_host, priority=priority, team=f"team-{k % 64}", queued_at=NOW - 7200)
            sched.started(run, pool.name, per_host, NOW - rng.uniform(60, 7200))
            filled += per_host
            k += 1
        progress.advance(task)
    for req in pending:
        sched.submitted(req)
    progress.advance(task, len(pending))
    progress.remove_task(task)
    return sched


def estimates(fleet: Fleet, sched: Scheduler, pending: list[Request]) -> tuple[float, float, float]:
    """ms to estimate every pending run's start on its planned pool (without and with backfill), and ms for
    the whole placement plan."""
    pools = [PoolInfo.from_spec(p) for p in fleet.spec.pools]
    running = [Busy(a.run, a.pool, a.chips, a.started_at + 3 * 3600.0) for a in sched.cache.allocs.values()]
    quota = QuotaBook(fleet.spec.queues)
    works = [
        PlacementWork(
            r.run,
            r.chips,
            reference_s=r.duration_s,
            prefer=r.prefer,
            rank=priority_rank(r.priority),
            queued_at=r.queued_at,
            pools=quota.reachable(r.queue),
        )
        for r in pending
    ]
    t0 = time.perf_counter()
    planned = plan(works, running, pools, NOW, explain_all=False)
    plan_ms = (time.perf_counter() - t0) * 1000
    waiting = []
    for w in works:
        pool = planned.choices[w.run].pool
        if pool is not None:
            waiting.append(Waiting(w.run, w.chips, {pool: w.reference_s}, w.rank, w.queued_at, pool))
    t0 = time.perf_counter()
    starts = estimate_starts(waiting, running, pools, NOW)
    starts_ms = (time.perf_counter() - t0) * 1000
    assert len(starts) == len(waiting)
    t0 = time.perf_counter()
    estimate_starts(waiting, running, pools, NOW, backfill=True)
    backfill_ms = (time.perf_counter() - t0) * 1000
    return starts_ms, backfill_ms, plan_ms


def measure(
    fleet: Fleet, n: int, repeats: int, busy: float, progress: Progress
) -> tuple[float, float, float, int, int, float, float, float, float]:
    """Medians: ms per cycle (wall, then this process's CPU time: on a shared machine the gap is other
    work), ms to sort, admissions and blocked heads per cycle, ms of the next cycle, ms to estimate starts
    (without and with backfill) and ms to plan placements (outside the cycle, on the state before it)."""
    cycle_ms, cpu_ms, sort_ms, admitted, blocked, next_ms = [], [], [], [], [], []
    starts_ms, backfill_ms, plan_ms = [], [], []
    for rep in range(repeats):
        rng = random.Random(rep * 1_000_003 + n)
        pending = [request(rng, f"run-{i}", NOW - rng.uniform(0, 3600)) for i in range(n)]
        sched = prepared(fleet, pending, busy, rng, progress)
        starts, backfilled, planned = estimates(fleet, sched, pending)
        starts_ms.append(starts)
        backfill_ms.append(backfilled)
        plan_ms.append(planned)
        t0, c0 = time.perf_counter(), time.process_time()
        result: CycleResult = sched.cycle(NOW)
        cycle_ms.append((time.perf_counter() - t0) * 1000)
        cpu_ms.append((time.process_time() - c0) * 1000)
        t0 = time.perf_counter()
        sched.cycle(NOW + 1)  # nothing changed since: the steady state between events
        next_ms.append((time.perf_counter() - t0) * 1000)
        t0 = time.perf_counter()
        sorted(pending, key=lambda r: (r.rank, r.queued_at, r.run))
        sort_ms.append((time.perf_counter() - t0) * 1000)
        admitted.append(len(result.admitted))
        blocked.append(len(result.blocked))
    return (
        statistics.median(cycle_ms),
        statistics.median(cpu_ms),
        statistics.median(sort_ms),
        int(statistics.median(admitted)),
        int(statistics.median(blocked)),
        statistics.median(next_ms),
        statistics.median(starts_ms),
        statistics.median(backfill_ms),
        statistics.median(plan_ms),
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--sizes", type=int, nargs="+", default=[1_000, 10_000, 100_000])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--busy", type=float, default=0.9, help="fraction of every pool already running work")
    args = ap.parse_args()
    fleet = build_fleet()
    rows = []
    with Progress(transient=True) as progress:
        for n in args.sizes:
            rows.append((n, *measure(fleet, n, args.repeats, args.busy, progress)))
    parts = []
    for n, cycle, cpu, sort, admitted, blocked, steady, starts, backfilled, planned in rows:
        aim = AIMS_MS.get(n)
        aim_text = f" (aim < {aim:.0f} ms)" if aim else ""
        rate = admitted / (cycle / 1000) if cycle else 0.0
        print(
            f"{n:>7,} pending: cycle {cycle:7.2f} ms{aim_text} ({cpu:.2f} ms CPU), "
            f"{admitted} admitted ({rate:,.0f}/s), "
            f"{blocked} heads blocked; sorting the pending list {sort:7.2f} ms, ratio {cycle / sort:.2f}; "
            f"the next cycle, nothing changed: {steady:.2f} ms"
        )
        est_aim = ESTIMATE_AIM_MS.get(n)
        est_aim_text = f" (aim < {est_aim:.0f} ms)" if est_aim else ""
        print(
            f"{n:>7,} pending: start estimates {starts:8.1f} ms{est_aim_text}, with backfill {backfilled:8.1f} ms; "
            f"placement plan with starts {planned:8.1f} ms"
        )
        parts.append(
            f"pending_{n} cycle_ms {cycle:.2f} cycle_cpu_ms {cpu:.2f} sort_ms {sort:.2f} admitted {admitted} "
            f"admit_per_s {rate:.0f} "
            f"next_cycle_ms {steady:.2f} estimate_starts_ms {starts:.1f} estimate_backfill_ms {backfilled:.1f} "
            f"plan_ms {planned:.1f}"
        )
    load = os.getloadavg()[0]
    print(f"load average {load:.2f} on {os.cpu_count()} cores while measuring (wall times grow with it)")
    print(
        f"SUMMARY {'; '.join(parts)}; pools {POOLS} queues {QUEUES} cohorts {COHORTS} busy {args.busy}; load {load:.2f}"
    )


if __name__ == "__main__":
    main()
