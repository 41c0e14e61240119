"""An sbatch script for one attempt: partition and `--gres` from the pool, the image through Pyxis/enroot.

Slurm never requeues it (`--no-requeue`): as on Kubernetes, crossrail owns retries. `srun` starts one task
per node; the exit status of the script is the training command's, so the exit-code contract holds.
"""

from __future__ import annotations

import math
import shlex

from crossrail.executors.render.hardware import layout, slurm_gres
from crossrail.executors.render.workload import Workload
from crossrail.spec import Fleet, Pool


def _time(duration_s: float) -> str:
    minutes = math.ceil(duration_s / 60)
    days, rest = divmod(minutes, 24 * 60)
    return f"{days}-{rest // 60:02d}:{rest % 60:02d}:00"


def sbatch_directives(work: Workload, fleet: Fleet, pool: Pool) -> list[str]:
    """The `#SBATCH` options, in order, without the `#SBATCH ` prefix."""
    lay = layout(fleet, pool, work.chips)
    slurm = pool.slurm
    options = [
        f"--job-name={work.object_name}",
        f"--partition={slurm.partition if slurm and slurm.partition else pool.name}",
        f"--nodes={lay.pods}",
        "--ntasks-per-node=1",
    ]
    gres = slurm_gres(pool, lay)
    if gres is not None:
        options.append(f"--gres={gres}")
    elif pool.accelerator == "cpu":
        options.append(f"--cpus-per-task={lay.chips_per_pod}")
    if slurm and slurm.account:
        options.append(f"--account={slurm.account}")
    if work.duration_s is not None:
        options.append(f"--time={_time(work.duration_s)}")
    options += [
        "--no-requeue",
        f"--signal=TERM@{int(fleet.spec.preemption.grace_s)}",
        f"--output={work.object_name}-%j.log",
        f"--comment=crossrail run={work.run} attempt={work.attempt} stage={work.stage}",
    ]
    return options


def render_sbatch(work: Workload, fleet: Fleet, pool: Pool) -> str:
    """The whole script; `bash -n` accepts it and every value is shell-quoted."""
    lines = ["#!/bin/bash", *(f"#SBATCH {o}" for o in sbatch_directives(work, fleet, pool))]
    lines += ["", f"# crossrail: {work.experiment} ({work.stage}) on pool {pool.name}", "set -euo pipefail", ""]
    env = {**work.env, "TRAINING_BACKEND": str(pool.accelerator)}
    lines += [f"export {name}={shlex.quote(value)}" for name, value in sorted(env.items())]
    names = ",".join(sorted(env))
    command = " ".join(shlex.quote(part) for part in [*work.command, *work.args])
    lines += [
        "",
        "# Pyxis/enroot runs the image; the script exits with the training command's status.",
        f"exec srun --container-image={shlex.quote(work.image)} --container-env={names} {command}",
        "",
    ]
    return "\n".join(lines)
