"""Read a spec file safely into a Document: plain data plus the line of every key and list item."""

from __future__ import annotations

import errno
import os
import stat
from dataclasses import dataclass, field
from typing import Any

from crossrail.errors import Problem, ProblemCode, SpecError
from crossrail.spec.compose import compose
from crossrail.spec.paths import Path

MAX_FILE_BYTES = 1024 * 1024
_BOM = b"\xef\xbb\xbf"


@dataclass(frozen=True)
class Document:
    """One parsed file: `data` is plain Python; `lines` maps a key path to the 1-based line it is on;
    `overrides` maps each path a `--set` argument replaced to that argument (`spec.resources.chips=4`)."""

    source: str
    data: Any
    lines: dict[Path, int]
    overrides: dict[Path, str] = field(default_factory=dict)

    def line_of(self, path: Path) -> int | None:
        """The line of `path`, or of its nearest parent that has one."""
        for end in range(len(path), -1, -1):
            line = self.lines.get(path[:end])
            if line is not None:
                return line
        return None

    def override_of(self, path: Path) -> str | None:
        """The `--set` argument that wrote `path` or one of its parents, if any (the last one wins)."""
        for end in range(len(path), 0, -1):
            argument = self.overrides.get(path[:end])
            if argument is not None:
                return argument
        return None


def load_document(path: str | os.PathLike[str]) -> Document:
    """Read and parse the file at `path`; SpecError unless it is a regular, small, UTF-8 YAML/JSON file."""
    source = os.fspath(path)
    return parse_document(_read(source), source)


def read_text(path: str | os.PathLike[str]) -> str:
    """The text of the file at `path` under the limits of load_document (regular, small, UTF-8, no NUL)."""
    source = os.fspath(path)
    return _decode(_read(source), source)


def parse_document(text: str | bytes, source: str) -> Document:
    """Parse YAML or JSON text whose top level is a mapping; SpecError listing every problem found."""
    data, lines = parse_value(text, source, what="document")
    if not isinstance(data, dict):
        kind = "a list" if isinstance(data, list) else f"the value {data!r}"[:80]
        raise _error(
            source,
            f"the top level is {kind}; expected a mapping such as `apiVersion: crossrail/v1`",
            1,
            code=ProblemCode.WRONG_TYPE,
        )
    return Document(source, data, lines)


def parse_value(text: str | bytes, source: str, *, what: str = "value") -> tuple[Any, dict[Path, int]]:
    """Any single YAML value from `text`, under the same limits as a document."""
    decoded = _decode(text.encode("utf-8", "surrogatepass") if isinstance(text, str) else text, source)
    value, lines, problems, empty = compose(decoded, source)
    if problems:
        raise SpecError([_tab_problem(decoded, p) or p for p in problems])
    if empty or (value is None and what == "document"):
        raise _error(source, f"the {what} is empty", None, "write a mapping such as `apiVersion: crossrail/v1`")
    return value, lines


def _tab_problem(text: str, problem: Problem) -> Problem | None:
    """PyYAML's message for a tab where YAML wants spaces, said plainly with the tab's line and column."""
    if problem.code != ProblemCode.YAML_SYNTAX or problem.line is None:
        return None
    lines = text.splitlines()
    # The parser reports the tab's line, or the line after it when the tab ends a line.
    for number in (problem.line, problem.line - 1):
        if 0 < number <= len(lines) and "\t" in lines[number - 1]:
            column = lines[number - 1].index("\t") + 1
            return Problem(
                problem.source,
                problem.path,
                f"a tab character at line {number}, column {column}; YAML indents with spaces only",
                number,
                "replace the tab with spaces (e.g. two per level)",
                code=ProblemCode.YAML_SYNTAX,
            )
    return None


def _error(
    source: str, message: str, line: int | None = None, fix: str | None = None, code: ProblemCode = ProblemCode.BAD_YAML
) -> SpecError:
    return SpecError([Problem(source, "", message, line=line, fix=fix, code=code)])


def _decode(raw: bytes, source: str) -> str:
    if len(raw) > MAX_FILE_BYTES:
        raise _error(source, f"larger than {MAX_FILE_BYTES} bytes", None, "spec files are small; check the path")
    start = len(_BOM) if raw.startswith(_BOM) else 0
    if raw.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise _error(source, "the file is UTF-16", 1, "save it as UTF-8")
    nul = raw.find(b"\x00")
    if nul >= 0:
        line = raw.count(b"\n", 0, nul) + 1
        raise _error(source, f"binary data: a NUL byte at byte offset {nul}", line, "pass a YAML or JSON text file")
    try:
        return raw[start:].decode("utf-8")
    except UnicodeDecodeError as exc:
        offset = start + exc.start
        line = raw.count(b"\n", 0, offset) + 1
        byte = raw[offset]
        raise _error(
            source, f"not UTF-8: byte 0x{byte:02x} at byte offset {offset}", line, "save the file as UTF-8"
        ) from None


def read_bounded(path: str | os.PathLike[str], max_bytes: int) -> bytes:
    """The bytes of the regular file at `path`, refused (SpecError) past `max_bytes` or when it is not a
    regular file; never opens a FIFO or device for reading, never reads more than `max_bytes` + 1 bytes."""
    source = os.fspath(path)
    raw = _read(source, max_bytes)
    if len(raw) > max_bytes:
        raise _error(source, f"larger than {max_bytes} bytes", None, "check the path")
    return raw


def _read(source: str, max_bytes: int = MAX_FILE_BYTES) -> bytes:
    """At most `max_bytes` + 1 bytes of a regular file; never opens a FIFO or device for reading."""
    try:
        # O_NONBLOCK: opening a FIFO must not wait for a writer; fstat then tells what was opened.
        fd = os.open(source, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise _error(source, _why(exc), None, _fix(exc), ProblemCode.NOT_FOUND) from None
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise _error(source, "is a directory", None, "pass a YAML or JSON file")
        if not stat.S_ISREG(mode):
            raise _error(source, "is not a regular file (a pipe, socket or device)", None, "pass a file on disk")
        chunks: list[bytes] = []
        size = 0
        while size <= max_bytes:
            chunk = os.read(fd, min(max_bytes + 1 - size, 1 << 24))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        return b"".join(chunks)
    except OSError as exc:
        raise _error(source, _why(exc), None, _fix(exc)) from None
    finally:
        os.close(fd)


def _why(exc: OSError) -> str:
    reasons = {
        errno.ENOENT: "no such file",
        errno.EISDIR: "is a directory",
        errno.ELOOP: "a symbolic link loop",
        errno.EACCES: "permission denied",
        errno.ENOTDIR: "a part of the path is not a directory",
        errno.ENAMETOOLONG: "the path is too long",
        errno.ENXIO: "is not a regular file (a socket or a device with no reader)",
    }
    return reasons.get(exc.errno or 0, f"cannot be read ({exc.strerror or exc})")


def _fix(exc: OSError) -> str | None:
    return {
        errno.ENOENT: "check the path",
        errno.ELOOP: "point the link at a file",
        errno.EACCES: "make the file readable",
    }.get(exc.errno or 0)
