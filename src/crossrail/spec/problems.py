"""Turn pydantic validation errors into Problems: field path, line, a plain message and how to fix it."""

from __future__ import annotations

import ast
import dataclasses
import difflib
import re
import types
from collections.abc import Iterable
from typing import Annotated, Any, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError

from crossrail.errors import Problem, ProblemCode
from crossrail.spec.common import FieldErrors, Items, nested
from crossrail.spec.loader import Document
from crossrail.spec.paths import Path, format_path


def did_you_mean(word: str, choices: Iterable[str]) -> str | None:
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.7)
    return f"did you mean {close[0]!r}?" if close else None


def show(value: Any) -> str:
    """A value as the YAML reader saw it, short enough for one line."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, str):
        return repr(value if len(value) <= 60 else value[:57] + "...")
    text = str(value)
    return text if len(text) <= 60 else text[:57] + "..."


def sort_problems(problems: Iterable[Problem]) -> list[Problem]:
    """Without repeats, in line then path order; problems without a line come last."""
    unique = list(dict.fromkeys(problems))
    return sorted(unique, key=lambda p: (p.line is None, p.line or 0, p.path))


_PATH_PART = re.compile(r"\.?([A-Za-z_][A-Za-z0-9_-]*)|\[(\d+)\]|\[('(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\")\]")


def parse_path(text: str) -> Path | None:
    """`spec.command[0]` -> `('spec', 'command', 0)`, the inverse of format_path; None if it is not a path."""
    path: list[str | int] = []
    pos = 0
    while pos < len(text):
        m = _PATH_PART.match(text, pos)
        if m is None or (m.group(1) is not None and text[pos] == "." and not path):
            return None
        key, index, quoted = m.groups()
        path.append(key if key is not None else int(index) if index is not None else ast.literal_eval(quoted))
        pos = m.end()
    return tuple(path)


def locate(problems: Iterable[Problem], doc: Document) -> list[Problem]:
    """`doc`'s problems given their place: the `--set` argument that wrote the field, else the field's line.

    Problems found after a document was read (at submit: fleet, parent, dataset, commit) come without a
    line; problems about an overridden field would otherwise point at the line the argument replaced.
    """
    return sort_problems(_located(problem, doc) for problem in problems)


def _located(problem: Problem, doc: Document) -> Problem:
    path = parse_path(problem.path) if problem.source == doc.source and problem.path else None
    if path is None:
        return problem
    argument = doc.override_of(path)
    if argument is not None:
        return dataclasses.replace(problem, line=None, argument=argument)
    return problem if problem.line is not None else dataclasses.replace(problem, line=doc.line_of(path))


def problems_at(doc: Document, items: Items) -> list[Problem]:
    """Problems for findings whose paths are absolute in `doc`."""
    return [
        Problem(doc.source, format_path(path), message, doc.line_of(path), fix, code=ProblemCode.BAD_VALUE)
        for path, message, fix in items
    ]


def problems_from(exc: ValidationError, doc: Document, model: type[BaseModel]) -> list[Problem]:
    """One Problem per pydantic error, in line order."""
    problems: list[Problem] = []
    for err in exc.errors(include_url=False):
        loc: Path = tuple(err["loc"])
        error = err.get("ctx", {}).get("error")
        if isinstance(error, FieldErrors):
            problems += problems_at(doc, nested(loc, error.items))
        else:
            problems.append(_problem(err, loc, doc, model))
    return sort_problems(problems)


def _problem(err: Any, loc: Path, doc: Document, model: type[BaseModel]) -> Problem:
    kind: str = err["type"]
    value = err.get("input")
    ctx: dict[str, Any] = err.get("ctx", {})
    is_key = bool(loc) and loc[-1] == "[key]"
    if is_key:
        loc = loc[:-1]
    message, fix = _describe(kind, value, ctx, err["msg"])
    code = code_of(kind)
    if kind == "missing":
        key, loc = loc[-1], loc[:-1]
        message, fix = (
            f"missing required key {key!r}",
            f"add `{key}:` to {format_path(loc) or 'the document'}",
        )
    elif kind == "extra_forbidden":
        allowed = _keys_at(model, loc[:-1])
        message = f"unknown key {loc[-1]!r}"
        fix = did_you_mean(str(loc[-1]), allowed) or (f"allowed keys: {', '.join(allowed)}" if allowed else None)
    elif is_key:
        message = f"key {message}"
    return Problem(doc.source, format_path(loc), message, doc.line_of(loc), fix, code=code)


def code_of(kind: str) -> ProblemCode:
    """The code of a problem pydantic reports as error type `kind`."""
    if kind == "missing":
        return ProblemCode.MISSING_FIELD
    if kind == "extra_forbidden":
        return ProblemCode.UNKNOWN_FIELD
    return ProblemCode.WRONG_TYPE if kind in _EXPECTED else ProblemCode.BAD_VALUE


def _describe(kind: str, value: Any, ctx: dict[str, Any], msg: str) -> tuple[str, str | None]:
    if kind in ("literal_error", "enum"):
        allowed = re.findall(r"'([^']*)'", str(ctx.get("expected", "")))
        fix = did_you_mean(value, allowed) if isinstance(value, str) else None
        return f"{show(value)} is not one of {', '.join(allowed)}", fix
    if kind == "string_type" and isinstance(value, bool | int | float):
        noun = "boolean" if isinstance(value, bool) else "number"
        return f"expected text, got the {noun} {show(value)}", f"quote it: '{show(value)}'"
    described = _mismatch(kind, value) or _limit(kind, value, ctx)
    if described is not None:
        return described
    if kind == "value_error":
        return str(ctx.get("error", msg)), None
    return f"{msg[0].lower()}{msg[1:]} (got {show(value)})", None


_EXPECTED = {
    "string_type": "text",
    "int_type": "a whole number",
    "int_parsing": "a whole number",
    "int_from_float": "a whole number",
    "float_type": "a number",
    "float_parsing": "a number",
    "bool_type": "true or false",
    "list_type": "a list",
    "dict_type": "a mapping",
    "model_type": "a mapping",
    "model_attributes_type": "a mapping",
}
_BOUNDS = {"greater_than": ">", "greater_than_equal": ">=", "less_than": "<", "less_than_equal": "<="}


def _mismatch(kind: str, value: Any) -> tuple[str, str | None] | None:
    expected = _EXPECTED.get(kind)
    if expected is None:
        return None
    fix = f"write it as a list: [{value}]" if kind == "list_type" and isinstance(value, str) else None
    return f"expected {expected}, got {show(value)}", fix


def _limit(kind: str, value: Any, ctx: dict[str, Any]) -> tuple[str, str | None] | None:
    if kind in _BOUNDS:
        limit = next(iter(ctx.values()), "?")
        return f"must be {_BOUNDS[kind]} {limit} (got {show(value)})", None
    if kind == "too_short":
        least = ctx.get("min_length", 1)
        return ("must not be empty" if least == 1 else f"needs at least {least} items"), None
    return None


def _keys_at(model: type[BaseModel], loc: Path) -> list[str]:
    """The keys the model at `loc` accepts (YAML spelling), or [] when `loc` is not a model."""
    current: Any = model
    for part in loc:
        current = _unwrap(current)
        if isinstance(current, type) and issubclass(current, BaseModel):
            field = next((f for n, f in current.model_fields.items() if part in (n, f.alias)), None)
            if field is None:
                return []
            current = field.annotation
        elif get_origin(current) is list and isinstance(part, int):
            current = get_args(current)[0]
        elif get_origin(current) is dict:
            current = get_args(current)[1]
        else:
            return []
    current = _unwrap(current)
    if isinstance(current, type) and issubclass(current, BaseModel):
        return [f.alias or n for n, f in current.model_fields.items()]
    return []


def _unwrap(annotation: Any) -> Any:
    """`Annotated[X, ...]` and `X | None` -> X."""
    while True:
        origin = get_origin(annotation)
        if origin is Annotated:
            annotation = get_args(annotation)[0]
        elif origin in (Union, types.UnionType):
            rest = [a for a in get_args(annotation) if a is not type(None)]
            if len(rest) != 1:
                return annotation
            annotation = rest[0]
        else:
            return annotation
