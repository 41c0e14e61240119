"""The service's state and what all of its parts read: the fleet and policy, who sees what, a run by reference."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from crossrail.control.service import lineage
from crossrail.control.service.reach import DEFAULT_TIMEOUT_S, Reachability
from crossrail.core import Clock, RunState
from crossrail.core.access import EVERYONE, Actor, Sight, note_hidden
from crossrail.errors import NotFoundError
from crossrail.store import RunRecord, Store

# The spec, scheduling and metrics layers, and what only submit, resubmit and show use (control.parents,
# isolation, loaded), load only for the commands that use them: `status` needs none of them.
if TYPE_CHECKING:
    from crossrail.spec import Fleet, PlacementPolicy


ACTIVE_STATES = (RunState.QUEUED, RunState.ADMITTED, RunState.RUNNING, RunState.SUSPENDED)


class ServiceBase:
    """What every part of the service reads: the store, the fleet and policy, the clock, and a run by reference."""

    def __init__(
        self,
        store: Store,
        fleet: Fleet | Callable[[], Fleet],
        policy: PlacementPolicy | Callable[[], PlacementPolicy],
        clock: Clock,
    ) -> None:
        """`fleet` and `policy` may be given as loaders, read the first time a command needs them."""
        self.store = store
        self._fleet_source = fleet
        self._policy_source = policy
        self.clock = clock
        # Lookups shared by the documents of one submit call (a file may change between calls).
        self._git: dict[Path, tuple[str | None, bool, str | None]] = {}
        self._resolved: dict[Path, Path] = {}  # each cwd given, resolved once per call
        self._datasets: dict[str, str] = {}
        self._configs: dict[str, str | BaseException] = {}
        self._reached: dict[str, Reachability] = {}
        self._teams: frozenset[str] | None = None  # the store's team names, read once per submit call
        self.reach_timeout_s = DEFAULT_TIMEOUT_S
        self.workspace_dir: Path | None = None
        """The `.crossrail` directory: its configs/, data/ and checkpoints/ are what requests may name."""
        # How much and how long submit reads to digest a config or an unversioned dataset.
        self.input_limits = lineage.DEFAULT_LIMITS
        # Cores of the host local pools start worker processes on (one per data-parallel worker).
        self.host_cores = os.cpu_count() or 1

    @cached_property
    def fleet(self) -> Fleet:
        src = self._fleet_source
        return src() if callable(src) else src

    def reload_fleet(self, fleet: Fleet | None = None) -> Fleet:
        """Forget the cached fleet; the next use reads it again from its source (or takes `fleet`)."""
        self.__dict__.pop("fleet", None)
        if fleet is not None:
            self.__dict__["fleet"] = fleet
        return self.fleet

    @cached_property
    def policy(self) -> PlacementPolicy:
        src = self._policy_source
        return src() if callable(src) else src

    def sight(self, actor: Actor | None) -> Sight:
        """Whose runs `actor` sees and may name (everyone's without an actor: the workspace owner's CLI)."""
        if actor is None:
            return EVERYONE
        return actor.sight(self.fleet.shared_with(actor.team))

    def get(self, ref: str, sight: Sight = EVERYONE) -> RunRecord:
        """The run `ref` names, of those `sight` sees; NotFoundError, in the same words, for one it does not."""
        run = self.find(ref, sight)
        if run is None:
            from crossrail.spec.problems import did_you_mean  # the spec layer loads only on this error

            # suggested only from runs `sight` sees: a hidden run's name gets what a nonexistent one gets
            hint = did_you_mean(ref, self.store.run_names(teams=sight.teams))
            raise NotFoundError(f"no run or experiment named {ref!r}; {hint or '`crossrail status` lists runs'}")
        return run

    def find(self, ref: str, sight: Sight = EVERYONE) -> RunRecord | None:
        """The run `ref` names, of those `sight` sees; a run it names but may not see is None, and noted as a
        refusal for the audit log (core.access.note_hidden)."""
        run = self.store.find_run(ref, teams=sight.teams)
        if run is None and sight.teams is not None:
            hidden = self.store.find_run(ref)
            if hidden is not None:
                seen = ", ".join(sorted(sight.teams)) or "none"
                note_hidden(f"run {hidden.id} of team {hidden.team or '(none)'} is not visible to teams {seen}")
        return run


def _crossing(parent_run: str | None, parent_team: str | None, team: str | None) -> str | None:
    """How a run of `team` crossed to a parent of another team, as the audit log says it; None when it did not."""
    if parent_run is None or parent_team is None or team is None or parent_team == team:
        return None
    return f"parent {parent_run} of team {parent_team}, shared with team {team} by the fleet's spec.sharing"


def _digest(obj: Any) -> str:
    text = json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def _by(actor: Actor | None) -> dict[str, str]:
    """Who an event says acted: the token's user, or locally the OS user (a claimed $CROSSRAIL_USER apart)."""
    from crossrail.control.access import local_actor

    return (actor or local_actor()).by()
