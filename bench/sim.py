"""The fleet simulator at scale: 10,000 jobs on 1 million chips over 30 days with failures, 100,000 jobs on
15 million TPU and GPU chips, 100 jobs of up to 1,048,576 chips on one 12.5M-chip pool, the 15-job Gavel trace
replay, and Gavel's Fig. 8 (generated jobs).

Fleets are described at slice granularity (`chips_per_host` = 256: one "host" is a 256-chip slice or
NVLink domain), so the scheduler's per-host allocator holds thousands of entries per pool, never millions;
no object anywhere stands for one chip. Scheduling cycles are batched within 60 s.
Jobs: Poisson arrivals over `--days`, a stage mix, sizes of 8 to 16,384 chips, log-normal work with a 12 h
median. Failures: per-chip MTBF 50,000 h (Llama 3's 16k-GPU job MTBF of about 3 h at that scale), 30 s
blocking checkpoints at Daly's interval, 5 min restore. Each large case runs once; the Gavel replay is
repeated and the median reported. The last line printed is the summary.

The single-job scale case (`big-jobs`, aim <= 30 s): 100 pretraining jobs of 65,536 to 1,048,576 chips
(4,096 of the pool's 49,152 hosts at most) arriving over `--days`, the same failure and checkpoint model; a
1M-chip run's MTBF is 3 minutes, so most of its time goes to restores and the case is dominated by the
scheduling cycles of restarts, each admitting a gang of thousands of hosts (`crossrail.sim.units`).

Gavel's own figures (its simulator run for reference, seed 0, 6-minute rounds; issue 15) are printed beside
crossrail's: on the 15-job trace at 2 V100 + 4 K80, LAS (`max_min_fairness`) 6,032 s and Gavel-LAS
(`max_min_fairness_hetero`) 4,322 s average JCT at 2.7 s wall; Fig. 8 (36 V100 : 36 P100 : 36 K80, one GPU
per job, jobs 4000-5000 measured) in `FIG8_GAVEL`. `gavel-gen` draws Gavel's own jobs for each seed
(docs/traces.md), so seed 0 here is the workload behind Gavel's figures; its former draws (numpy, the same
distributions) could not compare like with like at 5 jobs/h, where one seed's draw moves the average 2x
(a restatement of Gavel's round loop gave 148,097 s on those draws, mean of seeds 0-2, and 185,147 s on
Gavel's seed 0, whose figure is 185,057 s). Aims: each 15-job replay <= 0.27 s; on Fig. 8, hetero
(mean of 3 seeds) <= Gavel-LAS, agnostic within 10% of LAS, each run <= 14 s at 5 jobs/h.

A Fig. 8 run's CPU time is the simulation's own: the LP solver (scipy.optimize, which a max-min policy loads
when it is built, inside the timed `Simulation(...)`: 0.3-0.4 s CPU of module loading) is loaded before the
first timed run, so the first run of the process does not carry the process's imports and every run's
figure counts the same work.
"""

from __future__ import annotations

import argparse
import csv
import os
import statistics
import time
from pathlib import Path

from rich.progress import Progress

from crossrail.sim import CheckpointModel, FailureSpec, SimJob, Simulation, SyntheticSpec, synthetic
from crossrail.sim.fleets import build_fleet
from crossrail.sim.records import SimResult
from crossrail.sim.traces import gavel_jobs
from crossrail.spec import Fleet

DATA = Path(__file__).resolve().parents[1] / "data" / "gavel"
SLICE = 256
HOUR = 3600.0
FAILURES = FailureSpec(chip_mtbf_s=50_000 * HOUR)
CHECKPOINT = CheckpointModel(cost_s=30.0, restore_s=300.0, detect_s=60.0, interval="daly")
MIX = {"pretraining": 0.1, "post_training": 0.25, "reinforcement_learning": 0.1, "eval": 0.2, "experiment": 0.35}
SIZES = (8, 64, 256, 1024, 4096, 16384)
WEIGHTS = (0.1, 0.15, 0.25, 0.25, 0.17, 0.08)


