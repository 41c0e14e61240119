"""Failure models for the simulator: per-chip, per-host and correlated (host, rack, slice) interruptions.

No chip is an object. A run of `chips` chips on `hosts` hosts is exposed to independent failure sources,
each a count of identical components with one MTBF:

    chips                      n = chips,                 one chip lost   -> its host goes to repair
    hosts                      n = hosts,                 one host lost
    correlated (scope, M, k)   n = ceil(hosts / k) domains, one domain lost -> min(k, hosts) hosts at once

Every source shares one distribution: exponential, or Weibull with shape `weibull_shape` (exponential is
Weibull with shape 1). A component of MTBF M has Weibull scale  lambda = M / Gamma(1 + 1/k), and cumulative
hazard (t/lambda)^k; the run's cumulative hazard is the sum over sources,

    H(t) = t^k * sum_i n_i * lambda_i^(-k) = (t / lambda_run)^k,   lambda_run = (sum_i n_i lambda_i^-k)^(-1/k)

so the run's time to interruption is itself Weibull(k, lambda_run), its MTBF is lambda_run * Gamma(1 + 1/k)
(for the exponential: 1 / (chips/chip_mtbf + hosts/host_mtbf + sum domains/domain_mtbf)), and the rate grows
with the run's size. Because all hazards share the shape, the source of an interruption is independent of
when it happens: source i with probability n_i lambda_i^-k / sum_j n_j lambda_j^-k.

Age is the time since the run (re)started computing: a restart resets it, so interruption gaps are i.i.d.
Weibull (the renewal view that Schroeder & Gibson fit to HPC failure logs with shapes 0.7-0.8). Given age a,
the residual time X has  P(X > x) = exp(-((a + x)/lambda)^k + (a/lambda)^k), sampled by inversion:

    x = lambda * ((a/lambda)^k + E)^(1/k) - a,   E ~ Exp(1)

Each sample draws exactly two numbers from the generator (E, then the source), so a seeded run is
reproducible however the caller interleaves other draws.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np

from crossrail.errors import Problem, ProblemCode, SpecError

Scope = Literal["host", "rack", "slice"]
Cause = Literal["chip", "host", "rack", "slice"]
Distribution = Literal["exponential", "weibull"]

_SOURCE = "failures"


@dataclass(frozen=True)
class CorrelatedFailure:
    """A failure domain that takes down all of its `hosts` hosts at once (a host's board, a rack, a slice)."""

    scope: Scope
    mtbf_s: float
    hosts: int = 1


@dataclass(frozen=True)
class FailureSpec:
    """Which components fail, how often, with which distribution, and how long a failed host is away."""

    chip_mtbf_s: float | None = None
    host_mtbf_s: float | None = None
    distribution: Distribution = "exponential"
    weibull_shape: float = 1.0
    correlated: tuple[CorrelatedFailure, ...] = ()
    repair_s: float = 0.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "correlated", tuple(self.correlated))  # a list is accepted and frozen
        problems = _problems(self)
        if problems:
            raise SpecError(problems)

    @property
    def shape(self) -> float:
        """The Weibull shape every source uses (1.0 for the exponential)."""
        return self.weibull_shape if self.distribution == "weibull" else 1.0

    @property
    def enabled(self) -> bool:
        return self.chip_mtbf_s is not None or self.host_mtbf_s is not None or bool(self.correlated)


def _number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _positive(path: str, value: float | None, fix: str) -> list[Problem]:
    if value is None or (_number(value) and value > 0):
        return []
    return [Problem(_SOURCE, path, f"must be a finite number > 0 (got {value!r})", fix=fix, code=ProblemCode.BAD_VALUE)]


def _problems(spec: FailureSpec) -> list[Problem]:
    found = _positive("chip_mtbf_s", spec.chip_mtbf_s, "give seconds, or None for no chip failures")
    found += _positive("host_mtbf_s", spec.host_mtbf_s, "give seconds, or None for no host failures")
    if spec.distribution not in ("exponential", "weibull"):
        found.append(
            Problem(
                _SOURCE,
                "distribution",
                f"unknown distribution {spec.distribution!r}",
                fix="use 'exponential' or 'weibull'",
                code=ProblemCode.BAD_VALUE,
            )
        )
    found += _positive("weibull_shape", spec.weibull_shape, "a shape below 1 is infant mortality, above 1 wear-out")
    if not (_number(spec.repair_s) and spec.repair_s >= 0):
        found.append(
            Problem(
                _SOURCE, "repair_s", f"must be a finite number >= 0 (got {spec.repair_s!r})", code=ProblemCode.BAD_VALUE
            )
        )
    for i, c in enumerate(spec.correlated):
        where = f"correlated[{i}]"
        if not isinstance(c, CorrelatedFailure):
            found.append(
                Problem(
                    _SOURCE,
                    where,
                    f"must be a CorrelatedFailure (got {c!r})",
                    fix="CorrelatedFailure(scope='rack', mtbf_s=..., hosts=...)",
                    code=ProblemCode.WRONG_TYPE,
                )
            )
            continue
        if c.scope not in ("host", "rack", "slice"):
            found.append(
                Problem(
                    _SOURCE,
                    f"{where}.scope",
                    f"unknown scope {c.scope!r}",
                    fix="use 'host', 'rack' or 'slice'",
                    code=ProblemCode.BAD_VALUE,
                )
            )
        found += _positive(f"{where}.mtbf_s", c.mtbf_s, "the MTBF of one whole domain, in seconds")
        if not isinstance(c.hosts, int) or c.hosts < 1:
            found.append(
                Problem(
                    _SOURCE,
                    f"{where}.hosts",
                    f"must be an integer >= 1 (got {c.hosts})",
                    fix="the number of hosts one failure of this domain takes down",
                    code=ProblemCode.BAD_VALUE,
                )
            )
    return found


