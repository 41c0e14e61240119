"""`--set` overrides: YAML values at dotted paths, a new Document each time, malformed ones named."""

from __future__ import annotations

import copy

import pytest

from crossrail.errors import SpecError
from crossrail.spec import apply_overrides, parse_experiment

from .builders import EXPERIMENT_YAML, doc


def test_overrides_set_typed_values_and_leave_the_input_unchanged() -> None:
    original = doc(EXPERIMENT_YAML)
    before = copy.deepcopy(original.data)

    changed = apply_overrides(original, ["spec.resources.chips=4", "spec.env.FOO=bar", "spec.args.1=300"])

    assert original.data == before
    exp = parse_experiment(changed)
    assert exp.spec.resources.chips == 4
    assert exp.spec.env == {"LOG_LEVEL": "info", "FOO": "bar"}
    assert exp.spec.args == ["--steps", "300"]


def test_plus_equals_appends_to_a_list_and_minus_equals_removes_from_it() -> None:
    sets = ["spec.args+=--resume", "spec.args+=[--seed, 7]", "spec.args-=--steps", "spec.retries.exit_codes+=3"]
    exp = parse_experiment(apply_overrides(doc(EXPERIMENT_YAML), sets))
    assert exp.spec.args == ["200", "--resume", "--seed", "7"]
    assert exp.spec.retries.exit_codes == [3]


@pytest.mark.parametrize(
    ("override", "message", "fix"),
    [
        pytest.param(
            "spec.args.7=x",
            "spec.args is a list; index '7' is not one of 0 to 1",
            "to add an item write --set spec.args+=VALUE; to remove one, --set spec.args-=VALUE",
            id="out-of-range-names-both-forms",
        ),
        pytest.param(
            "spec.args-=--seed", "spec.args has no item '--seed'; it holds '--steps', '200'", None, id="absent"
        ),
        pytest.param(
            "spec.image+=x", "spec.image is 'us-docker", "+= works on a list; set a value with =", id="scalar"
        ),
    ],
)
def test_a_list_change_that_cannot_apply_says_why_and_how(override: str, message: str, fix: str | None) -> None:
    with pytest.raises(SpecError) as caught:
        apply_overrides(doc(EXPERIMENT_YAML), [override])
    (problem,) = caught.value.problems
    assert message in problem.message
    assert problem.path == override.partition("=")[0].rstrip("+-")
    assert problem.fix == fix


def test_overridden_paths_lose_their_lines_and_others_keep_them() -> None:
    changed = apply_overrides(doc(EXPERIMENT_YAML), ["spec.resources={chips: 2}"])

    assert ("spec", "resources") not in changed.lines
    assert ("spec", "resources", "chips") not in changed.lines
    assert changed.line_of(("spec", "resources", "chips")) == 4  # falls back to `spec:`
    assert changed.lines[("spec", "image")] == 6


@pytest.mark.parametrize(
    ("override", "path", "value"),
    [
        pytest.param("spec.priority=high", ("spec", "priority"), "high", id="plain-text"),
        pytest.param("spec.command=[python, train.py]", ("spec", "command"), ["python", "train.py"], id="flow-list"),
        pytest.param("spec.accelerators={prefer: tpu}", ("spec", "accelerators"), {"prefer": "tpu"}, id="flow-mapping"),
        pytest.param("spec.config=~", ("spec", "config"), None, id="null"),
        pytest.param("spec.env.EMPTY=", ("spec", "env", "EMPTY"), "", id="nothing-is-an-empty-string"),
        pytest.param("spec.env.URL=a=b", ("spec", "env", "URL"), "a=b", id="value-may-contain-equals"),
        pytest.param("spec.new.deep.key=1", ("spec", "new", "deep", "key"), 1, id="missing-mappings-are-created"),
    ],
)
def test_values_are_read_as_yaml(override: str, path: tuple[str, ...], value: object) -> None:
    data = apply_overrides(doc(EXPERIMENT_YAML), [override]).data
    for key in path:
        data = data[key]

    assert data == value


@pytest.mark.parametrize(
    ("override", "message"),
    [
        pytest.param("spec.resources.chips", "expected key=value", id="no-equals"),
        pytest.param("=4", "expected key=value", id="no-key"),
        pytest.param("spec..chips=4", "has an empty part", id="empty-path-part"),
        pytest.param("spec.args.7=x", "spec.args is a list; index '7' is not one of 0 to 1", id="index-out-of-range"),
        pytest.param("spec.retries.exit_codes.0=1", "none, the list is empty", id="empty-list-is-not-grown"),
        pytest.param("spec.args.first=x", "index 'first' is not one of 0 to 1", id="list-index-not-a-number"),
        pytest.param("spec.image.tag=v2", "spec.image is 'us-docker.pkg.dev", id="into-a-string"),
        pytest.param("spec.args=[1, 2", "the value is not valid YAML", id="unclosed-flow"),
        pytest.param(
            "spec.env.X=!!python/name:os.system",
            "tag !!python/name:os.system is not allowed",
            id="hostile-tag",
        ),
        pytest.param("spec.env.X=a\n---\nb", "more than one document", id="two-documents"),
    ],
)
def test_a_malformed_override_is_named(override: str, message: str) -> None:
    with pytest.raises(SpecError) as caught:
        apply_overrides(doc(EXPERIMENT_YAML), [override])

    (problem,) = caught.value.problems
    assert problem.message.startswith(f"--set {override!r}: ")
    assert message in problem.message


def test_every_malformed_override_is_reported_together() -> None:
    with pytest.raises(SpecError) as caught:
        apply_overrides(doc(EXPERIMENT_YAML), ["a", "spec.resources.chips=2", "b"])

    assert [p.message for p in caught.value.problems] == [
        "--set 'a': expected key=value",
        "--set 'b': expected key=value",
    ]


def test_problems_about_an_overridden_field_cite_the_argument_and_others_keep_their_line() -> None:
    from crossrail.errors import Problem
    from crossrail.spec.problems import locate

    changed = apply_overrides(doc(EXPERIMENT_YAML), ["spec.resources={chips: 2}", "spec.priority=high"])
    found = [
        Problem("experiment.yaml", "spec.resources.chips", "too many"),
        Problem("experiment.yaml", "spec.image", "not pinned"),
        Problem("experiment.yaml", "spec.priority", "no", line=9),
    ]

    placed = {p.path: (p.line, p.argument) for p in locate(found, changed)}

    assert placed == {
        "spec.resources.chips": (None, "spec.resources={chips: 2}"),
        "spec.image": (6, None),
        "spec.priority": (None, "spec.priority=high"),
    }
    assert locate(found[:1], changed)[0].render() == "spec.resources.chips (--set spec.resources={chips: 2}): too many"


@pytest.mark.parametrize(
    ("text", "path"),
    [
        pytest.param("spec.command[0]", ("spec", "command", 0), id="an-index"),
        pytest.param("metadata.labels['a.b/c']", ("metadata", "labels", "a.b/c"), id="a-quoted-key"),
        pytest.param("kind", ("kind",), id="one-key"),
    ],
)
def test_a_problem_path_reads_back_as_the_key_path(text: str, path: tuple[str | int, ...]) -> None:
    from crossrail.spec.paths import format_path
    from crossrail.spec.problems import parse_path

    assert parse_path(text) == path
    assert format_path(path) == text
