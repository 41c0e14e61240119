"""Build plain Python values from YAML parser events, refusing everything a hostile file could abuse.

Events, not composed nodes: the composer recurses once per nesting level and follows aliases into cycles,
while the event stream lets every limit (depth, size, alias expansion, tags) be checked before any work.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

import yaml

from crossrail.errors import Problem, ProblemCode
from crossrail.spec.paths import Path, format_path

try:
    from yaml import CSafeLoader as _Loader
except ImportError:  # PyYAML built without libyaml
    from yaml import SafeLoader as _Loader  # type: ignore[assignment]


MAX_DEPTH = 64
MAX_NODES = 100_000
MAX_SCALAR_CHARS = 64 * 1024

_STD = "tag:yaml.org,2002:"
_SCALAR_TAGS = {f"{_STD}{t}" for t in ("str", "int", "float", "bool", "null", "timestamp")}
_MAP_TAG = f"{_STD}map"
_SEQ_TAG = f"{_STD}seq"
_MERGE_TAG = f"{_STD}merge"


class _Abort(Exception):
    """A limit was crossed: stop reading the document at once."""


def _show_tag(tag: str) -> str:
    return "!!" + tag[len(_STD) :] if tag.startswith(_STD) else tag


@dataclass
class _Anchor:
    value: Any
    size: int
    lines: list[tuple[Path, int]]


@dataclass
class _Builder:
    loader: Any
    source: str
    problems: list[Problem] = field(default_factory=list)
    lines: dict[Path, int] = field(default_factory=dict)
    nodes: int = 0
    anchors: dict[str, _Anchor] = field(default_factory=dict)
    open_anchors: list[str] = field(default_factory=list)
    line_log: list[tuple[Path, int]] = field(default_factory=list)

    def problem(
        self,
        line: int | None,
        message: str,
        fix: str | None = None,
        path: Path | None = None,
        code: ProblemCode = ProblemCode.BAD_YAML,
    ) -> None:
        where = format_path(path) if path is not None else ""
        self.problems.append(Problem(self.source, where, message, line=line, fix=fix, code=code))

    def abort(self, line: int | None, message: str, fix: str | None = None) -> _Abort:
        self.problem(line, message, fix)
        return _Abort(message)

    def next_line(self) -> int:
        """The 1-based line the next event starts on."""
        return int(self.loader.peek_event().start_mark.line) + 1

    def record(self, path: Path | None, line: int) -> None:
        if path is not None:
            self.lines.setdefault(path, line)
            self.line_log.append((path, line))

    def count(self, n: int, line: int) -> None:
        self.nodes += n
        if self.nodes > MAX_NODES:
            raise self.abort(
                line,
                f"too many nodes after alias expansion (more than {MAX_NODES} values)",
                "remove the aliases (*name) that repeat large parts, or split the file",
            )

    # 1. One node: an alias, a scalar, a sequence or a mapping.
    def node(self, path: Path | None, depth: int) -> Any:
        event = self.loader.get_event()
        line = event.start_mark.line + 1
        if isinstance(event, yaml.AliasEvent):
            return self.alias(event.anchor or "", path, line)
        anchor = event.anchor
        if anchor is not None:
            self.open_anchors.append(anchor)
        start_nodes, start_log = self.nodes, len(self.line_log)
        self.count(1, line)
        if isinstance(event, yaml.ScalarEvent):
            value = self.scalar(event, line, path)
        elif isinstance(event, yaml.SequenceStartEvent | yaml.MappingStartEvent):
            if depth >= MAX_DEPTH:
                raise self.abort(line, f"nested more than {MAX_DEPTH} levels deep", "flatten the document")
            value = self.collection(event, path, depth + 1, line)
        else:  # the parser only yields the events above here; anything else is a parser defect
            raise self.abort(line, f"unexpected YAML event {type(event).__name__}")
        if anchor is not None:
            self.open_anchors.remove(anchor)
            base = len(path) if path is not None else 0
            relative = [(p[base:], n) for p, n in self.line_log[start_log:]]
            self.anchors[anchor] = _Anchor(value, self.nodes - start_nodes, relative)
        return value

    # 2. An alias repeats its anchor's value; its cost counts again on every use.
    def alias(self, name: str, path: Path | None, line: int) -> Any:
        found = self.anchors.get(name)
        if found is None:
            if name in self.open_anchors:
                message = f"alias *{name} refers to the node that contains it (a recursive anchor)"
            else:
                message = f"alias *{name} refers to no anchor &{name} defined before it"
            self.problem(line, message, "repeat the value instead, or anchor it before this line", path)
            return None
        self.count(found.size, line)
        if path is not None:
            for relative, n in found.lines:
                self.record(path + relative, n)
        return copy.deepcopy(found.value)

    # 3. Scalars: only the standard tags; timestamps stay the text they were written as.
    def scalar(self, event: Any, line: int, path: Path | None) -> Any:
        value: str = event.value
        if len(value) > MAX_SCALAR_CHARS:
            message = f"a value of {len(value)} characters; the limit is {MAX_SCALAR_CHARS}"
            self.problem(line, message, "keep large data in object storage and refer to it by URI", path)
            return None
        tag = event.tag
        if tag is None or tag == "!":
            tag = self.loader.resolve(yaml.ScalarNode, value, event.implicit)
        elif tag not in _SCALAR_TAGS:
            self.problem(line, f"tag {_show_tag(tag)} is not allowed", _NO_TAGS, path)
            return None
        construct = {
            f"{_STD}null": self.loader.construct_yaml_null,
            f"{_STD}bool": self.loader.construct_yaml_bool,
            f"{_STD}int": self.loader.construct_yaml_int,
            f"{_STD}float": self.loader.construct_yaml_float,
        }.get(tag)
        if construct is None:  # str, timestamp, and YAML 1.1 oddities such as `=` (!!value): keep the text
            return value
        node = yaml.ScalarNode(tag, value, event.start_mark, event.end_mark, event.style)
        try:
            return construct(node)
        except (ValueError, KeyError, OverflowError):
            shown = value if len(value) <= 60 else value[:57] + "..."
            self.problem(line, f"{shown!r} is not a valid {_show_tag(tag)}", "quote it to keep it as text", path)
            return None

    def collection(self, event: Any, path: Path | None, depth: int, line: int) -> Any:
        is_map = isinstance(event, yaml.MappingStartEvent)
        tag = event.tag
        allowed = _MAP_TAG if is_map else _SEQ_TAG
        refused = tag is not None and tag not in ("!", allowed)
        if refused:
            self.problem(line, f"tag {_show_tag(tag)} is not allowed", _NO_TAGS, path)
        value = self.mapping(path, depth) if is_map else self.sequence(path, depth)
        return None if refused else value

    def sequence(self, path: Path | None, depth: int) -> list[Any]:
        items: list[Any] = []
        while not self.loader.check_event(yaml.SequenceEndEvent):
            line = self.next_line()
            here = (*path, len(items)) if path is not None else None
            self.record(here, line)
            items.append(self.node(here, depth))
        self.loader.get_event()
        return items

    # 4. Mappings: string keys only, each once; `<<` merges keys the mapping does not set itself.
    def mapping(self, path: Path | None, depth: int) -> dict[str, Any]:
        result: dict[str, Any] = {}
        first_line: dict[str, int] = {}
        merges: list[tuple[Any, int]] = []
        while not self.loader.check_event(yaml.MappingEndEvent):
            line = self.next_line()
            key = self.key(path, depth, line)
            if key is _MERGE:
                merges.append((self.node(None, depth), line))
                continue
            if not isinstance(key, str):
                self.node(None, depth)
                continue
            if key in first_line:
                message = f"duplicate key {key!r} (first at line {first_line[key]})"
                self.problem(line, message, "keep one of them", (*path, key) if path is not None else None)
                self.node(None, depth)
                continue
            first_line[key] = line
            here = (*path, key) if path is not None else None
            self.record(here, line)
            result[key] = self.node(here, depth)
        self.loader.get_event()
        for merged, line in merges:
            self.merge(result, merged, path, line)
        return result

    def key(self, path: Path | None, depth: int, line: int) -> object:
        event = self.loader.peek_event()
        text = event.value if isinstance(event, yaml.ScalarEvent) else None
        if (
            text is not None
            and event.tag is None
            and self.loader.resolve(yaml.ScalarNode, text, event.implicit) == _MERGE_TAG
        ):
            self.loader.get_event()
            self.count(1, line)
            return _MERGE
        reported = len(self.problems)
        key = self.node(None, depth)
        if isinstance(key, str) or len(self.problems) > reported:
            return key
        if isinstance(key, dict | list):
            self.problem(line, "a key that is a mapping or a list", "keys must be plain text", path)
        elif text is None:
            self.problem(line, f"key {key!r} is not text", "write the key as plain text", path)
        else:
            kind = _KEY_KINDS.get(type(key), "a value")
            self.problem(line, f"key {text!r} is read as {kind}, not text", f"quote it: '{text}'", path)
        return None

    def merge(self, target: dict[str, Any], merged: Any, path: Path | None, line: int) -> None:
        sources = merged if isinstance(merged, list) else [merged]
        if not all(isinstance(s, dict) for s in sources):
            self.problem(line, "`<<` must merge a mapping or a list of mappings", None, path)
            return
        for source in sources:
            for k, v in source.items():
                if k not in target:
                    target[k] = v
                    self.record((*path, k) if path is not None else None, line)


_MERGE = object()
_NO_TAGS = "remove the tag; crossrail reads plain data"
_KEY_KINDS = {bool: "a boolean", int: "a number", float: "a number", type(None): "null"}


def compose(text: str, source: str) -> tuple[Any, dict[Path, int], list[Problem], bool]:
    """(value, lines, problems, empty) for the single YAML document in `text`.

    Problems are gathered as far as the document can still be read; a crossed limit stops at once.
    """
    loader = _Loader(text)
    builder = _Builder(loader, source)
    value: Any = None
    empty = False
    try:
        loader.get_event()  # stream start
        if loader.check_event(yaml.StreamEndEvent):
            empty = True
        else:
            loader.get_event()  # document start
            builder.record((), builder.next_line())
            value = builder.node((), 0)
            loader.get_event()  # document end
            if not loader.check_event(yaml.StreamEndEvent):
                builder.problem(
                    builder.next_line(),
                    "more than one document (a second `---`)",
                    "keep one document per file",
                )
    except _Abort:
        pass
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else None
        what = ", ".join(part for part in (exc.context, exc.problem) if part)
        builder.problem(line, f"not valid YAML: {what}", code=ProblemCode.YAML_SYNTAX)
    except yaml.reader.ReaderError as exc:
        line = text.count("\n", 0, exc.position) + 1
        message = f"not valid YAML: character #x{exc.character:04x} ({exc.reason})"
        builder.problem(line, message, code=ProblemCode.YAML_SYNTAX)
    except yaml.YAMLError as exc:
        builder.problem(None, f"not valid YAML: {str(exc).splitlines()[0]}", code=ProblemCode.YAML_SYNTAX)
    except RecursionError:
        builder.problem(None, f"nested more than {MAX_DEPTH} levels deep", "flatten the document")
    finally:
        loader.dispose()
    return value, builder.lines, builder.problems, empty
