"""GKE as it is: pods select only labels GKE puts on its nodes (plus a pool's declared ones), TPU shapes are
ones GKE offers, checkpoints and reports outlive the pod, and Kueue gets a topology, namespaces and versions."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from crossrail.errors import PlacementError, SpecError
from crossrail.executors.render.importer import import_job
from crossrail.executors.render.kubernetes import render_kubernetes
from crossrail.executors.render.kueue import render_kueue
from crossrail.executors.render.workload import from_experiment
from crossrail.scheduling import require_feasible
from crossrail.spec import Fleet, load_fleet, parse_document, parse_experiment, parse_fleet
from crossrail.spec.targets import GKE_LABELS
from crossrail.spec.tpu import TPU_VERSIONS, tpu_version

from .builders import experiment
from .conftest import FIXTURES, MATRIX_FLEET, ROOT, assert_valid

TEMPLATES = ROOT / "src" / "crossrail" / "control" / "ops" / "templates"


def _fleet(text: str) -> Fleet:
    return parse_fleet(parse_document(text, "fleet.yaml"))


def _fleet_problems(text: str) -> list[tuple[str, str, str | None]]:
    with pytest.raises(SpecError) as caught:
        _fleet(text)
    return [(p.path, p.message, p.fix) for p in caught.value.problems]


def _pod(obj: dict[str, Any]) -> dict[str, Any]:
    if obj["kind"] == "Job":
        return obj["spec"]["template"]
    return obj["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]


def _render(fleet: Fleet, pool: str, chips: int = 8, **kw: Any) -> dict[str, Any]:
    return render_kubernetes(from_experiment(experiment(chips=chips, **kw), source="e.yaml"), fleet, fleet.pool(pool))


# --- node selectors -------------------------------------------------------------------------------------------


def test_the_article_job_comes_back_from_a_fleet_that_declares_its_node_label() -> None:
    """The seed's Job selects `accelerator: nvidia-gpu`, a label only a team's own nodes carry: a pool that
    declares it under kubernetes.node_selector gets it back, next to GKE's own GPU label."""
    article = yaml.safe_load((FIXTURES / "posttrain-gpu-run.yaml").read_text())
    imported = import_job(article, "posttrain-gpu-run.yaml", dataset="gs://MODEL_BUCKET/data/sft")
    fleet = _fleet(
        MATRIX_FLEET.replace(
            "backend: kubernetes}", "backend: kubernetes, kubernetes: {node_selector: {accelerator: nvidia-gpu}}}", 1
        )
    )
    work = from_experiment(imported.experiment, source="imported", allow_unpinned=True)
    job = render_kubernetes(work, fleet, fleet.pool("h100"))
    assert_valid(job)
    before, after = article["spec"]["template"]["spec"], job["spec"]["template"]["spec"]
    assert after["nodeSelector"] == {**before["nodeSelector"], "cloud.google.com/gke-accelerator": "nvidia-h100-80gb"}
    _assert_same_container(before, after)


def test_the_article_job_comes_back_exactly_from_a_pool_whose_nodes_are_not_gkes() -> None:
    """A cluster that is not GKE carries only the labels its team set: `gke: false` selects those alone, so the
    seed's Job renders with exactly its `accelerator: nvidia-gpu` selector."""
    article = yaml.safe_load((FIXTURES / "posttrain-gpu-run.yaml").read_text())
    imported = import_job(article, "posttrain-gpu-run.yaml", dataset="gs://MODEL_BUCKET/data/sft")
    declared = "backend: kubernetes, kubernetes: {gke: false, node_selector: {accelerator: nvidia-gpu}}}"
    fleet = _fleet(MATRIX_FLEET.replace("backend: kubernetes}", declared, 1))
    work = from_experiment(imported.experiment, source="imported", allow_unpinned=True)
    job = render_kubernetes(work, fleet, fleet.pool("h100"))
    assert_valid(job)
    before, after = article["spec"]["template"]["spec"], job["spec"]["template"]["spec"]
    assert after["nodeSelector"] == before["nodeSelector"] == {"accelerator": "nvidia-gpu"}
    _assert_same_container(before, after)
    flavor = next(o for o in render_kueue(fleet) if o["kind"] == "ResourceFlavor" and o["metadata"]["name"] == "h100")
    assert flavor["spec"] == {"nodeLabels": {"accelerator": "nvidia-gpu"}}  # no GKE topology levels to follow


