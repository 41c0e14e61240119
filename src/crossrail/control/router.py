"""The executor router: one Executor over several backends, each attempt run by its pool's `backend`.

`FACTORIES` is the registration point: backend name -> a function that builds that backend's executor
from a `BackendContext`. A backend is built the first time a pool of the fleet names it; one whose executor
cannot be built (its extra is not installed, or its module does not exist yet) fails with one line saying
which pools need it and how to fix that. `stop`, `resize`, `logs` and `forget` go to the executor holding the
attempt: the one that reported it in `observe()`, else the backend of the pool the store recorded for it,
so the routing survives an agent restart.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from crossrail.control.executor import AttemptStatus, Capabilities, Executor, LaunchRequest, StopReason
from crossrail.core import Clock, SystemClock
from crossrail.errors import ExecutionError, UsageError


@dataclass(frozen=True)
class BackendContext:
    """What a backend's factory gets: the workspace root (each backend keeps records in its own folder under
    it), the fleet, read anew on each call, so pool settings edited in the fleet file apply to new launches,
    and the clock every executor is given (wall time by default: executors time real processes); `run_uid`
    gives the uid the store holds for a run id (None: a run from before uids, or unknown), so an executor
    whose engine is shared with other stores can tell their objects of the same run id from its own."""

    root: Path
    fleet: Callable[[], Any]
    clock: Clock = field(default_factory=SystemClock)
    run_uid: Callable[[str], str | None] | None = None

    def pools(self, backend: str) -> list[Any]:
        return [p for p in self.fleet().pools if str(p.backend) == backend]


ExecutorFactory = Callable[[BackendContext], Executor]


def _local(ctx: BackendContext) -> Executor:
    from crossrail.executors.local import LocalExecutor

    return LocalExecutor(ctx.root / "attempts", clock=ctx.clock)


def _ray(ctx: BackendContext) -> Executor:
    from crossrail.executors.ray import RayExecutor, RayPool

    def pools() -> dict[str, RayPool]:
        found = {}
        for p in ctx.pools("ray"):
            settings = p.ray
            found[p.name] = RayPool(
                name=p.name,
                address=settings.address,
                chip_resource=settings.chip_resource or p.chip_type,
                chips_per_host=p.chips_per_host,
                resources=dict(settings.resources),
                label_selector=dict(p.node_labels if settings.label_selector is None else settings.label_selector),
                namespace=settings.namespace,
                placement_timeout_s=settings.placement_timeout_s,
                placement_strategy=settings.placement_strategy,
            )
        return found

    return RayExecutor(ctx.root / "ray", pools, clock=ctx.clock)


def _kubernetes(ctx: BackendContext) -> Executor:
    module = importlib.import_module("crossrail.executors.kubernetes")
    return module.KubernetesExecutor(ctx.fleet(), clock=ctx.clock, run_uid=ctx.run_uid)  # type: ignore[no-any-return]


FACTORIES: dict[str, ExecutorFactory] = {"local": _local, "ray": _ray, "kubernetes": _kubernetes}
"""Backend name -> factory. A new backend registers here (or in the mapping given to `Router`)."""


class Router:
    """Satisfies crossrail.control.executor.Executor by dispatching to one executor per backend."""

    def __init__(
        self,
        root: Path,
        fleet: Callable[[], Any],
        pool_of: Callable[[str, int], str | None],
        factories: Mapping[str, ExecutorFactory] | None = None,
        clock: Clock | None = None,
        *,
        run_uid: Callable[[str], str | None] | None = None,
    ) -> None:
        self.context = BackendContext(Path(root), fleet, clock or SystemClock(), run_uid)
        self.fleet = fleet
        self.pool_of = pool_of
        self.factories = dict(FACTORIES if factories is None else factories)
        self.executors: dict[str, Executor] = {}
        self._holder: dict[tuple[str, int], str] = {}

    # --- what the agent asks of it -----------------------------------------------------------------

    @property
    def capabilities(self) -> Capabilities:
        """The backends the fleet's pools use, each with its executor built (or one clear error); it sees
        processes only if every one of them does, and can withdraw where any one can (per attempt, below)."""
        used = sorted({str(p.backend) for p in self.fleet().pools})
        caps = [self.executor(backend).capabilities for backend in used]
        return Capabilities(
            backends=tuple(used),
            sees_processes=all(c.sees_processes for c in caps),
            can_withdraw=any(c.can_withdraw for c in caps),
        )

    def executor(self, backend: str) -> Executor:
        """The executor of `backend`, built on first use."""
        if backend not in self.executors:
            factory = self.factories.get(backend)
            if factory is None:
                raise UsageError(self._unavailable(backend, f"no executor is registered for backend {backend!r}"))
            try:
                self.executors[backend] = factory(self.context)
            except ImportError as exc:
                raise ExecutionError(self._unavailable(backend, f"its executor cannot be imported ({exc})")) from exc
        return self.executors[backend]

    # --- the protocol ------------------------------------------------------------------------------

    def launch(self, request: LaunchRequest) -> AttemptStatus:
        backend = self._backend_of_pool(request.pool) or "local"
        status = self.executor(backend).launch(request)
        self._holder[(request.run, request.attempt)] = backend
        return status

    def launch_parts(self, requests: Sequence[LaunchRequest]) -> list[AttemptStatus]:
        """The parts of one pipeline admitted together, by backend: those of a backend whose executor launches
        parts together (Kubernetes: one JobSet) as one, every other part alone; statuses in the order given."""
        by_backend: dict[str, list[int]] = {}
        for i, request in enumerate(requests):
            by_backend.setdefault(self._backend_of_pool(request.pool) or "local", []).append(i)
        found: dict[int, AttemptStatus] = {}
        for backend, indices in by_backend.items():
            executor, group = self.executor(backend), [requests[i] for i in indices]
            together = getattr(executor, "launch_parts", None)
            statuses = together(group) if together is not None else [executor.launch(r) for r in group]
            for i, status in zip(indices, statuses, strict=True):
                self._holder[(requests[i].run, requests[i].attempt)] = backend
                found[i] = status
        return [found[i] for i in range(len(requests))]

    def observe(self) -> list[AttemptStatus]:
        """Every backend's attempts; each backend the fleet uses is asked, so a restart re-adopts its attempts."""
        self.capabilities  # noqa: B018 (builds the executors the fleet needs)
        found: list[AttemptStatus] = []
        for backend, executor in list(self.executors.items()):
            for status in executor.observe():
                self._holder[(status.run, status.attempt)] = backend
                found.append(status)
        return sorted(found, key=lambda s: (s.run, s.attempt))

    def stop(self, run: str, attempt: int, grace_s: float, reason: StopReason) -> None:
        for executor in self._holders(run, attempt):
            executor.stop(run, attempt, grace_s, reason)

    def resize(self, run: str, attempt: int, chips: int) -> bool:
        return any(executor.resize(run, attempt, chips) for executor in self._holders(run, attempt))

    def logs(self, run: str, attempt: int) -> str:
        for executor in self._holders(run, attempt):
            text = executor.logs(run, attempt)
            if text:
                return text
        return ""

    def withdraw(self, run: str, attempt: int) -> bool:
        """Take back an attempt its engine has not started or given quota to (Kueue); False where it cannot."""
        return any(
            executor.withdraw(run, attempt)
            for executor in self._holders(run, attempt)
            if executor.capabilities.can_withdraw
        )

    def forget(self, run: str, attempt: int) -> None:
        for executor in self._holders(run, attempt):
            executor.forget(run, attempt)
        self._holder.pop((run, attempt), None)

    # --- routing -----------------------------------------------------------------------------------

    def _holders(self, run: str, attempt: int) -> Iterable[Executor]:
        """The executor that holds the attempt; when none is known, the local one (a pool since removed)."""
        backend = self._holder.get((run, attempt))
        if backend is None:
            pool = self.pool_of(run, attempt)
            backend = (self._backend_of_pool(pool) if pool else None) or "local"
        return [self.executor(backend)]

    def _backend_of_pool(self, pool: str) -> str | None:
        for p in self.fleet().pools:
            if p.name == pool:
                return str(p.backend)
        return None

    def _unavailable(self, backend: str, why: str) -> str:
        pools = [p.name for p in self.fleet().pools if str(p.backend) == backend]
        named = f"pool{'s' if len(pools) != 1 else ''} {', '.join(pools)}" if pools else "no pool"
        return (
            f"{named} of the fleet use{'s' if len(pools) == 1 else ''} backend: {backend}, but {why}; "
            f"install crossrail[{_EXTRAS.get(backend, backend)}] or give the pools another backend "
            f"({', '.join(b for b in self.factories if b != backend)})"
        )


_EXTRAS = {"kubernetes": "k8s", "ray": "ray"}
