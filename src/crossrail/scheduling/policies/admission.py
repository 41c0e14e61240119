"""The scheduling policy as the agent's admission order: a sort key for each pending Request.

The agent's scheduler orders heads across queues by (class, fair share, primary, secondary): a policy
reorders pending work within what priority classes of its own choosing, fair share and quotas allow,
and never admits beyond a quota. Hetero policies read each request's rates per chip type where the driver
gives them (`Request.throughput`; docs/policies.md).
"""

from __future__ import annotations

from collections.abc import Callable

from crossrail.scheduling.policies.base import JobView, level_of
from crossrail.scheduling.policies.registry import DEFAULT_POLICY, get_policy
from crossrail.scheduling.types import Request

OrderKey = Callable[[Request], tuple[float, float, float]]
"""A request's (class, primary, secondary) in admission order: smaller goes first."""


def priority_order(req: Request) -> tuple[float, float, float]:
    """The `priority` policy's key, computed without building a JobView (it is the default, on every submit)."""
    return (float(req.rank), req.queued_at, 0.0)


def view_of(req: Request) -> JobView:
    """What a policy sees of a pending request."""
    return JobView(
        run=req.run,
        queue=req.queue,
        priority=level_of(req.priority),
        submitted_at=req.queued_at,
        chips=req.chips,
        attained_s=req.attained_s,
        throughput={},
    )


def admission_order(name: str) -> OrderKey:
    """The key of policy `name` for requests; UsageError naming the valid policies for an unknown name."""
    policy = get_policy(name)
    if name == DEFAULT_POLICY:
        return priority_order

    def order(req: Request) -> tuple[float, float, float]:
        cls, primary, secondary, _ = policy.key(view_of(req))
        return (cls, primary, secondary)

    return order
