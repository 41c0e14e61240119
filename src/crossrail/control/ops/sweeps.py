"""Sweeps: one ordinary run per point of a grid of `--set` values, named together by a sweep id.

`--grid KEY=V1,V2,...` gives a key (a dotted path, as `--set` takes it) and its values, each read as a YAML
scalar; the points are every combination of the grids' values, the first grid varying slowest. `--random N
--seed S` keeps N of them, drawn without replacement by Python's `random.Random(S)`, so the same seed picks
the same points. The sweep id is the digest of the experiment file's bytes, the fixed `--set`s, the grid and
the draw: submitting the same sweep again names the same id, and its members are the runs already there.

Each member is submitted with the idempotency key `sweep:<id>:<index of its point in the whole grid>` and
carries the labels `crossrail-sweep` (the id) and `crossrail-sweep-point` (its values, as JSON), which
`crossrail show` prints with the rest of the run's spec. docs/sweeps.md.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from crossrail.errors import Problem, SpecError, UsageError

SWEEP_LABEL = "crossrail-sweep"
POINT_LABEL = "crossrail-sweep-point"
KEY_PREFIX = "sweep:"
MAX_POINTS = 1000
"""The most runs one sweep submits (a grid of more points needs --random)."""


@dataclass(frozen=True)
class Axis:
    """One `--grid` argument: the key it sets and its values, each with the text it was written as."""

    key: str
    values: tuple[Any, ...]
    texts: tuple[str, ...]


@dataclass(frozen=True)
class Point:
    """One point of a sweep: its index in the whole grid and the value of each key."""

    index: int
    values: tuple[tuple[str, Any], ...]

    @property
    def params(self) -> dict[str, Any]:
        return dict(self.values)

    def sets(self, axes: Sequence[Axis]) -> list[str]:
        """The `--set` arguments that make this point: each key with the text its value was written as."""
        texts = {a.key: dict(zip(a.values, a.texts, strict=True)) for a in axes}
        return [f"{key}={_text(texts[key], value)}" for key, value in self.values]


def _text(texts: Mapping[Any, str], value: Any) -> str:
    for v, t in texts.items():
        if v == value and type(v) is type(value):
            return t
    return json.dumps(value)


def parse_grid(grids: Sequence[str]) -> list[Axis]:
    """Every `--grid KEY=V1,V2,...` argument read; a UsageError naming each malformed one (none submitted)."""
    from crossrail.spec.loader import parse_value

    axes: list[Axis] = []
    problems: list[str] = []
    for raw in grids:
        key, sep, rest = raw.partition("=")
        key = key.strip()
        if not sep or not key or not rest.strip():
            problems.append(f"--grid {raw!r}: expected KEY=V1,V2,... (e.g. --grid spec.resources.chips=1,2,4)")
            continue
        if not all(key.split(".")):
            problems.append(f"--grid {raw!r}: {key!r} has an empty part; separate keys with single dots")
            continue
        if any(a.key == key for a in axes):
            problems.append(f"--grid {raw!r}: {key} is gridded twice; give all its values in one --grid")
            continue
        values: list[Any] = []
        texts: list[str] = []
        for text in (t.strip() for t in rest.split(",")):
            try:
                value = parse_value(text, f"--grid {key}")[0] if text else None
            except SpecError as exc:
                reason = "; ".join(p.message for p in exc.problems)
                problems.append(f"--grid {raw!r}: value {text!r} is not valid YAML ({reason}); quote it")
                continue
            if not text or isinstance(value, dict | list) or value is None:
                problems.append(f"--grid {raw!r}: value {text!r} is not a scalar (a number, a word or true/false)")
                continue
            if any(v == value and type(v) is type(value) for v in values):
                problems.append(f"--grid {raw!r}: value {text!r} is given twice")
                continue
            values.append(value)
            texts.append(text)
        axes.append(Axis(key, tuple(values), tuple(texts)))
    if not grids:
        problems.append("a sweep needs at least one --grid KEY=V1,V2,... (e.g. --grid spec.resources.chips=1,2,4)")
    if problems:
        raise UsageError("; ".join(problems))
    return axes


def points(axes: Sequence[Axis], *, sample: int | None = None, seed: int = 0) -> list[Point]:
    """The grid's points, the first axis varying slowest; with `sample`, that many drawn without replacement by
    `random.Random(seed)` (kept in grid order)."""
    total = math.prod(len(a.values) for a in axes)
    if sample is not None:
        if not 1 <= sample <= total:
            raise UsageError(f"--random {sample}: the grid has {total} points; draw between 1 and {total}")
        chosen = sorted(random.Random(seed).sample(range(total), sample))
    else:
        if total > MAX_POINTS:
            raise UsageError(
                f"the grid has {total} points, more than {MAX_POINTS} runs at once; draw some with --random N"
            )
        chosen = list(range(total))
    keys = [a.key for a in axes]
    return [Point(index, tuple(zip(keys, _nth(axes, index), strict=True))) for index in chosen]


def _nth(axes: Sequence[Axis], index: int) -> tuple[Any, ...]:
    """The `index`-th combination of the axes' values in itertools.product's order, without listing them all."""
    picked = []
    for axis in reversed(axes):
        index, at = divmod(index, len(axis.values))
        picked.append(axis.values[at])
    return tuple(reversed(picked))


def sweep_id(text: str, sets: Sequence[str], axes: Sequence[Axis], sample: int | None, seed: int) -> str:
    """The digest of the file's text, the fixed sets, the grid (keys and values as written) and the draw."""
    described = {
        "file": hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest(),
        "sets": list(sets),
        "grid": [[a.key, list(a.texts)] for a in axes],
        "random": sample,
        "seed": seed if sample is not None else None,
    }
    digest = hashlib.sha256(json.dumps(described, sort_keys=True).encode()).hexdigest()
    return f"sw-{digest[:12]}"