def test_a_tpu_pool_cannot_leave_gke() -> None:
    with pytest.raises(SpecError, match=r"kubernetes\.gke.*a TPU pool runs on GKE"):
        _fleet(MATRIX_FLEET.replace("backend: kubernetes}", "backend: kubernetes, kubernetes: {gke: false}}"))


def _assert_same_container(before: dict[str, Any], after: dict[str, Any]) -> None:
    (was,), (now,) = before["containers"], after["containers"]
    for key in ("name", "image", "command"):
        assert now[key] == was[key], key
    # the checkpoint argument names each run's own directory, which Kubernetes expands from the pod's env
    assert now["args"] == [*was["args"][:3], "$(CROSSRAIL_CHECKPOINT_DIR)"]
    assert now["resources"]["limits"] == was["resources"]["limits"]
    env = {e["name"]: e.get("value") for e in now["env"]}
    assert {e["name"]: e["value"] for e in was["env"]}.items() <= env.items()
    assert after["restartPolicy"] == before["restartPolicy"]


def test_node_labels_are_rays_and_never_reach_a_manifest(matrix_fleet: Fleet) -> None:
    text = MATRIX_FLEET.replace(
        "chip_type: h100, chips: 64,", "chip_type: h100, chips: 64, node_labels: {accelerator: nvidia-gpu},"
    ).replace("chip_type: tpu-v5p,", "chip_type: tpu-v5p, node_labels: {accelerator: tpu-v5p},")
    fleet = _fleet(text)
    assert fleet.pool("h100").node_labels == {"accelerator": "nvidia-gpu"}
    gpu, tpu = _render(fleet, "h100"), _render(fleet, "v5p", 8)
    assert _pod(gpu)["spec"]["nodeSelector"] == {"cloud.google.com/gke-accelerator": "nvidia-h100-80gb"}
    assert _pod(tpu)["spec"]["nodeSelector"] == {
        "cloud.google.com/gke-tpu-accelerator": "tpu-v5p-slice",
        "cloud.google.com/gke-tpu-topology": "2x2x2",
    }
    flavors = {o["metadata"]["name"]: o for o in render_kueue(fleet) if o["kind"] == "ResourceFlavor"}
    assert "accelerator" not in flavors["h100"]["spec"]["nodeLabels"]


def test_a_node_pool_and_declared_labels_join_gkes_own() -> None:
    fleet = _fleet(
        MATRIX_FLEET.replace(
            "kubernetes: {flavor: trillium}",
            "kubernetes: {flavor: trillium, node_pool: trillium-west, node_selector: {example.com/rack: r7}}",
        )
    )
    selector = _pod(_render(fleet, "v6e", 4))["spec"]["nodeSelector"]
    assert selector == {
        "cloud.google.com/gke-tpu-accelerator": "tpu-v6e-slice",
        "cloud.google.com/gke-nodepool": "trillium-west",
        "example.com/rack": "r7",
        "cloud.google.com/gke-tpu-topology": "2x2",
    }


@pytest.mark.parametrize(
    ("selector", "says"),
    [
        ("{cloud.google.com/gke-accelerator: nvidia-l4}", "set the pool's kubernetes.gke_accelerator instead"),
        ("{cloud.google.com/gke-nodepool: a}", "set the pool's kubernetes.node_pool instead"),
        ("{cloud.google.com/gke-tpu-topology: 2x2}", "set the pool's topologies instead"),
        ("{'bad key!': x}", "not a Kubernetes label key"),
        ("{accelerator: 'nvidia gpu'}", "not a Kubernetes label value"),
    ],
    ids=["gke-label-declared", "node-pool-declared", "topology-declared", "bad-key", "bad-value"],
)
def test_declared_node_selectors_are_checked(selector: str, says: str) -> None:
    text = MATRIX_FLEET.replace("kubernetes: {flavor: trillium}", f"kubernetes: {{node_selector: {selector}}}")
    ((path, message, _),) = _fleet_problems(text)
    assert path == "spec.pools[3].kubernetes.node_selector"
    assert says in message


