"""The reconcile step's decisions that both drivers take the same way, gathered as they move out of the drivers.

The agent (crossrail.control.agent) and the simulator (crossrail.sim) each keep their own state and ask
these pure functions what to do with it, as they already ask `decisions.py` what an attempt's end means:

  1. Place: before each scheduling cycle, every pending run's pool from one plan over the whole queue
     (`scheduling.plan.plan`: the estimates' pick, held to the run's current pool by the hysteresis), set
     on its request, so the cycle tries that pool first (`placement.Placement`). `Placing` keeps each run's
     current pool between plans, as the agent's `planned` and `replaced` events do.
  2. Pipelines: which attempts of a pipeline run must stop (`halted`, with `stop_reason`), and what a part's
     end means for its run (`pipeline_state`): the parts of a pipeline start together and end with it.

What is not here yet (admission under the round-based and ordering policies, budgets' gating of the
backlog controller, resizes) is listed in docs/policies.md; bench/parity.py measures what still differs.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from crossrail.core.attempts import StopReason
from crossrail.scheduling.backlog import LEARNER
from crossrail.scheduling.choice import Choice
from crossrail.scheduling.plan import Plan, plan
from crossrail.scheduling.scoring import PlacementWork, PoolInfo
from crossrail.scheduling.timeline import Busy
from crossrail.scheduling.types import Request

# --- 1. place ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PlacementSettings:
    """The fleet's `spec.placement`: how much better another pool must be to leave a preference or a pool."""

    hysteresis: float = 0.1
    min_gain_s: float = 0.0
    prefer_margin: float = 0.25


def placed(pending: Sequence[Request], choices: Mapping[str, Choice]) -> list[Request]:
    """Each pending request with the pool its choice names and why (unchanged where it has none)."""
    return [
        dataclasses.replace(req, pool=c.pool, pool_reason=c.reason)
        if (c := choices.get(req.run)) is not None and c.pool is not None
        else req
        for req in pending
    ]


@dataclass
class Placing:
    """Each pending run's current pool between plans (a plan moves a placed run only when clearly better)."""

    settings: PlacementSettings = field(default_factory=PlacementSettings)
    current: dict[str, str] = field(default_factory=dict)

    def place(
        self,
        pending: Sequence[Request],
        works: Sequence[PlacementWork],
        running: Sequence[Busy],
        pools: Sequence[PoolInfo],
        now: float,
    ) -> tuple[list[Request], Plan]:
        """Plan `works` (one per pending request, by run) over `running` and `pools` at `now`; the requests
        placed by that plan, and the plan. Runs no longer pending are forgotten."""
        waiting = {req.run for req in pending}
        self.current = {run: pool for run, pool in self.current.items() if run in waiting}
        works = [dataclasses.replace(w, current=self.current.get(w.run, w.current)) for w in works]
        s = self.settings
        planned = plan(
            works,
            running,
            pools,
            now,
            hysteresis=s.hysteresis,
            min_gain_s=s.min_gain_s,
            prefer_margin=s.prefer_margin,
            explain_all=False,
        )
        for run, choice in planned.choices.items():
            if choice.pool is not None:
                self.current[run] = choice.pool
        return placed(pending, planned.choices), planned


# --- 2. pipelines ----------------------------------------------------------------------------------------


def halted(run_state: str, part: str | None) -> bool:
    """Whether an attempt (of `part`, None for a whole run) of a run in `run_state` must stop: the run was
    cancelled or suspended, or it is a part of a pipeline that ended (its siblings are cancelled with it)."""
    ended = part is not None and run_state in ("succeeded", "failed")
    return ended or run_state in ("cancelled", "suspended")


def stop_reason(run_state: str) -> StopReason:
    """Why an attempt of a run in `run_state` is stopped: suspended, else cancelled (a part of an ended pipeline)."""
    return "suspended" if run_state == "suspended" else "cancelled"


def pipeline_state(parts: Sequence[str], part: str, run_state: str | None) -> str | None:
    """The pipeline run's next state when its part `part` ends with the decision's `run_state` (what the end
    would mean for a run of its own): it succeeds with its learner (with its only part, when it has no
    learner), fails with a part that is not retried, and otherwise keeps running while the part is offered
    again alone."""
    if run_state == "succeeded":
        return "succeeded" if part == LEARNER or (LEARNER not in parts and len(parts) == 1) else None
    return "failed" if run_state == "failed" else None
