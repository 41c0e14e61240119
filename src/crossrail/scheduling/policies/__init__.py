"""Scheduling policies behind one interface, for the agent (admission order) and the simulator (rounds).

    policy = get_policy("max_min_fairness_hetero")
    policy.allocate(jobs, pools, now, round_s)   # round-based: run -> pool for the next round
    policy.order(pending, pools, now)            # admission: pending jobs in order, with a wanted pool

Pure: no clock, files or processes. See docs/policies.md.
"""

from crossrail.scheduling.policies.base import (
    PRIORITY_LEVELS,
    JobView,
    Policy,
    PoolView,
    SortKey,
    level_of,
)
from crossrail.scheduling.policies.registry import (
    AGNOSTIC_FORM,
    DEFAULT_POLICY,
    POLICY_NAMES,
    ROUND_S,
    get_policy,
)

__all__ = [
    "AGNOSTIC_FORM",
    "DEFAULT_POLICY",
    "POLICY_NAMES",
    "PRIORITY_LEVELS",
    "ROUND_S",
    "JobView",
    "Policy",
    "PoolView",
    "SortKey",
    "get_policy",
    "level_of",
]