# --- TPU topologies -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("version", "good", "bad"),
    [
        (
            "v4",
            ["2x2x1", "2x2x2", "2x2x4", "2x4x4", "4x4x4", "4x4x8", "8x8x12", "16x16x16"],
            ["1x1x1", "2x1x1", "4x4", "4x4x6", "8x4x4", "16x16x24"],
        ),
        ("v5p", ["2x2x1", "2x4x4", "4x4x4", "4x8x8", "16x16x24"], ["1x1x1", "2x1x1", "2x2", "4x4x2", "16x16x28"]),
        ("v5e", ["1x1", "2x2", "2x4", "4x4", "4x8", "8x8", "8x16", "16x16"], ["1x2", "4x2", "2x2x1", "16x32"]),
        ("v6e", ["1x1", "2x4", "8x16", "16x16"], ["2x1", "3x3", "1x1x1"]),
    ],
)
def test_gkes_tpu_shapes_per_version(version: str, good: list[str], bad: list[str]) -> None:
    table = TPU_VERSIONS[version]
    shapes = table.shapes()
    for text in good:
        assert table.allows(tuple(int(d) for d in text.split("x"))), text
        assert text in shapes
    for text in bad:
        assert not table.allows(tuple(int(d) for d in text.split("x"))), text
        assert text not in shapes


def test_a_gke_tpu_pool_with_a_shape_gke_does_not_offer_is_refused_with_the_offered_ones() -> None:
    text = MATRIX_FLEET.replace("topologies: [2x2x1, 2x2x2, 2x2x4, 4x4x4]", "topologies: [1x1x1, 2x1x1, 2x2x1]")
    problems = _fleet_problems(text)
    assert [p for p, _, _ in problems] == ["spec.pools[2].topologies[0]", "spec.pools[2].topologies[1]"]
    _, message, fix = problems[0]
    assert message == "GKE offers no 1x1x1 slice of TPU v5p"
    assert fix is not None
    assert "2x2x1, 2x2x2, 2x2x4, 2x4x4, 4x4x4, 4x4x8" in fix
    assert "plan-tpus" in fix


def test_a_gke_tpu_pool_must_list_its_shapes_but_a_local_one_keeps_any() -> None:
    ((path, message, fix),) = _fleet_problems(MATRIX_FLEET.replace(" topologies: [1x1, 2x2, 2x4, 4x4],", ""))
    assert (path, message) == ("spec.pools[3].topologies", "a TPU pool on GKE needs its slice topologies")
    assert fix is not None
    assert "1x1, 2x2, 2x4, 4x4, 4x8, 8x8" in fix
    local = MATRIX_FLEET.replace(
        "topologies: [1x1, 2x2, 2x4, 4x4], backend: kubernetes", "topologies: [1x2], backend: local"
    )
    assert _fleet(local).pool("v6e").topologies == ["1x2"]  # virtual chips: crossrail's own shapes


def test_inits_fleet_offers_only_shapes_gke_has_and_refuses_a_size_no_slice_makes(tmp_path: Path) -> None:
    fleet = load_fleet(TEMPLATES / "fleet.yaml")
    for pool in fleet.pools:
        version = tpu_version(pool.chip_type) if pool.accelerator == "tpu" else None
        for shape in pool.topology_shapes if version else []:
            assert version is not None
            assert version.allows(shape), f"{pool.name}: {shape}"
    gke = parse_fleet(
        parse_document(
            (TEMPLATES / "fleet.yaml").read_text().replace("backend: local", "backend: kubernetes"), "f.yaml"
        )
    )
    assert gke.pool("tpu-v5p").backend == "kubernetes"  # valid as a GKE fleet too
    text = (TEMPLATES / "experiments" / "pretrain-small.yaml").read_text().replace("${workspace}", str(tmp_path))
    exp = parse_experiment(
        parse_document(
            text.replace("chips: 4,", "chips: 3,").replace(
                "priority: normal", "priority: normal\n  accelerators: {allow: [tpu]}"
            ),
            "p.yaml",
        )
    )
    with pytest.raises(PlacementError) as caught:
        require_feasible(exp, fleet)
    assert "tpu-v5p: no allowed slice shape has 3 chips (shapes: 2x2x1=4, 2x2x2=8)" in str(caught.value)


# --- checkpoint and report locations ----------------------------------------------------------------------------

VOLUMES = """kubernetes: {flavor: trillium, service_account: ckpt-writer, volumes: [
         {name: ckpt, mount_path: /checkpoints, gcsfuse: {bucket: acme-ckpt, mount_options: [implicit-dirs]}},
         {name: scratch, mount_path: /scratch, claim: scratch-pvc},
         {name: models, mount_path: /models, claim: models-pvc, read_only: true}]}"""


