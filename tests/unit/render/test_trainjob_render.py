"""Multi-worker work on Kubernetes: GPU workers as one Kubeflow TrainJob on the ClusterTrainingRuntime
`fleet render --target trainer` produces, TPU hosts as one JobSet with JAX's coordinator environment; every
size validates strictly against the CRDs in schemas/crds/."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from crossrail.errors import SpecError
from crossrail.executors.render.kubernetes import render_kubernetes
from crossrail.executors.render.trainjob import cluster_training_runtime, torchrun_command
from crossrail.executors.render.workload import from_experiment
from crossrail.spec import Fleet, parse_document, parse_fleet

from .builders import IMAGE, experiment
from .conftest import MATRIX_FLEET, assert_valid, problems

WORKERS = [1, 2, 4, 8, 16]

# workers -> (kind, nodes, workers per node, GPUs per node) on 8-GPU hosts, one GPU per worker
GPU = {1: ("Job", 1, 1, 1), 2: ("TrainJob", 1, 2, 2), 4: ("TrainJob", 1, 4, 4), 8: ("TrainJob", 1, 8, 8)}
GPU[16] = ("TrainJob", 2, 8, 8)
# workers (one JAX process per 4-chip v5p host) -> (kind, slices, hosts per slice)
TPU = {1: ("Job", 1, 1), 2: ("JobSet", 1, 2), 4: ("JobSet", 1, 4), 8: ("JobSet", 2, 4), 16: ("JobSet", 1, 16)}


def _render(fleet: Fleet, pool: str, chips: int, workers: int, **kw: Any) -> dict[str, Any]:
    exp = experiment("pretraining", chips, workers=workers, **kw)
    return render_kubernetes(from_experiment(exp, source="e.yaml", run="exp-042-3", attempt=2), fleet, fleet.pool(pool))


def _env(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value") or e["valueFrom"] for e in container["env"]}


@pytest.mark.parametrize("workers", WORKERS, ids=[f"{n}-workers" for n in WORKERS])
@pytest.mark.slow
def test_gpu_workers_render_as_one_valid_trainjob_gang(matrix_fleet: Fleet, workers: int) -> None:
    kind, nodes, per_node, gpus = GPU[workers]
    obj = _render(matrix_fleet, "h100", workers, workers)
    assert_valid(obj)
    assert obj["kind"] == kind
    if kind == "Job":
        return
    spec = obj["spec"]
    assert spec["suspend"] is True
    assert spec["runtimeRef"] == {
        "apiGroup": "trainer.kubeflow.org",
        "kind": "ClusterTrainingRuntime",
        "name": cluster_training_runtime()["metadata"]["name"],
    }
    trainer = spec["trainer"]
    assert (trainer["numNodes"], trainer["numProcPerNode"]) == (nodes, per_node)
    assert trainer["resourcesPerNode"]["limits"] == {"nvidia.com/gpu": str(gpus)}
    assert trainer["image"] == IMAGE
    assert trainer["command"] == ["torchrun", "-m", "trainer.run"]
    assert trainer["args"][:2] == ["--steps", "200"]
    env = _env(trainer)
    assert (env["TRAINING_BACKEND"], env["CROSSRAIL_RUN_ID"]) == ("gpu", "exp-042-3")
    meta = obj["metadata"]
    assert meta["labels"]["kueue.x-k8s.io/queue-name"] == "pretraining"
    assert meta["labels"]["crossrail.dev/pool"] == "h100"
    (patch,) = spec["runtimePatches"]
    (node,) = patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]
    assert node["name"] == "node"
    pod = node["template"]["spec"]["template"]
    assert pod["metadata"]["labels"]["crossrail.dev/attempt"] == "2"
    assert pod["spec"]["nodeSelector"] == {"cloud.google.com/gke-accelerator": "nvidia-h100-80gb"}
    assert pod["spec"]["serviceAccountName"] == "trainer-wi"


def test_one_process_per_gpu_and_a_spot_pool_keeps_its_selector_and_toleration(matrix_fleet: Fleet) -> None:
    # whatever the data-parallel degree: the reference trainer binds its local rank's GPU, so 8 per node
    for chips, data, nodes in ((32, 16, 4), (32, 4, 4), (16, 2, 2)):
        obj = _render(matrix_fleet, "h100", chips, data)
        assert_valid(obj)
        trainer = obj["spec"]["trainer"]
        assert (trainer["numNodes"], trainer["numProcPerNode"]) == (nodes, 8), data
    assert trainer["resourcesPerNode"]["requests"] == {"nvidia.com/gpu": "8"}
    spot = _render(matrix_fleet, "h200-spot", 16, 1)  # one worker asked, two hosts: one worker per GPU
    assert_valid(spot)
    assert (spot["spec"]["trainer"]["numNodes"], spot["spec"]["trainer"]["numProcPerNode"]) == (2, 8)
    (patch,) = spot["spec"]["runtimePatches"]
    pod = patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
    assert pod["spec"]["nodeSelector"]["cloud.google.com/gke-spot"] == "true"
    assert pod["spec"]["serviceAccountName"] == "spot-trainer"
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod["spec"]["tolerations"]


def test_a_volume_checkpoint_dir_is_mounted_into_the_node_container_with_the_gcsfuse_annotation() -> None:
    volume = (
        "chips_per_host: 8, backend: kubernetes, kubernetes: {service_account: ckpt-writer, "
        "volumes: [{name: ckpt, mount_path: /ckpt, gcsfuse: {bucket: b}}]}"
    )
    text = MATRIX_FLEET.replace("chips_per_host: 8, backend: kubernetes}", volume + "}", 1)
    fleet = parse_fleet(parse_document(text, "fleet.yaml"))
    obj = _render(fleet, "h100", 16, 16, checkpoint="/ckpt/exp-042")
    assert_valid(obj)
    node = obj["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"][0]
    pod = node["template"]["spec"]["template"]
    (container,) = pod["spec"]["containers"]
    assert container == {"name": "node", "volumeMounts": [{"name": "ckpt", "mountPath": "/ckpt", "readOnly": False}]}
    assert pod["spec"]["volumes"][0]["csi"]["volumeAttributes"] == {"bucketName": "b"}
    assert pod["metadata"]["annotations"] == {"gke-gcsfuse/volumes": "true"}
    assert pod["spec"]["serviceAccountName"] == "ckpt-writer"


@pytest.mark.parametrize(
    ("chips", "workers", "path", "says"),
    [
        (16, 3, "spec.parallelism.data", "one of 2, 4, 8, 16"),
        (8, 3, "spec.parallelism.data", "one of 1, 2, 4, 8"),
        (12, 12, "spec.pools[0].chips_per_host", "12 chips are not whole 8-chip hosts"),
    ],
    ids=["workers-that-do-not-split-over-hosts", "workers-that-do-not-split-gpus", "part-of-a-host"],
)
def test_gpu_gangs_that_do_not_divide_are_refused_with_the_field_and_the_sizes_that_do(
    matrix_fleet: Fleet, chips: int, workers: int, path: str, says: str
) -> None:
    with pytest.raises(SpecError) as caught:
        _render(matrix_fleet, "h100", chips, workers)
    (problem,) = caught.value.problems
    assert problem.path == path
    assert says in f"{problem.message} {problem.fix}"


@pytest.mark.parametrize("workers", WORKERS, ids=[f"{n}-hosts" for n in WORKERS])
def test_tpu_hosts_render_as_one_valid_jobset_with_the_jax_coordinator(matrix_fleet: Fleet, workers: int) -> None:
    kind, slices, hosts = TPU[workers]
    obj = _render(matrix_fleet, "v5p", 4 * workers, workers)
    assert_valid(obj)
    assert obj["kind"] == kind
    if kind == "Job":
        assert "JAX_COORDINATOR_ADDRESS" not in _env(obj["spec"]["template"]["spec"]["containers"][0])
        return
    (rjob,) = obj["spec"]["replicatedJobs"]
    assert (rjob["replicas"], rjob["template"]["spec"]["parallelism"]) == (slices, hosts)
    env = _env(rjob["template"]["spec"]["template"]["spec"]["containers"][0])
    assert env["JAX_COORDINATOR_ADDRESS"] == "exp-042-3-a2-slice-0-0.exp-042-3-a2:8476"
    assert env["JAX_NUM_PROCESSES"] == str(workers)
    index = {"fieldRef": {"fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']"}}
    assert env["CROSSRAIL_HOST_INDEX"] == index
    if slices == 1:  # and under crossrail.runtime's names, which crossrail.workloads.parallel joins through
        assert env["JAX_PROCESS_ID"] == env["RANK"] == index
        assert (env["WORLD_SIZE"], env["CROSSRAIL_COORDINATOR"]) == (str(workers), env["JAX_COORDINATOR_ADDRESS"])
    else:  # slice x hosts per slice + host: the runtime computes it
        assert not {"JAX_PROCESS_ID", "RANK", "WORLD_SIZE"} & env.keys()
        assert env["MEGASCALE_NUM_SLICES"] == str(slices)


@pytest.mark.slow
def test_the_cluster_training_runtime_validates_and_the_validators_refuse_unknown_fields(matrix_fleet: Fleet) -> None:
    runtime = cluster_training_runtime()
    assert_valid(runtime)
    assert runtime["spec"]["template"]["spec"]["failurePolicy"] == {"maxRestarts": 0}
    job = _render(matrix_fleet, "h100", 16, 16)
    broken = copy.deepcopy(job)
    broken["spec"]["trainer"]["numWorkers"] = 16
    assert any("numWorkers" in p for p in problems(broken))
    broken = copy.deepcopy(runtime)
    broken["spec"]["mlPolicy"]["torch"]["numProcPerNode"] = 8  # moved to the TrainJob upstream
    assert any("numProcPerNode" in p for p in problems(broken))


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        (["python", "-m", "trainer.run"], ["torchrun", "-m", "trainer.run"]),
        (["/usr/bin/python3", "train.py", "--lr", "1"], ["torchrun", "train.py", "--lr", "1"]),
        (["torchrun", "train.py"], ["torchrun", "train.py"]),
        (["./launch.sh"], ["./launch.sh"]),
    ],
    ids=["module", "script", "already-torchrun", "not-python"],
)
def test_python_commands_run_under_torchrun(command: list[str], expected: list[str]) -> None:
    assert torchrun_command(command) == expected
