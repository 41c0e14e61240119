"""Whose checkpoint is it: a restore takes only its own run's checkpoints, or its declared parent's.

Every manifest's lineage names the run that wrote it (`run`, `run_uid`, `experiment`, `spec_digest`). Run ids
count up per store, so two stores sharing a checkpoint directory both have a `tiny-1`; the uid tells them
apart. A checkpoint without `run_uid` comes from before uids (legacy): usable only as a declared parent.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from crossrail.errors import ForeignCheckpoint as ForeignCheckpoint  # noqa: PLC0414  # crossrail.errors' tree


def owner_problem(
    lineage: Mapping[str, Any],
    *,
    run: str,
    run_uid: str | None,
    parent_run: str | None,
    parent_uid: str | None,
    as_parent: bool,
) -> str | None:
    """Why a run (`run`, `run_uid`) may not restore a checkpoint with this `lineage`; None when it may.

    `as_parent` False: the checkpoint is in the run's own directory, so it must be the run's own. True: it
    is the one the run starts from, so it must be its declared parent's (`parent_run`, `parent_uid`; a legacy
    checkpoint qualifies when the parent is a legacy run of the same id). A run without a uid (one created
    before uids, or a process started by hand) has nothing to check against: anything goes, as before.
    """
    if run_uid is None:
        return None
    if as_parent:
        return _parent_problem(lineage, run, run_uid, parent_run, parent_uid)
    return _own_problem(lineage, run, run_uid)


def _own_problem(lineage: Mapping[str, Any], run: str, run_uid: str) -> str | None:
    owner_uid = lineage.get("run_uid")
    if owner_uid == run_uid:
        return None
    if owner_uid is None:
        return (
            f"it was written before runs had uids (by run {_name(lineage)}), so it cannot be shown to be "
            f"this run's ({run}, uid {run_uid}); a legacy checkpoint is usable only as a declared parent: "
            "submit a run with spec.parent.run naming the run that wrote it"
        )
    return (
        f"it belongs to {_owner(lineage)}, not to this run ({run}, uid {run_uid}); a run resumes only from its "
        "own checkpoints: give each workspace's runs their own directory (crossrail keys it by uid), or start "
        "from that checkpoint by naming its run in spec.parent.run in the store that holds it"
    )


def _parent_problem(
    lineage: Mapping[str, Any], run: str, run_uid: str, parent_run: str | None, parent_uid: str | None
) -> str | None:
    owner_uid = lineage.get("run_uid")
    if parent_run is None:
        return (
            f"it belongs to {_owner(lineage)} and this run ({run}, uid {run_uid}) declares no parent; "
            "name the run that wrote it in spec.parent.run"
        )
    if owner_uid is not None and owner_uid == parent_uid:
        return None
    if owner_uid is None and parent_uid is None and lineage.get("run") in (None, parent_run):
        return None  # a legacy parent run's legacy checkpoint
    parent = f"{parent_run}, uid {parent_uid}" if parent_uid else f"{parent_run}, a run from before uids"
    return (
        f"it belongs to {_owner(lineage)}, not to this run's declared parent ({parent}); "
        "a run starts only from its declared parent's checkpoints: name the run that wrote it in "
        "spec.parent.run, in the store that holds it"
    )


def _owner(lineage: Mapping[str, Any]) -> str:
    uid = lineage.get("run_uid")
    parts = [f"uid {uid}" if uid else "no uid: written before runs had uids"]
    if lineage.get("experiment"):
        parts.append(f"experiment {lineage['experiment']}")
    if lineage.get("spec_digest"):
        parts.append(f"spec {lineage['spec_digest']}")
    return f"run {_name(lineage)} ({', '.join(parts)})"


def _name(lineage: Mapping[str, Any]) -> str:
    run = lineage.get("run")
    return str(run) if run else "(unnamed)"
