"""The Experiment schema: the full example parses, and every mistake is reported with its line and fix."""

from __future__ import annotations

import pytest

from crossrail.errors import SpecError
from crossrail.spec import (
    Experiment,
    PlacementPolicy,
    Stage,
    check_experiment,
    experiment_digest,
    parse_experiment,
)

from .builders import DIGEST, EXPERIMENT_YAML, doc, edited

MINIMAL = """\
apiVersion: crossrail/v1
kind: Experiment
metadata: {name: tiny}
spec:
  stage: eval
  image: trainer:latest
  command: [python, eval.py]
  dataset: {uri: gs://d/x}
  checkpoint: {dir: gs://c/x}
  resources: {chips: 1}
"""


def problems(text: str) -> list[tuple[str, int | None, str, str | None]]:
    with pytest.raises(SpecError) as caught:
        parse_experiment(doc(text))
    return [(p.path, p.line, p.message, p.fix) for p in caught.value.problems]


def test_the_full_example_passes_schema_and_strict_lint(policy: PlacementPolicy) -> None:
    exp = check_experiment(doc(EXPERIMENT_YAML), policy)

    assert exp.name == "posttrain-042"
    assert exp.stage is Stage.POST_TRAINING
    assert exp.spec.image.endswith(DIGEST)
    assert exp.spec.resources.chips == 8
    assert exp.spec.resources.duration_s == 6 * 3600
    assert exp.spec.checkpoint.every_s == 600
    assert exp.spec.parent is not None
    assert exp.spec.parent.checkpoint == "latest"
    assert exp.spec.accelerators.prefer == "gpu"


def test_optional_keys_take_their_defaults() -> None:
    exp = parse_experiment(doc(MINIMAL))

    assert exp.spec.args == []
    assert exp.spec.code.commit == "auto"
    assert exp.spec.checkpoint.format == "crossrail-ckpt/v1"
    assert exp.spec.checkpoint.keep_last == 3
    assert exp.spec.retries.max == 0
    assert exp.spec.priority == "normal"
    assert exp.spec.accelerators.prefer is None
    assert exp.spec.parent is None
    assert exp.team is None


def test_numbers_in_args_and_env_are_taken_as_text() -> None:
    text = edited(edited(EXPERIMENT_YAML, '"200"', "200"), "LOG_LEVEL: info", "LOG_LEVEL: info, SEED: 7")

    exp = parse_experiment(doc(text))

    assert exp.spec.args == ["--steps", "200"]
    assert exp.spec.env["SEED"] == "7"


def test_dumped_experiment_reads_back_equal_with_equal_digest() -> None:
    exp = parse_experiment(doc(EXPERIMENT_YAML))

    again = Experiment.model_validate(exp.model_dump(by_alias=True))

    assert again == exp
    assert experiment_digest(again) == experiment_digest(exp)
    assert experiment_digest(exp).startswith("sha256:")
    assert len(experiment_digest(exp)) == len("sha256:") + 64


def test_any_change_moves_the_digest() -> None:
    base = parse_experiment(doc(EXPERIMENT_YAML))
    other = parse_experiment(doc(edited(EXPERIMENT_YAML, "chips: 8,", "chips: 6,")))

    assert experiment_digest(base) != experiment_digest(other)


def test_a_model_is_frozen() -> None:
    exp = parse_experiment(doc(MINIMAL))

    with pytest.raises(ValueError, match="frozen"):
        exp.spec.resources.chips = 2  # type: ignore[misc]


def test_unknown_key_suggests_the_nearest_known_key() -> None:
    text = edited(EXPERIMENT_YAML, "  resources: {", "  resource: {}\n  resources: {")

    assert problems(text) == [("spec.resource", 13, "unknown key 'resource'", "did you mean 'resources'?")]


