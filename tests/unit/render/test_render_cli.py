"""`crossrail import`, `crossrail render` and `crossrail fleet render` from the command line: the
article's Job goes in, a TPU JobSet comes out; bad input is one message and exit 1, never a traceback."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from crossrail.cli import app

from .builders import DIGEST
from .conftest import FIXTURES, ROOT, assert_valid

FLEET = str(ROOT / "examples" / "fleet.yaml")
ARTICLE = str(FIXTURES / "posttrain-gpu-run.yaml")
runner = CliRunner()


def test_import_then_render_for_tpu_moves_the_article_job_off_gpus(tmp_path: Path) -> None:
    exp = tmp_path / "posttrain-042.yaml"
    done = runner.invoke(app, ["import", ARTICLE, "--dataset", "gs://MODEL_BUCKET/data/sft", "-o", str(exp)])
    assert done.exit_code == 0, done.output
    assert "experiment posttrain-042" in " ".join(done.output.split())  # the findings table (wrapped to the terminal)
    assert "nvidia" not in exp.read_text()
    refused = runner.invoke(app, ["render", str(exp), "--pool", "tpu-v5p-pool", "--fleet", FLEET])
    assert refused.exit_code == 1
    assert "not pinned by digest" in refused.output
    assert "Traceback" not in refused.output
    out = tmp_path / "out"
    rendered = runner.invoke(
        app,
        ["render", str(exp), "--pool", "tpu-v5p-pool", "--fleet", FLEET, "--image-digest", DIGEST, "-o", str(out)],
    )
    assert rendered.exit_code == 0, rendered.output
    (path,) = out.glob("*.yaml")
    assert path.name == "posttrain-042-1-a1.yaml"
    jobset = yaml.safe_load(path.read_text())
    assert jobset["kind"] == "JobSet"
    assert_valid(jobset)
    container = jobset["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == f"us-docker.pkg.dev/PROJECT/train/posttrain@{DIGEST}"


def test_render_to_stdout_for_each_target() -> None:
    exp = str(ROOT / "examples" / "posttrain-042.yaml")
    base = ["render", exp, "--pool", "h100-pool", "--fleet", FLEET]
    job = runner.invoke(app, [*base, "--run", "posttrain-042-7", "--attempt", "2"])
    assert job.exit_code == 0, job.output
    obj = yaml.safe_load(job.stdout)
    assert obj["metadata"]["name"] == "posttrain-042-7-a2"
    assert_valid(obj)
    sbatch = runner.invoke(app, [*base, "--target", "slurm"])
    assert sbatch.stdout.startswith("#!/bin/bash\n#SBATCH --job-name=posttrain-042-1-a1\n")
    sky = runner.invoke(app, [*base, "--target", "skypilot"])
    assert yaml.safe_load(sky.stdout)["resources"]["accelerators"] == "H100:8"


@pytest.mark.slow
def test_fleet_render_writes_the_training_runtime_rendered_trainjobs_refer_to(tmp_path: Path) -> None:
    done = runner.invoke(app, ["fleet", "render", "--target", "trainer", "--fleet", FLEET, "-o", str(tmp_path)])
    assert done.exit_code == 0, done.output
    text = (tmp_path / "trainer.yaml").read_text()
    assert text.startswith("# Rendered by crossrail for Kubeflow Trainer v1alpha1")
    (runtime,) = yaml.safe_load_all(text)
    assert_valid(runtime)
    exp = tmp_path / "exp.yaml"
    example = (ROOT / "examples" / "posttrain-042.yaml").read_text()
    exp.write_text(
        example.replace("{chips: 8, min_chips: 4, max_chips: 8,", "{chips: 16, min_chips: 8, max_chips: 16,")
    )
    out = tmp_path / "out"
    job = runner.invoke(app, ["render", str(exp), "--pool", "h100-pool", "--fleet", FLEET, "-o", str(out)])
    assert job.exit_code == 0, job.output
    assert "2 node(s) x 8 worker(s) x 1 chips" in job.output
    (trainjob,) = yaml.safe_load_all((out / "posttrain-042-1-a1.yaml").read_text())
    assert trainjob["spec"]["runtimeRef"]["name"] == runtime["metadata"]["name"]
    assert trainjob["spec"]["runtimeRef"]["kind"] == runtime["kind"]


def test_fleet_render_writes_every_kueue_object(tmp_path: Path) -> None:
    done = runner.invoke(app, ["fleet", "render", "--target", "kueue", "--fleet", FLEET, "-o", str(tmp_path)])
    assert done.exit_code == 0, done.output
    text = (tmp_path / "kueue.yaml").read_text()
    assert text.startswith("# Rendered by crossrail for Kueue v0.19 (kueue.x-k8s.io/v1beta2)")
    objects = list(yaml.safe_load_all(text))
    kinds = Counter(o["kind"] for o in objects)
    # 2 team namespaces; 5 stage queues' LocalQueues in default, foundation and alignment
    assert kinds == {
        "Namespace": 2,
        "Topology": 1,
        "ResourceFlavor": 2,
        "Cohort": 1,
        "WorkloadPriorityClass": 4,
        "ClusterQueue": 5,
        "LocalQueue": 15,
    }
    for obj in objects:
        assert_valid(obj)


def test_an_unknown_pool_and_a_non_job_are_one_line_errors(tmp_path: Path) -> None:
    exp = str(ROOT / "examples" / "posttrain-042.yaml")
    unknown = runner.invoke(app, ["render", exp, "--pool", "h100", "--fleet", FLEET])
    assert unknown.exit_code == 1
    assert "no pool 'h100' in fleet gke-mixed; pools are tpu-v5p-pool, h100-pool" in unknown.output
    deployment = tmp_path / "deploy.yaml"
    deployment.write_text("apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\n")
    bad = runner.invoke(app, ["import", str(deployment)])
    assert bad.exit_code == 1
    assert "apps/v1/Deployment is not a batch/v1 Job" in bad.output
    assert "Traceback" not in bad.output
