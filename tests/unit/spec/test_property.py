"""Whatever bytes or text arrive, parsing ends in a Document or a SpecError, never another exception."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from crossrail.errors import SpecError
from crossrail.spec import (
    Document,
    PlacementPolicy,
    apply_overrides,
    default_policy,
    parse_document,
    validate_files,
)
from crossrail.spec.validate import check_experiment, kind_of, parse_fleet, parse_policy

from .builders import EXPERIMENT_YAML, doc

# Characters that steer the YAML parser into its less travelled corners.
YAML_ALPHABET = "[]{}:,-?&*!|>'\"#%@`~ \n\t\\abkn01.<=\x00\xe9\ufeff"
POLICY = default_policy()


def _outcome(call: Callable[[], object]) -> object:
    """What `call` returns, or the SpecError it raises; any other exception fails the test."""
    try:
        return call()
    except SpecError as exc:
        return exc


def _parse_or_problem(text: str | bytes) -> Document | None:
    result = _outcome(lambda: parse_document(text, "fuzz.yaml"))
    if isinstance(result, SpecError):
        assert result.problems
        return None
    assert isinstance(result, Document)
    return result


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=400))
def test_arbitrary_bytes_end_in_a_document_or_spec_error(raw: bytes) -> None:
    _parse_or_problem(raw)


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=YAML_ALPHABET, max_size=200) | st.text(max_size=200))
def test_arbitrary_text_ends_in_a_document_or_spec_error(text: str) -> None:
    _parse_or_problem(text)


@settings(max_examples=150, deadline=None)
@given(st.text(alphabet=YAML_ALPHABET, max_size=120))
def test_every_kind_of_check_raises_only_spec_error(text: str) -> None:
    document = _parse_or_problem("kind: Experiment\nspec:\n  " + text)
    if document is None:
        return
    checks: list[Callable[[Document], object]] = [kind_of, parse_fleet, parse_policy]
    checks.append(lambda d: check_experiment(d, POLICY))
    for check in checks:
        result = _outcome(lambda check=check: check(document))
        assert not isinstance(result, SpecError) or result.problems


@settings(max_examples=150, deadline=None)
@given(st.lists(st.text(alphabet="spec.args01env=[]{}:!~ ab", max_size=30), max_size=4))
def test_overrides_raise_only_spec_error(sets: list[str]) -> None:
    result = _outcome(lambda: apply_overrides(doc(EXPERIMENT_YAML), sets))

    assert isinstance(result, Document) or (isinstance(result, SpecError) and result.problems)


NUMERIC_FIELDS = [
    "spec.resources.chips",
    "spec.resources.min_chips",
    "spec.resources.duration",
    "spec.checkpoint.every",
    "spec.checkpoint.keep_last",
    "spec.retries.max",
    "spec.retries.exit_codes",
    "spec.parent.checkpoint",
    "spec.args.1",
    "spec.env.SEED",
    "metadata.name",
]


@settings(max_examples=200, deadline=None)
@given(
    st.sampled_from(NUMERIC_FIELDS),
    st.integers(min_value=-(10**400), max_value=10**400) | st.floats() | st.booleans(),
)
def test_any_number_in_any_field_is_a_value_or_a_problem(field: str, number: float) -> None:
    document = apply_overrides(
        doc(EXPERIMENT_YAML), [f"{field}={number!r}".replace("nan", ".nan").replace("inf", ".inf")]
    )

    result = _outcome(lambda: check_experiment(document, POLICY))

    assert not isinstance(result, SpecError) or result.problems


def test_validate_files_reports_a_directory_not_raises(tmp_path: Path, policy: PlacementPolicy) -> None:
    assert validate_files([str(tmp_path)], policy)[0].message == "is a directory"
