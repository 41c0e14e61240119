"""Trace adapters: Gavel's 10-column traces with their throughput matrix, and Philly-style job CSVs.

Formats: docs/traces.md. Both gather every malformed row with its line number before failing.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

from crossrail.errors import Problem, ProblemCode, SpecError
from crossrail.scheduling import gavel
from crossrail.sim.job import SimJob


def _read(path: str | Path) -> str:
    return gavel.read_text(path)  # bounded: a FIFO, a device or a huge file is refused, never read


def gavel_jobs(trace: str | Path, throughputs: str | Path) -> list[SimJob]:
    """One SimJob per trace line (parsed by `crossrail.scheduling.gavel`): work = total steps, throughput =
    the whole job's steps/s alone on each consolidated worker type of the matrix (types where it is 0 left out).
    """
    try:
        matrix, trace_jobs = gavel.load_throughputs(throughputs), gavel.load_trace(trace)
    except (OSError, UnicodeDecodeError) as exc:
        where = getattr(exc, "filename", None) or f"{trace} or {throughputs}"
        why = getattr(exc, "strerror", None) or str(exc)
        raise SpecError(
            [Problem(str(where), "", f"cannot read the file: {why}", fix="check the path", code=ProblemCode.NOT_FOUND)]
        ) from None
    jobs, problems = [], []
    for n, job in enumerate(trace_jobs, start=1):
        rates = {t: r for t, r in matrix.job_rates(job).items() if r > 0}
        if not rates:
            key = (job.job_type, job.scale_factor)
            problems.append(
                Problem(
                    str(trace), "", f"no worker type in {throughputs} runs {key}", line=n, code=ProblemCode.BAD_VALUE
                )
            )
            continue
        jobs.append(
            SimJob(
                name=f"gavel-{n:04d}",
                stage="experiment",
                chips=job.scale_factor,
                work_s=float(job.total_steps),
                submit_s=job.arrival_s,
                throughput=rates,
                priority="high" if job.priority_weight > 1 else "normal",
                estimate_s=job.total_steps / max(rates.values()),
            )
        )
    if problems:
        raise SpecError(problems)
    return jobs


def throughput_matrix(path: str | Path) -> gavel.Throughputs:
    """Gavel's throughput matrix from a file; SpecError naming the file when it cannot be read or parsed."""
    return gavel.parse_throughputs(_read(path), source=str(path))


# --- Philly-style CSV --------------------------------------------------------------------------

PHILLY_COLUMNS = ("timestamp", "duration", "num_gpus", "gpu_time", "cluster")


def philly_jobs(path: str | Path, *, stage: str = "experiment") -> list[SimJob]:
    """One SimJob per row with positive duration and GPUs; submit times relative to the earliest row.

    Rows with zero duration or zero GPUs (jobs that never ran) are skipped; malformed rows are errors.
    """
    source = str(path)
    rows = list(csv.DictReader(_read(path).splitlines()))
    if rows and set(PHILLY_COLUMNS) - set(rows[0]):
        missing = ", ".join(sorted(set(PHILLY_COLUMNS) - set(rows[0])))
        raise SpecError(
            [Problem(source, "", f"missing columns {missing}", line=1, fix=_PHILLY_FIX, code=ProblemCode.MISSING_FIELD)]
        )
    parsed: list[tuple[float, float, int, str]] = []
    problems = []
    for n, row in enumerate(rows, start=2):
        try:
            parsed.append(_philly_row(row))
        except (ValueError, TypeError) as exc:
            problems.append(Problem(source, "", str(exc), line=n, fix=_PHILLY_FIX, code=ProblemCode.BAD_VALUE))
    if problems:
        raise SpecError(problems)
    if not parsed:
        raise SpecError([Problem(source, "", "no jobs in the file", fix=_PHILLY_FIX, code=ProblemCode.BAD_VALUE)])
    start = min(ts for ts, *_ in parsed)
    ordered = sorted(enumerate(parsed), key=lambda item: (item[1][0], item[0]))
    return [
        SimJob(name=f"philly-{i:06d}", stage=stage, chips=gpus, work_s=duration, submit_s=ts - start, team=cluster)
        for i, (ts, duration, gpus, cluster) in ordered
        if duration > 0 and gpus > 0
    ]


_PHILLY_FIX = "rows are `YYYY-MM-DD HH:MM:SS,seconds,gpus,gpu_seconds,cluster` (docs/traces.md)"


def _philly_row(row: Mapping[str, Any]) -> tuple[float, float, int, str]:
    ts = datetime.fromisoformat(str(row["timestamp"]).strip()).timestamp()
    duration = float(row["duration"])
    gpus = int(float(row["num_gpus"]))
    if duration < 0 or gpus < 0 or not math.isfinite(duration):
        raise ValueError(f"duration and num_gpus must be >= 0 (got {row['duration']}, {row['num_gpus']})")
    return ts, duration, gpus, str(row["cluster"]).strip() or "default"