@pytest.mark.parametrize(
    ("old", "new", "path", "line", "message", "fix"),
    [
        pytest.param(
            "stage: post_training",
            "stage: posttraining",
            "spec.stage",
            5,
            "'posttraining' is not one of pretraining, post_training, inference, "
            "reinforcement_learning, eval, experiment",
            "did you mean 'post_training'?",
            id="misspelt-stage-lists-the-stages",
        ),
        pytest.param(
            "chips: 8,",
            "chips: 0,",
            "spec.resources.chips",
            13,
            "must be > 0 (got 0)",
            None,
            id="zero-chips",
        ),
        pytest.param(
            "{chips: 8, min_chips: 4, max_chips: 8, duration: 6h}",
            "{min_chips: 4}",
            "spec.resources",
            13,
            "missing required key 'chips'",
            "add `chips:` to spec.resources",
            id="missing-chips-on-parent-line",
        ),
        pytest.param(
            "min_chips: 4",
            "min_chips: 12",
            "spec.resources.min_chips",
            13,
            "must be <= chips (got min_chips 12 > chips 8)",
            "lower min_chips to at most 8",
            id="min-above-chips",
        ),
        pytest.param(
            "commit: auto",
            "commit: 1234567",
            "spec.code.commit",
            10,
            "expected text, got the number 1234567",
            "quote it: '1234567'",
            id="commit-read-as-number",
        ),
        pytest.param(
            "commit: auto",
            "commit: main",
            "spec.code.commit",
            10,
            "'main' is not a commit; write `auto` or 7 to 40 hex digits",
            None,
            id="branch-name-as-commit",
        ),
        pytest.param(
            "command: [python, -m, trainer.run]",
            "command: python -m trainer.run",
            "spec.command",
            7,
            "expected a list, got 'python -m trainer.run'",
            "write it as a list: [python -m trainer.run]",
            id="command-as-a-string",
        ),
        pytest.param(
            "command: [python, -m, trainer.run]",
            "command: []",
            "spec.command",
            7,
            "must not be empty",
            None,
            id="empty-command",
        ),
        pytest.param(
            "every: 10m",
            "every: soon",
            "spec.checkpoint.every",
            12,
            "'soon' is not a duration; write e.g. 90s, 10m, 6h or 1h30m",
            None,
            id="bad-duration-keeps-yaml-key",
        ),
        pytest.param(
            "prefer: gpu, allow: [gpu, tpu]",
            "prefer: gpu, allow: [tpu]",
            "spec.accelerators.prefer",
            14,
            "prefers gpu but allow lists only tpu",
            "add gpu to spec.accelerators.allow or prefer one of tpu",
            id="preferred-accelerator-not-allowed",
        ),
        pytest.param(
            "checkpoint: latest",
            "checkpoint: newest",
            "spec.parent.checkpoint",
            15,
            "'newest' is not a checkpoint; write `latest` or a step number such as 1200",
            None,
            id="parent-checkpoint-neither-latest-nor-step",
        ),
        pytest.param(
            "priority: normal",
            "priority: urgent",
            "spec.priority",
            17,
            "'urgent' is not one of low, normal, high, critical",
            None,
            id="unknown-priority",
        ),
        pytest.param(
            "name: posttrain-042,",
            "name: Posttrain_042,",
            "metadata.name",
            3,
            "'Posttrain_042' is not a valid name; use lower-case letters, digits and '-', "
            "starting and ending with a letter or digit",
            None,
            id="name-not-dns-safe",
        ),
        pytest.param(
            "apiVersion: crossrail/v1",
            "apiVersion: crossrail/v2",
            "apiVersion",
            1,
            "'crossrail/v2' is not one of crossrail/v1",
            "did you mean 'crossrail/v1'?",
            id="unknown-api-version",
        ),
        pytest.param(
            "keep_last: 3",
            "keep_last: 0",
            "spec.checkpoint.keep_last",
            12,
            "must be >= 1 (got 0)",
            None,
            id="keep-no-checkpoints",
        ),
        pytest.param(
            "LOG_LEVEL: info",
            "LOG_LEVEL: true",
            "spec.env.LOG_LEVEL",
            18,
            "expected text, got the boolean true",
            "quote it: 'true'",
            id="boolean-env-value-must-be-quoted",
        ),
    ],
)
def test_one_mistake_is_one_problem_with_line_and_fix(
    *, old: str, new: str, path: str, line: int, message: str, fix: str | None
) -> None:
    assert problems(edited(EXPERIMENT_YAML, old, new)) == [(path, line, message, fix)]


