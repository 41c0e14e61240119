"""Pieces every spec model shares: the base model, stages, accelerators and value types written by people."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict

from crossrail.core import parse_duration, validate_name
from crossrail.spec.paths import Path

ApiVersion = Literal["crossrail/v1"]


class Stage(StrEnum):
    """The stage of the research cycle a workload belongs to; each stage has its own queues."""

    PRETRAINING = "pretraining"
    POST_TRAINING = "post_training"
    INFERENCE = "inference"
    REINFORCEMENT_LEARNING = "reinforcement_learning"
    EVAL = "eval"
    EXPERIMENT = "experiment"


class Accelerator(StrEnum):
    """The kind of chip a pool holds."""

    TPU = "tpu"
    GPU = "gpu"
    CPU = "cpu"


class SpecModel(BaseModel):
    """Base of every spec model: unknown keys are errors and a parsed model never changes."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


Items = list[tuple[Path, str, str | None]]
"""Cross-field findings: (path relative to the model checked, message, fix)."""


class FieldErrors(ValueError):
    """Problems a model validator found in its own fields, each relative to the model's location.

    Raised from `model_validator`s so that every cross-field problem keeps its own field path and line.
    """

    def __init__(self, items: Items) -> None:
        self.items = items
        super().__init__("; ".join(message for _, message, _ in items))


def raise_items(items: Items) -> None:
    if items:
        raise FieldErrors(items)


def as_int(value: Any) -> int | None:
    """`value` when it is a YAML integer (not a boolean), else None; for checks on unvalidated data."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def as_dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def nested(prefix: Path, items: Items) -> Items:
    return [((*prefix, *path), message, fix) for path, message, fix in items]


def _number_to_str(value: Any) -> Any:
    # YAML reads `--steps 200` or `LOG_LEVEL: 3` as numbers; arguments and variables are text anyway.
    if isinstance(value, int | float) and not isinstance(value, bool):
        return str(value)
    return value


def _duration(value: Any) -> Any:
    if isinstance(value, str | int | float):
        try:
            return parse_duration(value)
        except OverflowError:
            raise ValueError("the duration is too long; write e.g. 6h or 2d") from None
    return value


def _name(value: Any) -> Any:
    if isinstance(value, str):
        why = validate_name(value)
        if why is not None:
            raise ValueError(why)
    return value


def _non_blank(value: Any) -> Any:
    if isinstance(value, str) and not value.strip():
        raise ValueError("must not be empty")
    return value


def _uri(value: Any) -> Any:
    value = _non_blank(value)
    if isinstance(value, str):
        scheme, sep, rest = value.partition("://")
        if sep and scheme and scheme != "file" and not rest.strip("/"):  # file:/// is the root, a real path
            raise ValueError(f"{value!r} names no bucket or path; write e.g. {scheme}://bucket/path")
    return value


Text = Annotated[str, BeforeValidator(_number_to_str)]
"""A string where a YAML number is taken as its text (command arguments, environment values)."""

NonEmpty = Annotated[str, BeforeValidator(_non_blank)]
Uri = Annotated[str, BeforeValidator(_uri)]
"""A local path or a URI; a bare `scheme://` (no bucket, no path) is refused."""
Name = Annotated[str, BeforeValidator(_name)]
Seconds = Annotated[float, BeforeValidator(_duration)]
"""A duration: `6h`, `10m`, `1h30m` or a number of seconds; stored as seconds."""