GAVEL_15 = {"max_min_fairness": 6032.0, "max_min_fairness_hetero": 4322.0}
GAVEL_15_AIM_S = 0.27
FIG8_GAVEL = {  # jobs per hour -> (LAS, Gavel-LAS) average JCT in seconds, Gavel's simulator, seed 0
    3: (85_757.0, 58_704.0),
    4: (85_483.0, 61_461.0),
    5: (185_057.0, 73_620.0),
}
FIG8_AIM_S = 14.0
BIG_SIZES = (65_536, 131_072, 262_144, 524_288, 1_048_576)
BIG_POOL_CHIPS = 12_582_912
BIG_AIM_S = 30.0


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


def big_jobs(days: float, scale: int = 1) -> tuple[Fleet, list[SimJob]]:
    """One TPU pool of 12.5M chips (1/`scale` of it for a reduced run) and 100 jobs of up to 1,048,576 chips."""
    pool = {"name": "tpu-12m", "accelerator": "tpu", "chip_type": "v5p", "chips": BIG_POOL_CHIPS // scale,
            "chips_per_host": SLICE, "cost_per_chip_hour": 2.0}  # fmt: skip
    spec = SyntheticSpec(
        jobs=100, span_s=days * 86_400, mix={"pretraining": 1.0}, sizes=tuple(s // scale for s in BIG_SIZES),
        median_s=12 * HOUR, sigma=1.0, max_s=20 * 86_400, seed=3,
    )  # fmt: skip
    return build_fleet([pool], name="12m-chip-pool"), list(synthetic(spec))


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


def gavel_15(repeats: int) -> str:
    """The 15-job trace: average JCT beside Gavel's, wall time the median of `repeats`."""
    jobs = gavel_jobs(DATA / "artifact_evaluation.trace", DATA / "simulation_throughputs.json")
    cluster = build_fleet(
        [{"name": t, "accelerator": "gpu", "chip_type": t, "chips": n, "chips_per_host": n, "time_sliced": True}
         for t, n in (("v100", 2), ("k80", 4))],
        name="gavel",
    )  # fmt: skip
    parts = []
    for policy in ("fifo", "max_min_fairness", "max_min_fairness_hetero"):
        runs = [Simulation(cluster, jobs, policy=policy).run() for _ in range(repeats)]
        wall = statistics.median(r.wall_s for r in runs)
        jct = runs[0].avg_jct_s or 0.0
        gavel = GAVEL_15.get(policy)
        beside = f", Gavel {gavel:,.0f} s ({jct / gavel:.2f}x)" if gavel else ""
        print(
            f"gavel 15-job replay, {policy}: avg JCT {jct:,.0f} s{beside}; "
            f"wall {wall * 1000:.1f} ms (median of {repeats}, aim <= {GAVEL_15_AIM_S * 1000:.0f} ms)"
        )
        parts.append(f"gavel15_{policy}_jct_s {jct:.0f} gavel15_{policy}_ms {wall * 1000:.1f}")
    return " ".join(parts)


GAVEL_TRACE_CLUSTERS = ("8:16:24", "36:36:36")
GAVEL_TRACE_POLICIES = (("max_min_fairness", "max_min_fairness"), ("max_min_fairness_hetero", "max_min_fairness_perf"))
GAVEL_TRACE_AIM = 0.03


def gavel_trace() -> str:
    """Gavel's physical-cluster trace with arrivals (`max_min_fairness.trace`, 96 jobs) on the clusters its
    reference rows use (V100:P100:K80, one GPU per server, time-sliced, Gavel's 6-minute rounds), each policy's
    average JCT beside the figure Gavel's own simulator printed (data/gavel/reference_jcts.csv, simulation
    throughputs). Aims: `max_min_fairness` within 3% of Gavel's LAS, `max_min_fairness_hetero` at most 3% above
    Gavel-LAS (`max_min_fairness_perf`)."""
    jobs = gavel_jobs(DATA / "max_min_fairness.trace", DATA / "simulation_throughputs.json")
    with (DATA / "reference_jcts.csv").open() as f:
        reference = {
            (row["cluster_v100_p100_k80"], row["policy"]): float(row["avg_jct_s"])
            for row in csv.DictReader(f)
            if row["trace"] == "max_min_fairness.trace" and row["throughputs"] == "simulation_throughputs.json"
        }
    parts = []
    for cluster in GAVEL_TRACE_CLUSTERS:
        counts = dict(zip(("v100", "p100", "k80"), (int(n) for n in cluster.split(":")), strict=True))
        pools = build_fleet(
            [{"name": t, "accelerator": "gpu", "chip_type": t, "chips": n, "chips_per_host": 1, "time_sliced": True}
             for t, n in counts.items() if n],
            name="gavel-trace",
        )  # fmt: skip
        for policy, theirs in GAVEL_TRACE_POLICIES:
            t0 = time.process_time()
            result = Simulation(pools, jobs, policy=policy, round_s=360.0).run()
            cpu = time.process_time() - t0
            jct, gavel = result.avg_jct_s or 0.0, reference[(cluster, theirs)]
            ratio = jct / gavel
            met = abs(ratio - 1) <= GAVEL_TRACE_AIM if policy == "max_min_fairness" else ratio <= 1 + GAVEL_TRACE_AIM
            aim = "within 3%" if policy == "max_min_fairness" else "<= 1.03"
            print(
                f"gavel max_min_fairness.trace {cluster}, {policy}: avg JCT {jct:,.0f} s, Gavel {theirs} "
                f"{gavel:,.0f} s: {ratio:.3f}x (aim {aim}{'' if met else ', missed'}); {result.finished} of "
                f"{len(jobs)} finished, utilization {result.utilization or 0:.2f}, CPU {cpu:.1f} s"
            )
            tag = cluster.replace(":", "_")
            parts.append(f"gavel_trace_{tag}_{policy}_x {ratio:.3f}")
    return " ".join(parts)


def fig8(rates: list[int], seeds: int, progress: Progress) -> str:
    """Gavel Fig. 8: 36 V100 : 36 P100 : 36 K80, continuous-single, jobs 4000-5000 measured.

    Prints one table row per rate and policy (the mean over seeds beside Gavel's figure, every seed, the
    slowest run's wall and CPU time) and returns the summary's part: each aimed figure with its aim.

    Gavel's figures are one run each, seed 0; `gavel-gen` seed 0 draws the very jobs and arrivals Gavel's
    generator draws for seed 0, so seed 0's ratio (`_seed0_x`) compares like with like and is printed beside
    the mean's. The aims are on the mean, as issue 15 states them; in overload (5 jobs/h) one seed's draw
    moves the average by 2x, and Gavel's own round loop, restated, gives 0.88x its seed-0 figure as the mean
    of its seeds 0-2 (docs/simulator.md).
    """
    import importlib

    from crossrail.sim.workload import parse_workload

    importlib.import_module("scipy.optimize")  # a process's module loading, not a run's work (docstring)

    cluster = build_fleet(
        [{"name": t, "accelerator": "gpu", "chip_type": t, "chips": 36, "chips_per_host": 1, "time_sliced": True}
         for t in ("v100", "p100", "k80")],
        name="gavel-fig8",
    )  # fmt: skip
    matrix = str(DATA / "simulation_throughputs.json")
    policies = (("max_min_fairness", 0), ("max_min_fairness_hetero", 1))
    task = progress.add_task("  Gavel Fig. 8", total=len(rates) * len(policies) * seeds)
    print(
        "| jobs/h | policy | avg JCT, mean of seeds | Gavel | ratio (aim) | seed 0 / Gavel (same jobs) | seeds "
        "| wall / CPU per run, max |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    parts = []
    for rate in rates:
        for policy, column in policies:
            gavel = FIG8_GAVEL[rate][column]
            results, cpu = [], []
            for seed in range(seeds):
                gen = parse_workload(f"gavel-gen:rate={rate}/h,window=4000-5000,seed={seed}", throughputs=matrix)
                t0 = time.process_time()
                results.append(Simulation(cluster, gen, policy=policy).run())
                cpu.append(time.process_time() - t0)
                progress.advance(task)
            jct = statistics.mean(r.avg_jct_s or 0.0 for r in results)
            wall = max(r.wall_s for r in results)
            ratio = jct / gavel
            same = (results[0].avg_jct_s or 0.0) / gavel
            aim = "<= 1.00" if column else "0.90-1.10"
            met = ratio <= 1.0 if column else abs(ratio - 1.0) <= 0.10
            each = ", ".join(f"{r.avg_jct_s or 0:,.0f}" for r in results)
            verdict = aim if met else f"{aim}, missed"
            print(
                f"| {rate} | {policy} | {jct:,.0f} s | {gavel:,.0f} s | {ratio:.2f}x ({verdict}) | {same:.3f}x "
                f"| {each} "
                f"| {wall:.1f} s / {max(cpu):.1f} s (aim <= {FIG8_AIM_S:.0f} s) |"
            )
            parts.append(
                f"fig8_{rate}h_{policy}_x {ratio:.3f} (aim {aim}) fig8_{rate}h_{policy}_seed0_x {same:.3f} "
                f"fig8_{rate}h_{policy}_wall_s {wall:.1f} "
                f"(aim <= {FIG8_AIM_S:.0f}) fig8_{rate}h_{policy}_cpu_s {max(cpu):.1f} (aim <= {FIG8_AIM_S:.0f})"
            )
    progress.remove_task(task)
    return " ".join(parts)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    cases = ["1m", "15m", "big-jobs", "gavel", "gavel-trace", "fig8"]
    ap.add_argument("--cases", nargs="+", default=cases, choices=cases)
    ap.add_argument("--days", type=float, default=30.0)
    ap.add_argument("--repeats", type=int, default=5, help="repeats of the cheap Gavel replay (median)")
    ap.add_argument(
        "--rates",
        nargs="+",
        type=int,
        default=[3, 4, 5],
        choices=sorted(FIG8_GAVEL),
        help="Fig. 8 arrival rates, jobs per hour (default: all three)",
    )
    ap.add_argument("--seeds", type=int, default=3, help="seeds per Fig. 8 rate and policy (mean; default 3)")
    ap.add_argument("--big-scale", type=int, default=1, help="shrink the big-jobs pool and jobs by this factor")
    args = ap.parse_args()
    parts = []
    with Progress(transient=True) as progress:
        if "gavel" in args.cases:
            parts.append(gavel_15(args.repeats))
        if "gavel-trace" in args.cases:
            parts.append(gavel_trace())
        if "fig8" in args.cases:
            parts.append(fig8(args.rates, args.seeds, progress))
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
        if "big-jobs" in args.cases:
            f, jobs = big_jobs(args.days, args.big_scale)
            size = "12.5M-chip pool" if args.big_scale == 1 else f"1/{args.big_scale} of the 12.5M-chip pool"
            cpu = time.process_time()
            r = run(f, jobs, f"100 jobs of up to {max(j.chips for j in jobs):,} chips, {size}", progress)
            cpu = time.process_time() - cpu
            print(line(f"big jobs ({size})", r, BIG_AIM_S) + f", CPU {cpu:.1f} s")
            parts.append(
                f"big_jobs_wall_s {r.wall_s:.1f} (aim <= {BIG_AIM_S:.0f}) big_jobs_cpu_s {cpu:.1f} "
                f"big_jobs_interruptions {r.interruptions} big_jobs_finished {r.finished}"
            )
    print(f"SUMMARY {'; '.join(parts)} (load average {os.getloadavg()[0]:.1f})")


if __name__ == "__main__":
    main()
