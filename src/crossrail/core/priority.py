"""The priority classes of runs, most important first: the one table every ranking derives from."""

from __future__ import annotations

from typing import Literal, get_args

Priority = Literal["low", "normal", "high", "critical"]
"""The priority classes, least important first: `spec.priority` takes one of them (its errors list them so)."""

PRIORITIES: tuple[str, ...] = tuple(reversed(get_args(Priority)))
"""Priority classes, most important first."""

PRIORITY_RANK: dict[str, int] = {name: rank for rank, name in enumerate(PRIORITIES)}
"""Class -> rank: 0 is the most important; sorted ascending, the most important come first."""

UNKNOWN_RANK = len(PRIORITIES)
"""Rank of a class no table knows: after every known one."""


def priority_rank(priority: str) -> int:
    """The rank of `priority` (0 first); an unknown class ranks after every known one."""
    return PRIORITY_RANK.get(priority, UNKNOWN_RANK)


def priority_level(priority: str) -> int:
    """The same order as a level, higher is more important (`low` is 0); an unknown class is -1."""
    rank = PRIORITY_RANK.get(priority)
    return -1 if rank is None else len(PRIORITIES) - 1 - rank
