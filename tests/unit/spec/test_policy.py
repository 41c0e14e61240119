"""The placement policy: the article's YAML verbatim, crossrail's extensions, and mistakes named."""

from __future__ import annotations

import pytest

from crossrail.core.metric_names import METRIC_NAMES
from crossrail.errors import SpecError
from crossrail.spec import ARTICLE_POLICY_YAML, Stage, default_policy, kind_of, parse_document, parse_policy


def policy_problems(text: str) -> list[tuple[str, int | None, str, str | None]]:
    with pytest.raises(SpecError) as caught:
        parse_policy(parse_document(text, "policy.yaml"))
    return [(p.path, p.line, p.message, p.fix) for p in caught.value.problems]


def test_the_article_policy_parses_verbatim() -> None:
    doc = parse_document(ARTICLE_POLICY_YAML, "policy.yaml")

    policy = parse_policy(doc)

    assert kind_of(doc) == "PlacementPolicy"
    assert policy.for_stage(Stage.PRETRAINING).preferred_accelerator == "tpu"
    assert policy.for_stage("post_training").preferred_accelerator == "gpu"
    assert policy.for_stage("reinforcement_learning").preferred_accelerator == "mixed"
    assert policy.for_stage("post_training").metrics == [
        "steps_per_hour",
        "experiment_queue_seconds",
        "eval_pass_rate",
    ]
    assert policy.portability_requirements.container_image == "pinned-by-digest"
    assert policy.portability_requirements.local_uri_schemes == []


@pytest.mark.parametrize("stage", [Stage.INFERENCE, Stage.EVAL, Stage.EXPERIMENT])
def test_stages_the_policy_omits_prefer_any_accelerator(stage: Stage) -> None:
    workload = default_policy().for_stage(stage)

    assert (workload.preferred_accelerator, workload.metrics, workload.objective) == ("any", [], None)


def test_default_policy_is_the_article_policy() -> None:
    assert default_policy() == parse_policy(parse_document(ARTICLE_POLICY_YAML, "x"))


def test_the_article_text_is_kept_byte_for_byte() -> None:
    assert ARTICLE_POLICY_YAML.startswith("workloads:\n  pretraining:\n    preferred_accelerator: tpu\n")
    assert ARTICLE_POLICY_YAML.endswith("  container_image: pinned-by-digest\n")
    assert ARTICLE_POLICY_YAML.count("\n") == 24


def test_an_empty_mapping_is_the_strict_policy() -> None:
    policy = parse_policy(parse_document("apiVersion: crossrail/v1\nkind: PlacementPolicy\n", "p.yaml"))

    assert policy.portability_requirements == default_policy().portability_requirements
    assert policy.for_stage("pretraining").preferred_accelerator == "any"


def test_crossrail_extensions_are_accepted() -> None:
    text = (
        "apiVersion: crossrail/v1\nkind: PlacementPolicy\nmetadata: {name: lab}\n"
        "workloads:\n  eval: {preferred_accelerator: gpu, objective: time_to_result}\n"
        "portability_requirements: {local_uri_schemes: [file]}\n"
    )

    policy = parse_policy(parse_document(text, "p.yaml"))

    assert policy.for_stage("eval").objective == "time_to_result"
    assert policy.portability_requirements.local_uri_schemes == ["file"]
    assert policy.portability_requirements.dataset_uri_scheme == "object-storage"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param(
            "workloads:\n  posttraining: {preferred_accelerator: gpu}\n",
            (
                "workloads.posttraining",
                2,
                "key 'posttraining' is not one of pretraining, post_training, inference, "
                "reinforcement_learning, eval, experiment",
                "did you mean 'post_training'?",
            ),
            id="workload-key-must-be-a-stage",
        ),
        pytest.param(
            "workloads:\n  eval: {preferred_accelerator: cpu}\n",
            ("workloads.eval.preferred_accelerator", 2, "'cpu' is not one of tpu, gpu, mixed, any", None),
            id="cpu-is-not-a-stage-preference",
        ),
        pytest.param(
            "portability_requirements:\n  container_image: pinned\n",
            (
                "portability_requirements.container_image",
                2,
                "'pinned' is not one of pinned-by-digest, any",
                None,
            ),
            id="unknown-requirement-value",
        ),
        pytest.param(
            "portability_requirements:\n  checkpoint_formats: versioned\n",
            (
                "portability_requirements.checkpoint_formats",
                2,
                "unknown key 'checkpoint_formats'",
                "did you mean 'checkpoint_format'?",
            ),
            id="misspelt-requirement",
        ),
        pytest.param(
            "workloads:\n  post_training:\n    metrics: [steps_per_hour, experiment_queue_secs]\n",
            (
                "workloads.post_training.metrics[1]",
                3,
                "unknown metric 'experiment_queue_secs'",
                "did you mean 'experiment_queue_seconds'? known metrics: " + ", ".join(METRIC_NAMES),
            ),
            id="a-metric-crossrail-cannot-compute",
        ),
    ],
)
def test_policy_mistakes_are_named(text: str, expected: tuple[str, int, str, str | None]) -> None:
    assert policy_problems(text) == [expected]


def test_code_commit_is_recorded_by_default_and_required_only_when_the_policy_says_so() -> None:
    assert default_policy().portability.code_commit == "recorded"
    strict = parse_policy(parse_document("portability_requirements: {code_commit: required}\n", "p.yaml"))
    assert strict.portability.code_commit == "required"
    with pytest.raises(SpecError, match=r"portability_requirements.code_commit \(line 1\): 'always' is not one of"):
        parse_policy(parse_document("portability_requirements: {code_commit: always}\n", "p.yaml"))
