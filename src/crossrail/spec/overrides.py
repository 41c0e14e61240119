"""`--set path=value` overrides (and `path+=value`, `path-=value` on lists) applied to a Document before it
is validated."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

from crossrail.errors import Problem, ProblemCode, SpecError
from crossrail.spec.loader import Document, parse_value
from crossrail.spec.paths import Path, format_path
from crossrail.spec.problems import show


def apply_overrides(doc: Document, sets: Sequence[str]) -> Document:
    """A new Document with each `dotted.path=value` applied in order; `doc` is left unchanged.

    The value is read as YAML (`4` is a number, `[a, b]` a list, `~` null, nothing an empty string).
    Missing mapping keys along the path are created; list items are addressed by index (`spec.args.1`).
    `path+=value` appends to the list at `path` (creating it when missing; a list value appends each item),
    `path-=value` removes every item equal to `value` (each item of a list value), which must be there.
    Every malformed override is reported in one SpecError.
    """
    data = copy.deepcopy(doc.data)
    lines = dict(doc.lines)
    overrides = dict(doc.overrides)
    problems: list[Problem] = []
    for raw in sets:
        try:
            keys, op, value = _parse(raw, doc.source)
            path = _assign(data, keys, value, raw, doc.source, op=op)
        except SpecError as exc:
            problems.extend(exc.problems)
            continue
        lines = {p: n for p, n in lines.items() if p[: len(path)] != path}
        overrides = {p: a for p, a in overrides.items() if p[: len(path)] != path}
        overrides[path] = raw
    if problems:
        raise SpecError(problems)
    return Document(doc.source, data, lines, overrides)


def _problem(source: str, raw: str, message: str, fix: str | None = None) -> SpecError:
    key = raw.partition("=")[0].strip().rstrip("+-").rstrip() if "=" in raw else ""
    return SpecError([Problem(source, key, f"--set {raw!r}: {message}", fix=fix, code=ProblemCode.BAD_VALUE)])


def _parse(raw: str, source: str) -> tuple[tuple[str, ...], str, Any]:
    """The path, the operation (`=`, `+=` or `-=`) and the value of one override."""
    key, sep, text = raw.partition("=")
    key = key.strip()
    op = "="
    if key[-1:] in {"+", "-"}:
        op, key = key[-1] + "=", key[:-1].rstrip()
    if not sep or not key:
        raise _problem(source, raw, "expected key=value", "write e.g. --set spec.resources.chips=4")
    path = tuple(key.split("."))
    if not all(path):
        raise _problem(source, raw, f"{key!r} has an empty part", "separate keys with single dots")
    if not text.strip():
        return path, op, ""
    try:
        value, _ = parse_value(text, f"--set {key}")
    except SpecError as exc:
        reason = "; ".join(p.message for p in exc.problems)
        raise _problem(source, raw, f"the value is not valid YAML ({reason})", "quote it") from None
    return path, op, value


def _assign(data: Any, keys: tuple[str, ...], value: Any, raw: str, source: str, *, op: str = "=") -> Path:
    """Set `value` at `keys` inside `data` (or append or remove it, by `op`); the path actually written, list
    indexes as ints."""
    node: Any = data
    path: Path = ()
    for depth, key in enumerate(keys):
        part: str | int = key
        if isinstance(node, list):
            if not (key.isascii() and key.isdigit()) or int(key) >= len(node):
                bound = f"0 to {len(node) - 1}" if node else "none, the list is empty"
                message = f"{format_path(path)} is a list; index {key!r} is not one of {bound}"
                listed = format_path(path)
                fix = f"to add an item write --set {listed}+=VALUE; to remove one, --set {listed}-=VALUE"
                raise _problem(source, raw, message, fix)
            part = int(key)
        elif not isinstance(node, dict):
            shown = format_path(path) or "the document"
            raise _problem(source, raw, f"{shown} is {show(node)}, not a mapping or a list")
        path = (*path, part)
        if depth == len(keys) - 1:
            present = node.get(part) if isinstance(node, dict) else node[part]
            node[part] = value if op == "=" else _changed_list(present, value, op=op, path=path, raw=raw, source=source)
        elif isinstance(node, dict) and node.get(part) is None:
            node[part] = {}
            node = node[part]
        else:
            node = node[part]
    return path


def _changed_list(present: Any, value: Any, *, op: str, path: Path, raw: str, source: str) -> list[Any]:
    """The list `present` with `value` appended (`+=`) or removed (`-=`); each item of a list value."""
    items = value if isinstance(value, list) else [value]
    if present is None and op == "+=":
        return list(items)
    if not isinstance(present, list):
        shown = "not set" if present is None else f"{show(present)}, not a list"
        raise _problem(source, raw, f"{format_path(path)} is {shown}", f"{op} works on a list; set a value with =")
    if op == "+=":
        return [*present, *items]
    missing = [item for item in items if item not in present]
    if missing:
        listed = ", ".join(show(i) for i in present) or "nothing, the list is empty"
        message = f"{format_path(path)} has no item {', '.join(show(i) for i in missing)}; it holds {listed}"
        raise _problem(source, raw, message)
    return [item for item in present if item not in items]
