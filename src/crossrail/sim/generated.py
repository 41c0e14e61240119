"""Gavel's generated workloads: `gavel-gen:rate=5/h,window=4000-5000,seed=0[,multi_gpu=1]`.

As in Gavel's simulator (Narayanan et al., OSDI 2020, Figs. 8 and 9): each job's type is drawn uniformly
from the job templates of the throughput matrix; its run time alone on a V100 is 60 * 10^U(1.5, 3) s with
probability 0.8, else 60 * 10^U(3, 4) s, and its work is that time at its V100 rate. Jobs take one GPU
(continuous-single), or with `multi_gpu=1` 1, 2, 4 or 8 GPUs with probability 0.7, 0.1, 0.15 and 0.05
(a multi-GPU job's type is drawn again until it is one Gavel runs distributed). Arrivals are Poisson at
`rate` and keep coming, without end, until every job of the window has finished; the window's jobs
(numbered from 0 in arrival order, `window=A-B` is jobs A..B-1) are the ones measured.

The draws are Gavel's own, in its order (`utils.generate_job`, `Scheduler._sample_arrival_time_delta`):
job after job from Python's `random.Random(seed + 2)` (a scale-factor draw, the duration, the type from
Gavel's job table in its order), the gaps from `random.Random(seed + 3)`, the first job at 0. So `seed=N`
is the very workload Gavel's simulator draws with seed N: in the overloaded regime one seed's draw of long
jobs moves the average JCT by 2x, and only the same draw compares a policy with Gavel's figure.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from crossrail.errors import Problem, ProblemCode, SpecError
from crossrail.scheduling.gavel import Throughputs
from crossrail.sim.job import SimJob

WHERE = "--workload gavel-gen:"
REFERENCE = "v100"
"""The worker type a generated job's run time is drawn for (Gavel's `reference_worker_type`)."""
SHORT = (0.8, 1.5, 3.0)
"""(probability, low, high): log10 of the run time in minutes for short jobs; long ones are U(3, 4)."""
LONG = (3.0, 4.0)
GPUS = ((0.7, 1), (0.8, 2), (0.95, 4), (1.0, 8))
"""Cumulative probability -> GPUs of a multi-GPU job (Gavel Fig. 9; `utils._generate_scale_factor`)."""
JOB_TABLE = (
    *((f"ResNet-18 (batch size {b})", True) for b in (16, 32, 64, 128, 256)),
    *((f"ResNet-50 (batch size {b})", True) for b in (16, 32, 64, 128)),
    *((f"Transformer (batch size {b})", True) for b in (16, 32, 64, 128, 256)),
    *((f"LM (batch size {b})", True) for b in (5, 10, 20, 40, 80)),
    *((f"Recommendation (batch size {b})", False) for b in (512, 1024, 2048, 4096, 8192)),
    ("A3C", False),
    ("CycleGAN", False),
)
"""Gavel's job table (`scheduler/job_table.py`) in its order, which its draws index: (model, distributed)."""


@dataclass(frozen=True)
class GavelGenSpec:
    rate_per_s: float
    window: tuple[int, int]
    seed: int = 0
    multi_gpu: bool = False

    @classmethod
    def parse(cls, text: str, *, seed: int = 0) -> GavelGenSpec:
        """`rate=5/h,window=4000-5000,seed=0,multi_gpu=1`; SpecError naming every bad key."""
        rate, window, multi, problems = None, None, False, []
        for item in filter(None, (p.strip() for p in text.split(","))):
            key, _, raw = item.partition("=")
            if key not in _FIX:
                problems.append(
                    Problem(
                        WHERE,
                        key,
                        f"unknown key {key!r}",
                        fix=f"keys are {', '.join(_FIX)}",
                        code=ProblemCode.UNKNOWN_FIELD,
                    )
                )
                continue
            try:
                if key == "rate":
                    rate = _rate(raw)
                elif key == "window":
                    window = _window(raw)
                elif key == "seed":
                    seed = int(raw)
                else:
                    multi = _flag(raw)
            except ValueError as exc:
                problems.append(
                    Problem(WHERE, key, f"cannot read {raw!r}: {exc}", fix=_FIX[key], code=ProblemCode.BAD_VALUE)
                )
        named = {p.path for p in problems}
        for key, value in (("rate", rate), ("window", window)):
            if value is None and key not in named:
                problems.append(
                    Problem(WHERE, key, f"{key} is required", fix=_FIX[key], code=ProblemCode.MISSING_FIELD)
                )
        if problems or rate is None or window is None:
            raise SpecError(problems)
        return cls(rate, window, seed, multi)


_FIX = {
    "rate": "write rate=5/h (jobs per hour; /s, /m and /d also work)",
    "window": "write window=4000-5000: the jobs measured, numbered from 0 in arrival order",
    "seed": "write seed=0",
    "multi_gpu": "write multi_gpu=1 (1, 2, 4 or 8 GPUs) or multi_gpu=0 (one GPU each)",
}
_PER = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86_400.0}


def _window(raw: str) -> tuple[int, int]:
    first, _, last = raw.partition("-")
    window = (int(first), int(last))
    if not 0 <= window[0] < window[1]:
        raise ValueError("needs 0 <= A < B")
    return window


