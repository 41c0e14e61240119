"""Simulated workloads: a synthetic generator, job files, and the `--workload` dispatcher over every kind.

The job record, `SimJob`, is crossrail.sim.job's (imported from here too); traces, generated streams and
experiments build it without this module.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from crossrail.core.priority import PRIORITIES
from crossrail.errors import Problem, ProblemCode, SpecError
from crossrail.metrics import QualityTarget
from crossrail.scheduling.decisions import RetryPolicy
from crossrail.sim.job import SimJob as SimJob  # noqa: PLC0414  # re-exported: callers import it here
from crossrail.sim.quality import QualityCurve
from crossrail.spec import Retries, Stage
from crossrail.spec.loader import MAX_FILE_BYTES, parse_value, read_bounded

if TYPE_CHECKING:
    from crossrail.sim.generated import GavelGen


# --- synthetic ---------------------------------------------------------------------------------

DEFAULT_MIX = {"pretraining": 0.05, "post_training": 0.2, "eval": 0.25, "experiment": 0.5}


@dataclass(frozen=True)
class SyntheticSpec:
    """Poisson arrivals over `span_s`; stage mix; sizes drawn from `sizes` by `size_weights`; log-normal work."""

    jobs: int = 100
    span_s: float = 86_400.0
    mix: Mapping[str, float] = field(default_factory=lambda: dict(DEFAULT_MIX))
    sizes: tuple[int, ...] = (1, 2, 4, 8)
    size_weights: tuple[float, ...] | None = None
    median_s: float = 3600.0
    sigma: float = 1.0
    max_s: float | None = None
    seed: int = 0
    teams: int = 0

    @classmethod
    def parse(cls, text: str) -> SyntheticSpec:
        """`jobs=1000,span=7d,mix=pretraining:1/experiment:4,sizes=8/64/512,median=2h,sigma=1.2,seed=3`."""
        from crossrail.core import parse_duration

        values: dict[str, Any] = {}
        problems: list[Problem] = []
        for item in filter(None, text.split(",")):
            key, _, raw = item.partition("=")
            try:
                if key in {"jobs", "seed", "teams"}:
                    values[key] = int(raw)
                elif key in ("span", "median", "max"):
                    values[f"{key}_s"] = parse_duration(raw)
                elif key == "sigma":
                    values[key] = float(raw)
                elif key == "mix":
                    values[key] = {s: float(w) for s, w in (p.split(":") for p in raw.split("/"))}
                elif key == "sizes":
                    sizes = [p.partition(":") for p in raw.split("/")]
                    values["sizes"] = tuple(int(s) for s, _, _ in sizes)
                    if any(w for _, _, w in sizes):
                        values["size_weights"] = tuple(float(w or 1) for _, _, w in sizes)
                else:
                    fix = "keys are jobs, span, mix, sizes, median, sigma, max, seed, teams"
                    problems.append(
                        Problem(
                            "--workload synthetic:",
                            key,
                            f"unknown key {key!r}",
                            fix=fix,
                            code=ProblemCode.UNKNOWN_FIELD,
                        )
                    )
            except (ValueError, TypeError) as exc:
                problems.append(
                    Problem("--workload synthetic:", key, f"cannot read {raw!r}: {exc}", code=ProblemCode.BAD_VALUE)
                )
        if problems:
            raise SpecError(problems)
        spec = cls(**values)
        spec.check()
        return spec

    def check(self) -> None:
        problems = []
        where = "--workload synthetic:"
        if self.jobs <= 0 or self.span_s <= 0 or self.median_s <= 0 or self.sigma < 0:
            problems.append(
                Problem(
                    where,
                    "jobs/span/median/sigma",
                    "jobs, span and median must be > 0, sigma >= 0",
                    code=ProblemCode.BAD_VALUE,
                )
            )
        for stage in self.mix:
            if stage not in {s.value for s in Stage}:
                fix = f"stages are {', '.join(s.value for s in Stage)}"
                problems.append(
                    Problem(where, f"mix.{stage}", f"unknown stage {stage!r}", fix=fix, code=ProblemCode.BAD_VALUE)
                )
        if not self.sizes or min(self.sizes) <= 0 or (self.size_weights and len(self.size_weights) != len(self.sizes)):
            problems.append(
                Problem(
                    where,
                    "sizes",
                    "sizes must be positive chip counts, one weight per size",
                    code=ProblemCode.BAD_VALUE,
                )
            )
        if problems:
            raise SpecError(problems)


def synthetic(spec: SyntheticSpec) -> list[SimJob]:
    """Jobs drawn from `spec` with its seed: the same spec always yields the same jobs."""
    rng = np.random.default_rng(spec.seed)
    n = spec.jobs
    gaps = rng.exponential(spec.span_s / n, size=n)
    arrivals = np.cumsum(gaps) - gaps[0]
    stages = sorted(spec.mix)
    weights = np.array([spec.mix[s] for s in stages], dtype=float)
    stage_of = rng.choice(len(stages), size=n, p=weights / weights.sum())
    size_p = None
    if spec.size_weights:
        w = np.array(spec.size_weights, dtype=float)
        size_p = w / w.sum()
    size_of = rng.choice(len(spec.sizes), size=n, p=size_p)
    work = rng.lognormal(math.log(spec.median_s), spec.sigma, size=n)
    if spec.max_s is not None:
        work = np.minimum(work, spec.max_s)
    team_of = rng.integers(0, max(spec.teams, 1), size=n)
    return [
        SimJob(
            name=f"job-{i:06d}",
            stage=stages[int(stage_of[i])],
            chips=int(spec.sizes[int(size_of[i])]),
            work_s=float(work[i]),
            submit_s=float(arrivals[i]),
            team=f"team-{int(team_of[i])}" if spec.teams else None,
        )
        for i in range(n)
    ]


# --- job files ---------------------------------------------------------------------------------

JOB_KEYS = set(SimJob.__dataclass_fields__)


def load_jobs(path: str | Path) -> list[SimJob]:
    """A YAML or JSON list of jobs (`{jobs: [...]}` or a bare list) with SimJob's field names."""
    source = str(path)
    text = read_bounded(path, MAX_FILE_BYTES)  # what parse_value takes; a FIFO or device is never opened to read
    data, _ = parse_value(text, source, what="workload")
    if isinstance(data, dict) and data.get("kind") == "Experiment":
        data = [data]  # one Experiment document: a workload of one job
    rows = data.get("jobs") if isinstance(data, dict) else data
    if not isinstance(rows, list):
        raise SpecError(
            [
                Problem(
                    source,
                    "jobs",
                    "expected a list of jobs",
                    fix="write `jobs: [{name: ..., ...}]`",
                    code=ProblemCode.WRONG_TYPE,
                )
            ]
        )
    return jobs_from_rows(rows, source, base=Path(path).parent)


