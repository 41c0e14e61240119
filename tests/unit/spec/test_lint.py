"""Portability lint: each finding names the field, its line, and how to say the same thing portably."""

from __future__ import annotations

import pytest

from crossrail.errors import SpecError
from crossrail.spec import PlacementPolicy, check_experiment, lint_experiment, parse_document, parse_policy

from .builders import EXPERIMENT_YAML, doc, edited

LOCAL_SFT = """\
apiVersion: crossrail/v1
kind: Experiment
metadata:
  name: sft-local
  team: alignment
  owner: ada@example.com
spec:
  stage: post_training
  image: trainer:latest
  command: [python, -m, trainer.run]
  code: {repo: https://github.com/acme/trainer}
  dataset:
    uri: /data/sft
  checkpoint: {dir: gs://acme-models/ckpt/sft}
  resources:
    chips: 8
    nvidia.com/gpu: 8
"""


def relaxed(extra: str) -> PlacementPolicy:
    return parse_policy(parse_document(f"portability_requirements: {{{extra}}}\n", "policy.yaml"))


def findings(text: str, policy: PlacementPolicy) -> list[tuple[str, int | None, str]]:
    return [(p.path, p.line, p.message) for p in lint_experiment(doc(text), policy)]


def test_unpinned_image_hard_coded_gpu_and_local_path_are_exactly_three_problems(
    policy: PlacementPolicy,
) -> None:
    with pytest.raises(SpecError) as caught:
        check_experiment(doc(LOCAL_SFT, "experiments/sft.yaml"), policy)

    problems = caught.value.problems
    assert [(p.path, p.line) for p in problems] == [
        ("spec.image", 9),
        ("spec.dataset.uri", 13),
        ("spec.resources['nvidia.com/gpu']", 17),
    ]
    image, dataset, gpu = problems
    assert image.message == "'trainer:latest' is not pinned by digest"
    assert image.fix is not None
    assert image.fix.startswith("use trainer@sha256:<64 hex>")
    assert dataset.message.startswith("'/data/sft' is a local path")
    assert dataset.fix is not None
    assert "gs://bucket/path" in dataset.fix
    assert "local_uri_schemes: [file]" in dataset.fix
    assert gpu.message == "hard-coded nvidia.com/gpu"
    assert gpu.fix is not None
    assert gpu.fix.startswith("request chips with spec.resources.chips: 8 and a preference with")
    assert "spec.accelerators.prefer: gpu" in gpu.fix
    assert str(caught.value).startswith("crossrail: 3 problems in experiments/sft.yaml\n  spec.image (line 9): ")


def test_the_full_example_has_no_findings(policy: PlacementPolicy) -> None:
    assert lint_experiment(doc(EXPERIMENT_YAML), policy) == []


@pytest.mark.parametrize(
    ("old", "new", "path", "message"),
    [
        pytest.param(
            "format: crossrail-ckpt/v1",
            "format: safetensors",
            "spec.checkpoint.format",
            "checkpoint format 'safetensors' is not versioned",
            id="unversioned-checkpoint-format",
        ),
        pytest.param(
            "config: gs://acme-models/configs/posttrain.yaml",
            "config: https://example.com/posttrain.yaml",
            "spec.config",
            "'https://example.com/posttrain.yaml' uses https://, not object storage; a run placed on another "
            "pool cannot read it",
            id="config-over-https",
        ),
        pytest.param(
            "dir: gs://acme-models/ckpt/posttrain-042",
            "dir: ./checkpoints",
            "spec.checkpoint.dir",
            "'./checkpoints' is a local path; a run placed on another pool cannot read it",
            id="relative-checkpoint-dir",
        ),
        pytest.param("team: alignment, ", "", "metadata.team", "missing metadata.team", id="no-team"),
        pytest.param("owner: ada@example.com, ", "", "metadata.owner", "missing metadata.owner", id="no-owner"),
        pytest.param(
            "repo: https://github.com/acme/trainer, ",
            "",
            "spec.code.repo",
            "missing spec.code.repo",
            id="no-repo",
        ),
        pytest.param(
            "image: us-docker.pkg.dev/acme/train/posttrain@sha256:",
            "image: us-docker.pkg.dev/acme/train/posttrain@sha256:ABC",
            "spec.image",
            "'us-docker.pkg.dev/acme/train/posttrain@sha256:ABC716716f6347cd75fb375b7bf7ade9f86aacee812082efae0b84c0d8"
            "54c1bd74d' is not pinned by digest",
            id="digest-that-is-not-64-lowercase-hex",
        ),
        pytest.param(
            "LOG_LEVEL: info",
            "CUDA_VISIBLE_DEVICES: '0,1'",
            "spec.env.CUDA_VISIBLE_DEVICES",
            "hard-coded device visibility (CUDA_VISIBLE_DEVICES)",
            id="cuda-visible-devices",
        ),
        pytest.param(
            "LOG_LEVEL: info",
            "TPU_CHIPS_PER_HOST_BOUNDS: '2,2,1'",
            "spec.env.TPU_CHIPS_PER_HOST_BOUNDS",
            "hard-coded TPU runtime setting (TPU_CHIPS_PER_HOST_BOUNDS)",
            id="tpu-runtime-variable",
        ),
        pytest.param(
            "LOG_LEVEL: info",
            "TRAINING_BACKEND: jax",
            "spec.env.TRAINING_BACKEND",
            "hard-coded TRAINING_BACKEND",
            id="training-backend-is-set-by-placement",
        ),
        pytest.param(
            'args: [--steps, "200"]',
            "args: [--gpus=nvidia.com/gpu]",
            "spec.args[0]",
            "hard-coded nvidia.com/gpu",
            id="resource-name-inside-an-argument",
        ),
    ],
)
def test_each_rule_finds_one_problem(policy: PlacementPolicy, old: str, new: str, path: str, message: str) -> None:
    found = findings(edited(EXPERIMENT_YAML, old, new), policy)

    assert [(p, m) for p, _, m in found] == [(path, message)]