def _flag(raw: str) -> bool:
    if raw not in {"0", "1"}:
        raise ValueError("must be 0 or 1")
    return raw == "1"


def _rate(raw: str) -> float:
    count, _, unit = raw.partition("/")
    per = _PER.get(unit or "h")
    if per is None:
        raise ValueError(f"unknown unit {unit!r}")
    value = float(count)
    if not math.isfinite(value) or value <= 0:
        raise ValueError("must be > 0")
    return value / per


@runtime_checkable
class JobStream(Protocol):
    """Jobs generated as they arrive, without end; the simulation ends when the `measured` ones have finished."""

    measured: frozenset[str]

    def shapes(self) -> list[SimJob]:
        """One job of every shape the stream can yield (checked against the fleet before the start)."""
        ...

    def __iter__(self) -> Iterator[SimJob]: ...


class GavelGen:
    """An endless, seeded stream of Gavel-style jobs; `measured` names the window's jobs."""

    def __init__(self, spec: GavelGenSpec, matrix: Throughputs) -> None:
        self.spec = spec
        self.types = [t for t in matrix.worker_types if not t.endswith("_unconsolidated")]
        if REFERENCE not in self.types:
            fix = f"use a matrix with {REFERENCE} rates (data/gavel/simulation_throughputs.json)"
            raise SpecError(
                [
                    Problem(
                        WHERE,
                        "throughputs",
                        f"the matrix has no {REFERENCE} worker type",
                        fix=fix,
                        code=ProblemCode.BAD_VALUE,
                    )
                ]
            )
        self.matrix = matrix
        known = sorted(k for k, r in matrix.rates[REFERENCE].items() if k[1] == 1 and r > 0)
        ordered = [(name, 1) for name, _ in JOB_TABLE if (name, 1) in known]
        self.templates = ordered + [k for k in known if k not in ordered]
        """The one-GPU jobs the matrix has, in Gavel's job table order (others after it, by name)."""
        self.distributed = {name for name, spread in JOB_TABLE if spread} | {
            k[0] for k in known if k[0] not in dict(JOB_TABLE)
        }
        if not self.templates:
            raise SpecError(
                [
                    Problem(
                        WHERE,
                        "throughputs",
                        f"the matrix has no one-GPU job on {REFERENCE}",
                        code=ProblemCode.BAD_VALUE,
                    )
                ]
            )
        first, last = spec.window
        self.measured = frozenset(_name(i) for i in range(first, last))
        self._rates: dict[tuple[str, int], tuple[dict[str, float], float]] = {}
        """(template, GPUs) -> its rate on each worker type that runs it, and the fastest of them."""

    def shapes(self) -> list[SimJob]:
        """One job of every (template, GPUs) the stream can draw, for checks before a simulation starts."""
        gpus = sorted({g for _, g in GPUS}) if self.spec.multi_gpu else [1]
        keys = {self._scaled(t, g) for t, _ in self.templates for g in gpus}
        return [self._job(f"shape-{i}", key, 60.0, 0.0) for i, key in enumerate(sorted(keys))]

    def __iter__(self) -> Iterator[SimJob]:
        draws, gaps = random.Random(self.spec.seed + 2), random.Random(self.spec.seed + 3)
        at, n = 0.0, 0
        while True:
            template, gpus, run_s = self._draw(draws)
            yield self._job(_name(n), self._scaled(template, gpus), run_s, at)
            n += 1
            at += -math.log(1.0 - gaps.random()) / self.spec.rate_per_s

    def _draw(self, rng: random.Random) -> tuple[str, int, float]:
        """One job as Gavel's `generate_job` draws it: scale factor, duration, then type (redrawn until a
        multi-GPU job's type runs distributed)."""
        draw = rng.uniform(0, 1)
        gpus = 1 if not self.spec.multi_gpu or draw < GPUS[0][0] else next(g for p, g in GPUS[1:] if draw <= p)
        low, high = LONG if rng.random() >= SHORT[0] else SHORT[1:]
        run_s = 60.0 * 10 ** rng.uniform(low, high)
        while True:
            template = rng.choice(self.templates)[0]
            if gpus == 1 or template in self.distributed:
                return template, gpus, run_s

    def _scaled(self, template: str, gpus: int) -> tuple[str, int]:
        return (template, gpus) if self.matrix.rate(template, gpus, REFERENCE) > 0 else (template, 1)

    def _job(self, name: str, key: tuple[str, int], run_s: float, at: float) -> SimJob:
        known = self._rates.get(key)
        if known is None:  # jobs of one kind share one (read-only) row: a stream draws thousands of each
            rates = {t: r for t in self.types if (r := self.matrix.rate(key[0], key[1], t)) > 0}
            known = self._rates[key] = (rates, max(rates.values()))
        rates, fastest = known
        steps = run_s * rates[REFERENCE]
        return SimJob(
            name=name,
            stage="experiment",
            chips=key[1],
            work_s=steps,
            submit_s=at,
            throughput=rates,
            estimate_s=steps / fastest,
        )


def _name(i: int) -> str:
    return f"gen-{i:06d}"
