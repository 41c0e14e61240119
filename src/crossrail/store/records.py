"""Plain records the store reads and writes; no SQLAlchemy types leak out of the store."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields, replace
from typing import Any, NamedTuple, Self

from crossrail.core.attempts import EndReason
from crossrail.core.ids import run_dir_name

CHECKPOINT_COMMITTED, CHECKPOINT_DELETED, CHECKPOINT_DAMAGED = "committed", "deleted", "damaged"


@dataclass(frozen=True)
class NewRun:
    """Everything recorded when a run is created; the store assigns its number and id."""

    experiment: str
    experiment_digest: str
    experiment_spec: dict[str, Any]
    stage: str
    team: str | None
    owner: str | None
    priority: str
    chips: int
    queue: str
    spec: dict[str, Any]
    spec_digest: str
    dataset_uri: str
    dataset_version: str
    image: str
    checkpoint_dir: str
    idempotency_key: str | None = None
    resumed_from: str | None = None
    parent_run: str | None = None
    parent_checkpoint: str | None = None
    code_repo: str | None = None
    code_commit: str | None = None
    config_uri: str | None = None
    config_digest: str | None = None
    image_digest: str | None = None
    uid: str | None = None
    """The run's globally unique id (core.ids.new_uid); None only for runs created before uids."""


class QueuedKey(NamedTuple):
    """What orders one queued run in its queue (Store.queued_keys)."""

    id: str
    queue: str
    priority: str
    updated_at: float
    parent_run: str | None
    parent_checkpoint: str | None


class _Row:
    """Building a record from a result row, and back to a plain dict."""

    @classmethod
    def from_row(cls, row: Any) -> Self:
        m = row._mapping
        return cls(**{f.name: m[f.name] for f in fields(cls)})  # type: ignore[arg-type]

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)  # type: ignore[call-overload, no-any-return]


@dataclass(frozen=True)
class RecordedSpec:
    """A run's recorded `spec` (the experiment document's body), read typed: each key as submit validated it,
    or the schema's default where the record lacks it (one written before the key existed)."""

    body: Mapping[str, Any]

    @classmethod
    def of(cls, document: Mapping[str, Any]) -> RecordedSpec:
        body = document.get("spec")
        return cls(body if isinstance(body, Mapping) else {})

    def _section(self, key: str) -> Mapping[str, Any]:
        value = self.body.get(key)
        return value if isinstance(value, Mapping) else {}

    @property
    def retries(self) -> Mapping[str, Any]:
        """`spec.retries` (max, exit_codes, backoff), for scheduling.decisions.RetryPolicy.from_spec."""
        return self._section("retries")

    @property
    def parts(self) -> Mapping[str, Mapping[str, Any]]:
        """`spec.parts` by name: a pipeline's parts, empty for a single-gang run."""
        return self._section("parts")

    @property
    def resources(self) -> Mapping[str, Any]:
        return self._section("resources")

    @property
    def accelerators(self) -> Mapping[str, Any]:
        return self._section("accelerators")

    @property
    def duration(self) -> str | None:
        """`spec.resources.duration` as written (`6h`), None when not declared."""
        value = self.resources.get("duration")
        return str(value) if value else None

    @property
    def data_parallel(self) -> int:
        """`spec.parallelism.data`: the run's data-parallel workers, 1 when not declared."""
        data = self._section("parallelism").get("data")
        return data if isinstance(data, int) and not isinstance(data, bool) and data > 0 else 1


@dataclass(frozen=True)
class RunRecord(_Row):
    id: str
    experiment: str
    n: int
    stage: str
    team: str | None
    owner: str | None
    priority: str
    chips: int
    queue: str
    state: str
    spec: dict[str, Any]
    spec_digest: str
    idempotency_key: str | None
    resumed_from: str | None
    parent_run: str | None
    parent_checkpoint: str | None
    dataset_uri: str
    dataset_version: str
    code_repo: str | None
    code_commit: str | None
    config_uri: str | None
    config_digest: str | None
    image: str
    image_digest: str | None
    checkpoint_dir: str
    created_at: float
    updated_at: float
    uid: str | None = None
    """Globally unique (a lower-case ULID); None for a legacy run, created before uids."""

    @property
    def experiment_spec(self) -> RecordedSpec:
        """The recorded experiment's `spec`, read typed."""
        return RecordedSpec.of(self.spec)

    @property
    def run_checkpoint_dir(self) -> str:
        """Where this run's checkpoints go: `<spec.checkpoint.dir>/<run id>-<uid>` (legacy runs: `/<run id>`)."""
        return f"{self.checkpoint_dir.rstrip('/')}/{run_dir_name(self.id, self.uid)}"


@dataclass(frozen=True)
class AttemptRecord(_Row):
    run_id: str
    number: int
    state: str
    pool: str
    accelerator: str
    chip_type: str
    chips: int
    cost_per_chip_hour: float
    dataset_uri: str
    dataset_version: str
    code_commit: str | None
    config_digest: str | None
    image_digest: str | None
    started_at: float | None
    ended_at: float | None
    exit_code: int | None
    reason: str | None
    report_uri: str | None = None
    report_cursor: str | None = None
    last_heartbeat: float | None = None
    signal: int | None = None
    stopped_by: str | None = None
    """The reason crossrail gave the executor's stop() (preempted, drained, cancelled, suspended); None otherwise."""
    created_at: float | None = None
    parent_checkpoint: str | None = None
    """The parent checkpoint URI this attempt was launched from (a `latest` parent resolved at launch)."""
    end_reason: EndReason | None = None
    """Why it ended, as data (None while it runs); the sentence for people is `reason`."""
    part: str | None = None
    """The part of a pipeline run (`spec.parts`) this attempt runs; None for an ordinary run's attempt."""

    @classmethod
    def from_row(cls, row: Any) -> Self:
        att = super().from_row(row)
        if att.end_reason is None:
            return att
        return replace(att, end_reason=EndReason(att.end_reason))

    def as_dict(self) -> dict[str, Any]:
        out = super().as_dict()
        out["end_reason"] = None if self.end_reason is None else str(self.end_reason)
        return out


@dataclass(frozen=True)
class CheckpointRecord(_Row):
    id: int
    run_id: str
    attempt: int | None
    step: int
    uri: str
    format: str
    parent_id: int | None
    committed_at: float
    skipped_reason: str | None = None
    """Why a restore skipped it as corrupt (None: never found corrupt)."""
    state: str = "committed"
    """committed, deleted (by the runtime's retention) or damaged (a restore found it corrupt)."""

    @property
    def usable(self) -> bool:
        return self.state == CHECKPOINT_COMMITTED and self.skipped_reason is None
