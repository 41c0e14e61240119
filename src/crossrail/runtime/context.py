"""What crossrail tells a training process about itself, read once from the environment it launched it with."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, cast

from crossrail.core import is_uid, parse_duration
from crossrail.errors import ContextError as ContextError  # noqa: PLC0414  # crossrail.errors' tree
from crossrail.runtime.ownership import ForeignCheckpoint, owner_problem

Backend = Literal["tpu", "gpu", "cpu"]
BACKENDS: tuple[Backend, ...] = ("tpu", "gpu", "cpu")
REQUIRED = (
    "TRAINING_BACKEND",
    "EXPERIMENT_ID",
    "CROSSRAIL_RUN_ID",
    "CROSSRAIL_ATTEMPT",
    "CROSSRAIL_CHECKPOINT_DIR",
    "CROSSRAIL_DATASET",
    "CROSSRAIL_REPORT",
)
DEFAULT_HEARTBEAT_S = 10.0


@dataclass(frozen=True)
class RuntimeContext:
    """One attempt of one run, as the training process sees it.

    `spec` is the resolved experiment document (with the agent's top-level `lineage`, `placement` and
    `parent_checkpoint`); the properties below read the parts of it the runtime uses.
    """

    backend: Backend
    experiment: str
    run: str
    attempt: int
    checkpoint_dir: str
    dataset: str
    report: str
    config: str | None = None
    spec: dict[str, Any] = field(default_factory=dict)
    checkpoint_every_s: float | None = None
    keep_last: int | None = None
    heartbeat_s: float = DEFAULT_HEARTBEAT_S
    run_uid: str | None = None  # None: a run from before uids, or a process started by hand
    # Data-parallel workers, as torchrun (and crossrail's JAX launch) set them: RANK, WORLD_SIZE, LOCAL_RANK,
    # TORCHELASTIC_RESTART_COUNT (how many times an elastic launch restarted its workers). One process: 0, 1.
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    restart_count: int = 0
    coordinator: str | None = None  # host:port of JAX's coordinator service (CROSSRAIL_COORDINATOR)
    stop_budget_s: float | None = None
    """Seconds from SIGTERM to the kill (CROSSRAIL_STOP_BUDGET_S: a spot pool's preemption notice, else the fleet's
    preemption grace); None: not told. A final checkpoint that cannot finish inside it is not started."""

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> RuntimeContext:
        """Read the context from `environ` (default os.environ); ContextError lists every problem."""
        env = os.environ if environ is None else environ
        problems = [f"{name}: not set" for name in REQUIRED if not env.get(name, "").strip()]
        backend = env.get("TRAINING_BACKEND", "").strip()
        if backend and backend not in BACKENDS:
            problems.append(f"TRAINING_BACKEND: {backend!r} is not one of {', '.join(BACKENDS)}")
        attempt = _int(env, "CROSSRAIL_ATTEMPT", problems)
        spec = _spec(env, problems)
        every_s, keep_last = _checkpoint_policy(spec, problems)
        heartbeat_s = _seconds(env, "CROSSRAIL_HEARTBEAT_S", problems)
        stop_budget_s = _seconds(env, "CROSSRAIL_STOP_BUDGET_S", problems)
        run_uid = env.get("CROSSRAIL_RUN_UID", "").strip() or None
        if run_uid is not None and not is_uid(run_uid):
            problems.append(f"CROSSRAIL_RUN_UID: {run_uid!r} is not a run uid (26 characters, a lower-case ULID)")
        world = _world(env, problems)
        if problems:
            raise ContextError(problems)
        assert attempt is not None  # CROSSRAIL_ATTEMPT is required, so a missing one is a problem above
        return cls(
            backend=cast(Backend, backend),
            experiment=env["EXPERIMENT_ID"].strip(),
            run=env["CROSSRAIL_RUN_ID"].strip(),
            attempt=attempt,
            checkpoint_dir=env["CROSSRAIL_CHECKPOINT_DIR"].strip(),
            dataset=env["CROSSRAIL_DATASET"].strip(),
            report=env["CROSSRAIL_REPORT"].strip(),
            config=env.get("CROSSRAIL_CONFIG", "").strip() or None,
            spec=spec,
            checkpoint_every_s=every_s,
            keep_last=keep_last,
            heartbeat_s=heartbeat_s if heartbeat_s is not None else DEFAULT_HEARTBEAT_S,
            run_uid=run_uid,
            coordinator=env.get("CROSSRAIL_COORDINATOR", "").strip() or None,
            stop_budget_s=stop_budget_s,
            **world,
        )

    @property
    def is_primary(self) -> bool:
        """Rank 0: the one worker of a data-parallel run that writes checkpoints and reports."""
        return self.rank == 0

    @property
    def lineage(self) -> dict[str, Any]:
        """The agent's resolved lineage: dataset_version, code_commit, config_digest, image_digest."""
        return dict(_section(self.spec, "lineage"))

    @property
    def placement(self) -> dict[str, Any]:
        """Where this attempt runs: pool, chip_type, accelerator, chips."""
        return dict(_section(self.spec, "placement"))

    @property
    def parent_checkpoint(self) -> str | None:
        """The checkpoint (or run checkpoint directory) this run starts from, when it has a parent."""
        value = self.spec.get("parent_checkpoint")
        return value if isinstance(value, str) and value.strip() else None

    @property
    def parent_run(self) -> str | None:
        """The run this one declares as its parent (spec.parent.run, or the run it resumes), if any."""
        value = self.lineage.get("parent_run")
        return value if isinstance(value, str) and value else None

    @property
    def continues_parent(self) -> bool:
        """Whether the parent checkpoint is this run's own past (`resubmit --resume`: the run it resumes is its
        parent), so training continues from its step, optimizer and data cursor; otherwise a parent only gives
        the weights a new training starts from (`resubmit --from-weights`, `spec.parent`)."""
        resumed = self.lineage.get("resumed_from")
        return self.parent_run is not None and resumed == self.parent_run

    @property
    def parent_optional(self) -> bool:
        """`spec.parent.optional: true`: a parent checkpoint that cannot be loaded starts the run fresh instead
        of failing it. Never for a run that resumes: continuing is what was asked."""
        if self.continues_parent:
            return False
        spec = self.spec.get("spec")
        parent = spec.get("parent") if isinstance(spec, dict) else None
        return isinstance(parent, dict) and parent.get("optional") is True

    @property
    def parent_uid(self) -> str | None:
        """The declared parent's uid; None when there is none or it is a run from before uids."""
        value = self.lineage.get("parent_run_uid")
        return value if isinstance(value, str) and value else None

    def claim(self, manifest: Mapping[str, Any], uri: str, *, as_parent: bool = False) -> None:
        """Refuse, with ForeignCheckpoint naming its owner and the fix, a checkpoint this run may not restore.

        A checkpoint in the run's own directory (`as_parent` False) must be this run's; the one it starts
        from (`as_parent` True) must be its declared parent's (see runtime/ownership.py).
        """
        lineage = manifest.get("lineage")
        problem = owner_problem(
            lineage if isinstance(lineage, dict) else {},
            run=self.run,
            run_uid=self.run_uid,
            parent_run=self.parent_run,
            parent_uid=self.parent_uid,
            as_parent=as_parent,
        )
        if problem is not None:
            raise ForeignCheckpoint(f"refusing the checkpoint {uri}: {problem}")

    def checkpoint_lineage(self, framework: str, parent: str | None = None) -> dict[str, Any]:
        """The `lineage` block a checkpoint of this attempt carries (docs/formats/checkpoint.md)."""
        lineage, placement = self.lineage, self.placement
        return {
            "run": self.run,
            "run_uid": self.run_uid,
            "experiment": self.experiment,
            "spec_digest": lineage.get("spec_digest"),
            "attempt": self.attempt,
            "parent": parent,
            "dataset_version": lineage.get("dataset_version"),
            "code_commit": lineage.get("code_commit"),
            "hardware": {k: placement.get(k) for k in ("pool", "chip_type", "accelerator")},
            "framework": framework,
        }


