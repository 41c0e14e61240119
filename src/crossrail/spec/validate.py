"""Documents to models: tell a document's kind, validate it, lint it, and check many files at once."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ValidationError

from crossrail.errors import Problem, ProblemCode, SpecError
from crossrail.spec import experiment, fleet
from crossrail.spec.common import Items
from crossrail.spec.experiment import Experiment
from crossrail.spec.fleet import Fleet
from crossrail.spec.lint import lint_experiment
from crossrail.spec.loader import Document, load_document, parse_document
from crossrail.spec.policy import ARTICLE_POLICY_YAML, PlacementPolicy
from crossrail.spec.problems import did_you_mean, locate, problems_at, problems_from, show, sort_problems
from crossrail.spec.warnings import fleet_warnings

Kind = Literal["Experiment", "Fleet", "PlacementPolicy"]
KINDS: tuple[Kind, ...] = ("Experiment", "Fleet", "PlacementPolicy")
_POLICY_KEYS = ("workloads", "portability_requirements")

M = TypeVar("M", bound=BaseModel)


def kind_of(doc: Document) -> Kind:
    """The document's `kind`; a file with `workloads` or `portability_requirements` is a PlacementPolicy."""
    data = doc.data if isinstance(doc.data, dict) else {}
    kind = data.get("kind")
    for known in KINDS:
        if kind == known:
            return known
    if kind is None and any(key in data for key in _POLICY_KEYS):
        return "PlacementPolicy"
    choices = ", ".join(KINDS)
    if kind is None:
        fix = f"add `kind:` with one of {choices}"
        problem = Problem(
            doc.source, "kind", "missing key 'kind'", doc.line_of(()), fix, code=ProblemCode.MISSING_FIELD
        )
    else:
        fix = (did_you_mean(kind, KINDS) if isinstance(kind, str) else None) or f"use one of {choices}"
        line = doc.line_of(("kind",))
        problem = Problem(doc.source, "kind", f"unknown kind {show(kind)}", line, fix, code=ProblemCode.BAD_VALUE)
    raise SpecError([problem])


def _parse(doc: Document, model: type[M], cross_checks: Callable[[Any], Items] | None = None) -> M:
    try:
        return model.model_validate(doc.data)
    except ValidationError as exc:
        problems = problems_from(exc, doc, model)
    # pydantic skips a model's cross-field checks when one of its fields failed; run them on the raw data.
    if cross_checks is not None:
        problems += problems_at(doc, cross_checks(doc.data))
    raise SpecError(sort_problems(problems))


def parse_experiment(doc: Document) -> Experiment:
    """The Experiment in `doc`; SpecError with every schema problem, each with its line and fix."""
    return _parse(doc, Experiment, experiment.cross_checks)


def parse_fleet(doc: Document) -> Fleet:
    """The Fleet in `doc`; SpecError with every problem, quotas on unknown pools included."""
    return _parse(doc, Fleet, fleet.cross_checks)


def parse_policy(doc: Document) -> PlacementPolicy:
    """The PlacementPolicy in `doc`; stages it does not name prefer `any` accelerator."""
    return _parse(doc, PlacementPolicy)


def load_experiment(path: str | os.PathLike[str]) -> Experiment:
    return parse_experiment(load_document(path))


def load_fleet(path: str | os.PathLike[str]) -> Fleet:
    return parse_fleet(load_document(path))


def load_policy(path: str | os.PathLike[str]) -> PlacementPolicy:
    return parse_policy(load_document(path))


def default_policy() -> PlacementPolicy:
    """The article's policy: TPU for pretraining, GPU for post-training, mixed for RL, strict portability."""
    return parse_policy(parse_document(ARTICLE_POLICY_YAML, "<default policy>"))


def check_experiment(doc: Document, policy: PlacementPolicy) -> Experiment:
    """Schema and portability problems together in one SpecError, in line order; else the Experiment."""
    findings = lint_experiment(doc, policy)
    try:
        parsed: Experiment | None = parse_experiment(doc)
        schema: list[Problem] = []
    except SpecError as exc:
        parsed, schema = None, exc.problems
    hardware = [f.path for f in findings if f.code == ProblemCode.HARD_CODED]
    # An unknown key that is hard-coded hardware gets the portability finding, which says what to write.
    schema = [p for p in schema if not (p.code == ProblemCode.UNKNOWN_FIELD and _under(p.path, hardware))]
    problems = locate([*schema, *findings], doc) if doc.overrides else sort_problems([*schema, *findings])
    if problems or parsed is None:
        raise SpecError(problems)
    return parsed


def _under(path: str, parents: list[str]) -> bool:
    return any(path == p or path.startswith((p + ".", p + "[")) for p in parents)


@dataclass(frozen=True)
class Findings:
    """What checking files found: `problems` make them invalid; `warnings` leave them valid (spec/warnings.py)."""

    problems: list[Problem]
    warnings: list[Problem]


def check_files(
    paths: Sequence[str | os.PathLike[str]],
    policy: PlacementPolicy,
    check: Callable[[Document, Experiment], list[Problem]] | None = None,
) -> Findings:
    """Every problem and every warning in every file, whatever its kind; bad input is reported, never raised.

    `check` is called with each Experiment the files alone find no problem in, for the problems only a
    workspace can show (the fleet, the store, the data); it reports them, it does not raise. A file with
    problems gets no warnings: its problems come first.
    """
    problems: list[Problem] = []
    warnings: list[Problem] = []
    for path in paths:
        try:
            doc = load_document(path)
            kind = kind_of(doc)
            if kind == "Experiment":
                exp = check_experiment(doc, policy)
                if check is not None:
                    problems.extend(check(doc, exp))
            elif kind == "Fleet":
                warnings.extend(fleet_warnings(parse_fleet(doc), doc))
            else:
                parse_policy(doc)
        except SpecError as exc:
            problems.extend(exc.problems)
    return Findings(problems, warnings)


def validate_files(
    paths: Sequence[str | os.PathLike[str]],
    policy: PlacementPolicy,
    check: Callable[[Document, Experiment], list[Problem]] | None = None,
) -> list[Problem]:
    """Every problem in every file (check_files without its warnings)."""
    return check_files(paths, policy, check).problems
