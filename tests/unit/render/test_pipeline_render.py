"""A run with parts renders as one JobSet with a replicated job per part, each on its own pool, valid strictly."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from crossrail.cli import app
from crossrail.errors import SpecError
from crossrail.executors.render.pipeline import render_pipeline
from crossrail.executors.render.workload import from_experiment
from crossrail.spec import Experiment, Fleet, load_experiment, parse_document, parse_experiment, parse_fleet

from .builders import IMAGE
from .conftest import MATRIX_FLEET, ROOT, assert_valid

runner = CliRunner()

RL = f"""
apiVersion: crossrail/v1
kind: Experiment
metadata: {{name: rl-add, owner: ada@example.com}}
spec:
  stage: reinforcement_learning
  image: {IMAGE}
  command: [python, -m, crossrail.workloads.rl]
  dataset: {{uri: gs://acme-data/add/, version: v1}}
  checkpoint: {{dir: gs://acme-models/checkpoints/rl-add, every: 10m}}
  resources: {{chips: 25}}
  parts:
    sampler: {{chips: 4, replicas: 2, prefer: tpu}}
    reward: {{chips: 1}}
    learner: {{chips: 16, prefer: tpu}}
"""


SHARED = "{name: rl-shared, mount_path: /shared, claim: rl-rwx}"
RL_FLEET = (
    MATRIX_FLEET.replace("backend: kubernetes}", f"backend: kubernetes, kubernetes: {{volumes: [{SHARED}]}}}}")
    .replace("{flavor: trillium}", f"{{flavor: trillium, volumes: [{SHARED}]}}")
    .replace(
        "{spot: true, service_account: spot-trainer}",
        f"{{spot: true, service_account: spot-trainer, volumes: [{SHARED}]}}",
    )
)
"""The matrix fleet with a ReadWriteMany claim every pool mounts alike: where the RL stages meet."""


@pytest.fixture(scope="module")
def rl_fleet() -> Fleet:
    return parse_fleet(parse_document(RL_FLEET, "fleet.yaml"))


def rl() -> Experiment:
    return parse_experiment(parse_document(RL, "rl.yaml"))


def render(fleet: Fleet, pools: dict[str, str]) -> dict[str, Any]:
    exp = rl()
    work = from_experiment(exp, source="rl.yaml", run="rl-add-1", attempt=1)
    return render_pipeline(work, fleet, exp.parts, {part: fleet.pool(name) for part, name in pools.items()})


def test_each_part_is_a_replicated_job_on_its_pool_and_the_jobset_validates(rl_fleet: Fleet) -> None:
    obj = render(rl_fleet, {"sampler": "v6e", "reward": "cpu", "learner": "v5p"})

    assert_valid(obj)
    assert obj["kind"] == "JobSet"
    assert obj["spec"]["suspend"] is True
    assert obj["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "rl"
    jobs = {j["name"]: j for j in obj["spec"]["replicatedJobs"]}
    assert {n: j["replicas"] for n, j in jobs.items()} == {"sampler": 2, "reward": 1, "learner": 1}
    pods = {n: j["template"]["spec"]["template"] for n, j in jobs.items()}
    assert {n: p["metadata"]["labels"]["crossrail.dev/pool"] for n, p in pods.items()} == {
        "sampler": "v6e",
        "reward": "cpu",
        "learner": "v5p",
    }
    assert pods["sampler"]["spec"]["nodeSelector"]["cloud.google.com/gke-tpu-topology"] == "2x2"
    assert pods["reward"]["spec"]["containers"][0]["resources"] == {"requests": {"cpu": "1"}}
    learner = jobs["learner"]["template"]["spec"]
    assert (learner["parallelism"], learner["completions"]) == (4, 4)  # a 2x2x4 slice of 4-chip hosts
    env = {e["name"]: e.get("value", e.get("valueFrom")) for e in pods["sampler"]["spec"]["containers"][0]["env"]}
    assert env["CROSSRAIL_PART_REPLICA"] == {
        "fieldRef": {"fieldPath": "metadata.labels['jobset.sigs.k8s.io/job-index']"}
    }
    env = {e["name"]: e.get("value") for e in pods["learner"]["spec"]["containers"][0]["env"]}
    assert env["CROSSRAIL_PART"] == "learner"
    assert env["CROSSRAIL_COORDINATOR"] == "rl-add-1-a1-learner-0-0.rl-add-1-a1:8476"
    assert pods["learner"]["spec"]["containers"][0]["args"][-2:] == ["--part", "learner"]


def test_a_part_on_a_pool_that_is_not_on_kubernetes_is_refused_by_part(rl_fleet: Fleet) -> None:
    with pytest.raises(SpecError) as caught:
        render(rl_fleet, {"sampler": "v6e", "reward": "cpu", "learner": "ray-h100"})

    [problem] = caught.value.problems
    assert problem.path == "spec.parts.learner"
    assert "ray-h100, which has backend: ray" in problem.message


def test_a_part_without_a_pool_is_named(matrix_fleet: Fleet) -> None:
    with pytest.raises(SpecError) as caught:
        render(matrix_fleet, {"sampler": "v6e", "learner": "v5p"})

    assert [p.path for p in caught.value.problems] == ["spec.parts.reward"]


def test_render_writes_the_jobset_of_a_run_with_parts_on_the_pools_named(tmp_path: Path) -> None:
    exp, fleet = tmp_path / "rl.yaml", tmp_path / "fleet.yaml"
    exp.write_text(RL)
    fleet.write_text(RL_FLEET)
    base = ["render", str(exp), "--fleet", str(fleet)]

    out = runner.invoke(app, [*base, "--pool", "sampler=v6e,reward=cpu,learner=v5p"])

    assert out.exit_code == 0, out.output
    [obj] = list(yaml.safe_load_all(out.stdout))
    assert_valid(obj)
    assert [j["name"] for j in obj["spec"]["replicatedJobs"]] == ["sampler", "reward", "learner"]

    missing = runner.invoke(app, [*base, "--pool", "sampler=v6e,learner=v5p,critic=cpu"])
    assert missing.exit_code != 0
    assert "no pool named for part reward; add reward=POOL" in missing.output
    assert "critic is not a part of the run; its parts are sampler, reward, learner" in missing.output

    slurm = runner.invoke(app, [*base, "--pool", "v5p", "--target", "slurm"])
    assert slurm.exit_code != 0
    assert "a run with parts renders only for kubernetes (one JobSet), not slurm" in slurm.output


def test_the_rl_pipeline_example_renders_for_the_example_fleet(gke_fleet: Fleet) -> None:
    exp = load_experiment(ROOT / "examples" / "rl-pipeline.yaml")
    work = from_experiment(exp, source="rl-pipeline.yaml", run="rl-add-001-1", attempt=1)
    pools = {"sampler": "tpu-v5p-pool", "reward": "h100-pool", "learner": "h100-pool"}

    obj = render_pipeline(work, gke_fleet, exp.parts, {part: gke_fleet.pool(name) for part, name in pools.items()})

    assert_valid(obj)
    assert {j["name"]: j["replicas"] for j in obj["spec"]["replicatedJobs"]} == {
        "sampler": 2,
        "reward": 1,
        "learner": 1,
    }


def test_each_replica_of_each_part_reports_under_its_own_prefix(rl_fleet: Fleet) -> None:
    """All parts of one attempt used to write one report prefix (objects overwrite); the kubelet expands the
    replica index, defined before the report variable, into each pod's own prefix."""
    obj = render(rl_fleet, {"sampler": "v6e", "reward": "cpu", "learner": "v5p"})
    prefixes = set()
    for job in obj["spec"]["replicatedJobs"]:
        env = job["template"]["spec"]["template"]["spec"]["containers"][0]["env"]
        names = [e["name"] for e in env]
        assert names.index("CROSSRAIL_PART_REPLICA") < names.index("CROSSRAIL_REPORT")
        report = next(e["value"] for e in env if e["name"] == "CROSSRAIL_REPORT")
        for replica in range(job["replicas"]):  # $(VAR) as the kubelet expands it
            prefixes.add(report.replace("$(CROSSRAIL_PART_REPLICA)", str(replica)))
    base = "gs://acme-models/checkpoints/rl-add/rl-add-1/reports/attempt-1/parts"
    assert prefixes == {f"{base}/sampler/0", f"{base}/sampler/1", f"{base}/reward/0", f"{base}/learner/0"}


def test_the_rl_stages_meet_on_a_shared_volume_or_the_render_is_refused(rl_fleet: Fleet, matrix_fleet: Fleet) -> None:
    obj = render(rl_fleet, {"sampler": "v6e", "reward": "cpu", "learner": "v5p"})
    for job in obj["spec"]["replicatedJobs"]:
        container = job["template"]["spec"]["template"]["spec"]["containers"][0]
        assert container["args"][-4:] == ["--rendezvous", "/shared/crossrail-rl/rl-add-1-a1", "--part", job["name"]]
        assert {"name": "rl-shared", "mountPath": "/shared", "readOnly": False} in container["volumeMounts"]
    with pytest.raises(SpecError) as caught:  # object storage holds the checkpoints, but no directory is shared
        render(matrix_fleet, {"sampler": "v6e", "reward": "cpu", "learner": "v5p"})
    (problem,) = caught.value.problems
    assert problem.path == "spec.parts"
    assert "declare no writable volume alike" in problem.message
    assert problem.fix is not None
    assert "ReadWriteMany volume (claim: <pvc>)" in problem.fix


def test_every_pod_of_the_rl_example_fed_its_env_and_args_finds_its_part_and_the_shared_directory(
    gke_fleet: Fleet,
) -> None:
    """What used to exit 2: each pod's rendered env (the replica index resolved as the kubelet would) and
    args go to the RL entry point's own parsing; every pod knows its part and replica and meets the others
    in one directory on the shared claim. Training itself is not run here."""
    from crossrail.runtime import RuntimeContext
    from crossrail.workloads.rl.__main__ import parse_args, rendezvous

    exp = load_experiment(ROOT / "examples" / "rl-pipeline.yaml")
    work = from_experiment(exp, source="rl-pipeline.yaml", run="rl-add-001-1", attempt=1)
    pools = {"sampler": "tpu-v5p-pool", "reward": "h100-pool", "learner": "h100-pool"}
    obj = render_pipeline(work, gke_fleet, exp.parts, {part: gke_fleet.pool(name) for part, name in pools.items()})
    met = set()
    for job in obj["spec"]["replicatedJobs"]:
        container = job["template"]["spec"]["template"]["spec"]["containers"][0]
        assert container["command"][-1] == "crossrail.workloads.rl"
        for replica in range(job["replicas"]):
            env = {}
            for e in container["env"]:
                value = e.get("value", str(replica) if "fieldRef" in e.get("valueFrom", {}) else "s3cret")
                env[e["name"]] = value.replace("$(CROSSRAIL_PART_REPLICA)", env.get("CROSSRAIL_PART_REPLICA", ""))
            ctx = RuntimeContext.from_env(env)
            args = parse_args(container["args"])
            assert (args.part, env["CROSSRAIL_PART"], env["CROSSRAIL_PART_REPLICA"]) == (job["name"],) * 2 + (
                str(replica),
            )
            met.add(str(rendezvous(ctx, args.rendezvous).root))
    assert met == {"/shared/crossrail-rl/rl-add-001-1-a1"}
