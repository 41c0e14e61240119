"""Every Problem crossrail makes says what kind it is where it is made (not only the spec validator's), so a
program can act on `code` wherever a refusal comes from: the simulator's inputs, renderers, preflight."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from crossrail.control.ops.sweeps import grid_problems, parse_grid, points
from crossrail.errors import Problem, ProblemCode, SpecError
from crossrail.sim import FailureSpec
from crossrail.sim.workload import SyntheticSpec
from crossrail.spec import load_document

SRC = Path(__file__).resolve().parents[2] / "src" / "crossrail"


def test_no_problem_is_made_without_a_code() -> None:
    uncoded = []
    for path in sorted(SRC.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            called = isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "Problem"
            if called and not any(k.arg == "code" for k in node.keywords):
                uncoded.append(f"{path.relative_to(SRC)}:{node.lineno}")
    assert uncoded == []


def test_the_simulators_inputs_say_unknown_missing_or_bad() -> None:
    with pytest.raises(SpecError) as unknown:
        SyntheticSpec.parse("jobs=10,colour=blue")
    with pytest.raises(SpecError) as bad:
        SyntheticSpec.parse("jobs=ten")

    assert [(p.path, p.code) for p in unknown.value.problems] == [("colour", ProblemCode.UNKNOWN_FIELD)]
    assert [(p.path, p.code) for p in bad.value.problems] == [("jobs", ProblemCode.BAD_VALUE)]


def test_a_failure_model_with_a_negative_mtbf_is_a_bad_value() -> None:
    with pytest.raises(SpecError) as caught:
        FailureSpec(chip_mtbf_s=-1.0)

    assert [(p.path, p.code) for p in caught.value.problems] == [("chip_mtbf_s", ProblemCode.BAD_VALUE)]


def test_a_file_that_is_not_there_is_not_found(tmp_path: Path) -> None:
    with pytest.raises(SpecError) as caught:
        load_document(tmp_path / "absent.yaml")

    assert [p.code for p in caught.value.problems] == [ProblemCode.NOT_FOUND]


def test_a_problem_a_grid_value_caused_keeps_its_code() -> None:
    axes = parse_grid(["spec.resources.chips=0,8"])
    message = "--set 'spec.resources.chips=0': must be > 0"
    found = Problem(
        "e.yaml", "spec.resources.chips", message, argument="spec.resources.chips=0", code=ProblemCode.BAD_VALUE
    )

    said = grid_problems([found], axes, points(axes))

    assert [(p.code, p.argument) for p in said] == [(ProblemCode.BAD_VALUE, None)]
    assert "--grid spec.resources.chips" in said[0].message
