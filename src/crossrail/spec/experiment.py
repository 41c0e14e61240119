"""The Experiment document: what to run, on how many chips, from which code, data and checkpoint."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, field_validator, model_validator

from crossrail.core.priority import Priority
from crossrail.core.quantities import parse_duration
from crossrail.spec.common import (
    Accelerator,
    ApiVersion,
    Items,
    Name,
    NonEmpty,
    Seconds,
    SpecModel,
    Stage,
    Text,
    Uri,
    as_dict,
    as_int,
    nested,
    raise_items,
)

Preference = Literal["tpu", "gpu", "cpu", "mixed", "any"]
PositiveInt = Annotated[int, Field(strict=True, gt=0)]

_ACCELERATORS = frozenset(a.value for a in Accelerator)
_COMMIT = re.compile(r"[0-9a-f]{7,40}")


class Metadata(SpecModel):
    name: Name
    team: NonEmpty | None = None
    owner: NonEmpty | None = None
    labels: dict[str, Text] = Field(default_factory=dict)


class CodeRef(SpecModel):
    """The code a run executes; `commit: auto` is resolved to the submitting checkout's HEAD."""

    repo: NonEmpty | None = None
    commit: str = "auto"

    @field_validator("commit")
    @classmethod
    def _commit(cls, value: str) -> str:
        if value == "auto":
            return value
        if not _COMMIT.fullmatch(value.lower()):
            raise ValueError(f"{value!r} is not a commit; write `auto` or 7 to 40 hex digits")
        return value.lower()


class DatasetRef(SpecModel):
    """The data a run reads; a missing version is resolved when the experiment is submitted."""

    uri: Uri
    version: Text | None = None


class CheckpointSpec(SpecModel):
    dir: NonEmpty
    format: NonEmpty = "crossrail-ckpt/v1"
    every_s: Seconds | None = Field(default=None, alias="every")
    keep_last: int = Field(default=3, strict=True, ge=1)


class Resources(SpecModel):
    """Chips a run asks for; `min_chips`..`max_chips` is the range an elastic run may be resized within."""

    chips: PositiveInt
    min_chips: PositiveInt | None = None
    max_chips: PositiveInt | None = None
    duration_s: Seconds | None = Field(default=None, alias="duration")

    @model_validator(mode="after")
    def _range(self) -> Resources:
        raise_items(chip_range_items(self.chips, self.min_chips, self.max_chips))
        return self


def chip_range_items(chips: int | None, min_chips: int | None, max_chips: int | None) -> Items:
    """min_chips <= chips <= max_chips, for the values that are known."""
    items: Items = []
    if chips is None:
        return items
    if min_chips is not None and min_chips > chips:
        message = f"must be <= chips (got min_chips {min_chips} > chips {chips})"
        items.append((("min_chips",), message, f"lower min_chips to at most {chips}"))
    if max_chips is not None and max_chips < chips:
        message = f"must be >= chips (got max_chips {max_chips} < chips {chips})"
        items.append((("max_chips",), message, f"raise max_chips to at least {chips}"))
    return items


class Parallelism(SpecModel):
    """How a run splits across workers: `data` data-parallel workers (processes), each with the whole model.

    Room for more axes later (tensor, pipeline). `oversubscribe: true` lets a run on a local pool start
    more worker processes than the host has cores; without it that is a lint error.
    """

    data: PositiveInt = 1
    oversubscribe: bool = False


def parallelism_items(data: int | None, chips: int | None, max_chips: int | None) -> Items:
    """Each data-parallel worker holds at least one chip: data <= max_chips (or chips when no max)."""
    most = max_chips if max_chips is not None else chips
    if data is None or most is None or data <= most:
        return []
    key = "max_chips" if max_chips is not None else "chips"
    message = f"must be <= resources.{key} (got data {data} > {key} {most}): each worker holds at least one chip"
    return [(("data",), message, f"lower parallelism.data to at most {most} or raise resources.{key}")]


def host_cores_items(data: int, oversubscribe: bool, host_cores: int) -> Items:
    """A local pool runs one process per data-parallel worker: no more than the host has cores, unless asked."""
    if oversubscribe or data <= host_cores:
        return []
    message = f"asks for {data} worker processes but this host has {host_cores} cores"
    fix = f"lower parallelism.data to at most {host_cores}, or set parallelism.oversubscribe: true"
    return [(("data",), message, fix)]


class Part(SpecModel):
    """One part of a pipeline run (`spec.parts`): `replicas` copies of `chips` chips each, its own attempt group.

    `parallelism` splits each replica into data-parallel workers as the run-level field does; `prefer` is
    the accelerator the part would rather run on (the run's own preference applies otherwise).
    """

    chips: PositiveInt
    replicas: PositiveInt = 1
    parallelism: Parallelism = Field(default_factory=Parallelism)
    prefer: Accelerator | None = None

    @property
    def total_chips(self) -> int:
        return self.chips * self.replicas

    @model_validator(mode="after")
    def _workers_have_chips(self) -> Part:
        raise_items(nested(("parallelism",), parallelism_items(self.parallelism.data, self.chips, None)))
        return self


