"""Attempt records shared by the control plane and the executors: launch requests and observed statuses."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Literal

AttemptPhase = Literal["pending", "running", "exited", "lost", "unplaced"]
StopReason = Literal["preempted", "drained", "cancelled", "suspended"]


class EndReason(StrEnum):
    """Why an attempt ended, as data: recorded on the attempt and in its end event (docs/events.md).

    Decisions (retry, back-off, which pool to avoid) read this, never the human sentence beside it.
    """

    SUCCEEDED = "succeeded"  # exit 0
    EXIT_TEMPFAIL = "exit_tempfail"  # exit 75 (EX_TEMPFAIL): retryable
    EXIT_LISTED = "exit_listed"  # an exit code listed in spec.retries.exit_codes: retryable
    EXIT = "exit"  # any other exit code: a failure of the training code, not retried
    SIGNAL = "signal"  # killed by a signal crossrail did not send: retryable
    LOST = "lost"  # gone with no exit status (its host, its pod, its supervisor): retryable
    HEARTBEAT_TIMEOUT = "heartbeat_lost"  # no heartbeat within the timeout; stopped and counted lost
    LAUNCH_FAILED = "launch_failed"  # the executor could not start it: retryable
    PREEMPTED = "preempted"  # stopped by crossrail to make room: requeued, no retry spent, no back-off
    DRAINED = "drained"  # stopped because its pool was drained: requeued, no retry spent, no back-off
    UNPLACED = "unplaced"  # its engine could not place it in time: requeued, no retry spent, backs off
    REPLACED = "replaced"  # withdrawn from its engine's queue before it started, moved: no back-off
    STALE_NUMBER = "stale_number"  # its number was used by an executor for an earlier store: offered again
    CANCELLED = "cancelled"  # stopped because the run was cancelled
    SUSPENDED = "suspended"  # stopped because the run was suspended


class AttemptState(StrEnum):
    """The state an attempt is recorded in (the store's `attempts.state`): active while `starting` or
    `running`, then one end state, which `scheduling.decisions.ATTEMPT_STATE` gives each EndReason."""

    STARTING = "starting"  # admitted and launched; its process or pods are not seen running yet
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    LOST = "lost"
    PREEMPTED = "preempted"
    UNPLACED = "unplaced"
    CANCELLED = "cancelled"
    SUSPENDED = "suspended"


ACTIVE_ATTEMPT_STATES = frozenset({AttemptState.STARTING, AttemptState.RUNNING})
"""An attempt in neither state has ended."""


@dataclass(frozen=True)
class Capabilities:
    """What an executor can do, as data the agent reads (never probed for).

    `backends`: the pool backends it runs attempts for (the agent schedules only their pools).
    `sees_processes`: it notices an attempt's end by itself (a process exit, a pod's status); when False the
    agent declares an attempt lost after `heartbeat_timeout_s` without a heartbeat.
    `can_withdraw`: it can take back an attempt its engine still holds in a queue, untouched (Kueue), so the
    agent may move waiting work to a better pool.
    """

    backends: tuple[str, ...]
    sees_processes: bool = True
    can_withdraw: bool = False


@dataclass(frozen=True)
class RunAs:
    """The OS identity a local attempt's command runs under (crossrail.control.isolation): `name` says whose
    it is (`team:<team>` or a user's name), `groups` are the gids of the teams that share checkpoints with it."""

    name: str
    uid: int
    gid: int
    groups: tuple[int, ...] = ()


@dataclass(frozen=True)
class LaunchRequest:
    """One attempt of one run on one pool. `env` already holds every CROSSRAIL_* variable.

    `run_as`: on local pools, the identity its command runs under; None runs it as the executor's own user
    (the workspace owner's runs in a one-person workspace). Executors of other machines ignore it."""

    run: str
    attempt: int
    pool: str
    accelerator: str
    chip_type: str
    chips: int
    command: list[str]
    env: dict[str, str] = field(default_factory=dict)
    run_as: RunAs | None = None
    slowdown: float = 1.0
    """Local pools: the pool's `slowdown` (its processes run 1/slowdown of the time); other executors ignore it."""


@dataclass(frozen=True)
class AttemptStatus:
    """What an executor knows of one attempt.

    `phase` is `running` while the attempt's process lives, `exited` once its exit was recorded
    durably (`exit_code` or `signal` set), `lost` when it is gone with no record of how it ended.
    Engines that place work themselves (Ray) add two: `pending` while the engine is still placing the
    attempt (nothing of it runs yet), and `unplaced` when the engine could not place it in time and
    released everything it had reserved: nothing ever ran, so the run goes back to its queue unharmed.
    `stopped_by` is the reason given to `stop()` when crossrail stopped it, else None.
    """

    run: str
    attempt: int
    phase: AttemptPhase
    exit_code: int | None = None
    signal: int | None = None
    stopped_by: StopReason | None = None
    started_at: float | None = None
    ended_at: float | None = None
    detail: str = ""
    image_digest: str | None = None
    """The digest (`sha256:...`) of the image its container ran, where the executor can tell (Kubernetes: the
    pod's resolved imageID); None where it cannot, or where no image runs (local, Ray without a container)."""