def test_every_problem_is_reported_at_once_in_line_order() -> None:
    text = edited(EXPERIMENT_YAML, "stage: post_training", "stage: rl")
    text = edited(text, "min_chips: 4, max_chips: 8", "min_chips: 9, max_chips: 7")
    text = edited(text, "priority: normal", "priority: 1")

    found = problems(text)

    assert [(path, line) for path, line, _, _ in found] == [
        ("spec.stage", 5),
        ("spec.resources.max_chips", 13),
        ("spec.resources.min_chips", 13),
        ("spec.priority", 17),
    ]


def test_cross_field_checks_report_even_when_another_field_fails() -> None:
    text = edited(EXPERIMENT_YAML, "min_chips: 4", "min_chips: 12, duration: forever")
    text = edited(text, ", duration: 6h}", "}")

    found = {path for path, _, _, _ in problems(text)}

    assert found == {"spec.resources.duration", "spec.resources.min_chips"}


def test_a_missing_spec_is_reported_on_the_document() -> None:
    text = "apiVersion: crossrail/v1\nkind: Experiment\nmetadata: {name: x}\n"

    assert problems(text) == [("", 1, "missing required key 'spec'", "add `spec:` to the document")]


def test_parallelism_defaults_to_one_worker_and_leaves_the_digest_as_before() -> None:
    exp = parse_experiment(doc(MINIMAL))
    said = parse_experiment(doc(MINIMAL + "  parallelism: {data: 1}\n"))

    assert exp.data_parallel == 1
    assert not exp.spec.parallelism.oversubscribe
    assert experiment_digest(said) == experiment_digest(exp)
    # The digest of an experiment written before parallelism existed: runs recorded then stay comparable.
    assert experiment_digest(exp) == "sha256:" + _digest_without_parallelism(exp)


def _digest_without_parallelism(exp: Experiment) -> str:
    import hashlib
    import json

    data = exp.model_dump(mode="json")
    del data["spec"]["parallelism"]
    del data["spec"]["parts"]  # nor parts
    text = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def test_a_data_parallel_degree_moves_the_digest_and_fits_the_chip_range() -> None:
    two = parse_experiment(doc(edited(MINIMAL, "{chips: 1}", "{chips: 2}") + "  parallelism: {data: 2}\n"))

    assert two.data_parallel == 2
    assert experiment_digest(two) != experiment_digest(
        parse_experiment(doc(edited(MINIMAL, "{chips: 1}", "{chips: 2}")))
    )


@pytest.mark.parametrize(
    ("resources", "data", "message", "fix"),
    [
        pytest.param(
            "{chips: 2}",
            4,
            "must be <= resources.chips (got data 4 > chips 2): each worker holds at least one chip",
            "lower parallelism.data to at most 2 or raise resources.chips",
            id="more-workers-than-chips",
        ),
        pytest.param(
            "{chips: 2, max_chips: 3}",
            4,
            "must be <= resources.max_chips (got data 4 > max_chips 3): each worker holds at least one chip",
            "lower parallelism.data to at most 3 or raise resources.max_chips",
            id="more-workers-than-max-chips",
        ),
    ],
)
def test_each_data_parallel_worker_needs_a_chip(resources: str, data: int, message: str, fix: str) -> None:
    text = edited(MINIMAL, "{chips: 1}", resources) + f"  parallelism: {{data: {data}}}\n"

    assert problems(text) == [("spec.parallelism.data", 11, message, fix)]


