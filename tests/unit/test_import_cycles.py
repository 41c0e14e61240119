"""No import cycles between crossrail's modules: every import counts, function-local and TYPE_CHECKING ones too.

import-linter's contracts (pyproject.toml) keep the packages in layers; this test looks one level down, at
modules, where a lazy import inside a function hides a cycle from the import order but not from a reader.
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Iterable, Mapping
from pathlib import Path

import grimp
import pytest

KNOWN_CYCLES: dict[frozenset[str], str] = {}
"""Cycles left in place, each with why; the test also fails when one of them is gone (drop it here then)."""


def direct_imports(graph: grimp.ImportGraph, package: str = "crossrail") -> dict[str, set[str]]:
    """Each module of `package` and the modules of `package` it imports itself, anywhere in its file."""
    modules = {m for m in graph.modules if m == package or m.startswith(package + ".")}
    return {m: {i for i in graph.find_modules_directly_imported_by(m) if i in modules and i != m} for m in modules}


def cycles(imports: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's, without recursion), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(imports):
        if root in index:
            continue
        work = [(root, iter(sorted(imports[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, targets = work[-1]
            target = next(targets, None)
            if target is not None:
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(sorted(imports.get(target, ())))))
                elif target in on_stack:
                    low[node] = min(low[node], index[target])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return sorted(found)


def loop(imports: Mapping[str, Iterable[str]], component: list[str]) -> list[str]:
    """One shortest way round the cycle through `component`, from its first module back to it."""
    start, members = component[0], set(component)
    came_from: dict[str, str] = {}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        for target in sorted(imports[node]):
            if target == start:
                path = [node]
                while path[-1] != start:
                    path.append(came_from[path[-1]])
                return [*reversed(path), start]
            if target in members and target not in came_from:
                came_from[target] = node
                queue.append(target)
    raise AssertionError(f"no loop through {component}")


def render(graph: grimp.ImportGraph, imports: Mapping[str, Iterable[str]], component: list[str]) -> str:
    lines = [f"cycle of {len(component)} modules: {', '.join(component)}"]
    path = loop(imports, component)
    for importer, imported in itertools.pairwise(path):
        details = graph.get_import_details(importer=importer, imported=imported)
        where = f"line {details[0]['line_number']}: {details[0]['line_contents']}" if details else "(import)"
        lines.append(f"  {importer} -> {imported}  ({where})")
    return "\n".join(lines)


@pytest.fixture(scope="module")
def graph() -> grimp.ImportGraph:
    return grimp.build_graph("crossrail", cache_dir=None)


def test_no_module_of_crossrail_imports_itself_back_through_others(graph: grimp.ImportGraph) -> None:
    imports = direct_imports(graph)
    found = [c for c in cycles(imports) if frozenset(c) not in KNOWN_CYCLES]
    assert not found, "\n".join(render(graph, imports, c) for c in found)


def test_every_known_cycle_is_still_there_as_listed(graph: grimp.ImportGraph) -> None:
    found = {frozenset(c) for c in cycles(direct_imports(graph))}
    gone = [sorted(c) for c in KNOWN_CYCLES if c not in found]
    assert not gone, f"no longer cycles (remove them from KNOWN_CYCLES): {gone}"


def test_function_local_and_type_checking_imports_count(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A cycle made only of an import inside a function and one under TYPE_CHECKING is found (grimp's defaults)."""
    package = tmp_path / "cyclepkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from cyclepkg import b\n")
    (package / "b.py").write_text("def f():\n    from cyclepkg.a import TYPE_CHECKING\n    return TYPE_CHECKING\n")
    monkeypatch.syspath_prepend(str(tmp_path))

    graph = grimp.build_graph("cyclepkg", cache_dir=None)

    imports = direct_imports(graph, "cyclepkg")
    assert cycles(imports) == [["cyclepkg.a", "cyclepkg.b"]]
    assert "cyclepkg.b -> cyclepkg.a  (line 2: from cyclepkg.a import TYPE_CHECKING)" in render(
        graph, imports, ["cyclepkg.a", "cyclepkg.b"]
    )


@pytest.mark.parametrize(
    ("imports", "expected"),
    [
        pytest.param({"a": {"b"}, "b": {"c"}, "c": set()}, [], id="a chain is no cycle"),
        pytest.param({"a": {"b"}, "b": {"a"}}, [["a", "b"]], id="two modules importing each other"),
        pytest.param(
            {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": {"e"}, "e": {"d"}},
            [["a", "b", "c"], ["d", "e"]],
            id="a loop of three feeding a loop of two: two cycles",
        ),
    ],
)
def test_the_cycle_finder_finds_what_is_planted(imports: dict[str, set[str]], expected: list[list[str]]) -> None:
    assert cycles(imports) == expected
    for component in expected:
        way = loop(imports, component)
        assert way[0] == way[-1] == component[0]
        assert all(b in imports[a] for a, b in itertools.pairwise(way))