WORLD_VARS = {"rank": "RANK", "world_size": "WORLD_SIZE", "local_rank": "LOCAL_RANK"}
MULTI_SLICE_VARS = ("MEGASCALE_SLICE_ID", "CROSSRAIL_HOSTS_PER_SLICE", "CROSSRAIL_HOST_INDEX")
"""What a host of a multi-slice TPU JobSet knows of itself (the downward API cannot multiply): its rank is
slice x hosts per slice + host within the slice, of CROSSRAIL_SLICES x hosts per slice."""


def _world(env: Mapping[str, str], problems: list[str]) -> dict[str, int]:
    """rank, world size, local rank and restart count from torchrun's variables (or a multi-slice TPU host's);
    absent: one process."""
    found = {key: _int(env, name, problems) for key, name in WORLD_VARS.items()}
    restarts = _int(env, "TORCHELASTIC_RESTART_COUNT", problems)
    world = {key: value for key, value in found.items() if value is not None}
    slices = {name: _int(env, name, problems) for name in MULTI_SLICE_VARS}
    if "rank" not in world and None not in slices.values():  # a host of a multi-slice TPU JobSet
        slice_id, hosts, host = (int(slices[name] or 0) for name in MULTI_SLICE_VARS)
        world["rank"] = slice_id * hosts + host
        count = _int(env, "CROSSRAIL_SLICES", problems)
        if "world_size" not in world and count is not None:
            world["world_size"] = count * hosts
    if restarts is not None:
        world["restart_count"] = restarts
    size, rank = world.get("world_size", 1), world.get("rank", 0)
    if size < 1:
        problems.append(f"WORLD_SIZE: must be >= 1 (got {size})")
    elif rank >= size:
        problems.append(f"RANK: must be < WORLD_SIZE ({size}) (got {rank})")
    return world