@pytest.mark.parametrize(
    ("addition", "path", "message"),
    [
        pytest.param(
            "  nodeSelector: {cloud.google.com/gke-accelerator: nvidia-h100-80gb}\n",
            "spec.nodeSelector",
            "hard-coded node placement (nodeSelector)",
            id="node-selector",
        ),
        pytest.param(
            "  tolerations: [{key: nvidia.com/gpu, operator: Exists}]\n",
            "spec.tolerations",
            "hard-coded node placement (tolerations)",
            id="tolerations",
        ),
        pytest.param(
            "  cloud.google.com/gke-tpu-topology: 2x2x1\n",
            "spec['cloud.google.com/gke-tpu-topology']",
            "hard-coded node label cloud.google.com/gke-tpu-topology: 2x2x1",
            id="gke-tpu-label",
        ),
        pytest.param(
            "  google.com/tpu: 4\n",
            "spec['google.com/tpu']",
            "hard-coded google.com/tpu",
            id="tpu-resource-name",
        ),
    ],
)
def test_hard_coded_placement_replaces_the_unknown_key_problem(
    policy: PlacementPolicy, addition: str, path: str, message: str
) -> None:
    with pytest.raises(SpecError) as caught:
        check_experiment(doc(EXPERIMENT_YAML + addition), policy)

    assert [(p.path, p.line, p.message) for p in caught.value.problems] == [(path, 19, message)]


def test_a_tpu_resource_suggests_preferring_tpu(policy: PlacementPolicy) -> None:
    (problem,) = lint_experiment(doc(EXPERIMENT_YAML + "  google.com/tpu: 4\n"), policy)

    assert problem.fix is not None
    assert "spec.resources.chips: 4 and a preference with spec.accelerators.prefer: tpu" in problem.fix


def test_a_missing_dataset_version_is_not_a_finding(policy: PlacementPolicy) -> None:
    text = edited(EXPERIMENT_YAML, "{uri: gs://acme-data/sft/v3/, version: v3}", "{uri: gs://acme-data/sft/v3/}")

    assert findings(text, policy) == []


@pytest.mark.parametrize(
    ("extra", "remaining"),
    [
        pytest.param("local_uri_schemes: [file]", ["spec.image", "spec.resources['nvidia.com/gpu']"], id="local-files"),
        pytest.param("container_image: any", ["spec.dataset.uri", "spec.resources['nvidia.com/gpu']"], id="any-image"),
        pytest.param(
            "dataset_uri_scheme: any, container_image: any",
            ["spec.resources['nvidia.com/gpu']"],
            id="hard-coded-hardware-is-never-allowed",
        ),
    ],
)
def test_a_relaxed_policy_drops_only_what_it_allows(extra: str, remaining: list[str]) -> None:
    assert [path for path, _, _ in findings(LOCAL_SFT, relaxed(extra))] == remaining


def test_optional_metadata_drops_team_owner_and_repo() -> None:
    text = edited(
        edited(EXPERIMENT_YAML, "team: alignment, owner: ada@example.com, ", ""),
        "repo: https://github.com/acme/trainer, ",
        "",
    )

    assert findings(text, relaxed("experiment_metadata: optional")) == []
    assert len(findings(text, relaxed("experiment_metadata: required"))) == 3


def test_lint_reads_any_shape_without_raising(policy: PlacementPolicy) -> None:
    found = findings("kind: Experiment\nspec: [1, 2]\nmetadata: 3\n", policy)

    assert {path for path, _, _ in found} == {"metadata.team", "metadata.owner", "spec.code.repo"}


def test_schema_errors_are_not_lint_findings(policy: PlacementPolicy) -> None:
    assert findings(edited(EXPERIMENT_YAML, "chips: 8,", "chips: 0,"), policy) == []


def test_a_placeholder_left_by_import_is_a_problem_under_any_policy() -> None:
    from crossrail.spec.lint import placeholder

    uri = placeholder("the dataset URI; the Job names none")
    text = edited(EXPERIMENT_YAML, "{uri: gs://acme-data/sft/v3/, version: v3}", f"{{uri: '{uri}'}}")

    (problem,) = lint_experiment(doc(text), relaxed("dataset_uri_scheme: any"))

    assert (problem.path, problem.line) == ("spec.dataset.uri", 11)
    assert problem.message == "is a placeholder, not a value (to fill in: the dataset URI; the Job names none)"
    assert problem.fix == "replace it with the real value"
