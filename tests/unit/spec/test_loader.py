"""The safe loader: plain data with line numbers, and a clear SpecError for every hostile file."""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from crossrail.errors import SpecError
from crossrail.spec import load_document, parse_document
from crossrail.spec.loader import MAX_FILE_BYTES

Write = Callable[[str, str | bytes], Path]


def problems_of(text: str | bytes) -> list[tuple[int | None, str]]:
    with pytest.raises(SpecError) as caught:
        parse_document(text, "hostile.yaml")
    return [(p.line, p.message) for p in caught.value.problems]


def test_lines_map_points_at_each_key_and_list_item() -> None:
    doc = parse_document("a: 1\nb:\n  c: [x,\n    y]\n  d:\n    - 1\n    - 2\n", "f.yaml")

    assert doc.data == {"a": 1, "b": {"c": ["x", "y"], "d": [1, 2]}}
    assert doc.lines[("a",)] == 1
    assert doc.lines[("b", "c", 1)] == 4
    assert doc.lines[("b", "d", 1)] == 7
    assert doc.line_of(("b", "d", 1, "missing")) == 7


def test_json_goes_through_the_same_path() -> None:
    doc = parse_document('{\n\t"apiVersion": "crossrail/v1",\n\t"n": [1, 2.5, true, null]\n}', "f.json")

    assert doc.data == {"apiVersion": "crossrail/v1", "n": [1, 2.5, True, None]}
    assert doc.lines[("n",)] == 3


def test_a_byte_order_mark_is_accepted() -> None:
    assert parse_document(b"\xef\xbb\xbfa: 1\n", "bom.yaml").data == {"a": 1}


def test_timestamps_stay_the_text_written() -> None:
    assert parse_document("when: 2001-12-14\n", "f.yaml").data == {"when": "2001-12-14"}


def test_merge_keys_fill_only_keys_the_mapping_does_not_set() -> None:
    doc = parse_document("base: &b {x: 1, y: 2}\nderived:\n  <<: *b\n  y: 3\n", "f.yaml")

    assert doc.data["derived"] == {"x": 1, "y": 3}


def test_aliases_copy_their_anchor_so_an_edit_stays_local() -> None:
    doc = parse_document("a: &x {k: [1]}\nb: *x\n", "f.yaml")
    doc.data["b"]["k"].append(2)

    assert doc.data["a"] == {"k": [1]}
    assert doc.lines[("b", "k")] == 1  # the anchor's own line: where the value is written


@pytest.mark.parametrize(
    ("text", "line", "expected"),
    [
        pytest.param(
            "a: !!python/object/apply:os.system ['true']\n",
            1,
            "tag !!python/object/apply:os.system",
            id="python-object-apply",
        ),
        pytest.param("a: !!python/name:os.system\n", 1, "tag !!python/name:os.system is not allowed", id="python-name"),
        pytest.param(
            "a:\n  b: !!python/object:os.system {x: 1}\n",
            2,
            "tag !!python/object:os.system",
            id="tagged-mapping",
        ),
        pytest.param("a: !Ref other\n", 1, "tag !Ref is not allowed", id="custom-tag"),
        pytest.param("a: !!binary aGVsbG8=\n", 1, "tag !!binary is not allowed", id="binary-tag"),
        pytest.param("a: &x [1, *x]\n", 1, "recursive anchor", id="recursive-anchor"),
        pytest.param("a: *nowhere\n", 1, "refers to no anchor", id="undefined-alias"),
        pytest.param("a: " + "[" * 100 + "]" * 100 + "\n", 1, "nested more than 64 levels", id="deep-flow-nesting"),
        pytest.param(
            "".join("  " * i + f"k{i}:\n" for i in range(80)),
            65,
            "nested more than 64",
            id="deep-block-nesting",
        ),
        pytest.param("a: " + "x" * (64 * 1024 + 1) + "\n", 1, "the limit is 65536", id="huge-scalar"),
        pytest.param("a: 1\n---\nb: 2\n", 2, "more than one document", id="two-documents"),
        pytest.param("- a\n- b\n", 1, "the top level is a list", id="top-level-list"),
        pytest.param("just text\n", 1, "the top level is the value 'just text'", id="top-level-scalar"),
        pytest.param("a: 1\nb: 2\na: 3\n", 3, "duplicate key 'a' (first at line 1)", id="duplicate-key"),
        pytest.param("1: one\n", 1, "key '1' is read as a number", id="number-key"),
        pytest.param("on: push\n", 1, "key 'on' is read as a boolean", id="yaml-boolean-key"),
        pytest.param("? [a, b]\n: 1\n", 1, "a key that is a mapping or a list", id="complex-key"),
        pytest.param("a: [1, 2\n", 2, "not valid YAML", id="unclosed-flow"),
        pytest.param("a: !!int twelve\n", 1, "'twelve' is not a valid !!int", id="bad-explicit-int"),
        pytest.param("a: " + "9" * 5000 + "\n", 1, "is not a valid !!int", id="integer-past-the-digit-limit"),
        pytest.param("a: b\nc: \x01\n", 2, "not valid YAML: character #x0001", id="control-character"),
        pytest.param(b"a: 1\nb: \x00\x01\x02\n", 2, "binary data: a NUL byte at byte offset 8", id="nul-byte"),
        pytest.param(b"a: caf\xe9\n", 1, "not UTF-8: byte 0xe9 at byte offset 6", id="latin-1"),
        pytest.param("a: 1\n".encode("utf-16"), 1, "the file is UTF-16", id="utf-16"),
        pytest.param(
            "a:\n\tb: 1\n", 2, "a tab character at line 2, column 1; YAML indents with spaces", id="tab-indent"
        ),
        pytest.param("a:\n  b: 1\n  \tc: 2\n", 3, "a tab character at line 3, column 3", id="tab-after-spaces"),
    ],
)
def test_hostile_text_is_one_clear_problem(text: str | bytes, line: int, expected: str) -> None:
    problems = problems_of(text)

    assert len(problems) == 1
    assert problems[0][0] == line
    assert expected in problems[0][1]


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("", id="empty"),
        pytest.param("# only a comment\n", id="comment-only"),
        pytest.param("~\n", id="null"),
    ],
)
def test_an_empty_document_is_a_problem(text: str) -> None:
    assert problems_of(text) == [(None, "the document is empty")]


