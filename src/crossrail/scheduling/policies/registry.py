"""Policies by name: `get_policy(name, **options)` builds a fresh one (round-based ones keep a memo)."""

from __future__ import annotations

from typing import Any, get_args

from crossrail.errors import UsageError
from crossrail.scheduling.policies.base import Policy
from crossrail.scheduling.policies.maxmin import NORMALISATIONS, MaxMinFairness
from crossrail.scheduling.policies.ordering import (
    KeyedPolicy,
    fifo_key,
    las_hetero_key,
    las_key,
    min_jct_key,
    priority_key,
)
from crossrail.spec.fleet import PolicyName
from crossrail.spec.problems import did_you_mean

POLICY_NAMES: tuple[str, ...] = get_args(PolicyName)  # the fleet format lists them; one list, one place
DEFAULT_POLICY = "priority"
"""The order crossrail always used: priority class, then time queued."""
ROUND_S = 360.0
"""Gavel's round length: six minutes."""
AGNOSTIC_FORM = {"fifo_hetero": "fifo", "las_hetero": "las", "max_min_fairness_hetero": "max_min_fairness"}
"""Each heterogeneity-aware policy's agnostic form (min_jct_hetero has none)."""


def get_policy(name: str, **options: Any) -> Policy:
    """A fresh policy called `name`. Options: `normalise` ("best", the default, or "equal_share") for
    max_min_fairness*.

    An unknown name or option is a UsageError that lists the valid ones.
    """
    if name not in POLICY_NAMES:
        hint = did_you_mean(name, POLICY_NAMES)
        lead = f"{hint} " if hint else ""
        raise UsageError(f"unknown scheduling policy {name!r}; {lead}policies are: {', '.join(POLICY_NAMES)}")
    allowed = {"normalise"} if name.startswith("max_min_fairness") else set()
    unknown = sorted(set(options) - allowed)
    if unknown:
        valid = ", ".join(sorted(allowed)) or "none"
        raise UsageError(f"policy {name} takes no option {', '.join(unknown)}; its options: {valid}")
    if name.startswith("max_min_fairness"):
        normalise = options.get("normalise", "best")
        if normalise not in NORMALISATIONS:
            raise UsageError(f"normalise must be one of {', '.join(NORMALISATIONS)} (got {normalise!r})")
        return MaxMinFairness(name, hetero=name.endswith("_hetero"), normalise=normalise)
    keys = {
        "fifo": (fifo_key, False),
        "priority": (priority_key, False),
        "las": (las_key, True),
        "fifo_hetero": (fifo_key, False),
        "las_hetero": (las_hetero_key, True),
        "min_jct_hetero": (min_jct_key, True),
    }
    key, round_based = keys[name]
    return KeyedPolicy(name, round_based, name.endswith("_hetero"), key)