@pytest.mark.parametrize(
    "where",
    ["/checkpoints", "file:///checkpoints", "/data/ckpt", "/checkpoints/../etc"],
    ids=["bare-path", "file-uri", "not-mounted", "climbs-out-of-the-volume"],
)
def test_a_checkpoint_dir_the_pod_would_lose_is_refused_with_the_fix(matrix_fleet: Fleet, where: str) -> None:
    mounted = where in {"/data/ckpt", "/checkpoints/../etc"}
    fleet = _fleet(MATRIX_FLEET.replace("kubernetes: {flavor: trillium}", VOLUMES)) if mounted else matrix_fleet
    with pytest.raises(SpecError) as caught:
        _render(fleet, "v6e", 4, checkpoint=where)
    ckpt, report = caught.value.problems
    assert (ckpt.path, report.path) == ("spec.checkpoint.dir", "env.CROSSRAIL_REPORT")
    assert "neither object storage nor on a volume of pool v6e" in ckpt.message
    assert ckpt.fix is not None
    assert "gs://<bucket>/<path>" in ckpt.fix
    assert "spec.pools[3].kubernetes.volumes" in ckpt.fix


def test_a_gcsfuse_volume_is_mounted_with_its_annotation_and_workload_identity() -> None:
    fleet = _fleet(MATRIX_FLEET.replace("kubernetes: {flavor: trillium}", VOLUMES))
    obj = _render(fleet, "v6e", 4, checkpoint="/checkpoints/exp-042")
    assert_valid(obj)
    pod = _pod(obj)
    assert pod["metadata"]["annotations"]["gke-gcsfuse/volumes"] == "true"
    assert pod["spec"]["serviceAccountName"] == "ckpt-writer"
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    assert volumes["ckpt"]["csi"] == {
        "driver": "gcsfuse.csi.storage.gke.io",
        "readOnly": False,
        "volumeAttributes": {"bucketName": "acme-ckpt", "mountOptions": "implicit-dirs"},
    }
    assert volumes["scratch"]["persistentVolumeClaim"] == {"claimName": "scratch-pvc", "readOnly": False}
    mounts = {m["mountPath"]: m for m in pod["spec"]["containers"][0]["volumeMounts"]}
    assert mounts["/checkpoints"] == {"name": "ckpt", "mountPath": "/checkpoints", "readOnly": False}
    env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
    assert env["CROSSRAIL_CHECKPOINT_DIR"] == "/checkpoints/exp-042/exp-042-1"
    assert env["CROSSRAIL_REPORT"].startswith("/checkpoints/exp-042/exp-042-1/reports/")
    on_pvc = _render(fleet, "v6e", 4, checkpoint="file:///scratch/exp")
    assert "gke-gcsfuse/volumes" in _pod(on_pvc)["metadata"]["annotations"]  # every pool volume is mounted
    with pytest.raises(SpecError, match="which the pool mounts read-only"):
        _render(fleet, "v6e", 4, checkpoint="/models/exp")


@pytest.mark.parametrize(
    ("volumes", "path", "says"),
    [
        (
            "{flavor: trillium, volumes: [{name: c, mount_path: /c, gcsfuse: {bucket: b}}]}",
            "spec.pools[3].kubernetes.service_account",
            "needs Workload Identity",
        ),
        ("{volumes: [{name: c, mount_path: /c}]}", "spec.pools[3].kubernetes.volumes[0]", "needs exactly one source"),
        (
            "{volumes: [{name: c, mount_path: c/, claim: p}]}",
            "spec.pools[3].kubernetes.volumes[0].mount_path",
            "not a mount path",
        ),
        (
            "{volumes: [{name: c, mount_path: /c, claim: p}, {name: d, mount_path: /c, claim: q}]}",
            "spec.pools[3].kubernetes.volumes[1].mount_path",
            "is volumes[0]'s too",
        ),
    ],
    ids=["gcsfuse-without-service-account", "no-source", "relative-path", "same-path-twice"],
)
def test_bad_volumes_are_errors_at_their_path(volumes: str, path: str, says: str) -> None:
    problems = _fleet_problems(MATRIX_FLEET.replace("kubernetes: {flavor: trillium}", f"kubernetes: {volumes}"))
    assert [(p, says in m) for p, m, _ in problems] == [(path, True)]


# --- backend --------------------------------------------------------------------------------------------------


