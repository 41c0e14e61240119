"""Regenerate data/gavel/reference_jcts.csv by running Gavel's own simulator on its physical-cluster traces.

Gavel (github.com/stanford-futuredata/gavel, MIT) is not a crossrail dependency: run this with a separate
interpreter that has Gavel's scheduler requirements (see data/gavel/README.md), for example

    python3 -m venv /tmp/gavel-venv
    /tmp/gavel-venv/bin/pip install cvxpy ecos numpy scipy scikit-learn matrix_completion psutil grpcio grpcio-tools
    git clone https://github.com/stanford-futuredata/gavel /tmp/gavel && git -C /tmp/gavel checkout c4fa400
    (cd /tmp/gavel/scheduler && PATH=/tmp/gavel-venv/bin:$PATH make rpc_stubs)
    python3 data/gavel/make_reference_jcts.py --gavel /tmp/gavel/scheduler --python /tmp/gavel-venv/bin/python

Each row is one run of `scripts/drivers/simulate_scheduler_with_trace.py`; the figures are the lines it prints
("Average job completion time", "Total duration") and the per-job lines it prints after "Job completion times:".
"""

import argparse
import csv
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

GAVEL_COMMIT = "c4fa40097339e9608ab71fd64c8bdea96a5e4a4c"
GPUS_PER_SERVER = "1:1:1"  # the driver's default: every server holds one GPU of its type
ROUND_S = 360  # the driver's default --time_per_iteration, also what EXPERIMENTS.md passes
SEED = 0
SOLVER = "ECOS"
POLICIES = ("max_min_fairness", "max_min_fairness_perf")  # Gavel's LAS and its heterogeneity-aware form


class Run(NamedTuple):
    trace: str  # under Gavel's scheduler/
    cluster: str  # v100:p100:k80 GPUs, the driver's -c
    throughputs: str  # under Gavel's scheduler/
    why: str  # where this cluster size comes from


RUNS = (
    Run(
        "traces/physical_cluster/max_min_fairness.trace",
        "8:16:24",
        "simulation_throughputs.json",
        "the OSDI'20 paper's 48-GPU physical cluster (8 V100, 16 P100, 24 K80); no script names one",
    ),
    Run(
        "traces/physical_cluster/max_min_fairness.trace",
        "8:16:24",
        "physical_cluster_throughputs.json",
        "the OSDI'20 paper's 48-GPU physical cluster (8 V100, 16 P100, 24 K80); no script names one",
    ),
    Run(
        "traces/physical_cluster/max_min_fairness.trace",
        "36:36:36",
        "simulation_throughputs.json",
        "EXPERIMENTS.md's simulated cluster (36 V100, 36 P100, 36 K80)",
    ),
    Run(
        "traces/physical_cluster/artifact_evaluation.trace",
        "2:0:4",
        "simulation_throughputs.json",
        "EXPERIMENTS.md: 2 V100 + 4 K80 for this trace",
    ),
    Run(
        "traces/physical_cluster/artifact_evaluation.trace",
        "2:0:4",
        "physical_cluster_throughputs.json",
        "EXPERIMENTS.md: 2 V100 + 4 K80 for this trace",
    ),
)

COLUMNS = (
    "trace",
    "arrivals",
    "policy",
    "cluster_v100_p100_k80",
    "gpus_per_server",
    "round_s",
    "seed",
    "solver",
    "throughputs",
    "jobs",
    "jobs_completed",
    "avg_jct_s",
    "makespan_s",
    "cluster_why",
    "gavel_commit",
    "command",
)


def command(trace: str, policy: str, cluster: str, throughputs: str) -> list[str]:
    return [
        "python",
        "scripts/drivers/simulate_scheduler_with_trace.py",
        "-t",
        trace,
        "-p",
        policy,
        "--throughputs_file",
        throughputs,
        "-c",
        cluster,
        "--num_gpus_per_server",
        GPUS_PER_SERVER,
        "--seed",
        str(SEED),
        "--solver",
        SOLVER,
        "--time_per_iteration",
        str(ROUND_S),
    ]


def parse_output(text: str) -> tuple[float, float, int]:
    """Average JCT, makespan and the number of jobs with a completion time, as Gavel prints them."""
    avg = re.search(r"^Average job completion time: ([\d.]+) seconds", text, re.M)
    total = re.search(r"^Total duration: ([\d.]+) seconds", text, re.M)
    if avg is None or total is None:
        sys.exit(f"make_reference_jcts: Gavel printed no average JCT or total duration:\n{text[-2000:]}")
    completed = len(re.findall(r"^Job \d+: [\d.]+$", text, re.M))
    return float(avg.group(1)), float(total.group(1)), completed


def simulate(gavel: Path, python: str, spec: Run, policy: str) -> dict:
    trace, cluster, throughputs, why = spec
    argv = command(trace, policy, cluster, throughputs)
    done = subprocess.run([python, *argv[1:]], cwd=gavel, capture_output=True, text=True, check=True)
    avg_s, makespan_s, completed = parse_output(done.stdout + done.stderr)
    lines = (gavel / trace).read_text().splitlines()
    arrivals = any(float(line.split("\t")[9]) > 0 for line in lines)
    return {
        "trace": Path(trace).name,
        "arrivals": "yes" if arrivals else "no (all at t=0)",
        "policy": policy,
        "cluster_v100_p100_k80": cluster,
        "gpus_per_server": GPUS_PER_SERVER,
        "round_s": ROUND_S,
        "seed": SEED,
        "solver": SOLVER,
        "throughputs": throughputs,
        "jobs": len(lines),
        "jobs_completed": completed,
        "avg_jct_s": f"{avg_s:.3f}",
        "makespan_s": f"{makespan_s:.3f}",
        "cluster_why": why,
        "gavel_commit": GAVEL_COMMIT,
        "command": shlex.join(argv),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gavel", type=Path, required=True, help="Gavel's scheduler/ directory")
    parser.add_argument("--python", default="python3", help="interpreter with Gavel's requirements")
    parser.add_argument("--out", type=Path, default=Path(__file__).with_name("reference_jcts.csv"))
    args = parser.parse_args()
    rows = [simulate(args.gavel, args.python, spec, policy) for spec in RUNS for policy in POLICIES]
    with args.out.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
    for row in rows:
        print(
            f"{row['trace']:28} {row['cluster_v100_p100_k80']:8} {row['throughputs']:34} {row['policy']:22} "
            f"avg JCT {row['avg_jct_s']:>10} s  makespan {row['makespan_s']:>10} s  "
            f"{row['jobs_completed']}/{row['jobs']} jobs"
        )


if __name__ == "__main__":
    main()