@dataclass(frozen=True)
class Interruption:
    """One failure hitting a run (or a pool): when, what failed, how many hosts it took away, for how long."""

    after_s: float
    cause: Cause
    hosts_lost: int
    repair_s: float


class FailureModel:
    """Samples interruptions of runs and pools from a `FailureSpec` with one seeded generator."""

    def __init__(self, spec: FailureSpec, rng: np.random.Generator) -> None:
        self.spec = spec
        self.rng = rng
        self._k = spec.shape
        self._gamma = math.gamma(1.0 + 1.0 / self._k)

    # -- the run-level distribution ------------------------------------------------------------------
    def _sources(self, chips: int, hosts: int) -> list[tuple[Cause, float, int]]:
        """(cause, hazard weight n * lambda^-k, hosts lost) for every source that can hit this run."""
        _check_size(chips, hosts)
        spec, k = self.spec, self._k
        out: list[tuple[Cause, float, int]] = []
        if spec.chip_mtbf_s is not None and chips > 0:
            out.append(("chip", chips * (spec.chip_mtbf_s / self._gamma) ** (-k), 1 if hosts else 0))
        if spec.host_mtbf_s is not None and hosts > 0:
            out.append(("host", hosts * (spec.host_mtbf_s / self._gamma) ** (-k), 1))
        for c in spec.correlated:
            if hosts > 0:
                domains = -(-hosts // c.hosts)
                out.append((c.scope, domains * (c.mtbf_s / self._gamma) ** (-k), min(c.hosts, hosts)))
        return out

    def run_scale_s(self, chips: int, hosts: int) -> float:
        """Weibull scale of the run's time to interruption (inf when nothing can fail)."""
        total = sum(w for _, w, _ in self._sources(chips, hosts))
        return math.inf if total == 0 else total ** (-1.0 / self._k)

    def run_mtbf_s(self, chips: int, hosts: int) -> float:
        """Mean time from a (re)start to the run's next interruption; inf when nothing can fail."""
        return self.run_scale_s(chips, hosts) * self._gamma

    def run_rate_per_s(self, chips: int, hosts: int) -> float:
        """Interruptions per second of a run this size (1 / run MTBF)."""
        return 1.0 / self.run_mtbf_s(chips, hosts)

    # -- sampling --------------------------------------------------------------------------------------
    def next_interruption_s(self, chips: int, hosts: int, age_s: float = 0.0) -> float:
        """Seconds from now until the run's next interruption, given it has run `age_s` since its (re)start."""
        return self.sample(chips, hosts, age_s).after_s

    def sample(self, chips: int, hosts: int, age_s: float = 0.0) -> Interruption:
        """The run's next interruption: its delay from now (given its age), its cause, the hosts it takes."""
        if not (math.isfinite(age_s) and age_s >= 0):
            raise ValueError(f"age_s must be a finite number >= 0 (got {age_s})")
        sources = self._sources(chips, hosts)
        e, u = self.rng.exponential(), self.rng.random()
        if not sources:
            return Interruption(math.inf, "chip", 0, self.spec.repair_s)
        total = sum(w for _, w, _ in sources)
        lam = total ** (-1.0 / self._k)
        after = self._residual(lam, age_s, e)
        cause, hosts_lost = _pick(sources, u * total)
        return Interruption(max(after, 0.0), cause, hosts_lost, self.spec.repair_s)

    def sample_many(self, n: int, chips: int, hosts: int, age_s: float = 0.0) -> np.ndarray:
        """`n` independent delays at once (for statistics and capacity sweeps), same law as `sample`."""
        sources = self._sources(chips, hosts)
        if not sources:
            return np.full(n, math.inf)
        lam = sum(w for _, w, _ in sources) ** (-1.0 / self._k)
        e = self.rng.exponential(size=n)
        if self._k == 1.0:
            memoryless: np.ndarray = lam * e  # the age does not matter
            return memoryless
        delays: np.ndarray = np.maximum(lam * ((age_s / lam) ** self._k + e) ** (1.0 / self._k) - age_s, 0.0)
        return delays

    def _residual(self, lam: float, age_s: float, e: float) -> float:
        """Inverse of the conditional survival: the residual life for a unit-exponential draw `e`."""
        if self._k == 1.0:
            return float(lam * e)  # memoryless, and exact however old the run is
        return float(lam * ((age_s / lam) ** self._k + e) ** (1.0 / self._k) - age_s)

    def pool_failure(self, chips: int, hosts: int) -> Interruption:
        """The next failure among a pool's `hosts` hosts (`chips` chips): which hosts leave, for `repair_s`.

        A pool is a renewal process: each failure draws afresh (age 0). The caller picks which hosts are
        hit (uniformly over the pool's hosts, so a busy run is hit with probability its share of hosts).
        """
        return self.sample(chips, hosts, 0.0)


def _pick(sources: list[tuple[Cause, float, int]], x: float) -> tuple[Cause, int]:
    acc = 0.0
    for cause, weight, lost in sources:
        acc += weight
        if x < acc:
            return cause, lost
    cause, _, lost = sources[-1]
    return cause, lost


def _check_size(chips: int, hosts: int) -> None:
    if chips < 0 or hosts < 0:
        raise ValueError(f"chips and hosts must be >= 0 (got chips={chips}, hosts={hosts})")