def test_a_pool_of_another_backend_is_refused_unless_forced(matrix_fleet: Fleet) -> None:
    work = from_experiment(experiment(), source="e.yaml")
    with pytest.raises(SpecError) as caught:
        render_kubernetes(work, matrix_fleet, matrix_fleet.pool("ray-h100"))
    (problem,) = caught.value.problems
    assert problem.path == "spec.pools[5].backend"
    assert "has backend: ray" in problem.message
    assert "--force-backend" in (problem.fix or "")
    forced = render_kubernetes(work, matrix_fleet, matrix_fleet.pool("ray-h100"), force_backend=True)
    assert_valid(forced)


# --- the matrix: TPU versions x shapes x stages, GPU types --------------------------------------------------------

GKE_FLEET = """
apiVersion: crossrail/v1
kind: Fleet
metadata: {name: gke-matrix}
spec:
  kubernetes: {team_namespaces: {alignment: alignment}}
  pools:
    - {name: v4, accelerator: tpu, chip_type: tpu-v4, chips: 128, chips_per_host: 4, backend: kubernetes,
       topologies: [2x2x1, 2x2x2, 2x4x4, 4x4x8]}
    - {name: v5e, accelerator: tpu, chip_type: tpu-v5-lite-podslice, chips: 64, chips_per_host: 4,
       backend: kubernetes, topologies: [1x1, 2x2, 2x4, 4x8]}
    - {name: v5p, accelerator: tpu, chip_type: tpu-v5p, chips: 256, chips_per_host: 4, backend: kubernetes,
       topologies: [2x2x1, 2x2x4, 4x4x4, 4x4x8], kubernetes: {service_account: v5p-wi, volumes: [
         {name: ckpt, mount_path: /checkpoints, gcsfuse: {bucket: acme-ckpt}}]}}
    - {name: v6e, accelerator: tpu, chip_type: v6e, chips: 256, chips_per_host: 4, backend: kubernetes,
       topologies: [1x1, 2x2, 4x4, 16x16], kubernetes: {volumes: [{name: ckpt, mount_path: /checkpoints,
       claim: ckpt-pvc}]}}
    - {name: h100, accelerator: gpu, chip_type: h100, chips: 16, chips_per_host: 8, backend: kubernetes,
       kubernetes: {node_selector: {accelerator: nvidia-gpu}}}
    - {name: h200, accelerator: gpu, chip_type: nvidia-h200, chips: 16, chips_per_host: 8, backend: kubernetes,
       kubernetes: {spot: true}}
    - {name: a100, accelerator: gpu, chip_type: a100-80gb, chips: 16, chips_per_host: 8, backend: kubernetes,
       kubernetes: {node_pool: a100-pool}}
    - {name: l4, accelerator: gpu, chip_type: l4, chips: 8, chips_per_host: 4, backend: kubernetes}
    - {name: b200, accelerator: gpu, chip_type: b200, chips: 16, chips_per_host: 8, backend: kubernetes}
  queues:
    - {name: pretraining, stage: pretraining, cohort: all, quota: {v4: 128, v5p: 256}}
    - {name: post-training, stage: post_training, cohort: all, quota: {h100: 16, h200: 16}}
    - {name: alignment-post, stage: post_training, team: alignment, cohort: all, quota: {a100: 16}}
    - {name: rl, stage: reinforcement_learning, cohort: all, quota: {v6e: 128, b200: 16}}
    - {name: inference, stage: inference, quota: {v5e: 64, l4: 8}}
    - {name: eval, stage: eval, cohort: all, quota: {l4: 8}}
    - {name: experiment, stage: experiment, cohort: all, quota: {v5e: 16}}
"""
STAGES = ["pretraining", "post_training", "inference", "reinforcement_learning", "eval", "experiment"]
CASES = [
    (p, shape)
    for p, shapes in [
        ("v4", [4, 8, 32, 128]),
        ("v5e", [1, 4, 8, 32]),
        ("v5p", [4, 16, 64, 256]),
        ("v6e", [1, 4, 16, 256]),
    ]
    for shape in shapes
]
CASES += [(gpu, chips) for gpu in ("h100", "h200", "a100", "l4", "b200") for chips in (1, 4)]
GPU_LABELS = {
    "h100": "nvidia-h100-80gb",
    "h200": "nvidia-h200-141gb",
    "a100": "nvidia-a100-80gb",
    "l4": "nvidia-l4",
    "b200": "nvidia-b200",
}


@pytest.fixture(scope="module")
def gke_matrix() -> Fleet:
    return _fleet(GKE_FLEET)


