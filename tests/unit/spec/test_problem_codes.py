"""Each validation problem carries a stable code, set where it is found: programs classify problems by it."""

from __future__ import annotations

import pytest

from crossrail.errors import Problem, ProblemCode, SpecError
from crossrail.spec import check_experiment, default_policy, kind_of, parse_document, parse_experiment

from .builders import EXPERIMENT_YAML, doc, edited


def codes(exc: SpecError) -> list[tuple[str, str]]:
    return [(p.path, str(p.code)) for p in exc.problems]


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        pytest.param("  priority: normal\n", "  priority: normal\n  colour: blue\n", ("spec.colour", "unknown_field")),
        pytest.param("  stage: post_training\n", "", ("spec", "missing_field"), id="missing"),
        pytest.param("chips: 8, min_chips", "chips: eight, min_chips", ("spec.resources.chips", "wrong_type")),
        pytest.param("chips: 8, min_chips", "chips: 0, min_chips", ("spec.resources.chips", "bad_value")),
    ],
)
def test_schema_problems_say_what_kind_they_are(old: str, new: str, expected: tuple[str, str]) -> None:
    with pytest.raises(SpecError) as caught:
        parse_experiment(doc(edited(EXPERIMENT_YAML, old, new)))

    assert expected in codes(caught.value)


def test_yaml_syntax_and_a_tab_are_yaml_syntax_and_other_refused_yaml_is_bad_yaml() -> None:
    with pytest.raises(SpecError) as syntax:
        parse_document("a: [1, 2\n", "f.yaml")
    with pytest.raises(SpecError) as tab:
        parse_document("a:\n\tb: 1\n", "f.yaml")
    with pytest.raises(SpecError) as repeated:
        parse_document("a: 1\na: 2\n", "f.yaml")

    assert [p.code for p in syntax.value.problems] == [ProblemCode.YAML_SYNTAX]
    assert [(p.code, p.message.split(" at ")[0]) for p in tab.value.problems] == [
        (ProblemCode.YAML_SYNTAX, "a tab character")
    ]
    assert [p.code for p in repeated.value.problems] == [ProblemCode.BAD_YAML]


def test_a_missing_or_unknown_kind_is_coded() -> None:
    with pytest.raises(SpecError) as missing:
        kind_of(doc("apiVersion: crossrail/v1\n"))
    with pytest.raises(SpecError) as unknown:
        kind_of(doc("kind: Experimnet\n"))

    assert [p.code for p in missing.value.problems] == [ProblemCode.MISSING_FIELD]
    assert [p.code for p in unknown.value.problems] == [ProblemCode.BAD_VALUE]


def test_hard_coded_hardware_is_hard_coded_and_hides_the_unknown_key_it_is() -> None:
    text = edited(EXPERIMENT_YAML, "resources: {chips: 8,", "resources: {nvidia.com/gpu: 8, chips: 8,")
    with pytest.raises(SpecError) as caught:
        check_experiment(doc(text), default_policy())

    assert ("spec.resources['nvidia.com/gpu']", "hard_coded") in codes(caught.value)
    assert [p for p in caught.value.problems if p.code == ProblemCode.UNKNOWN_FIELD] == []


def test_the_code_travels_in_the_json_form_and_back() -> None:
    problem = Problem("f.yaml", "spec.colour", "unknown key 'colour'", 3, None, code=ProblemCode.UNKNOWN_FIELD)

    shown = problem.as_dict()

    assert shown == {
        "file": "f.yaml",
        "line": 3,
        "path": "spec.colour",
        "message": "unknown key 'colour'",
        "fix": None,
        "set": None,
        "code": "unknown_field",
    }
    assert Problem.from_dict(shown) == problem
    assert Problem.from_dict({**shown, "code": "from_a_newer_server"}).code == ProblemCode.INVALID
    assert Problem.from_dict({k: v for k, v in shown.items() if k != "code"}).code == ProblemCode.INVALID


def test_a_refused_request_body_says_the_code_of_each_problem() -> None:
    from fastapi.exceptions import RequestValidationError

    from crossrail.api.errors import request_problems

    refused = RequestValidationError(
        [
            {"loc": ("body", "chips"), "msg": "Input should be a valid integer", "type": "int_parsing"},
            {"loc": ("body", "colour"), "msg": "Extra inputs are not permitted", "type": "extra_forbidden"},
            {"loc": ("body", "name"), "msg": "Field required", "type": "missing"},
            {"loc": ("query", "limit"), "msg": "Input should be greater than 0", "type": "greater_than"},
        ]
    )

    assert [(p.path, p.code) for p in request_problems(refused).problems] == [
        ("chips", ProblemCode.WRONG_TYPE),
        ("colour", ProblemCode.UNKNOWN_FIELD),
        ("name", ProblemCode.MISSING_FIELD),
        ("limit", ProblemCode.BAD_VALUE),
    ]