def _int(env: Mapping[str, str], name: str, problems: list[str]) -> int | None:
    text = env.get(name, "").strip()
    if not text:
        return None
    try:
        value = int(text)
    except ValueError:
        problems.append(f"{name}: {text!r} is not a whole number")
        return None
    if value < 0:
        problems.append(f"{name}: must be >= 0 (got {value})")
        return None
    return value


def _seconds(env: Mapping[str, str], name: str, problems: list[str]) -> float | None:
    text = env.get(name, "").strip()
    if not text:
        return None
    try:
        value = float(text)
    except ValueError:
        problems.append(f"{name}: {text!r} is not a number of seconds")
        return None
    if not value > 0:
        problems.append(f"{name}: must be > 0 seconds (got {text})")
        return None
    return value


def _spec(env: Mapping[str, str], problems: list[str]) -> dict[str, Any]:
    text = env.get("CROSSRAIL_SPEC", "").strip()
    if not text:
        return {}
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        problems.append(f"CROSSRAIL_SPEC: not JSON ({exc})")
        return {}
    if not isinstance(value, dict):
        problems.append(f"CROSSRAIL_SPEC: must be a JSON object (got {type(value).__name__})")
        return {}
    return value


def _checkpoint_policy(spec: Mapping[str, Any], problems: list[str]) -> tuple[float | None, int | None]:
    """spec.checkpoint.every (seconds or a duration such as `2m`; null: none) and spec.checkpoint.keep_last."""
    checkpoint = _section(_section(spec, "spec"), "checkpoint")
    every, keep_last = checkpoint.get("every", checkpoint.get("every_s")), checkpoint.get("keep_last")
    every_s = None
    if every is not None:
        try:
            every_s = parse_duration(every)
        except ValueError as exc:
            problems.append(f"CROSSRAIL_SPEC: spec.checkpoint.every: {exc}")
    if keep_last is not None and (not isinstance(keep_last, int) or isinstance(keep_last, bool) or keep_last < 1):
        problems.append(f"CROSSRAIL_SPEC: spec.checkpoint.keep_last must be a whole number >= 1 (got {keep_last!r})")
        keep_last = None
    return every_s, keep_last


def _section(data: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    value = data.get(key)
    return value if isinstance(value, dict) else {}
