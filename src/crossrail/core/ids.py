"""Identifiers: experiment names, run ids (`<experiment>-<n>`) and attempt ids (`<run>/<k>`)."""

from __future__ import annotations

import re

# DNS-1123 label, so a run id is a valid Kubernetes object name too. 56 leaves room for "-<n>".
NAME_MAX = 56
_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_RUN = re.compile(r"^(?P<name>[a-z0-9]([-a-z0-9]*[a-z0-9])?)-(?P<n>[1-9][0-9]*)$")


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
