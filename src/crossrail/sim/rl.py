"""A simulated RL pipeline: sampler, reward and learner parts on mixed pools, with the backlog controller.

    result = RLSimulation(fleet, RLPipeline(...), RLRates(...), controller=True).run(600.0)

The pipeline is one run with parts, admitted by the scheduling core exactly as the agent's is (linked
allocations, each part on its own pool under `mixed`). Its stages then move samples as a fluid on the
engine's virtual clock, every `tick_s`:

- samplers produce `rate(chip type) x chips` samples/s, tagged with the learner's version; the lag bound
  holds them back once `(version + max_policy_lag_steps + 1) x batch` samples exist, so every batch step
  `b` uses samples made at version `b - max_policy_lag_steps` or later (0: synchronous);
- the reward stage scores samples first in, first out, at its own rate;
- the learner takes a batch when one is scored and trains for `batch / (rate x chips)` seconds, idle
  otherwise.

A part may crash (`crashes`: part -> time): its end is decided by the agent's end decision, and only
that part is offered again (`scheduling.pipeline.retry_part`, away from the pool it was lost on) after
`restart_s`, while the others keep running; a part runs only on pools whose chip type has a rate for it.

Every `window_s` the window's stage metrics go to `crossrail.scheduling.backlog.control` (when the
controller is on); each resize goes through `Scheduler.resized` for the part's allocation, and only as far
as its pool has free chips, and is recorded as a `resized` event with part, old and new size and reason.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections import deque
from dataclasses import dataclass, field

from crossrail.core import Event, EventType
from crossrail.errors import PlacementError
from crossrail.scheduling import Request, Scheduler, SchedulerConfig
from crossrail.scheduling.backlog import LEARNER, REWARD, SAMPLER, Bounds, Resize, StageMetrics, control
from crossrail.scheduling.pipeline import retry_part
from crossrail.scheduling.types import Admission, PartRequest, part_key
from crossrail.sim.engine import Engine
from crossrail.sim.retries import SimRetries
from crossrail.spec import Fleet

__all__ = ["RLPart", "RLPipeline", "RLRates", "RLResult", "RLSimulation"]

RUN = "rl"
EPS = 1e-6
"""Samples below this are rounding, not work."""


@dataclass(frozen=True)
class RLPart:
    """A part's replicas of `chips` chips each, the range the controller may size it in, and a hint."""

    chips: int
    replicas: int
    least: int = 1
    most: int = 64
    prefer: str | None = None


@dataclass(frozen=True)
class RLPipeline:
    parts: dict[str, RLPart]
    batch: int = 64
    max_policy_lag_steps: int = 2
    prefer: str = "mixed"


@dataclass(frozen=True)
class RLRates:
    """Samples per second per chip of each stage, by chip type (a chip type not listed: rate 0)."""

    sampler: dict[str, float]
    reward: dict[str, float]
    learner: dict[str, float]

    def of(self, part: str, chip_type: str) -> float:
        table = {SAMPLER: self.sampler, REWARD: self.reward, LEARNER: self.learner}[part]
        return table.get(chip_type, 0.0)


@dataclass
class RLResult:
    duration_s: float
    learner_idle_fraction: float
    samples_per_second: float
    """Samples the learner trained on per second."""
    max_policy_lag_steps: int
    steps: int
    pools: dict[str, str]
    """part -> the pool it ran on."""
    sizes: dict[str, int]
    """part -> replicas at the end."""
    events: list[Event] = field(default_factory=list)

    @property
    def resizes(self) -> list[Event]:
        return [e for e in self.events if e.type == EventType.RESIZED]


@dataclass
class _Window:
    produced: float = 0.0
    scored: float = 0.0
    trained: float = 0.0
    idle_s: float = 0.0
    held_s: float = 0.0
    lag: int = 0


