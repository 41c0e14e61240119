"""Kueue as crossrail renders it for GKE: both API versions, the releases targeted, a Topology whose levels
ResourceFlavors name (with the CRDs' CEL rules, which offline schema validation skips, checked here), TPU
slices asking for one node pool each, and a namespace with LocalQueues for every team."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from crossrail.cli import app
from crossrail.errors import SpecError
from crossrail.executors.render.kubernetes import render_kubernetes
from crossrail.executors.render.kueue import KUEUE_RELEASE, render_kueue
from crossrail.executors.render.workload import from_experiment
from crossrail.spec import Fleet, load_experiment, load_fleet, parse_document, parse_fleet

from .builders import experiment
from .conftest import CRDS, ROOT, assert_valid

TEMPLATES = ROOT / "src" / "crossrail" / "control" / "ops" / "templates"
runner = CliRunner()


def _kinds(objects: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    found = [o for o in objects if o["kind"] == kind]
    return {f"{o['metadata'].get('namespace', '')}/{o['metadata']['name']}".lstrip("/"): o for o in found}


# The CEL rules of the CRDs that crossrail's objects must satisfy, as Python, keyed by the rule's exact text:
# a new or changed rule in schemas/crds/ fails test_the_crds_cel_rules_are_the_ones_checked_here.
def _flavor_topology(spec: dict[str, Any], _old: Any) -> bool:
    return "topologyName" not in spec or len(spec.get("nodeLabels") or {}) >= 1


def _levels_unique(levels: list[dict[str, Any]], _old: Any) -> bool:
    return all(levels.count(level) == 1 for level in levels)


def _hostname_lowest(levels: list[dict[str, Any]], _old: Any) -> bool:
    hostname = [i for i, level in enumerate(levels) if level["nodeLabel"] == "kubernetes.io/hostname"]
    return not hostname or levels[-1]["nodeLabel"] == "kubernetes.io/hostname"


def _no_borrowing_without(field: str) -> Any:
    def rule(spec: dict[str, Any], _old: Any) -> bool:
        if field in spec or "resourceGroups" not in spec:
            return True
        resources = [r for g in spec["resourceGroups"] for f in g["flavors"] for r in f["resources"]]
        return all("borrowingLimit" not in r for r in resources)

    return rule


CEL = {
    ("ResourceFlavor", "spec"): {
        "!has(self.topologyName) || self.nodeLabels.size() >= 1": _flavor_topology,
    },
    ("Topology", "spec.levels"): {
        "size(self.filter(i, size(self.filter(j, j == i)) > 1)) == 0": _levels_unique,
        "size(self.filter(i, i.nodeLabel == 'kubernetes.io/hostname')) == 0 || self[size(self) - 1].nodeLabel == "
        "'kubernetes.io/hostname'": _hostname_lowest,
    },
}
CQ_RULE = (
    "!has(self.{f}) && has(self.resourceGroups) ? self.resourceGroups.all(rg, rg.flavors.all(f, "
    "f.resources.all(r, !has(r.borrowingLimit)))) : true"
)
CRD = {"ResourceFlavor": "resourceflavors", "Topology": "topologies", "ClusterQueue": "clusterqueues"}


def _rules(kind: str, version: str, path: str) -> list[str]:
    """The CEL rules at `path` that a new object must pass (transition rules, naming oldSelf, judge updates)."""
    crd = yaml.safe_load((CRDS / f"kueue.x-k8s.io_{CRD[kind]}.yaml").read_text())
    node = next(v for v in crd["spec"]["versions"] if v["name"] == version)["schema"]["openAPIV3Schema"]
    for key in path.split("."):
        node = node["properties"][key]
    rules = [" ".join(r["rule"].split()) for r in node.get("x-kubernetes-validations", [])]
    return [r for r in rules if "oldSelf" not in r]


def _at(obj: dict[str, Any], path: str) -> Any:
    for key in path.split("."):
        obj = obj[key]
    return obj


@pytest.mark.parametrize("api", ["v1beta1", "v1beta2"])
def test_the_crds_cel_rules_are_the_ones_checked_here(api: str) -> None:
    for (kind, path), rules in CEL.items():
        assert sorted(_rules(kind, api, path)) == sorted(rules), (kind, api)
    field = {"v1beta1": "cohort", "v1beta2": "cohortName"}[api]
    assert _rules("ClusterQueue", api, "spec") == [CQ_RULE.format(f=field)]


@pytest.mark.parametrize("api", ["v1beta1", "v1beta2"])
def test_every_object_validates_and_keeps_the_cel_rules_in_both_api_versions(matrix_fleet: Fleet, api: str) -> None:
    objects = render_kueue(matrix_fleet, api)
    for obj in objects:
        assert_valid(obj)
        if obj["kind"] != "Namespace":
            assert obj["apiVersion"] == f"kueue.x-k8s.io/{api}"
            assert obj["metadata"]["annotations"]["crossrail.dev/kueue-version"] == KUEUE_RELEASE
        for (kind, path), rules in CEL.items():
            if obj["kind"] == kind:
                value = _at(obj, path)
                assert all(rule(value, None) for rule in rules.values()), obj
    cohort = {"v1beta1": "cohort", "v1beta2": "cohortName"}[api]
    queues = _kinds(objects, "ClusterQueue")
    assert queues["post-training"]["spec"][cohort] == "research"
    no_borrowing = _no_borrowing_without(cohort)
    assert all(no_borrowing(q["spec"], None) for q in queues.values())
    other = {"v1beta1": "cohortName", "v1beta2": "cohort"}[api]
    assert other not in queues["post-training"]["spec"]


def test_the_cel_checks_here_refuse_what_kueue_would() -> None:
    assert not _flavor_topology({"topologyName": "t", "nodeLabels": {}}, None)
    assert not _levels_unique([{"nodeLabel": "a"}, {"nodeLabel": "a"}], None)
    assert not _hostname_lowest([{"nodeLabel": "kubernetes.io/hostname"}, {"nodeLabel": "a"}], None)
    spec = {"resourceGroups": [{"flavors": [{"resources": [{"borrowingLimit": 1}]}]}]}
    assert not _no_borrowing_without("cohortName")(spec, None)


@pytest.mark.slow
def test_flavors_name_the_topology_and_tpu_slices_ask_for_one_node_pool(matrix_fleet: Fleet) -> None:
    objects = render_kueue(matrix_fleet)
    (topology,) = _kinds(objects, "Topology").values()
    assert topology["spec"]["levels"] == [
        {"nodeLabel": "cloud.google.com/gke-nodepool"},
        {"nodeLabel": "kubernetes.io/hostname"},
    ]
    flavors = _kinds(objects, "ResourceFlavor")
    for name in ("v5p", "trillium"):
        assert flavors[name]["spec"]["topologyName"] == topology["metadata"]["name"]
        assert flavors[name]["spec"]["nodeLabels"]
    for name in ("h100", "cpu"):  # plain: their pod sets ask for no topology, so a mixed queue admits them
        assert "topologyName" not in flavors[name]["spec"]

    def pod_annotations(chips: int) -> dict[str, str]:
        work = from_experiment(experiment(chips=chips), source="e.yaml")
        obj = render_kubernetes(work, matrix_fleet, matrix_fleet.pool("v5p"))
        assert_valid(obj)
        pod = obj["spec"]["template"] if obj["kind"] == "Job" else obj["spec"]["replicatedJobs"][0]["template"]
        pod = pod if obj["kind"] == "Job" else pod["spec"]["template"]
        return dict(pod["metadata"]["annotations"])

    assert pod_annotations(64) == {"kueue.x-k8s.io/podset-required-topology": "cloud.google.com/gke-nodepool"}
    assert pod_annotations(128) == {  # two 4x4x4 slices: each of its 16 hosts in one node pool
        "kueue.x-k8s.io/podset-slice-required-topology": "cloud.google.com/gke-nodepool",
        "kueue.x-k8s.io/podset-slice-size": "16",
    }
    gpu = render_kubernetes(from_experiment(experiment(), source="e.yaml"), matrix_fleet, matrix_fleet.pool("h100"))
    assert "annotations" not in gpu["spec"]["template"]["metadata"]


def test_workloads_state_the_kueue_and_jobset_releases(matrix_fleet: Fleet) -> None:
    for chips in (8, 64):
        work = from_experiment(experiment(chips=chips), source="e.yaml")
        obj = render_kubernetes(work, matrix_fleet, matrix_fleet.pool("v5p"))
        annotations = obj["metadata"]["annotations"]
        assert (annotations["crossrail.dev/kueue-version"], annotations["crossrail.dev/jobset-version"]) == (
            "v0.19",
            "v0.12",
        )
    sources = (CRDS / "SOURCES.md").read_text()
    assert "v0.20.0-devel" in sources
    assert "newest release tag is v0.12.0" in sources


def test_an_unknown_kueue_api_is_refused(matrix_fleet: Fleet) -> None:
    with pytest.raises(SpecError, match="'v1' is not a Kueue API version"):
        render_kueue(matrix_fleet, "v1")


# --- team namespaces ------------------------------------------------------------------------------------------


def test_every_team_of_inits_examples_gets_a_namespace_with_its_local_queues(tmp_path: Path) -> None:
    text = (TEMPLATES / "fleet.yaml").read_text().replace("backend: local", "backend: kubernetes")
    fleet = parse_fleet(parse_document(text, "fleet.yaml"))
    objects = render_kueue(fleet)
    namespaces = set(_kinds(objects, "Namespace"))
    local = set(_kinds(objects, "LocalQueue"))
    for path in sorted((TEMPLATES / "experiments").glob("*.yaml")):
        written = path.read_text().replace("${workspace}", str(tmp_path))
        (tmp_path / path.name).write_text(written)
        exp = load_experiment(tmp_path / path.name)
        team = exp.metadata.team
        assert team in namespaces, path.name
        queue = fleet.queue_for(exp.spec.stage, team)
        assert queue is not None
        assert f"{team}/{queue.name}" in local
        work = from_experiment(exp.model_copy(), source=path.name, allow_unpinned=True)
        assert work.team == team
    assert _kinds(objects, "Namespace")["evals"]["metadata"]["annotations"] == {"crossrail.dev/teams": "evals"}


def test_a_teams_queue_makes_its_namespace(matrix_fleet: Fleet) -> None:
    objects = render_kueue(matrix_fleet)
    assert set(_kinds(objects, "Namespace")) == {"research", "align"}
    assert "align/alignment-post" in _kinds(objects, "LocalQueue")


# --- the command line -----------------------------------------------------------------------------------------

FLEET = str(ROOT / "examples" / "fleet.yaml")
EXP = str(ROOT / "examples" / "posttrain-042.yaml")


@pytest.mark.parametrize("api", ["v1beta1", "v1beta2"])
def test_fleet_render_takes_the_kueue_api(api: str) -> None:
    done = runner.invoke(app, ["fleet", "render", "--fleet", FLEET, "--kueue-api", api])
    assert done.exit_code == 0, done.output
    assert done.stdout.startswith(f"# Rendered by crossrail for Kueue v0.19 (kueue.x-k8s.io/{api})")
    objects = list(yaml.safe_load_all(done.stdout))
    assert {o["apiVersion"] for o in objects} == {"v1", f"kueue.x-k8s.io/{api}"}
    for obj in objects:
        assert_valid(obj)


def test_render_refuses_a_local_pool_unless_forced(tmp_path: Path) -> None:
    text = Path(FLEET).read_text().replace("backend: kubernetes", "backend: local", 1)
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(text)
    assert load_fleet(fleet).pool("tpu-v5p-pool").backend == "local"
    refused = runner.invoke(app, ["render", EXP, "--pool", "tpu-v5p-pool", "--fleet", str(fleet)])
    assert refused.exit_code == 1
    assert "has backend: local" in refused.output
    assert "--force-backend" in refused.output
    forced = runner.invoke(app, ["render", EXP, "--pool", "tpu-v5p-pool", "--fleet", str(fleet), "--force-backend"])
    assert forced.exit_code == 0, forced.output
    assert forced.stdout.startswith("# Rendered by crossrail for Kueue v0.19 (kueue.x-k8s.io) and JobSet v0.12")
    assert yaml.safe_load(forced.stdout)["kind"] == "JobSet"
