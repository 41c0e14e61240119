"""The backlog controller in the live agent: a running pipeline's stage metrics -> resizes of its parts.

Each pass, for each pipeline run whose parts all run (and have run a whole window at their size), the agent
reads the learner's stage metrics of the last `window_s` from the store (the samples its reports left),
asks `crossrail.scheduling.backlog.control` — the function the simulator calls — and applies a resize:

1. a `resized` event (part, degree_before, degree_after, chips, reason) and `Scheduler.resized` of the
   part's allocation;
2. control.json in the run's rendezvous directory (`<checkpoint dir>/rl`) gets the part's new count, so the
   pipeline's stages know how many replicas of it to expect;
3. the part's attempt is stopped with grace (`preempted`: no retry spent, no back-off) and offered again at
   its new size; its next attempt runs that many replicas (the local executor's replicas, a JobSet's
   replicated job).

The size a part should have is the `degree_after` of its latest `resized` event (else its declared
replicas), so a pass that finds a running attempt of another size stops it again: an agent killed between
the event and the stop finishes the resize when it starts. Decisions are rate-limited: after a resize of a
run no other is decided for `window_s`, and a window counts only once every part has run through all of it,
so sizes do not flap on the metrics of the size they are leaving. Only the sampler and reward parts are
resized live (each within 1..`MOST_REPLICAS` and the free chips of its pool); the learner keeps its size.

Sampler and reward rates are read from what the learner reports: it learns from every sample it takes, and
the queues before it (backlog_samples_length, backlog_scored_length) grew by what the stages made beyond
that. The samplers' held seconds are not reported to the store, so the controller's "held back by the lag
bound" rule acts here through the policy lag only.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path
from typing import Any

from crossrail.core import Event, EventType
from crossrail.scheduling.backlog import REWARD, SAMPLER, Bounds, Resize, StageMetrics, control
from crossrail.spec import Part
from crossrail.store import AttemptRecord, RunRecord, Store
from crossrail.workloads.rl.control import read_control, write_control

__all__ = [
    "MOST_REPLICAS",
    "RESIZABLE",
    "PipelineSizing",
    "current_sizes",
    "decide",
    "lag_bound",
    "resize_event",
    "window_metrics",
    "write_sizes",
]

RESIZABLE = (SAMPLER, REWARD)
MOST_REPLICAS = 8
"""The most replicas the live controller gives a part (the pool's free chips may hold it lower)."""


@dataclass(frozen=True)
class PipelineSizing:
    """What a pass found for one pipeline: its parts' running attempts, their sizes and the sizes wanted."""

    running: dict[str, AttemptRecord]
    sizes: dict[str, int]
    wanted: dict[str, int]
    last_resize_at: float | None


def current_sizes(
    store: Store, run: RunRecord, parts: dict[str, Part], running: dict[str, AttemptRecord]
) -> PipelineSizing:
    """Each part's replicas as it runs now, and as its latest `resized` event (else its spec) wants them."""
    wanted = {name: p.replicas for name, p in parts.items()}
    last: float | None = None
    for e in store.events(run=run.id, types=[EventType.RESIZED.value]):
        part = e.data.get("part")
        if part in wanted and isinstance(e.data.get("degree_after"), int):
            wanted[part], last = int(e.data["degree_after"]), e.ts
    sizes = {name: max(att.chips // parts[name].chips, 1) for name, att in running.items() if name in parts}
    return PipelineSizing(running, sizes, wanted, last)


def window_metrics(samples: list[dict[str, Any]], since: float, until: float) -> StageMetrics | None:
    """The stage metrics of the learner's steps reported in (since, until]; None with fewer than two steps, and
    None for a window a restart spoiled: samples of two attempts, a step counter that went back (the learner
    resumed from a checkpoint), or a learner idle the whole window (it says nothing of what it could take)."""
    inside = [s for s in samples if since < float(s["ts"]) <= until and s.get("step") is not None]
    if len({s.get("attempt") for s in inside}) > 1 or _went_back(inside):
        return None
    steps: dict[int, dict[str, float]] = {}
    lag = 0.0
    for s in inside:
        if s["name"] == "policy_lag_steps":
            lag = max(lag, float(s["value"]))
        else:
            steps.setdefault(int(s["step"]), {})[str(s["name"])] = float(s["value"])
    full = [steps[k] for k in sorted(steps) if {"samples_per_second", "step_time_s"} <= steps[k].keys()]
    if len(full) < 2:
        return None
    span = until - since
    learnt = sum(m["samples_per_second"] * m["step_time_s"] for m in full)
    queued, scored = (full[-1].get(k, 0.0) - full[0].get(k, 0.0) for k in _BACKLOGS)
    idle = sum(m.get("learner_idle_seconds", 0.0) for m in full)
    if idle >= span:
        return None
    return StageMetrics(
        window_s=span,
        sampler_samples_per_second=max(learnt + queued + scored, 0.0) / span,
        reward_samples_per_second=max(learnt + scored, 0.0) / span,
        learner_samples_per_second=learnt / span,
        learner_idle_seconds=idle,
        policy_lag_steps=lag,
    )


def _went_back(samples: list[dict[str, Any]]) -> bool:
    """Whether the learner's step counter went back within the samples, in time order (a restart resumed)."""
    steps = [int(s["step"]) for s in sorted(samples, key=lambda s: float(s["ts"]))]
    return any(later < earlier for earlier, later in pairwise(steps))


_BACKLOGS = ("backlog_samples_length", "backlog_scored_length")


def decide(
    metrics: StageMetrics, plan: PipelineSizing, parts: dict[str, Part], free_chips: dict[str, int], lag: int
) -> list[Resize]:
    """backlog.control over the sampler and reward parts, each within 1..MOST_REPLICAS and its pool's room."""
    bounds = Bounds(
        max_policy_lag_steps=lag,
        replicas={name: (1, MOST_REPLICAS) for name in RESIZABLE if name in plan.sizes},
        free={name: free_chips.get(name, 0) // parts[name].chips for name in RESIZABLE if name in plan.sizes},
    )
    return control(metrics, dict(plan.sizes), bounds)


def resize_event(run: RunRecord, att: AttemptRecord, resize: Resize, part: Part, now: float) -> Event:
    data = {
        "part": resize.part,
        "degree_before": resize.old,
        "degree_after": resize.new,
        "chips": resize.new * part.chips,
        "reason": resize.reason,
    }
    return Event(EventType.RESIZED, now, run.id, att.number, data)


def rendezvous(run: RunRecord) -> Path | None:
    """The run's rendezvous directory on this machine, or None when its checkpoints are elsewhere."""
    base = run.run_checkpoint_dir
    if base.startswith("file://"):
        base = base.removeprefix("file://")
    elif "://" in base:
        return None
    return Path(base) / "rl"


_CONTROL_KEYS = {SAMPLER: "samplers", REWARD: "reward_workers"}


def write_sizes(rdv: Path, wanted: dict[str, int], reason: str) -> None:
    """control.json with the sampler and reward counts in `wanted` (a new generation only when one differs)."""
    current = read_control(rdv)
    changes = {key: wanted[part] for part, key in _CONTROL_KEYS.items() if part in wanted}
    if all(getattr(current, key) == n for key, n in changes.items()):
        return
    write_control(rdv, current.resized(reason=reason, written_by="crossrail agent", **changes))


def lag_bound(rdv: Path) -> int:
    """The pipeline's bound on policy lag, as its control.json states it."""
    return read_control(rdv).max_policy_lag_steps