def member_key(sweep: str, point: Point) -> str:
    return f"{KEY_PREFIX}{sweep}:{point.index}"


def labelled(doc: Any, sweep: str, point: Point) -> Any:
    """The document with the sweep's labels in its metadata (a copy; `doc` is left as it is)."""
    import copy

    from crossrail.spec.loader import Document

    data = copy.deepcopy(doc.data)
    meta = data.get("metadata") if isinstance(data, dict) else None
    if isinstance(meta, dict):
        labels = meta.get("labels")
        labels = dict(labels) if isinstance(labels, dict) else {}
        labels[SWEEP_LABEL] = sweep
        labels[POINT_LABEL] = json.dumps(point.params, sort_keys=False)
        meta["labels"] = labels
    return Document(doc.source, data, dict(doc.lines), dict(doc.overrides))


def grid_problems(problems: Sequence[Problem], axes: Sequence[Axis], pts: Sequence[Point]) -> list[Problem]:
    """The problems of every point's document, each once, those a grid value caused said as that `--grid`."""
    grid_sets = {s: p for p in pts for s in p.sets(axes)}
    out: dict[tuple[Any, ...], Problem] = {}
    for found in problems:
        p = found
        if p.argument is not None and p.argument in grid_sets:
            key = p.argument.partition("=")[0]
            message = p.message.replace(f"--set {p.argument!r}", f"--grid {key}").replace("--set", "--grid")
            p = replace(p, message=f"{message} (--grid value {p.argument})", argument=None, line=None)
        out.setdefault((found.source, found.path, found.message, found.line), p)  # once, not once per point
    return list(out.values())


def point_index(run: Any) -> int:
    """The index in the whole grid of a member's point, from its idempotency key."""
    return int(str(run.idempotency_key).rsplit(":", 1)[-1])


def point_of(run_spec: Mapping[str, Any]) -> dict[str, Any]:
    """The values of a member's point, from its label (an empty dict for a run that carries none)."""
    labels = (run_spec.get("metadata") or {}).get("labels") or {}
    try:
        values = json.loads(labels.get(POINT_LABEL) or "{}")
    except ValueError:
        return {}
    return values if isinstance(values, dict) else {}


def value_at(run_spec: Mapping[str, Any], path: str) -> Any:
    """The value at dotted `path` of a run's recorded experiment (list items by index); None when absent."""
    node: Any = run_spec
    for part in path.split("."):
        if isinstance(node, dict):
            node = node.get(part)
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return None
    return node


def ranked(members: list[dict[str, Any]], better: str) -> list[dict[str, Any]]:
    """Members best first by `metric` (`better`: lower or higher), those without one last in grid order; each
    with its `rank` (None without a metric)."""
    scored = [m for m in members if isinstance(m.get("metric"), int | float) and math.isfinite(m["metric"])]
    rest = [m for m in members if m not in scored]
    scored.sort(key=lambda m: (m["metric"] if better == "lower" else -m["metric"], m["point"]))
    rest.sort(key=lambda m: m["point"])
    return [{**m, "rank": i + 1} for i, m in enumerate(scored)] + [{**m, "rank": None} for m in rest]
