"""The Fleet document: pools of chips crossrail may place on, and the stage queues that share them."""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal

from pydantic import Field, field_validator, model_validator

from crossrail.core import parse_topology
from crossrail.spec.common import (
    Accelerator,
    ApiVersion,
    Items,
    Name,
    NonEmpty,
    SpecModel,
    Stage,
    as_dict,
    as_int,
    as_list,
    nested,
    raise_items,
)
from crossrail.spec.experiment import Metadata
from crossrail.spec.problems import did_you_mean

Backend = Literal["local", "ray", "kubernetes"]
PositiveInt = Annotated[int, Field(strict=True, gt=0)]


class Pool(SpecModel):
    """Chips of one type behind one backend; `topologies` are the slice shapes a TPU pool can form."""

    name: Name
    accelerator: Accelerator
    chip_type: NonEmpty
    chips: PositiveInt
    chips_per_host: PositiveInt
    topologies: list[str] = Field(default_factory=list)
    cost_per_chip_hour: float = Field(default=0.0, strict=True, ge=0, allow_inf_nan=False)
    relative_speed: float = Field(default=1.0, strict=True, gt=0, allow_inf_nan=False)
    node_labels: dict[str, str] = Field(default_factory=dict)
    backend: Backend = "local"

    @field_validator("topologies")
    @classmethod
    def _shapes(cls, value: list[str]) -> list[str]:
        items: Items = []
        for i, text in enumerate(value):
            try:
                parse_topology(text)
            except ValueError as exc:
                items.append(((i,), str(exc), None))
        raise_items(items)
        return value

    @model_validator(mode="after")
    def _sizes(self) -> Pool:
        raise_items(pool_size_items(self.chips, self.chips_per_host, self.topologies))
        return self

    @property
    def topology_shapes(self) -> list[tuple[int, ...]]:
        return [parse_topology(text) for text in self.topologies]

    def topology_chips(self) -> list[int]:
        """Chips in each slice shape, in the order the shapes are listed."""
        return [math.prod(shape) for shape in self.topology_shapes]

    @property
    def hosts(self) -> int:
        return self.chips // self.chips_per_host


def pool_size_items(chips: int | None, chips_per_host: int | None, topologies: list[Any]) -> Items:
    """Whole hosts, and slice shapes no larger than the pool; shapes that do not parse are skipped."""
    items: Items = []
    if chips is None:
        return items
    if chips_per_host is not None and chips % chips_per_host:
        message = f"{chips_per_host} does not divide chips ({chips})"
        items.append((("chips_per_host",), message, "make chips a whole number of hosts times chips_per_host"))
    for i, text in enumerate(topologies):
        try:
            size = math.prod(parse_topology(text))
        except (ValueError, AttributeError):
            continue
        if size > chips:
            items.append((("topologies", i), f"{text} needs {size} chips; the pool has {chips}", _SHAPE_FIX))
    return items


_SHAPE_FIX = "remove the shape or raise chips"


class Queue(SpecModel):
    """A stage's queue (optionally one team's): `quota` is chips per pool it is guaranteed."""

    name: Name
    stage: Stage
    team: NonEmpty | None = None
    quota: dict[str, Annotated[int, Field(strict=True, ge=0)]] = Field(default_factory=dict)
    cohort: NonEmpty | None = None


class FleetSpec(SpecModel):
    pools: list[Pool] = Field(min_length=1)
    queues: list[Queue] = Field(default_factory=list)

    @model_validator(mode="after")
    def _references(self) -> FleetSpec:
        queues = [(q.name, str(q.stage), q.team, list(q.quota)) for q in self.queues]
        raise_items(reference_items([p.name for p in self.pools], queues))
        return self


QueueKeys = tuple[Any, Any, Any, list[Any]]
"""(name, stage, team, quota pool names) of one queue, possibly unvalidated."""


def reference_items(pools: list[Any], queues: list[QueueKeys]) -> Items:
    """Unique pool and queue names, one queue per (stage, team), quotas only on pools that exist."""
    items = _duplicates("pools", pools, "pool")
    items += _duplicates("queues", [q[0] for q in queues], "queue")
    seen: dict[tuple[str, Any], int] = {}
    for i, (name, stage, team, _) in enumerate(queues):
        if not isinstance(stage, str) or not isinstance(team, str | None):
            continue
        first = seen.setdefault((stage, team), i)
        if first != i:
            whose = f"team {team}" if team else "no team"
            message = f"queue {name!r} repeats stage {stage} with {whose} (see queues[{first}])"
            items.append((("queues", i, "stage"), message, "give one queue per stage and team, or set a team"))
    names = [p for p in pools if isinstance(p, str)]
    for i, (_, _, _, quota) in enumerate(queues):
        for pool in quota:
            if pool not in names:
                fix = did_you_mean(pool, names) or f"pools are {', '.join(names)}"
                items.append((("queues", i, "quota", pool), f"unknown pool {pool!r}", fix))
    return items


def _duplicates(field: str, names: list[Any], noun: str) -> Items:
    items: Items = []
    for i, name in enumerate(names):
        if isinstance(name, str) and names.index(name) != i:
            items.append(((field, i, "name"), f"{noun} name {name!r} is used twice", f"give each {noun} its own name"))
    return items


def cross_checks(data: Any) -> Items:
    """The cross-field checks above, run on unvalidated data so they report even when other fields fail."""
    spec = as_dict(as_dict(data).get("spec"))
    pools = [as_dict(p) for p in as_list(spec.get("pools"))]
    items: Items = []
    for i, pool in enumerate(pools):
        chips, per_host = (as_int(pool.get(k)) for k in ("chips", "chips_per_host"))
        if chips is not None and chips > 0 and (per_host is None or per_host > 0):
            sizes = pool_size_items(chips, per_host, as_list(pool.get("topologies")))
            items += nested(("spec", "pools", i), sizes)
    queues = [as_dict(q) for q in as_list(spec.get("queues"))]
    keys = [(q.get("name"), q.get("stage"), q.get("team"), list(as_dict(q.get("quota")))) for q in queues]
    return items + nested(("spec",), reference_items([p.get("name") for p in pools], keys))


class Fleet(SpecModel):
    api_version: ApiVersion = Field(alias="apiVersion")
    kind: Literal["Fleet"]
    metadata: Metadata
    spec: FleetSpec

    @property
    def name(self) -> str:
        return self.metadata.name

    @property
    def pools(self) -> list[Pool]:
        return self.spec.pools

    @property
    def queues(self) -> list[Queue]:
        return self.spec.queues

    def pool(self, name: str) -> Pool:
        """The pool called `name`; KeyError naming the fleet's pools when there is none."""
        for p in self.spec.pools:
            if p.name == name:
                return p
        raise KeyError(f"no pool {name!r} in fleet {self.name}; pools are {', '.join(self.pool_names)}")

    @property
    def pool_names(self) -> list[str]:
        return [p.name for p in self.spec.pools]

    def queue_for(self, stage: Stage | str, team: str | None = None) -> Queue | None:
        """The team's own queue for `stage` when there is one, else the stage's team-less queue."""
        stage = Stage(stage)
        shared = None
        for q in self.spec.queues:
            if q.stage is stage and team is not None and q.team == team:
                return q
            if q.stage is stage and q.team is None and shared is None:
                shared = q
        return shared