def test_problems_inside_the_document_name_their_key_path() -> None:
    with pytest.raises(SpecError) as caught:
        parse_document("spec:\n  args: [ok, !!python/object:x {}]\n  env: {A: 1, A: 2}\n", "f.yaml")

    assert [p.path for p in caught.value.problems] == ["spec.args[1]", "spec.env.A"]
    assert "crossrail: 2 problems in f.yaml" in str(caught.value)


def test_an_alias_bomb_stops_at_the_budget_quickly() -> None:
    levels = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for i in range(1, 10):
        prev, name = chr(96 + i), chr(97 + i)
        levels.append(f"{name}: &{name} [" + ",".join([f"*{prev}"] * 9) + "]")
    started = time.perf_counter()

    problems = problems_of("\n".join(levels) + "\n")

    assert time.perf_counter() - started < 1.0
    assert [m for _, m in problems] == ["too many nodes after alias expansion (more than 100000 values)"]


def test_very_deep_nesting_is_refused_without_recursion() -> None:
    problems = problems_of("[" * 200_000)

    assert len(problems) == 1
    assert "nest" in problems[0][1]


def test_a_file_over_the_size_limit_is_refused(write: Write) -> None:
    path = write("big.yaml", "a: 1\n" + "# padding\n" * (MAX_FILE_BYTES // 10 + 1))

    with pytest.raises(SpecError, match=f"larger than {MAX_FILE_BYTES} bytes"):
        load_document(path)


def test_a_regular_file_loads_with_its_path_as_source(write: Write) -> None:
    path = write("ok.yaml", "a: 1\n")

    doc = load_document(path)

    assert (doc.source, doc.data) == (str(path), {"a": 1})


@pytest.mark.parametrize(
    ("make", "expected"),
    [
        pytest.param(lambda d: d, "is a directory", id="directory"),
        pytest.param(lambda d: d / "absent.yaml", "no such file", id="missing-file"),
        pytest.param(lambda d: _fifo(d / "pipe.yaml"), "is not a regular file", id="fifo-without-writer"),
        pytest.param(lambda d: _loop(d / "loop.yaml"), "a symbolic link loop", id="symlink-loop"),
        pytest.param(lambda d: _socket(d / "s.yaml"), "is not a regular file", id="unix-socket"),
        pytest.param(lambda d: Path("/dev/zero"), "is not a regular file", id="endless-device"),
    ],
)
def test_paths_that_are_not_regular_files_are_refused_at_once(
    tmp_path: Path, make: Callable[[Path], Path], expected: str
) -> None:
    target = make(tmp_path)
    started = time.perf_counter()

    with pytest.raises(SpecError) as caught:
        load_document(target)

    assert time.perf_counter() - started < 1.0
    assert expected in caught.value.problems[0].message


def _fifo(path: Path) -> Path:
    os.mkfifo(path)
    return path


def _loop(path: Path) -> Path:
    path.symlink_to(path)
    return path


def _socket(path: Path) -> Path:
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(path))
    sock.close()
    return path