def jobs_from_rows(rows: Sequence[Any], source: str, *, base: Path | None = None) -> list[SimJob]:
    """SimJobs from dicts (or Experiments, `crossrail.sim.experiments`, whose files are found from `base`),
    gathering every problem with its row before failing."""
    from crossrail.sim.experiments import experiment_job, is_experiment_row

    jobs, problems = [], []
    for i, row in enumerate(rows):
        if not isinstance(row, dict):
            problems.append(Problem(source, f"jobs[{i}]", "a job must be a mapping", code=ProblemCode.WRONG_TYPE))
            continue
        if is_experiment_row(row):
            try:
                jobs.append(experiment_job(row, source, f"jobs[{i}]", base))
            except SpecError as exc:
                problems += exc.problems
            continue
        unknown = sorted(set(row) - JOB_KEYS)
        if unknown:
            fix = f"fields are {', '.join(sorted(JOB_KEYS))}"
            problems.append(
                Problem(
                    source,
                    f"jobs[{i}]",
                    f"unknown fields {', '.join(unknown)}",
                    fix=fix,
                    code=ProblemCode.UNKNOWN_FIELD,
                )
            )
            continue
        try:
            job = _row_job({"name": f"job-{i}", "stage": "experiment", **row})
        except (TypeError, ValueError) as exc:
            problems.append(Problem(source, f"jobs[{i}]", str(exc), code=ProblemCode.BAD_VALUE))
            continue
        jobs.append(job)
    names = [j.name for j in jobs]
    if len(set(names)) != len(names):
        problems.append(
            Problem(source, "jobs", "job names repeat", fix="give every job its own name", code=ProblemCode.BAD_VALUE)
        )
    if problems:
        raise SpecError(problems)
    return jobs