class RLSimulation:
    def __init__(
        self,
        fleet: Fleet,
        pipeline: RLPipeline,
        rates: RLRates,
        *,
        controller: bool = True,
        window_s: float = 30.0,
        tick_s: float = 0.1,
        crashes: dict[str, float] | None = None,
        restart_s: float = 30.0,
    ) -> None:
        self.fleet, self.pipeline, self.rates = fleet, pipeline, rates
        self.controller, self.window_s, self.tick_s = controller, window_s, tick_s
        self.crashes, self.restart_s = crashes or {}, restart_s
        self.retries = SimRetries()
        """Each part's ends, decided as the agent decides them (crossrail.scheduling.decisions)."""
        self.attempts = dict.fromkeys(pipeline.parts, 1)
        self.down: set[str] = set()
        """Parts whose attempt crashed and whose retry has not started."""
        self.engine = Engine()
        self.sched = Scheduler.from_fleet(fleet, SchedulerConfig.from_fleet(fleet))
        self.sizes = {name: p.replicas for name, p in pipeline.parts.items()}
        self.pools: dict[str, str] = {}
        self.events: list[Event] = []
        self._seq = itertools.count(1)
        self.version = 0
        self.made = 0.0
        self.to_score: deque[list[float]] = deque()
        self.to_train: deque[list[float]] = deque()
        self.step_left_s = 0.0
        self.totals = _Window()
        self.window = _Window()

    # --- admission ---------------------------------------------------------------------------------

    def request(self) -> Request:
        """The pipeline's request at its parts' current sizes, each part only on pools it has a rate on."""
        parts = tuple(
            PartRequest(name, p.chips * self.sizes[name], self.sizes[name], p.prefer, self._runs_on(name))
            for name, p in self.pipeline.parts.items()
        )
        chips = sum(p.chips for p in parts)
        return Request(RUN, "rl", chips, prefer=self.pipeline.prefer, parts=parts)

    def _runs_on(self, part: str) -> tuple[str, ...]:
        return tuple(p.name for p in self.fleet.pools if self.rates.of(part, p.chip_type) > 0)

    def admit(self) -> None:
        """Admit the pipeline through the scheduling core: every part on its pool, or PlacementError."""
        self.sched.submitted(self.request())
        result = self.sched.cycle(self.engine.now())
        if not result.admitted:
            raise PlacementError(f"the RL pipeline cannot start on this fleet: {result.blocked.get(RUN, 'no room')}")
        self._started(result.admitted)

    def _started(self, admitted: list[Admission]) -> None:
        for a in admitted:
            assert a.part is not None  # a run with parts is admitted part by part
            self.sched.started(a.run, a.pool, a.chips, self.engine.now())
            self.pools[a.part] = a.pool
            self.down.discard(a.part)
            pool = self.fleet.pool(a.pool)  # each part's hardware, as the agent's placed event records a run's
            data = {
                "part": a.part,
                "pool": a.pool,
                "accelerator": str(pool.accelerator),
                "chip_type": pool.chip_type,
                "chips": a.chips,
                "reason": a.reason,
            }
            self._emit(EventType.STARTED, data, self.attempts[a.part])

    # --- a part crashes and is retried alone -------------------------------------------------------

    def _crash(self, part: str) -> None:
        """The part's attempt is lost: the shared end decision says whether and when it goes again."""
        now, key, pool = self.engine.now(), part_key(RUN, part), self.pools[part]
        self.sched.finished(key, now)
        self.down.add(part)
        if part == LEARNER:
            self.step_left_s = 0.0  # the batch in training is lost with it; the learner resumes from its last step
        number = self.attempts[part]
        decision = self.retries.ended(key, number, pool, "interrupted", now)
        assert decision.event is not None  # the simulator neither cancels nor suspends
        self._emit(decision.event, {"part": part, **decision.data(pool)}, number)
        if decision.retry:
            self._emit(EventType.RETRIED, {"part": part, "next_attempt": number + 1, "reason": decision.detail})
            self.engine.after(decision.backoff_s + self.restart_s, functools.partial(self._retry, part))

    def _retry(self, part: str) -> None:
        """Offer only `part` again, away from the pool it was lost on; the other parts keep running."""
        now = self.engine.now()
        avoid = self.retries.avoid_pool(part_key(RUN, part))
        self.sched.submitted(retry_part(self.request(), part, queued_at=now, avoid_pool=avoid))
        result = self.sched.cycle(now)
        if result.admitted:
            self.attempts[part] += 1
            self._started(result.admitted)
        else:
            self.engine.after(self.window_s, functools.partial(self._retry, part))

    def rate(self, part: str) -> float:
        """Samples/s the part processes at its current size on its pool."""
        if part in self.down:
            return 0.0
        if part not in self.pools:
            return math.inf  # a pipeline without this stage: it never holds samples back
        pool = self.fleet.pool(self.pools[part])
        chips = self.sizes[part] * self.pipeline.parts[part].chips
        return self.rates.of(part, pool.chip_type) * pool.relative_speed * chips

    # --- running -----------------------------------------------------------------------------------

    def run(self, duration_s: float) -> RLResult:
        self.admit()
        for part, at in self.crashes.items():
            self.engine.schedule(at, functools.partial(self._crash, part))
        self.engine.after(self.tick_s, self._tick)
        self.engine.after(self.window_s, self._control)
        while self.engine.peek() <= duration_s:
            self.engine.step()
        t = self.totals
        return RLResult(
            duration_s,
            t.idle_s / duration_s,
            t.trained / duration_s,
            t.lag,
            self.version,
            dict(self.pools),
            dict(self.sizes),
            self.events,
        )

    def _tick(self) -> None:
        dt = self.tick_s
        self._sample(dt)
        self._score(dt)
        self._train(dt)
        self.engine.after(dt, self._tick)

    def _sample(self, dt: float) -> None:
        can = self.rate(SAMPLER) * dt
        allowed = max((self.version + self.pipeline.max_policy_lag_steps + 1) * self.pipeline.batch - self.made, 0.0)
        made = min(can, allowed)
        if made < can:
            self._add("held_s", dt * (1 - made / can) * self.sizes[SAMPLER])  # replica-seconds
        if made > EPS:
            self.made += made
            self.to_score.append([float(self.version), made])
            self._add("produced", made)

    def _score(self, dt: float) -> None:
        scored = _move(self.to_score, self.to_train, self.rate(REWARD) * dt)
        self._add("scored", scored)

    def _train(self, dt: float) -> None:
        if LEARNER in self.down or (self.step_left_s <= 0 and not self._take_batch()):
            self._add("idle_s", dt)
            return
        self.step_left_s -= dt
        if self.step_left_s <= EPS:
            self.step_left_s = 0.0
            self.version += 1
            self._add("trained", self.pipeline.batch)

    def _take_batch(self) -> bool:
        """Start a learner step on the oldest scored batch, when one is there."""
        batch = self.pipeline.batch
        if sum(amount for _, amount in self.to_train) < batch - EPS:
            return False
        taken: deque[list[float]] = deque()
        _move(self.to_train, taken, batch)
        lag = self.version - int(min(v for v, amount in taken if amount > EPS))
        self.window.lag, self.totals.lag = max(self.window.lag, lag), max(self.totals.lag, lag)
        self.step_left_s = batch / self.rate(LEARNER)
        return True

    def _add(self, name: str, amount: float) -> None:
        for w in (self.window, self.totals):
            setattr(w, name, getattr(w, name) + amount)

    # --- the controller ----------------------------------------------------------------------------

    def _control(self) -> None:
        w, span = self.window, self.window_s
        metrics = StageMetrics(
            window_s=span,
            sampler_samples_per_second=w.produced / span,
            reward_samples_per_second=w.scored / span,
            learner_samples_per_second=w.trained / span,
            learner_idle_seconds=w.idle_s,
            policy_lag_steps=w.lag,
            sampler_held_seconds=w.held_s,
        )
        self.window = _Window()
        if self.controller and not self.down:  # a window with a part down says nothing about its size
            for resize in control(metrics, dict(self.sizes), self._bounds()):
                self._resize(resize)
        self.engine.after(span, self._control)

    def _bounds(self) -> Bounds:
        free = {p.name: p.free for p in self.sched.pool_status()}
        parts = self.pipeline.parts
        return Bounds(
            max_policy_lag_steps=self.pipeline.max_policy_lag_steps,
            replicas={name: (p.least, p.most) for name, p in parts.items()},
            free={name: free[self.pools[name]] // parts[name].chips for name in self.pools},
        )

    def _resize(self, resize: Resize) -> None:
        """Apply one resize through the scheduler and record it."""
        chips = resize.new * self.pipeline.parts[resize.part].chips
        self.sched.resized(part_key(RUN, resize.part), chips, self.engine.now())
        self.sizes[resize.part] = resize.new
        data = {
            "part": resize.part,
            "degree_before": resize.old,
            "degree_after": resize.new,
            "chips": chips,
            "reason": resize.reason,
        }
        self._emit(EventType.RESIZED, data, self.attempts[resize.part])

    def _emit(self, kind: EventType, data: dict[str, object], attempt: int | None = None) -> None:
        self.events.append(Event(kind, self.engine.now(), RUN, attempt, dict(data), next(self._seq)))


def _move(source: deque[list[float]], target: deque[list[float]], amount: float) -> float:
    """Move up to `amount` samples first in, first out, keeping each chunk's policy version; how many moved."""
    moved = 0.0
    while source and moved < amount - EPS:
        chunk = source[0]
        take = min(chunk[1], amount - moved)
        target.append([chunk[0], take])
        chunk[1] -= take
        moved += take
        if chunk[1] <= EPS:  # a sliver left by rounding belongs to this move, not to a later batch
            moved += chunk[1]
            target[-1][1] += chunk[1]
            source.popleft()
    return moved