def parts_items(parts: dict[str, tuple[int, int]], chips: int | None, elastic: bool, data: int | None) -> Items:
    """A pipeline's parts add up to `resources.chips`; its size and parallelism are the parts' own."""
    if not parts:
        return []
    items: Items = []
    total = sum(c * r for c, r in parts.values())
    if chips is not None and total != chips:
        terms = " + ".join(f"{name} {c * r}" for name, (c, r) in parts.items())
        message = f"must equal the sum of spec.parts' chips x replicas (got chips {chips}, parts {terms} = {total})"
        items.append((("resources", "chips"), message, f"set resources.chips to {total} or resize the parts"))
    if elastic:
        message = "a run with parts is resized part by part; min_chips and max_chips do not apply"
        items.append((("resources",), message, "remove resources.min_chips and resources.max_chips"))
    if data is not None and data > 1:
        message = f"a run with parts sets parallelism per part (got parallelism.data {data})"
        items.append((("parallelism", "data"), message, "move parallelism under the part it belongs to"))
    return items


class AcceleratorPrefs(SpecModel):
    """Which accelerators a run prefers and accepts; overrides the placement policy's stage preference."""

    prefer: Preference | None = None
    allow: list[Accelerator] | None = Field(default=None, min_length=1)

    @model_validator(mode="after")
    def _prefer_allowed(self) -> AcceleratorPrefs:
        allow = [str(a) for a in self.allow] if self.allow is not None else None
        raise_items(preference_items(self.prefer, allow))
        return self


def preference_items(prefer: str | None, allow: list[str] | None) -> Items:
    """A preferred tpu, gpu or cpu must be one the run allows."""
    if prefer not in ("tpu", "gpu", "cpu") or allow is None or prefer in allow:
        return []
    allowed = ", ".join(allow)
    fix = f"add {prefer} to spec.accelerators.allow or prefer one of {allowed}"
    return [(("prefer",), f"prefers {prefer} but allow lists only {allowed}", fix)]


class ParentRef(SpecModel):
    """Start from another run's checkpoint: `checkpoint` is `latest` or a step number; `optional`: a checkpoint
    that cannot be loaded at launch starts the run fresh instead of failing it."""

    run: NonEmpty
    checkpoint: int | Literal["latest"] = "latest"
    optional: bool = False

    @field_validator("checkpoint", mode="before")
    @classmethod
    def _step(cls, value: Any) -> Any:
        if value == "latest":
            return value
        if isinstance(value, str) and value.isdigit():
            return int(value)
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            return value
        raise ValueError(f"{value!r} is not a checkpoint; write `latest` or a step number such as 1200")


def _wait(value: Any) -> Any:
    """A back-off: a duration, or 0 (no wait)."""
    if value in (0, "0", "0s"):
        return 0.0
    if isinstance(value, str | int | float) and not isinstance(value, bool):
        return parse_duration(value)
    return value


Wait = Annotated[float, BeforeValidator(_wait)]


class Backoff(SpecModel):
    """How long a run waits before its next attempt after a failure: `initial`, times `factor` per failure
    since, at most `max`. Preemptions, drains and moves before a start do not back off."""

    initial: Wait = 30.0
    factor: float = Field(default=2.0, ge=1.0, allow_inf_nan=False)
    max: Wait = 600.0

    @model_validator(mode="after")
    def _max_covers_initial(self) -> Backoff:
        if self.max < self.initial:
            why = f"is shorter than initial ({self.initial:g}s): {self.max:g}s"
            raise_items([(("max",), why, f"raise max to at least {self.initial:g}s, or lower initial")])
        return self


class Retries(SpecModel):
    max: int = Field(default=0, strict=True, ge=0)
    exit_codes: list[Annotated[int, Field(strict=True)]] = Field(default_factory=list)
    backoff: Backoff = Field(default_factory=Backoff)


class Target(SpecModel):
    """The model quality a run aims at: met the first time a reported `metric` satisfies `op value`, on the
    run's own reports (`via: self`) or on those of an eval run started from one of its checkpoints (`via: eval`)."""

    metric: NonEmpty
    op: Literal["<=", "<", ">=", ">", "=="] = "<="
    value: float = Field(allow_inf_nan=False)
    via: Literal["self", "eval"] = "self"


