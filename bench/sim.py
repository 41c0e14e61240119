"""The fleet simulator at scale: 10,000 jobs on 1 million chips over 30 days with failures, 100,000 jobs on
15 million TPU and GPU chips, and the 15-job Gavel trace replay.

Fleets are described at slice granularity (`chips_per_host` = 256: one "host" is a 256-chip slice or
NVLink domain), so the scheduler's per-host allocator holds thousands of entries per pool, never millions;
no object anywhere stands for one chip. Scheduling cycles are batched within 60 s.
Jobs: Poisson arrivals over `--days`, a stage mix, sizes of 8 to 16,384 chips, log-normal work with a 12 h
median. Failures: per-chip MTBF 50,000 h (Llama 3's 16k-GPU job MTBF of about 3 h at that scale), 30 s
blocking checkpoints at Daly's interval, 5 min restore. Each large case runs once; the Gavel replay is
repeated and the median reported. The last line printed is the summary.
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

from rich.progress import Progress

from crossrail.sim import CheckpointSpec, FailureSpec, SimJob, Simulation, SyntheticSpec, synthetic
from crossrail.sim.fleets import build_fleet
from crossrail.sim.records import SimResult
from crossrail.sim.traces import gavel_jobs
from crossrail.spec import Fleet

DATA = Path(__file__).resolve().parents[1] / "data" / "gavel"
SLICE = 256
HOUR = 3600.0
FAILURES = FailureSpec(chip_mtbf_s=50_000 * HOUR)
CHECKPOINT = CheckpointSpec(cost_s=30.0, restore_s=300.0, detect_s=60.0, interval="daly")
MIX = {"pretraining": 0.1, "post_training": 0.25, "reinforcement_learning": 0.1, "eval": 0.2, "experiment": 0.35}
SIZES = (8, 64, 256, 1024, 4096, 16384)
WEIGHTS = (0.1, 0.15, 0.25, 0.25, 0.17, 0.08)


def fleet(chips: int, pools: int, name: str, slice_chips: int = SLICE) -> Fleet:
    """Half TPU, half GPU pools of equal size, GPUs a little faster and dearer."""
    per = chips // pools // slice_chips * slice_chips
    specs: list[dict[str, object]] = []
    for i in range(pools):
        kind = "tpu" if i % 2 == 0 else "gpu"
        specs.append(
            {"name": f"{kind}-{i}", "accelerator": kind, "chip_type": "v5p" if kind == "tpu" else "h100",
             "chips": per, "chips_per_host": slice_chips, "cost_per_chip_hour": 2.0 if kind == "tpu" else 3.0,
             "relative_speed": 1.0 if kind == "tpu" else 1.2}
        )  # fmt: skip
    return build_fleet(specs, name=name)


def workload(jobs: int, days: float, seed: int) -> list[SimJob]:
    spec = SyntheticSpec(
        jobs=jobs, span_s=days * 86_400, mix=MIX, sizes=SIZES, size_weights=WEIGHTS, median_s=12 * HOUR,
        sigma=1.0, max_s=20 * 86_400, seed=seed,
    )  # fmt: skip
    return list(synthetic(spec))


def run(f: Fleet, jobs: list[SimJob], label: str, progress: Progress, *, quantum_s: float = 60.0) -> SimResult:
    task = progress.add_task(f"  {label}", total=len(jobs))
    sim = Simulation(
        f, jobs, policy="fifo", failures=FAILURES, checkpoint=CHECKPOINT, seed=1, quantum_s=quantum_s,
    )  # fmt: skip
    result = sim.run(progress=lambda done, _n, _t: progress.update(task, completed=done))
    progress.remove_task(task)
    return result


def line(label: str, r: SimResult, aim_s: float | None) -> str:
    aim = f" (aim < {aim_s:.0f} s)" if aim_s else ""
    return (
        f"{label}: {r.jobs:,} jobs on {r.chips:,} chips, {r.finished:,} finished, wall {r.wall_s:.1f} s{aim}, "
        f"{r.events:,} events ({r.events / r.wall_s:,.0f}/s), {r.cycles:,} cycles, "
        f"{r.interruptions:,} interruptions, makespan {(r.makespan_s or 0) / 86_400:.1f} d, "
        f"utilization {r.utilization or 0:.1%}, goodput {r.goodput or 0:.1%}"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--cases", nargs="+", default=["1m", "15m", "gavel"], choices=["1m", "15m", "gavel"])
    ap.add_argument("--days", type=float, default=30.0)
    ap.add_argument("--repeats", type=int, default=5, help="repeats of the cheap Gavel replay (median)")
    args = ap.parse_args()
    parts = []
    with Progress(transient=True) as progress:
        if "gavel" in args.cases:
            jobs = gavel_jobs(DATA / "artifact_evaluation.trace", DATA / "simulation_throughputs.json")
            cluster = build_fleet(
                [{"name": "v100", "accelerator": "gpu", "chip_type": "v100", "chips": 2, "chips_per_host": 2},
                 {"name": "k80", "accelerator": "gpu", "chip_type": "k80", "chips": 4, "chips_per_host": 4}],
                name="gavel",
            )  # fmt: skip
            walls = {}
            for policy in ("fifo", "max_min_fairness_hetero"):
                runs = [Simulation(cluster, jobs, policy=policy).run() for _ in range(args.repeats)]
                walls[policy] = statistics.median(r.wall_s for r in runs)
                print(f"gavel 15-job replay, {policy}: wall {walls[policy] * 1000:.1f} ms (median of {args.repeats})")
            mmf = walls["max_min_fairness_hetero"]
            parts.append(f"gavel_fifo_ms {walls['fifo'] * 1000:.1f} gavel_mmf_hetero_ms {mmf * 1000:.1f}")
        if "1m" in args.cases:
            r = run(fleet(1_048_576, 8, "1m-chips"), workload(10_000, args.days, 1), "10k jobs, 1M chips", progress)
            print(line("1M chips", r, 30.0))
            parts.append(f"1m_wall_s {r.wall_s:.1f} 1m_events_per_s {r.events / r.wall_s:.0f}")
        if "15m" in args.cases:
            r = run(
                fleet(15_728_640, 16, "15m-chips"),
                workload(100_000, args.days, 2),
                "100k jobs, 15M chips",
                progress,
            )
            print(line("15M chips", r, 300.0))
            parts.append(f"15m_wall_s {r.wall_s:.1f} 15m_events_per_s {r.events / r.wall_s:.0f}")
    print(f"SUMMARY {'; '.join(parts)}")


if __name__ == "__main__":
    main()
