"""Gavel's published data: its job trace format and its measured throughput matrix (see data/SOURCES.md).

`parse_trace` and `parse_throughputs` are pure (text or JSON passed in); `load_trace` and
`load_throughputs` are thin file readers around them, the only file access in scheduling/.

Trace: tab-separated, no header, ten columns: job_type, command, working_directory, num_steps_arg,
needs_data_dir (0/1), total_steps, scale_factor (GPUs), priority_weight, SLO (-1 = none), arrival_time (s).
Matrix: `{worker_type: {"('<job_type>', <gpus>)": {"null": steps_per_s, "<other job key>": [a, b]}}}`;
only the job-alone ("null") rates are kept; 0 means the job cannot run on that worker type.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from crossrail.errors import Problem, ProblemCode, SpecError

COLUMNS = (
    "job_type",
    "command",
    "working_directory",
    "num_steps_arg",
    "needs_data_dir",
    "total_steps",
    "scale_factor",
    "priority_weight",
    "SLO",
    "arrival_time",
)
_KEY = re.compile(r"^\('(?P<job>.+)', (?P<gpus>\d+)\)$")


@dataclass(frozen=True)
class GavelJob:
    job_type: str
    command: str
    working_directory: str
    num_steps_arg: str
    needs_data_dir: bool
    total_steps: int
    scale_factor: int
    """GPUs the job runs on (all at once)."""
    priority_weight: float
    slo: float | None
    arrival_s: float


@dataclass(frozen=True)
class Throughputs:
    """Steps per second of a whole job alone, by worker type and (job_type, GPUs)."""

    rates: Mapping[str, Mapping[tuple[str, int], float]]

    @property
    def worker_types(self) -> list[str]:
        return sorted(self.rates)

    def rate(self, job_type: str, gpus: int, worker_type: str) -> float:
        return self.rates.get(worker_type, {}).get((job_type, gpus), 0.0)

    def job_rates(self, job: GavelJob, worker_types: list[str] | None = None) -> dict[str, float]:
        """The job's rate on each worker type (default: every consolidated one); missing pairs are 0."""
        types = worker_types or [t for t in self.worker_types if not t.endswith("_unconsolidated")]
        return {t: self.rate(job.job_type, job.scale_factor, t) for t in types}


def parse_job_key(text: str) -> tuple[str, int]:
    """`"('ResNet-18 (batch size 64)', 1)"` -> ("ResNet-18 (batch size 64)", 1); ValueError otherwise."""
    found = _KEY.match(text)
    if found is None:
        raise ValueError(f"{text!r} is not a job key like \"('ResNet-18 (batch size 64)', 1)\"")
    return found["job"], int(found["gpus"])


def parse_trace(text: str, *, source: str = "trace") -> list[GavelJob]:
    """Every job of a Gavel trace, in file order; SpecError listing each bad line and column otherwise."""
    jobs, problems = [], []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        cells = line.split("\t")
        if len(cells) != len(COLUMNS):
            fix = f"write {len(COLUMNS)} tab-separated columns: {', '.join(COLUMNS)}"
            problems.append(
                Problem(source, "row", f"has {len(cells)} columns", number, fix, code=ProblemCode.BAD_VALUE)
            )
            continue
        try:
            jobs.append(_job(cells))
        except _BadCell as exc:
            problems.append(Problem(source, exc.column, exc.message, number, None, code=ProblemCode.BAD_VALUE))
    if problems:
        raise SpecError(problems)
    return jobs


class _BadCell(ValueError):
    def __init__(self, column: str, message: str) -> None:
        super().__init__(f"{column}: {message}")
        self.column, self.message = column, message


def _job(cells: list[str]) -> GavelJob:
    steps, gpus = _number(cells, 5, int), _number(cells, 6, int)
    for i, value in ((5, steps), (6, gpus)):
        if value <= 0:
            raise _BadCell(COLUMNS[i], f"must be > 0 (got {value})")
    slo = _number(cells, 8, float)
    return GavelJob(
        job_type=cells[0],
        command=cells[1],
        working_directory=cells[2],
        num_steps_arg=cells[3],
        needs_data_dir=_number(cells, 4, int) == 1,
        total_steps=steps,
        scale_factor=gpus,
        priority_weight=_number(cells, 7, float),
        slo=None if slo < 0 else slo,
        arrival_s=_number(cells, 9, float),
    )


def _number(cells: list[str], i: int, kind: type[int] | type[float]) -> Any:
    try:
        return kind(cells[i])
    except ValueError:
        noun = "a whole number" if kind is int else "a number"
        raise _BadCell(COLUMNS[i], f"column {i + 1} must be {noun} (got {cells[i]!r})") from None


def parse_throughputs(data: str | Mapping[str, Any], *, source: str = "throughputs") -> Throughputs:
    """The job-alone rates of a Gavel throughput matrix (JSON text or the decoded mapping)."""
    try:
        decoded = json.loads(data) if isinstance(data, str) else data
    except json.JSONDecodeError as exc:
        raise SpecError(
            [Problem(source, "", f"is not JSON: {exc.msg}", exc.lineno, None, code=ProblemCode.BAD_VALUE)]
        ) from None
    if not isinstance(decoded, Mapping):
        raise SpecError(
            [Problem(source, "", "must be a mapping of worker type to jobs", None, None, code=ProblemCode.WRONG_TYPE)]
        )
    rates: dict[str, dict[tuple[str, int], float]] = {}
    problems = []
    for worker_type, jobs in decoded.items():
        if not isinstance(jobs, Mapping):
            problems.append(
                Problem(source, worker_type, "must map job keys to rates", None, None, code=ProblemCode.WRONG_TYPE)
            )
            continue
        row = rates[worker_type] = {}
        for key, entry in jobs.items():
            try:
                alone = entry.get("null") if isinstance(entry, Mapping) else None
                if not isinstance(alone, int | float) or alone < 0:
                    raise ValueError(f"needs a 'null' rate >= 0 (got {alone!r})")
                row[parse_job_key(key)] = float(alone)
            except ValueError as exc:
                problems.append(
                    Problem(source, f"{worker_type}.{key}", str(exc), None, None, code=ProblemCode.BAD_VALUE)
                )
    if problems:
        raise SpecError(problems)
    return Throughputs(rates)


TRACE_MAX_BYTES = 64 * 1024 * 1024
"""The largest trace or matrix file read: Gavel's are about 1 MB; the bound keeps a device or FIFO out."""


def read_text(path: str | Path) -> str:
    """A trace file's text through the bounded reader (a regular file, at most TRACE_MAX_BYTES, UTF-8)."""
    from crossrail.spec.loader import read_bounded

    raw = read_bounded(path, TRACE_MAX_BYTES)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        message = f"not UTF-8: byte 0x{raw[exc.start]:02x} at byte offset {exc.start}"
        raise SpecError(
            [Problem(str(path), "", message, fix="save the file as UTF-8", code=ProblemCode.BAD_VALUE)]
        ) from None


def load_trace(path: str | Path) -> list[GavelJob]:
    return parse_trace(read_text(path), source=str(path))


def load_throughputs(path: str | Path) -> Throughputs:
    return parse_throughputs(read_text(path), source=str(path))