def test_too_many_workers_is_reported_even_when_another_field_fails() -> None:
    text = edited(MINIMAL, "stage: eval", "stage: rl") + "  parallelism: {data: 3}\n"

    assert {path for path, _, _, _ in problems(text)} == {"spec.stage", "spec.parallelism.data"}


PIPELINE = edited(MINIMAL, "{chips: 1}", "{chips: 17}") + (
    "  parts:\n"
    "    sampler: {chips: 4, replicas: 2, prefer: tpu}\n"
    "    reward: {chips: 1}\n"
    "    learner: {chips: 8, parallelism: {data: 2}, prefer: gpu}\n"
)


def test_parts_declare_a_pipeline_whose_chips_add_up() -> None:
    exp = parse_experiment(doc(PIPELINE))

    assert {name: (p.chips, p.replicas, p.total_chips) for name, p in exp.parts.items()} == {
        "sampler": (4, 2, 8),
        "reward": (1, 1, 1),
        "learner": (8, 1, 8),
    }
    assert exp.parts["learner"].parallelism.data == 2
    assert exp.parts["sampler"].prefer == "tpu"
    assert experiment_digest(exp) != experiment_digest(
        parse_experiment(doc(edited(MINIMAL, "{chips: 1}", "{chips: 17}")))
    )


def test_parts_that_do_not_add_up_to_the_chips_name_the_sum_and_the_fix() -> None:
    text = edited(PIPELINE, "{chips: 17}", "{chips: 16}")

    assert problems(text) == [
        (
            "spec.resources.chips",
            10,
            "must equal the sum of spec.parts' chips x replicas "
            "(got chips 16, parts sampler 8 + reward 1 + learner 8 = 17)",
            "set resources.chips to 17 or resize the parts",
        )
    ]


def test_parts_refuse_run_level_elasticity_and_parallelism() -> None:
    text = edited(PIPELINE, "{chips: 17}", "{chips: 17, max_chips: 20}") + "  parallelism: {data: 2}\n"

    assert {path for path, _, _, _ in problems(text)} == {"spec.resources", "spec.parallelism.data"}


def test_a_part_with_more_workers_than_chips_is_refused_at_its_path() -> None:
    text = edited(PIPELINE, "reward: {chips: 1}", "reward: {chips: 1, parallelism: {data: 2}}")

    assert [path for path, _, _, _ in problems(text)] == ["spec.parts.reward.parallelism.data"]


def test_the_work_digest_ignores_who_where_and_when_but_not_what_is_computed() -> None:
    from crossrail.spec import work_digest

    base = {
        "metadata": {"name": "a", "team": "t"},
        "spec": {
            "stage": "pretraining",
            "image": "img@sha256:00",
            "command": ["python", "-m", "x"],
            "args": ["--steps", "10"],
            "priority": "low",
            "checkpoint": {"dir": "file:///c/a", "every": 60},
            "dataset": {"uri": "file:///d", "version": "v1"},
            "code": {"repo": "r", "commit": "abc"},
            "resources": {"chips": 4},
        },
    }
    moved = {
        "metadata": {"name": "b", "team": "u", "labels": {"k": "v"}},
        "spec": {
            **base["spec"],
            "priority": "high",
            "checkpoint": {"dir": "file:///c/b", "every": 60},
            "dataset": {"uri": "file:///d", "version": "v2"},
            "code": {"repo": "r", "commit": "def"},
            "accelerators": {"prefer": "tpu"},
            "parent": {"run": "p", "checkpoint": "latest"},
        },
    }
    assert work_digest(base) == work_digest(moved)
    more_steps = {**base, "spec": {**base["spec"], "args": ["--steps", "20"]}}
    more_chips = {**base, "spec": {**base["spec"], "resources": {"chips": 8}}}
    assert len({work_digest(base), work_digest(more_steps), work_digest(more_chips)}) == 3
