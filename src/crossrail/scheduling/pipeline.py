"""Pipeline runs: parts placed as linked allocations, admitted together or not at all; a part retried alone.

A run with `Request.parts` (an RL run's sampler, reward and learner) is one queue entry. The cycle fits
its parts one after the other on a trial of its snapshot, largest first; when the pipeline prefers
`mixed`, each part tries the pools no earlier part took before those that hold one, so the parts land
on different pools wherever they fit. One part without room undoes the trial: none is admitted. Each
admitted part is an allocation of its own under `part_key(run, part)`, so it ends, is retried and is
resized alone; `retry_part` is the request that puts one part back in the queue.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

from crossrail.scheduling.admission import GangFit, fit, why_not
from crossrail.scheduling.placement import Ranked
from crossrail.scheduling.snapshot import Snapshot
from crossrail.scheduling.types import Allocation, PartRequest, Request, part_key
from crossrail.spec import Part

__all__ = ["PartFit", "fit_parts", "part_request", "parts_of", "retry_part"]


@dataclass(frozen=True)
class PartFit:
    """Where one part of an admitted pipeline goes, and how its pool ranked (for the reason)."""

    request: Request
    part: str
    fit: GangFit
    kind: str


def part_request(pipeline: Request, part: PartRequest) -> Request:
    """The request of one part: its chips and workers, the pipeline's queue, team and priority."""
    prefer = part.prefer or pipeline.prefer
    return replace(
        pipeline,
        run=part_key(pipeline.run, part.name),
        chips=part.chips,
        min_chips=None,
        max_chips=None,
        workers=part.workers,
        prefer=prefer,
        runs_on=part.runs_on if part.runs_on is not None else pipeline.runs_on,
        prefer_source=f" by part {part.name}" if part.prefer else pipeline.prefer_source,
        pool=None,
        parts=(),
        part=part.name,
    )


def retry_part(pipeline: Request, part: str, *, queued_at: float, avoid_pool: str | None = None) -> Request:
    """The request that retries only `part` of `pipeline` (the other parts keep running)."""
    for declared in pipeline.parts:
        if declared.name == part:
            return replace(part_request(pipeline, declared), queued_at=queued_at, avoid_pool=avoid_pool)
    known = ", ".join(p.name for p in pipeline.parts) or "none"
    raise KeyError(f"run {pipeline.run} has no part {part!r}; its parts are {known}")


def fit_parts(
    snap: Snapshot, pipeline: Request, ranked: Callable[[Request], Ranked], grace_s: float
) -> tuple[list[PartFit], str]:
    """Every part's fit, or none and why: tried on a trial of `snap` that is always restored."""
    mark = snap.mark()
    taken: set[str] = set()
    fits: list[PartFit] = []
    try:
        for part in sorted(pipeline.parts, key=lambda p: (-p.chips, p.name)):
            req = part_request(pipeline, part)
            pools = _spread(ranked(req), taken) if pipeline.prefer == "mixed" else ranked(req)
            found = _first_fit(snap, req, pools, grace_s)
            if found is None:
                return [], _blocked(snap, req, part, pools, grace_s)
            got, kind = found
            snap.take(Allocation(req, got.pool, got.chips, got.hosts, snap.now, reservation=got.reservation))
            taken.add(got.pool)
            fits.append(PartFit(req, part.name, got, kind))
        return fits, ""
    finally:
        snap.restore(mark)


def _spread(pools: Ranked, taken: set[str]) -> Ranked:
    """Pools no earlier part took first (a stable reorder: each group keeps its ranking)."""
    return [p for p in pools if p[0].name not in taken] + [p for p in pools if p[0].name in taken]


def _first_fit(snap: Snapshot, req: Request, pools: Ranked, grace_s: float) -> tuple[GangFit, str] | None:
    for pool_state, kind in pools:
        got = fit(snap, req, snap.pool(pool_state.name), grace_s)
        if got is not None and got.chips == req.chips:
            return got, kind
    return None


def _blocked(snap: Snapshot, req: Request, part: PartRequest, pools: Ranked, grace_s: float) -> str:
    if not pools:
        return f"part {part.name}: no pool of the fleet may run it (none has an accelerator it allows and runs it)"
    reasons = "; ".join(why_not(snap, req, snap.pool(p.name), grace_s) for p, _ in pools[:3])
    return (
        f"part {part.name} ({part.chips} chips) has no room: {reasons}; a pipeline's parts start together or not at all"
    )


def parts_of(parts: Mapping[str, Part]) -> tuple[PartRequest, ...]:
    """The scheduling view of an experiment's `spec.parts`: each part's chips, workers and preferred accelerator."""
    return tuple(
        PartRequest(name, p.total_chips, p.replicas * p.parallelism.data, p.prefer.value if p.prefer else None)
        for name, p in parts.items()
    )