def _row_job(fields: dict[str, Any]) -> SimJob:
    """One job file row as a SimJob; ValueError or TypeError saying what is wrong."""
    if isinstance(fields.get("accelerators"), list):
        fields["accelerators"] = tuple(fields["accelerators"])
    if isinstance(fields.get("quality"), dict):
        fields["quality"] = QualityCurve.of(fields["quality"])
    elif fields.get("quality") is not None:
        raise ValueError("quality must be a mapping {l_inf, a, alpha, samples_per_s, eval_every}")
    if isinstance(fields.get("retries"), dict):  # spec.retries, checked as a spec's are
        fields["retries"] = RetryPolicy.from_spec(Retries.model_validate(fields["retries"]).model_dump())
    if fields.get("target") is not None and QualityTarget.of(fields["target"]) is None:
        raise ValueError("target must be {metric: eval_loss, op: '<=', value: 2.1} (op: <=, <, >=, > or ==)")
    job = SimJob(**fields)
    if job.chips <= 0 or job.work_s <= 0 or job.submit_s < 0 or not math.isfinite(job.work_s):
        raise ValueError("chips and work_s must be > 0 and submit_s >= 0")
    if job.max_chips is not None and job.max_chips < job.chips:
        raise ValueError("max_chips must be at least chips (the most an elastic job grows to)")
    if job.priority not in PRIORITIES:
        raise ValueError(f"priority must be one of {', '.join(PRIORITIES)}")
    Stage(job.stage)
    return job


def parse_workload(text: str, *, throughputs: str | None = None, seed: int = 0) -> list[SimJob] | GavelGen:
    """`FILE`, `gavel:TRACE`, `gavel-gen:k=v,...`, `philly:CSV` or `synthetic:k=v,...` (docs/simulator.md).

    Every kind is a list of jobs but `gavel-gen`, an endless stream (`crossrail.sim.generated`).
    """
    from crossrail.sim import traces
    from crossrail.sim.generated import GavelGen, GavelGenSpec

    kind, _, rest = text.partition(":")
    if kind == "gavel-gen":
        if throughputs is None:
            fix = "pass --throughputs data/gavel/simulation_throughputs.json"
            raise SpecError(
                [
                    Problem(
                        text,
                        "",
                        "generated Gavel jobs need its throughput matrix",
                        fix=fix,
                        code=ProblemCode.MISSING_FIELD,
                    )
                ]
            )
        return GavelGen(GavelGenSpec.parse(rest, seed=seed), traces.throughput_matrix(throughputs))
    if kind == "gavel" and rest:
        if throughputs is None:
            fix = "pass --throughputs data/gavel/simulation_throughputs.json"
            raise SpecError(
                [
                    Problem(
                        rest, "", "a Gavel trace needs its throughput matrix", fix=fix, code=ProblemCode.MISSING_FIELD
                    )
                ]
            )
        return traces.gavel_jobs(rest, throughputs)
    if kind == "philly" and rest:
        return traces.philly_jobs(rest)
    if kind == "synthetic":
        spec = SyntheticSpec.parse(rest)
        if "seed=" not in rest:
            spec = SyntheticSpec(**{**spec.__dict__, "seed": seed})
        return synthetic(spec)
    return load_jobs(text)