class ExperimentSpec(SpecModel):
    stage: Stage
    image: NonEmpty
    command: list[NonEmpty] = Field(min_length=1)
    args: list[Text] = Field(default_factory=list)
    config: Uri | None = None
    code: CodeRef = Field(default_factory=CodeRef)
    dataset: DatasetRef
    checkpoint: CheckpointSpec
    resources: Resources
    parallelism: Parallelism = Field(default_factory=Parallelism)
    parts: dict[Name, Part] = Field(default_factory=dict)
    """Parts of a pipeline run (an RL run's sampler, reward and learner), placed as linked allocations."""
    accelerators: AcceleratorPrefs = Field(default_factory=AcceleratorPrefs)
    parent: ParentRef | None = None
    retries: Retries = Field(default_factory=Retries)
    priority: Priority = "normal"
    env: dict[str, Text] = Field(default_factory=dict)
    target: Target | None = None

    @model_validator(mode="after")
    def _workers_have_chips(self) -> ExperimentSpec:
        res = self.resources
        items = nested(("parallelism",), parallelism_items(self.parallelism.data, res.chips, res.max_chips))
        sizes = {name: (p.chips, p.replicas) for name, p in self.parts.items()}
        elastic = res.min_chips is not None or res.max_chips is not None
        items += parts_items(sizes, res.chips, elastic, self.parallelism.data)
        raise_items(items)
        return self


class Experiment(SpecModel):
    api_version: ApiVersion = Field(alias="apiVersion")
    kind: Literal["Experiment"]
    metadata: Metadata
    spec: ExperimentSpec

    @property
    def name(self) -> str:
        return self.metadata.name

    @property
    def team(self) -> str | None:
        return self.metadata.team

    @property
    def stage(self) -> Stage:
        return self.spec.stage

    @property
    def chips(self) -> int:
        return self.spec.resources.chips

    @property
    def parts(self) -> dict[str, Part]:
        """The run's parts (empty for a single-part run)."""
        return self.spec.parts

    @property
    def data_parallel(self) -> int:
        """How many data-parallel worker processes the run starts with."""
        return self.spec.parallelism.data


def cross_checks(data: Any) -> Items:
    """The cross-field checks above, run on unvalidated data so they report even when other fields fail."""
    spec = as_dict(as_dict(data).get("spec"))
    resources = as_dict(spec.get("resources"))
    counts = [as_int(resources.get(k)) for k in ("chips", "min_chips", "max_chips")]
    chips, least, most = (n if n is not None and n > 0 else None for n in counts)
    items = nested(("spec", "resources"), chip_range_items(chips, least, most))
    parallelism = as_dict(spec.get("parallelism"))
    data = as_int(parallelism.get("data"))
    items += nested(("spec", "parallelism"), parallelism_items(data if data and data > 0 else None, chips, most))
    items += _parts_cross_checks(spec, chips, least is not None or most is not None, data)
    accelerators = as_dict(spec.get("accelerators"))
    prefer, allow = accelerators.get("prefer"), accelerators.get("allow")
    if isinstance(prefer, str) and isinstance(allow, list) and all(isinstance(a, str) for a in allow) and allow:
        items += nested(("spec", "accelerators"), preference_items(prefer, allow))
    return items


def _parts_cross_checks(spec: dict[str, Any], chips: int | None, elastic: bool, data: int | None) -> Items:
    """The parts' sum, checked when every part's chips and replicas are readable numbers."""
    raw = as_dict(spec.get("parts"))
    sizes: dict[str, tuple[int, int]] = {}
    for name, part in raw.items():
        fields = as_dict(part)
        size, replicas = as_int(fields.get("chips")), as_int(fields.get("replicas", 1))
        if size is None or replicas is None or size <= 0 or replicas <= 0:
            return []  # the schema reports the part itself
        sizes[str(name)] = (size, replicas)
    return nested(("spec",), parts_items(sizes, chips, elastic, data))


def experiment_digest(exp: Experiment) -> str:
    """`sha256:<hex>` of the experiment's canonical JSON: equal experiments have equal digests."""
    data = exp.model_dump(mode="json")
    if exp.spec.parallelism == Parallelism():
        del data["spec"]["parallelism"]  # digests of experiments from before parallelism stay as they were
    if not exp.spec.parts:
        del data["spec"]["parts"]  # likewise for runs without parts
    canonical = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return "sha256:" + hashlib.sha256(canonical.encode("utf-8")).hexdigest()


WORK_FIELDS_IGNORED: tuple[tuple[str, ...], ...] = (
    ("metadata",),
    ("spec", "priority"),
    ("spec", "accelerators"),
    ("spec", "retries"),
    ("spec", "parent"),
    ("spec", "target"),
    ("spec", "checkpoint", "dir"),
    ("spec", "code", "commit"),
    ("spec", "dataset", "version"),
)
"""What an experiment's work digest leaves out: who, when and where it runs, not what it computes."""


def work_digest(recorded: Mapping[str, Any]) -> str:
    """`sha256:<hex>` of what a run computes: its recorded experiment (as stored, by alias) without its name,
    team, labels, priority, placement preferences, retries, parent, target, checkpoint directory, commit and
    dataset version. Runs with equal work digests are measurements of the same work: run-time estimates
    learn from them, and a verdict compares them."""
    data = json.loads(json.dumps(recorded, default=str))
    for path in WORK_FIELDS_IGNORED:
        node = data
        for key in path[:-1]:
            node = node.get(key) if isinstance(node, dict) else None
        if isinstance(node, dict):
            node.pop(path[-1], None)
    canonical = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return "sha256:" + hashlib.sha256(canonical.encode("utf-8")).hexdigest()