@pytest.mark.parametrize(("pool_name", "chips"), CASES, ids=[f"{p}-{c}-chips" for p, c in CASES])
@pytest.mark.slow
def test_every_stage_renders_what_gke_schedules(gke_matrix: Fleet, pool_name: str, chips: int) -> None:
    pool = gke_matrix.pool(pool_name)
    declared = set(pool.kubernetes.node_selector) if pool.kubernetes else set()
    mounts = [v.mount_path for v in pool.kubernetes.volumes] if pool.kubernetes else []
    for i, stage in enumerate(STAGES):
        team = "alignment" if i % 2 else None
        where = f"{mounts[0]}/exp-042" if mounts and i % 2 else None  # a mounted volume or object storage
        exp = experiment(stage, chips, team=team, checkpoint=where)
        obj = render_kubernetes(from_experiment(exp, source="e.yaml"), gke_matrix, pool)
        assert_valid(obj)
        pod = _pod(obj)
        selector = pod["spec"]["nodeSelector"]
        assert set(selector) <= set(GKE_LABELS) | declared, selector
        if pool.accelerator == "tpu":
            version = tpu_version(pool.chip_type)
            assert version is not None
            shape = tuple(int(d) for d in selector["cloud.google.com/gke-tpu-topology"].split("x"))
            assert version.allows(shape), shape
        else:
            assert selector["cloud.google.com/gke-accelerator"] == GPU_LABELS[pool_name]
        env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
        mounted = [m["mountPath"] for m in pod["spec"]["containers"][0].get("volumeMounts", [])]
        for var in ("CROSSRAIL_CHECKPOINT_DIR", "CROSSRAIL_REPORT"):
            assert env[var].startswith("gs://") or any(env[var].startswith(m + "/") for m in mounted), env[var]
        assert obj["metadata"]["namespace"] == (team or "default")


@pytest.mark.parametrize("api", ["v1beta1", "v1beta2"])
@pytest.mark.slow
def test_the_matrix_fleets_kueue_objects_validate(gke_matrix: Fleet, api: str) -> None:
    objects = render_kueue(gke_matrix, api)
    for obj in objects:
        assert_valid(obj)
    flavors = [o for o in objects if o["kind"] == "ResourceFlavor"]
    assert len(flavors) == 9
    for flavor in flavors:
        assert set(flavor["spec"]["nodeLabels"]) <= set(GKE_LABELS) | {"accelerator"}
        tpu = flavor["metadata"]["labels"]["crossrail.dev/accelerator"] == "tpu"
        assert flavor["spec"].get("topologyName") == ("crossrail-gke" if tpu else None)  # TAS only where it helps


# --- config and dataset a pod can reach --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "before", "uri", "path"),
    [
        ("config", "gs://acme-models/configs/exp-042.yaml", "configs/exp.yaml", "spec.config"),  # not even a path
        ("dataset", "gs://acme-data/sft/v3/", "file:///data/sft/v3/", "spec.dataset.uri"),
        ("dataset", "gs://acme-data/sft/v3/", "/checkpoints/../data/sft", "spec.dataset.uri"),
    ],
)
def test_a_config_or_dataset_a_pod_cannot_reach_is_refused_through_the_one_path_rule(
    field: str, before: str, uri: str, path: str
) -> None:
    fleet = _fleet(MATRIX_FLEET.replace("kubernetes: {flavor: trillium}", VOLUMES))  # volumes, but not there
    work = from_experiment(experiment(chips=4), source="e.yaml")
    var = {"config": "CROSSRAIL_CONFIG", "dataset": "CROSSRAIL_DATASET"}[field]
    assert work.env[var] == before
    work.env[var] = uri
    with pytest.raises(SpecError) as caught:
        render_kubernetes(work, fleet, fleet.pool("v6e"))
    (problem,) = caught.value.problems
    assert problem.path == path
    assert "a pod cannot reach" in problem.message or "not an absolute path" in problem.message
    assert problem.fix is not None
    assert "object storage" in problem.fix


def test_a_config_or_dataset_on_a_declared_volume_renders() -> None:
    fleet = _fleet(MATRIX_FLEET.replace("kubernetes: {flavor: trillium}", VOLUMES))
    work = from_experiment(experiment(chips=4), source="e.yaml")
    work.env["CROSSRAIL_CONFIG"] = "/models/configs/exp.yaml"  # a read-only volume is fine for reading
    work.env["CROSSRAIL_DATASET"] = "file:///scratch/sft/v3/"
    assert_valid(render_kubernetes(work, fleet, fleet.pool("v6e")))
