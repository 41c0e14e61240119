"""Which checkpoint a run starts from: `latest` or a step of its parent, or its own for a resume, checked cheaply.

"Verifies" here is the cheap check (runtime.check): commit marker and manifest present and parseable, every
tensor file of its stated size. The runtime checks every checksum when it restores, and falls back from a
damaged step to the previous one with a `checkpoint_skipped` report.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Literal

from crossrail.core import TERMINAL_RUN_STATES, Event, EventType
from crossrail.errors import ConflictError
from crossrail.store import CheckpointRecord, RunRecord, Store
from crossrail.store.records import CHECKPOINT_DELETED


def problem_of(uri: str) -> str | None:
    """Why the checkpoint at `uri` fails the cheap check, or None when it passes.

    Storage this process cannot reach (no credentials, no filesystem for the scheme) is not a failure: the
    runtime, which can, checks it in full when it restores.
    """
    from crossrail.runtime import CheckpointError, CheckpointNotFound, InvalidCheckpoint, check

    try:
        check(uri)
    except CheckpointNotFound:
        return "its directory no longer exists"
    except InvalidCheckpoint as exc:
        return str(exc)
    except (CheckpointError, OSError, ImportError, ValueError):
        return None
    return None


@dataclass
class Verified:
    """A run's checkpoints, newest first, as far as the cheap check went."""

    newest: CheckpointRecord | None = None
    """The newest checkpoint that verifies (None: none does)."""
    unusable: list[tuple[int, str]] = field(default_factory=list)
    """(step, why) of each newer one passed over, and of those the store already knows are unusable."""

    @property
    def newest_uri(self) -> str | None:
        return None if self.newest is None else self.newest.uri

    def describe(self) -> str:
        """`; step 50 is damaged (...), step 40 was deleted by retention` or an empty string."""
        return "".join(f"; step {step} {why}" for step, why in self.unusable)


def newest_verified(store: Store, run_id: str) -> Verified:
    """The newest checkpoint of `run_id` that the store offers and that passes the cheap check."""
    found = Verified()
    for c in reversed(store.checkpoints(run_id)):
        why = why_unusable(c)
        if why is None:
            found.newest = c
            return found
        found.unusable.append((c.step, why))
    return found


def usable_steps(store: Store, run_id: str) -> list[int]:
    """Every step of `run_id` a child could start from: offered by the store and passing the cheap check."""
    return [c.step for c in store.checkpoints(run_id, usable=True) if problem_of(c.uri) is None]


def why_unusable(c: CheckpointRecord) -> str | None:
    """Why checkpoint `c` cannot be started from (`was deleted by retention`, `is damaged (...)`), or None."""
    return recorded_problem(c) or _damaged(problem_of(c.uri))


def recorded_problem(c: CheckpointRecord) -> str | None:
    """Why the store no longer offers checkpoint `c`, or None."""
    if c.state == CHECKPOINT_DELETED:
        return "was deleted by retention"
    if not c.usable:
        return f"is damaged ({c.skipped_reason or c.state})"
    return None


def ended(run: RunRecord) -> bool:
    return run.state in TERMINAL_RUN_STATES


def no_usable_checkpoint(parent: RunRecord, verified: Verified) -> str:
    """Why a child of `parent` cannot start: the reason recorded on the child and shown by show, logs and status."""
    return f"parent run {parent.id} ended {parent.state} without a usable checkpoint{verified.describe()}"


def _damaged(problem: str | None) -> str | None:
    return None if problem is None else f"is damaged ({problem})"


# --- what the agent asks as it admits and launches a child ---------------------------------------


def ready(store: Store, run: RunRecord, now: float) -> bool:
    """A run that starts from another run's `latest` checkpoint waits until that run has ended; when it
    ended with no checkpoint the store still offers, the run ends failed with that reason."""
    if run.parent_checkpoint != "latest" or run.parent_run is None:
        return True
    parent = store.get_run(run.parent_run)
    if parent.state not in TERMINAL_RUN_STATES:
        return False
    if store.checkpoints(parent.id, usable=True):
        return True
    fail_child(store, run, parent, newest_verified(store, parent.id), now)
    return False


def resolve(store: Store, run: RunRecord, now: float) -> str | Literal[False] | None:
    """The checkpoint URI the run's next attempt starts from, resolved as it is admitted and launched.

    `latest` becomes the parent's newest checkpoint that verifies (the cheap check; the runtime checks every
    checksum and falls back further). False, with the run ended failed, when none does.
    """
    if run.parent_checkpoint != "latest" or run.parent_run is None:
        return run.parent_checkpoint
    parent = store.get_run(run.parent_run)
    verified = newest_verified(store, parent.id)
    if verified.newest is not None:
        return verified.newest.uri
    fail_child(store, run, parent, verified, now)
    return False


def fail_child(store: Store, run: RunRecord, parent: RunRecord, verified: Verified, now: float) -> None:
    """End a waiting child whose parent ended with nothing usable (a cancel or suspend meanwhile stands)."""
    reason = no_usable_checkpoint(parent, verified)
    ev = Event(EventType.FAILED, now, run.id, None, {"reason": reason, "retryable": False, "final": True})
    with contextlib.suppress(ConflictError):
        store.transition(run.id, ["queued"], "failed", [ev])


def launch_checkpoint(store: Store, run: RunRecord) -> str | None:
    """For an attempt admitted before attempts recorded their parent checkpoint: resolved now."""
    if run.parent_checkpoint != "latest" or run.parent_run is None:
        return run.parent_checkpoint
    return newest_verified(store, run.parent_run).newest_uri
