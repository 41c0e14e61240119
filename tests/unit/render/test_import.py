"""The first article's Job imports as a hardware-agnostic experiment and re-renders for a TPU pool:
image, command, args, config and checkpoint dir unchanged, every other difference listed and explained."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from crossrail.errors import SpecError
from crossrail.executors.render.importer import DATASET_PLACEHOLDER, Imported, import_job
from crossrail.executors.render.kubernetes import render_kubernetes
from crossrail.executors.render.workload import from_experiment
from crossrail.spec import Fleet, default_policy, parse_document, parse_fleet, validate_files

from .builders import DIGEST
from .conftest import FIXTURES, ROOT, assert_valid

ARTICLE_JOB = FIXTURES / "posttrain-gpu-run.yaml"
DATASET = "gs://MODEL_BUCKET/data/sft/v3"


def _article() -> dict[str, Any]:
    return yaml.safe_load(ARTICLE_JOB.read_text())


def _imported() -> Imported:
    return import_job(_article(), str(ARTICLE_JOB), dataset=DATASET)


def flatten(node: Any, prefix: str = "") -> dict[str, Any]:
    """Leaf values by path; env lists are keyed by variable name so order does not count."""
    if isinstance(node, dict):
        out: dict[str, Any] = {}
        for key, value in node.items():
            out |= flatten(value, f"{prefix}.{key}" if prefix else str(key))
        return out
    if isinstance(node, list) and prefix.endswith(".env"):
        return {f"{prefix}[{e['name']}]": e.get("value") for e in node}
    if isinstance(node, list):
        out = {}
        for i, value in enumerate(node):
            out |= flatten(value, f"{prefix}[{i}]")
        return out
    return {prefix: node}


def test_the_article_job_imports_as_a_portable_post_training_experiment() -> None:
    imported = _imported()
    exp = imported.experiment
    assert exp.name == "posttrain-042"
    assert str(exp.spec.stage) == "post_training"
    assert exp.spec.image == "us-docker.pkg.dev/PROJECT/train/posttrain:latest"
    assert exp.spec.command == ["python", "-m", "trainer.run"]
    assert exp.spec.args == [
        "--config",
        "gs://MODEL_BUCKET/configs/posttrain.yaml",
        "--checkpoint-dir",
        "$(CROSSRAIL_CHECKPOINT_DIR)",  # each run's own directory, never one every run of it shares
    ]
    assert exp.spec.config == "gs://MODEL_BUCKET/configs/posttrain.yaml"
    assert exp.spec.checkpoint.dir == "gs://MODEL_BUCKET/checkpoints/run-042"
    assert exp.spec.checkpoint.format == "unknown"  # trainer.run is no crossrail workload
    assert exp.spec.accelerators is not None
    assert str(exp.spec.accelerators.prefer) == "gpu"  # its nvidia.com/gpu limit: a preference, not a pin
    assert exp.spec.resources.chips == 8
    assert exp.spec.retries.max == 1
    assert exp.spec.env == {}  # TRAINING_BACKEND removed, EXPERIMENT_ID became the name
    text = imported.yaml()
    for hardware in ("nvidia", "TRAINING_BACKEND", "nodeSelector", "accelerator:"):
        assert hardware not in text
    paths = {f.path: f for f in imported.findings if f.action != "rendered"}
    assert paths["spec.template.spec.containers[0].env[0]"].action == "removed"
    assert "backend variable" in paths["spec.template.spec.containers[0].env[0]"].message
    assert paths["spec.template.spec.nodeSelector['accelerator']"].action == "removed"
    assert "not pinned by digest" in paths["spec.template.spec.containers[0].image"].message
    assert paths["spec.backoffLimit"].action == "moved"


# Each difference between the article's Job and its TPU re-render, by path pattern, with the findings
# path that explains it. A difference matching no pattern fails the test.
EXPLAINED_TOP = [
    (r"^kind$", "kind"),
    (r"^apiVersion$", "kind"),
    (r"^metadata\.name$", "metadata.name"),
    (r"^metadata\.namespace$", "metadata.name"),
    (r"^metadata\.labels\.(kueue\.x-k8s\.io|crossrail\.dev)/", "metadata.labels"),
    (r"^metadata\.annotations\.alpha\.jobset", "kind"),
    (r"^metadata\.annotations\.crossrail\.dev/(kueue|jobset)-version$", "kind"),
    (r"^spec\.backoffLimit$", "spec.backoffLimit"),
    (r"^spec\.(suspend)$", "spec.suspend"),
    (r"^spec\.failurePolicy\.maxRestarts$", "spec.backoffLimit"),
    (r"^spec\.replicatedJobs\[0\]\.(name|replicas)$", "kind"),
    (r"^spec\.replicatedJobs\[0\]\.template\.spec\.backoffLimit$", "spec.backoffLimit"),
    (r"^spec\.replicatedJobs\[0\]\.template\.spec\.(parallelism|completions|completionMode)$", "kind"),
]
EXPLAINED_POD = [
    (r"^metadata\.labels\.crossrail\.dev/", "metadata.labels"),
    (r"^spec\.nodeSelector\.", "spec.template.spec.nodeSelector"),
    (r"^metadata\.annotations\.kueue\.x-k8s\.io/podset-required-topology$", "spec.template.spec.nodeSelector"),
    (r"^spec\.tolerations", "spec.template.spec.tolerations"),
    (r"^spec\.containers\[0\]\.resources\.", "spec.template.spec.containers[0].resources"),
    (r"^spec\.containers\[0\]\.env\[(TRAINING_BACKEND|CROSSRAIL_[A-Z_]+)\]$", "spec.template.spec.containers[0].env"),
    (r"^spec\.containers\[0\]\.env\[(JAX_[A-Z_]+|RANK|WORLD_SIZE)\]$", "kind"),  # a multi-host JobSet's JAX coordinator
    (r"^spec\.containers\[0\]\.args\[3\]$", "spec.template.spec.containers[0].args[3]"),  # the run's own dir
    (r"^spec\.serviceAccountName$", "spec.template.spec.serviceAccountName"),
    (r"^spec\.terminationGracePeriodSeconds$", "spec.template.spec.terminationGracePeriodSeconds"),
]


def _diff(before: Any, after: Any) -> set[str]:
    a, b = flatten(before), flatten(after)
    return {p for p in a.keys() | b.keys() if a.get(p) != b.get(p)}


def _explain(diffs: set[str], table: list[tuple[str, str]], findings: set[str]) -> dict[str, str]:
    explained = {}
    for path in sorted(diffs):
        match = next((why for pattern, why in table if re.search(pattern, path)), None)
        assert match is not None, f"unexplained difference {path}"
        assert match in findings, f"{path} is explained by {match}, which the import's findings do not list"
        explained[path] = match
    return explained


@pytest.mark.slow
def test_the_article_job_rerenders_for_a_tpu_pool_with_every_difference_explained() -> None:
    # the example fleet without the claim its pools mount for RL pipelines: the article's Job mounts nothing
    text = (ROOT / "examples" / "fleet.yaml").read_text()
    gke_fleet = parse_fleet(parse_document(re.sub(r"\n +kubernetes: \{volumes: .*\}\]\}", "", text), "fleet.yaml"))
    assert all(not p.kubernetes for p in gke_fleet.pools)
    imported = _imported()
    job = _article()
    work = from_experiment(imported.experiment, source="imported", allow_unpinned=True)
    rendered = render_kubernetes(work, gke_fleet, gke_fleet.pool("tpu-v5p-pool"))
    assert_valid(rendered)
    assert rendered["kind"] == "JobSet"  # 8 v5p chips are a 2x2x2 slice of two hosts

    rjob = rendered["spec"]["replicatedJobs"][0]
    before_pod, after_pod = job["spec"]["template"], rjob["template"]["spec"]["template"]
    before_c, after_c = before_pod["spec"]["containers"][0], after_pod["spec"]["containers"][0]
    # What the article says to keep is kept, byte for byte.
    for key in ("image", "command", "name"):
        assert after_c[key] == before_c[key], key
    # The checkpoint argument names the run's own directory: Kubernetes expands it from the pod's env.
    assert after_c["args"] == [*before_c["args"][:3], "$(CROSSRAIL_CHECKPOINT_DIR)"]
    env = {e["name"]: e.get("value") for e in after_c["env"]}
    assert env["EXPERIMENT_ID"] == "posttrain-042"
    assert env["CROSSRAIL_CONFIG"] == "gs://MODEL_BUCKET/configs/posttrain.yaml"
    assert env["CROSSRAIL_CHECKPOINT_DIR"].startswith("gs://MODEL_BUCKET/checkpoints/run-042/")
    # What it says to change is changed: the scheduling constraints and the backend variable.
    assert env["TRAINING_BACKEND"] == "tpu"
    assert after_c["resources"]["limits"] == {"google.com/tpu": "4"}
    # Only labels GKE puts on its TPU nodes: no `accelerator: tpu-v5p`, which no GKE node carries.
    assert after_pod["spec"]["nodeSelector"] == {
        "cloud.google.com/gke-tpu-accelerator": "tpu-v5p-slice",
        "cloud.google.com/gke-tpu-topology": "2x2x2",
    }

    findings = {f.path for f in imported.findings}
    before_top = dict(job)
    before_top["spec"] = {k: v for k, v in job["spec"].items() if k != "template"}
    after_top = dict(rendered)
    after_top["spec"] = {
        **rendered["spec"],
        "replicatedJobs": [
            {**rjob, "template": {"spec": {k: v for k, v in rjob["template"]["spec"].items() if k != "template"}}}
        ],
    }
    top = _explain(_diff(before_top, after_top), EXPLAINED_TOP, findings)
    pod = _explain(_diff(before_pod, after_pod), EXPLAINED_POD, findings)
    # The differences the article's advice implies are all among them.
    assert {"kind", "spec.backoffLimit", "spec.suspend", "metadata.labels"} <= set(top.values())
    assert top["metadata.labels.kueue.x-k8s.io/queue-name"] == "metadata.labels"
    assert pod["spec.containers[0].env[TRAINING_BACKEND]"] == "spec.template.spec.containers[0].env"
    assert pod["spec.nodeSelector.accelerator"] == "spec.template.spec.nodeSelector"
    assert pod["spec.serviceAccountName"] == "spec.template.spec.serviceAccountName"
    assert "spec.containers[0].resources.limits.nvidia.com/gpu" in pod


def test_the_imported_job_with_a_digest_renders_pinned_and_otherwise_is_refused(gke_fleet: Fleet) -> None:
    imported = _imported()
    with pytest.raises(SpecError, match="not pinned by digest"):
        from_experiment(imported.experiment, source="imported")
    pinned = import_job(_article(), "job.yaml", dataset=DATASET, image_digest=DIGEST)
    assert pinned.experiment.spec.image == f"us-docker.pkg.dev/PROJECT/train/posttrain@{DIGEST}"
    assert_valid(
        render_kubernetes(from_experiment(pinned.experiment, source="i"), gke_fleet, gke_fleet.pool("h100-pool"))
    )


def test_a_job_without_a_checkpoint_dir_is_refused() -> None:
    job = _article()
    job["spec"]["template"]["spec"]["containers"][0]["args"] = ["--config", "gs://b/c.yaml"]
    with pytest.raises(SpecError) as caught:
        import_job(job, "job.yaml")
    assert [p.path for p in caught.value.problems] == ["spec.template.spec.containers[0].args"]


def test_the_articles_job_imports_without_flags_and_its_unnamed_dataset_is_a_placeholder_to_do() -> None:
    imported = import_job(_article(), str(ARTICLE_JOB))

    assert imported.document["spec"]["dataset"] == {"uri": DATASET_PLACEHOLDER}
    (todo,) = [f for f in imported.findings if f.path == "spec.dataset.uri"]
    assert todo.action == "to do"
    assert "placeholder" in todo.message
    assert "the Job names none" in todo.message


@pytest.mark.parametrize(
    "doc",
    [{"apiVersion": "apps/v1", "kind": "Deployment"}, ["not", "a", "job"]],
    ids=["a-deployment", "a-list"],
)
def test_only_a_batch_v1_job_imports(doc: Any) -> None:
    with pytest.raises(SpecError, match="is not a batch/v1 Job"):
        import_job(doc, "x.yaml", dataset=DATASET)


def test_device_pins_secrets_volumes_and_cpu_sizing_are_removed_with_reasons() -> None:
    job = _article()
    pod = job["spec"]["template"]["spec"]
    c = pod["containers"][0]
    c["env"] += [
        {"name": "CUDA_VISIBLE_DEVICES", "value": "0,1"},
        {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}},
        {"name": "LOG_LEVEL", "value": "debug"},
    ]
    c["resources"]["requests"] = {"cpu": "16", "memory": "64Gi"}
    pod["volumes"] = [{"name": "data", "hostPath": {"path": "/mnt/data"}}]
    pod["tolerations"] = [{"key": "nvidia.com/gpu", "operator": "Exists"}]
    imported = import_job(job, "job.yaml", dataset=DATASET)
    assert imported.experiment.spec.env == {"LOG_LEVEL": "debug"}
    removed = {f.path for f in imported.findings if f.action == "removed"}
    assert {
        "spec.template.spec.containers[0].env[2]",
        "spec.template.spec.containers[0].env[3]",
        "spec.template.spec.containers[0].resources.requests['cpu']",
        "spec.template.spec.volumes",
        "spec.template.spec.tolerations",
    } <= removed


def test_what_the_strict_policy_still_needs_is_listed_and_the_options_supply_it(tmp_path: Path) -> None:
    todo = {f.path for f in _imported().findings if f.action == "to do"}
    assert todo == {"metadata.owner", "metadata.team", "spec.code.repo", "spec.image", "spec.checkpoint.format"}
    complete = import_job(
        _article(),
        "job.yaml",
        dataset=DATASET,
        team="alignment",
        owner="ada@example.com",
        code_repo="https://github.com/acme/trainer",
        image_digest=DIGEST,
    )
    # What no option can say: the format of a trainer crossrail knows nothing about.
    assert [f.path for f in complete.findings if f.action == "to do"] == ["spec.checkpoint.format"]
    path = tmp_path / "posttrain-042.yaml"
    path.write_text(complete.yaml().replace("format: unknown", "format: trainer-ckpt/v1"))
    assert validate_files([path], default_policy()) == []  # the article's strict policy accepts it


def test_the_tpu_variant_keeps_its_intent_and_a_crossrail_workload_keeps_its_format() -> None:
    job = _article()
    pod = job["spec"]["template"]["spec"]
    container = pod["containers"][0]
    container["resources"] = {"limits": {"cpu": "8"}}  # the TPU variant asks for no accelerator resource
    container["env"] = [{"name": "TRAINING_BACKEND", "value": "tpu"}]
    pod["nodeSelector"] = {"accelerator": "tpu-v5p", "cloud.google.com/gke-tpu-topology": "2x2x2"}
    exp = import_job(job, "tpu-job.yaml", dataset=DATASET).experiment
    assert exp.spec.accelerators is not None
    assert str(exp.spec.accelerators.prefer) == "tpu"
    assert exp.spec.resources.chips == 8  # the slice's topology, not "no accelerator: 1 chip"
    container["command"] = ["python", "-m", "crossrail.workloads.gpt"]
    assert import_job(job, "tpu-job.yaml", dataset=DATASET).experiment.spec.checkpoint.format == "crossrail-ckpt/v1"


def test_placeholders_the_lint_suggests_are_obviously_placeholders() -> None:
    todo = {f.path: f.message for f in _imported().findings if f.action == "to do"}
    assert "`owner: <owner>`" in todo["metadata.owner"]
    assert "`team: <team>`" in todo["metadata.team"]
    assert "crossrail-ckpt/v1" in todo["spec.checkpoint.format"]
