"""One workspace opened in this process, lazily: its store (behind the Service), fleet, policy, executors, agents."""

from __future__ import annotations

import os
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from crossrail.control.ops import workspace as ws_mod
from crossrail.core import Clock, SystemClock

if TYPE_CHECKING:  # the store (SQLAlchemy) and the spec models load only for what opens them
    from crossrail.control.agent.loop import Agent
    from crossrail.control.router import Router
    from crossrail.control.service import Service
    from crossrail.spec import Fleet, PlacementPolicy


class Local:
    """A workspace of this machine: nothing is read until something needs it (`crossrail status` opens the
    store and nothing else; `init` and `validate --offline` open nothing)."""

    def __init__(
        self,
        home: str | os.PathLike[str] | None = None,
        *,
        clock: Clock | None = None,
        cwd: Path | None = None,
        policy: str | os.PathLike[str] | None = None,
    ) -> None:
        """`policy`: a placement policy file that stands in for the workspace's (`--policy`)."""
        self.cwd = (cwd or Path.cwd()).resolve()
        self.workspace = ws_mod.find(home, self.cwd)
        self.clock = clock or SystemClock()
        self.policy_path = Path(policy) if policy else None

    @cached_property
    def policy(self) -> PlacementPolicy:
        from crossrail.spec import default_policy, load_policy

        if self.policy_path is not None:
            return load_policy(self.policy_path)
        if self.workspace.policy_path.is_file():
            return load_policy(self.workspace.policy_path)
        return default_policy()

    def load_fleet(self) -> Fleet:
        """The workspace's fleet as the file says now (the service caches it until it is changed)."""
        from crossrail.spec import load_fleet

        return load_fleet(self.workspace.check().fleet_path)

    def has_workspace(self) -> bool:
        """Whether a workspace was found (a `.crossrail/` with its fleet and policy)."""
        return self.workspace.fleet_path.is_file() and self.workspace.policy_path.is_file()

    @cached_property
    def service(self) -> Service:
        from crossrail.control.service import Service

        self.workspace.check()
        service = Service(ws_mod.open_store(self.workspace), self.load_fleet, lambda: self.policy, self.clock)
        service.workspace_dir = self.workspace.root
        return service

    @property
    def opened(self) -> bool:
        """Whether the store is open (a refusal before it opened has no store to be recorded in)."""
        return "service" in self.__dict__

    @cached_property
    def executor(self) -> Router:
        """The executor router (crossrail.control.router): each attempt runs on its pool's backend."""
        from crossrail.control.router import Router

        return Router(self.workspace.check().root, lambda: self.service.fleet, self._pool_of, run_uid=self._run_uid)

    def _pool_of(self, run: str, attempt: int) -> str | None:
        return next((a.pool for a in self.service.store.attempts(run) if a.number == attempt), None)

    def _run_uid(self, run: str) -> str | None:
        found = self.service.store.find_run(run)
        return found.uid if found is not None and found.id == run else None

    def agent(self, config: Any = None) -> Agent:
        """The reconcile agent over this workspace (crossrail.control.agent.loop.Agent); run it under `agent_lock`."""
        from crossrail.control.agent.loop import Agent

        agent = Agent(self.service, self.executor, self.workspace.root / "reports", config)
        agent.fleet_path = self.workspace.fleet_path
        agent.workspace_root = self.workspace.root
        return agent

    def close(self) -> None:
        if self.opened:
            self.service.store.close()
