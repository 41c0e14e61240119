"""Every Job and JobSet rendered for stages x pool kinds x sizes validates strictly, and carries what a
launch needs: queue label, crossrail labels and env, image by digest, service account, no self-retries."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from crossrail.errors import SpecError
from crossrail.executors.render.kubernetes import render_kubernetes
from crossrail.executors.render.workload import from_experiment
from crossrail.spec import Fleet, Stage, parse_document, parse_fleet

from .builders import DIGEST, IMAGE, experiment
from .conftest import MATRIX_FLEET, assert_valid, problems

# (pool, chips) -> (kind, slices, hosts per slice, chips per pod, topology)
SIZES = {
    "gpu-one-chip": ("h100", 1, "Job", 1, 1, 1, None),
    "gpu-full-host": ("h100", 8, "Job", 1, 1, 8, None),
    "gpu-spot-host": ("h200-spot", 8, "Job", 1, 1, 8, None),
    "tpu-v5p-single-host": ("v5p", 4, "Job", 1, 1, 4, "2x2x1"),
    "tpu-v5p-two-host-slice": ("v5p", 8, "JobSet", 1, 2, 4, "2x2x2"),
    "tpu-v5p-16-host-slice": ("v5p", 64, "JobSet", 1, 16, 4, "4x4x4"),
    "tpu-v5p-multislice-2x64": ("v5p", 128, "JobSet", 2, 16, 4, "4x4x4"),
    "tpu-v6e-one-chip": ("v6e", 1, "Job", 1, 1, 1, "1x1"),
    "tpu-v6e-single-host": ("v6e", 4, "Job", 1, 1, 4, "2x2"),
    "tpu-v6e-multislice-2x16": ("v6e", 32, "JobSet", 2, 4, 4, "4x4"),
    "cpu-eval-box": ("cpu", 4, "Job", 1, 1, 4, None),
}
STAGES = [str(s) for s in Stage]


def _pod(obj: dict[str, Any]) -> dict[str, Any]:
    if obj["kind"] == "Job":
        return obj["spec"]["template"]
    return obj["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]


def _env(obj: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value") or e["valueFrom"] for e in _pod(obj)["spec"]["containers"][0]["env"]}


@pytest.mark.parametrize("stage", STAGES)
@pytest.mark.parametrize("size", list(SIZES), ids=list(SIZES))
def test_every_stage_on_every_pool_kind_and_size_renders_a_valid_workload(
    matrix_fleet: Fleet, stage: str, size: str
) -> None:
    pool_name, chips, kind, slices, hosts, per_pod, topology = SIZES[size]
    pool = matrix_fleet.pool(pool_name)
    work = from_experiment(experiment(stage, chips), source="exp.yaml", run="exp-042-3", attempt=2)
    obj = render_kubernetes(work, matrix_fleet, pool)
    assert_valid(obj)
    assert obj["kind"] == kind
    meta, spec = obj["metadata"], obj["spec"]
    assert spec["suspend"] is True
    queue = matrix_fleet.queue_for(stage)
    assert queue is not None
    assert meta["labels"]["kueue.x-k8s.io/queue-name"] == queue.name
    assert meta["labels"]["kueue.x-k8s.io/priority-class"] == "crossrail-normal"
    assert meta["namespace"] == "research"
    pod = _pod(obj)
    for labels in (meta["labels"], pod["metadata"]["labels"]):
        assert labels["crossrail.dev/run"] == "exp-042-3"
        assert labels["crossrail.dev/attempt"] == "2"
        assert labels["crossrail.dev/stage"] == stage
    container = pod["spec"]["containers"][0]
    assert container["image"] == IMAGE
    assert container["command"] == ["python", "-m", "trainer.run"]
    assert container["args"] == ["--steps", "200", "--note", "it's a $HOME test"]
    env = _env(obj)
    assert env["TRAINING_BACKEND"] == str(pool.accelerator)
    assert env["EXPERIMENT_ID"] == "exp-042"
    assert env["CROSSRAIL_CONFIG"] == "gs://acme-models/configs/exp-042.yaml"
    assert env["CROSSRAIL_DATASET"] == "gs://acme-data/sft/v3/"
    assert env["CROSSRAIL_CHECKPOINT_DIR"] == "gs://acme-models/checkpoints/exp-042/exp-042-3"
    assert env["CROSSRAIL_REPORT"].startswith("gs://acme-models/checkpoints/exp-042/exp-042-3/")
    assert (env["CROSSRAIL_RUN_ID"], env["CROSSRAIL_ATTEMPT"], env["LOG_LEVEL"]) == ("exp-042-3", "2", "info")
    assert pod["spec"]["serviceAccountName"] == ("spot-trainer" if pool_name == "h200-spot" else "trainer-wi")
    assert pod["spec"]["restartPolicy"] == "Never"
    selector = pod["spec"]["nodeSelector"]
    if pool.accelerator == "tpu":
        assert container["resources"]["limits"] == {"google.com/tpu": str(per_pod)}
        assert selector["cloud.google.com/gke-tpu-topology"] == topology
        assert (
            selector["cloud.google.com/gke-tpu-accelerator"]
            == {"v5p": "tpu-v5p-slice", "v6e": "tpu-v6e-slice"}[pool_name]
        )
        assert {"key": "google.com/tpu", "operator": "Exists", "effect": "NoSchedule"} in pod["spec"]["tolerations"]
    elif pool.accelerator == "gpu":
        assert container["resources"]["limits"] == {"nvidia.com/gpu": str(per_pod)}
        expected = {"h100": "nvidia-h100-80gb", "h200-spot": "nvidia-h200-141gb"}[pool_name]
        assert selector["cloud.google.com/gke-accelerator"] == expected
        assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod["spec"]["tolerations"]
    else:
        assert container["resources"] == {"requests": {"cpu": str(per_pod)}}
        assert "tolerations" not in pod["spec"]
    if kind == "Job":
        assert (spec["backoffLimit"], spec["parallelism"], spec["completions"]) == (0, 1, 1)
    else:
        assert spec["failurePolicy"] == {"maxRestarts": 0}
        (rjob,) = spec["replicatedJobs"]
        assert rjob["replicas"] == slices
        job = rjob["template"]["spec"]
        assert (job["parallelism"], job["completions"], job["backoffLimit"]) == (hosts, hosts, 0)
        assert meta["annotations"]["alpha.jobset.sigs.k8s.io/exclusive-topology"] == "cloud.google.com/gke-nodepool"
        assert (env["CROSSRAIL_SLICES"], env["CROSSRAIL_HOSTS_PER_SLICE"]) == (str(slices), str(hosts))
        if slices > 1:
            assert env["MEGASCALE_NUM_SLICES"] == str(slices)
            assert env["MEGASCALE_COORDINATOR_ADDRESS"] == "exp-042-3-a2-slice-0-0.exp-042-3-a2"
            assert env["MEGASCALE_SLICE_ID"] == {
                "fieldRef": {"fieldPath": "metadata.labels['jobset.sigs.k8s.io/job-index']"}
            }
        else:
            assert "MEGASCALE_NUM_SLICES" not in env


def test_a_teams_work_goes_to_its_namespace_and_its_own_queue(matrix_fleet: Fleet) -> None:
    work = from_experiment(experiment("post_training", 8, team="alignment", priority="high"), source="e.yaml")
    obj = render_kubernetes(work, matrix_fleet, matrix_fleet.pool("h100"))
    assert obj["metadata"]["namespace"] == "align"
    assert obj["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "alignment-post"
    assert obj["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] == "crossrail-high"
    assert obj["metadata"]["labels"]["crossrail.dev/team"] == "alignment"
    assert obj["metadata"]["name"] == "exp-042-1-a1"


def test_spot_pool_selects_spot_nodes_and_tolerates_their_taint(matrix_fleet: Fleet) -> None:
    obj = render_kubernetes(
        from_experiment(experiment(), source="e.yaml"), matrix_fleet, matrix_fleet.pool("h200-spot")
    )
    pod = obj["spec"]["template"]["spec"]
    assert pod["nodeSelector"]["cloud.google.com/gke-spot"] == "true"
    assert {"key": "cloud.google.com/gke-spot", "operator": "Equal", "value": "true", "effect": "NoSchedule"} in pod[
        "tolerations"
    ]


def test_the_example_fleet_selects_only_labels_gke_puts_on_its_nodes(gke_fleet: Fleet) -> None:
    gpu = render_kubernetes(from_experiment(experiment(), source="e.yaml"), gke_fleet, gke_fleet.pool("h100-pool"))
    assert gpu["spec"]["template"]["spec"]["nodeSelector"] == {"cloud.google.com/gke-accelerator": "nvidia-h100-80gb"}
    assert_valid(gpu)
    tpu = render_kubernetes(
        from_experiment(experiment(chips=4), source="e.yaml"), gke_fleet, gke_fleet.pool("tpu-v5p-pool")
    )
    assert tpu["spec"]["template"]["spec"]["nodeSelector"] == {
        "cloud.google.com/gke-tpu-accelerator": "tpu-v5p-slice",
        "cloud.google.com/gke-tpu-topology": "2x2x1",
    }


@pytest.mark.parametrize(
    ("pool", "chips", "path", "says"),
    [
        ("h100", 12, "spec.pools[0].chips_per_host", "12 chips are not whole 8-chip hosts"),
        ("v5p", 6, "spec.pools[2].topologies", "no slice shape or multi-slice makes 6 chips"),
        ("v6e", 128, "spec.pools[3].chips", "the pool has 64 chips"),
    ],
    ids=["gpu-part-of-a-host", "tpu-size-with-no-shape", "more-chips-than-the-pool"],
)
def test_sizes_a_pool_cannot_hold_are_refused_with_the_pool_field_and_a_fix(
    matrix_fleet: Fleet, pool: str, chips: int, path: str, says: str
) -> None:
    work = from_experiment(experiment(chips=chips), source="e.yaml")
    with pytest.raises(SpecError) as caught:
        render_kubernetes(work, matrix_fleet, matrix_fleet.pool(pool))
    (problem,) = caught.value.problems
    assert problem.path == path
    assert says in problem.message
    assert problem.fix


def test_an_unpinned_image_is_refused_unless_a_digest_is_given_or_it_is_allowed() -> None:
    exp = experiment(image="us-docker.pkg.dev/acme/train/trainer:latest")
    with pytest.raises(SpecError, match="not pinned by digest") as caught:
        from_experiment(exp, source="e.yaml")
    assert "--image-digest" in (caught.value.problems[0].fix or "")
    assert from_experiment(exp, source="e.yaml", image_digest=DIGEST).image == IMAGE
    assert from_experiment(exp, source="e.yaml", allow_unpinned=True).image.endswith(":latest")
    with pytest.raises(SpecError, match="not an image digest"):
        from_experiment(exp, source="e.yaml", image_digest="sha256:short")


def test_a_stage_without_a_queue_is_refused(gke_fleet: Fleet) -> None:
    work = from_experiment(experiment("inference", 8), source="e.yaml")
    with pytest.raises(SpecError, match="no queue for stage inference"):
        render_kubernetes(work, gke_fleet, gke_fleet.pool("h100-pool"))


def _job(matrix_fleet: Fleet, pool: str = "h100", chips: int = 8) -> dict[str, Any]:
    return render_kubernetes(
        from_experiment(experiment(chips=chips), source="e.yaml"), matrix_fleet, matrix_fleet.pool(pool)
    )


def _set(obj: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    obj = copy.deepcopy(obj)
    node: Any = obj
    keys = [int(k) if k.isdigit() else k for k in path.split(".")]
    for key in keys[:-1]:
        node = node[key]
    node[keys[-1]] = value
    return obj


@pytest.mark.parametrize(
    ("pool", "chips", "path", "value"),
    [
        ("h100", 8, "spec.template.spec.containers.0.gpus", 8),
        ("h100", 8, "spec.backoffLimit", "zero"),
        ("h100", 8, "spec.template.spec.containers.0.name", None),
        ("h100", 8, "spec.template.spec.nodeSelectors", {"a": "b"}),
        ("v5p", 8, "spec.replicatedJobs.0.replicas", -1),
        ("v5p", 8, "spec.failurePolicy.maxRestart", 0),
        (
            "v5p",
            8,
            "spec.replicatedJobs.0.template.spec.template.spec.containers.0.resources.limits.google.com/tpu",
            "4 chips",
        ),
    ],
    ids=[
        "job-unknown-container-field",
        "job-backoff-limit-not-a-number",
        "job-container-without-name",
        "job-misspelt-node-selector",
        "jobset-negative-replicas",
        "jobset-misspelt-max-restarts",
        "jobset-quantity-with-words",
    ],
)
def test_the_validators_refuse_broken_manifests(
    matrix_fleet: Fleet, pool: str, chips: int, path: str, value: Any
) -> None:
    good = _job(matrix_fleet, pool, chips)
    assert problems(good) == []
    if path.endswith("google.com/tpu"):
        bad = copy.deepcopy(good)
        limits = bad["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"][0]["resources"]
        limits["limits"]["google.com/tpu"] = value
    else:
        bad = _set(good, path, value)
    if value is None:
        del bad["spec"]["template"]["spec"]["containers"][0]["name"]
    assert problems(bad), f"{path}={value!r} was accepted"


def test_a_name_too_long_for_a_jobset_pod_hostname_is_refused(matrix_fleet: Fleet) -> None:
    name = "a" * 50
    work = from_experiment(experiment(chips=128, name=name), source="e.yaml")
    with pytest.raises(SpecError, match="longer than a Kubernetes name") as caught:
        render_kubernetes(work, matrix_fleet, matrix_fleet.pool("v5p"))
    assert "shorten the experiment name by" in (caught.value.problems[0].fix or "")
    job = from_experiment(experiment(chips=8, name=name), source="e.yaml")
    assert render_kubernetes(job, matrix_fleet, matrix_fleet.pool("h100"))["kind"] == "Job"  # a Job's name fits


def test_a_team_that_cannot_be_a_label_or_namespace_is_refused(matrix_fleet: Fleet) -> None:
    with pytest.raises(SpecError, match="cannot be a Kubernetes label value"):
        from_experiment(experiment(team="ML Team"), source="e.yaml")
    text = MATRIX_FLEET.replace("team: alignment,", "team: Alignment_Lab,").replace("{alignment: align}", "{}")
    fleet = parse_fleet(parse_document(text, "fleet.yaml"))
    work = from_experiment(experiment(team="Alignment_Lab"), source="e.yaml")
    with pytest.raises(SpecError, match="is not a namespace name") as caught:
        render_kubernetes(work, fleet, fleet.pool("h100"))
    assert "alignment-lab" in (caught.value.problems[0].fix or "")


def test_a_run_id_that_cannot_name_objects_is_refused() -> None:
    with pytest.raises(SpecError, match="cannot name Kubernetes objects"):
        from_experiment(experiment(), source="e.yaml", run="Exp 042")
