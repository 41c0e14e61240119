"""Telling kinds apart, loading each kind from disk, and validating many files without raising."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from crossrail.errors import SpecError
from crossrail.spec import (
    ARTICLE_POLICY_YAML,
    PlacementPolicy,
    kind_of,
    load_experiment,
    load_fleet,
    load_policy,
    validate_files,
)

from .builders import EXPERIMENT_YAML, FLEET_YAML, doc, edited

Write = Callable[[str, str | bytes], Path]


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        pytest.param(EXPERIMENT_YAML, "Experiment", id="experiment"),
        pytest.param(FLEET_YAML, "Fleet", id="fleet"),
        pytest.param("kind: PlacementPolicy\n", "PlacementPolicy", id="policy-by-kind"),
        pytest.param("portability_requirements: {}\n", "PlacementPolicy", id="policy-by-its-keys"),
    ],
)
def test_kind_of_tells_documents_apart(text: str, kind: str) -> None:
    assert kind_of(doc(text)) == kind


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param(
            "kind: Experimnt\n",
            ("kind", 1, "unknown kind 'Experimnt'", "did you mean 'Experiment'?"),
            id="typo",
        ),
        pytest.param(
            "apiVersion: crossrail/v1\nmetadata: {name: x}\n",
            ("kind", 1, "missing key 'kind'", "add `kind:` with one of Experiment, Fleet, PlacementPolicy"),
            id="no-kind",
        ),
        pytest.param(
            "a: 1\nkind: [Fleet]\n",
            ("kind", 2, "unknown kind a list", "use one of Experiment, Fleet, PlacementPolicy"),
            id="kind-is-a-list",
        ),
    ],
)
def test_kind_of_explains_an_unknown_kind(text: str, expected: tuple[str, int, str, str]) -> None:
    with pytest.raises(SpecError) as caught:
        kind_of(doc(text))

    assert [(p.path, p.line, p.message, p.fix) for p in caught.value.problems] == [expected]


def test_each_kind_loads_from_disk(write: Write) -> None:
    exp = load_experiment(write("exp.yaml", EXPERIMENT_YAML))
    fleet = load_fleet(write("fleet.yaml", FLEET_YAML))
    policy = load_policy(write("policy.yaml", ARTICLE_POLICY_YAML))

    assert (exp.name, fleet.name, policy.for_stage("pretraining").preferred_accelerator) == (
        "posttrain-042",
        "local",
        "tpu",
    )


def test_validate_files_reports_every_problem_in_every_file(
    write: Write, tmp_path: Path, policy: PlacementPolicy
) -> None:
    good = [
        write("exp.yaml", EXPERIMENT_YAML),
        write("fleet.yaml", FLEET_YAML),
        write("p.yaml", ARTICLE_POLICY_YAML),
    ]
    bad_exp = write("bad-exp.yaml", edited(EXPERIMENT_YAML, "chips: 8,", "chips: 0, nvidia.com/gpu: 8,"))
    bad_fleet = write("bad-fleet.yaml", edited(FLEET_YAML, "chips_per_host: 4", "chips_per_host: 5"))
    bad_policy = write("bad-policy.yaml", "workloads: {eval: {preferred_accelerator: fast}}\n")
    binary = write("model.bin", b"\x00\x01\x02")

    problems = validate_files([*good, bad_exp, bad_fleet, bad_policy, binary, tmp_path / "absent.yaml"], policy)

    assert [(Path(p.source).name, p.path) for p in problems] == [
        ("bad-exp.yaml", "spec.resources.chips"),
        ("bad-exp.yaml", "spec.resources['nvidia.com/gpu']"),
        ("bad-fleet.yaml", "spec.pools[0].chips_per_host"),
        ("bad-policy.yaml", "workloads.eval.preferred_accelerator"),
        ("model.bin", ""),
        ("absent.yaml", ""),
    ]


def test_validate_files_of_good_files_is_empty(write: Write, policy: PlacementPolicy) -> None:
    assert validate_files([write("exp.json", '{"kind": "PlacementPolicy"}')], policy) == []
