"""Identifiers: experiment names, run ids (`<experiment>-<n>`), run uids (ULIDs) and attempt ids (`<run>/<k>`)."""

from __future__ import annotations

import os
import re
from collections.abc import Callable

# DNS-1123 label, so a run id is a valid Kubernetes object name too. 56 leaves room for "-<n>".
NAME_MAX = 56
_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_RUN = re.compile(r"^(?P<name>[a-z0-9]([-a-z0-9]*[a-z0-9])?)-(?P<n>[1-9][0-9]*)$")
# A ULID (github.com/ulid/spec) in lower case: 48 bits of milliseconds, then 80 random bits, in Crockford's
# base32. The first character holds only 3 bits, so it is 0-7.
_CROCKFORD = "0123456789abcdefghjkmnpqrstvwxyz"
UID_LENGTH = 26
_UID = re.compile(r"^[0-7][0-9a-hjkmnp-tv-z]{25}$")


def validate_name(name: str) -> str | None:
    """Return why `name` is not a valid experiment name, or None when it is."""
    if not name:
        return "must not be empty"
    if len(name) > NAME_MAX:
        return f"is {len(name)} characters; at most {NAME_MAX} (run ids and Kubernetes names add a suffix)"
    if not _NAME.match(name):
        return (
            f"{name!r} is not a valid name; use lower-case letters, digits and '-', "
            "starting and ending with a letter or digit"
        )
    return None


TEAM_MAX = 63


def validate_team(name: str) -> str | None:
    """Why `name` is not a name for a new team (a DNS-1123 label: a Kubernetes namespace can carry it), or None.

    Teams stored before this rule keep their names; only new ones are held to it."""
    if not name:
        return "must not be empty"
    if len(name) > TEAM_MAX or not _NAME.match(name):
        return (
            f"{name[:80]!r} is not a team name; use at most {TEAM_MAX} lower-case letters, digits and '-',"
            " starting and ending with a letter or digit"
        )
    return None


def run_id(experiment: str, n: int) -> str:
    if n < 1:
        raise ValueError(f"run numbers start at 1 (got {n})")
    return f"{experiment}-{n}"


def parse_run_id(text: str) -> tuple[str, int] | None:
    """Split `posttrain-042-3` into (`posttrain-042`, 3); None when `text` has no run number."""
    m = _RUN.match(text)
    if not m:
        return None
    return m.group("name"), int(m.group("n"))


def attempt_id(run: str, attempt: int) -> str:
    return f"{run}/{attempt}"


def new_uid(now: float, randbytes: Callable[[int], bytes] = os.urandom) -> str:
    """A globally unique run uid: a lower-case ULID of time `now` (seconds since the epoch) and 80 random bits.

    Uids sort by creation time to the millisecond; two stores (or one store before and after a reset)
    never hand out the same one, unlike run ids, which count up per store.
    """
    ms = int(now * 1000)
    if not 0 <= ms < 1 << 48:
        raise ValueError(f"a uid's time must fall between 1970 and 10889 (got {now} s since the epoch)")
    random = randbytes(10)
    if len(random) != 10:
        raise ValueError(f"a uid takes 10 random bytes (got {len(random)})")
    value = ms << 80 | int.from_bytes(random, "big")
    return "".join(_CROCKFORD[(value >> shift) & 31] for shift in range(125, -1, -5))


def is_uid(text: str) -> bool:
    """Whether `text` is a run uid (a lower-case ULID), as opposed to a run id or an experiment name."""
    return bool(_UID.match(text))


def uid_time(uid: str) -> float:
    """The creation time (seconds since the epoch, to the millisecond) a uid carries."""
    if not is_uid(uid):
        raise ValueError(f"{uid!r} is not a run uid (26 characters of lower-case Crockford base32)")
    value = 0
    for char in uid:
        value = value << 5 | _CROCKFORD.index(char)
    return (value >> 80) / 1000


def run_dir_name(run: str, uid: str | None) -> str:
    """The name of a run's directory under `spec.checkpoint.dir`: `<run id>-<uid>`.

    The uid keeps two stores that share a checkpoint directory (or one store before and after a reset)
    apart although both number their runs `<experiment>-1`, `-2`, ... A run from before uids (uid None)
    keeps its old directory, `<run id>`.
    """
    return run if uid is None else f"{run}-{uid}"
