"""Slurm and SkyPilot exports: `bash -n` accepts the sbatch script and its #SBATCH lines are as intended;
`sky.Task.from_yaml` (offline) accepts the SkyPilot task."""

from __future__ import annotations

import os
import shutil
import subprocess
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from crossrail.executors.render.skypilot import render_skypilot
from crossrail.executors.render.slurm import render_sbatch
from crossrail.executors.render.workload import from_experiment
from crossrail.spec import Fleet, parse_document, parse_fleet

from .builders import IMAGE, experiment
from .conftest import MATRIX_FLEET


def _sbatch(fleet: Fleet, pool: str, chips: int) -> str:
    return render_sbatch(from_experiment(experiment(chips=chips), source="e.yaml"), fleet, fleet.pool(pool))


@pytest.mark.parametrize(
    ("pool", "chips", "nodes", "gres"),
    [("h100", 8, 1, "gpu:h100:8"), ("v5p", 16, 4, "tpu:tpu-v5p:4"), ("v6e", 32, 8, "tpu:tpu-v6e:4")],
    ids=["one-gpu-host", "tpu-slice-of-four-hosts", "two-tpu-slices"],
)
def test_the_sbatch_script_parses_and_asks_slurm_for_the_pools_nodes(
    matrix_fleet: Fleet, tmp_path: Path, pool: str, chips: int, nodes: int, gres: str
) -> None:
    script = _sbatch(matrix_fleet, pool, chips)
    path = tmp_path / "job.sbatch"
    path.write_text(script)
    bash = shutil.which("bash")
    assert bash is not None
    subprocess.run([bash, "-n", str(path)], check=True)
    assert script.startswith("#!/bin/bash\n")
    directives = [line.removeprefix("#SBATCH ") for line in script.splitlines() if line.startswith("#SBATCH ")]
    assert directives == [
        "--job-name=exp-042-1-a1",
        f"--partition={pool}",
        f"--nodes={nodes}",
        "--ntasks-per-node=1",
        f"--gres={gres}",
        "--time=0-01:30:00",
        "--no-requeue",
        "--signal=TERM@300",
        "--output=exp-042-1-a1-%j.log",
        "--comment=crossrail run=exp-042-1 attempt=1 stage=post_training",
    ]
    assert f"--container-image={IMAGE}" in script


def test_the_sbatch_script_hands_the_command_its_arguments_unchanged(matrix_fleet: Fleet, tmp_path: Path) -> None:
    script = _sbatch(matrix_fleet, "h100", 8)
    # Run the script's body with srun replaced by a printer: quoting survives bash as written.
    body = script.replace("exec srun", "printf '%s\\n'")
    path = tmp_path / "body.sh"
    path.write_text(body)
    out = subprocess.run(
        ["bash", str(path)], check=True, capture_output=True, text=True, env={"PATH": os.environ["PATH"]}
    )
    words = out.stdout.splitlines()
    assert words[-7:] == ["python", "-m", "trainer.run", "--steps", "200", "--note", "it's a $HOME test"]


def test_slurm_settings_on_the_pool_win_over_derived_ones() -> None:
    text = MATRIX_FLEET.replace(
        "backend: kubernetes}", "backend: kubernetes, slurm: {partition: a3-mega, gres: 'gpu:8', account: research}}", 1
    )
    fleet = parse_fleet(parse_document(text, "fleet.yaml"))
    script = _sbatch(fleet, "h100", 8)
    assert "#SBATCH --partition=a3-mega\n" in script
    assert "#SBATCH --gres=gpu:8\n" in script
    assert "#SBATCH --account=research\n" in script


@pytest.fixture(scope="module")
def sky(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    home = tmp_path_factory.mktemp("sky-home")
    saved = {k: os.environ.get(k) for k in ("HOME", "SKYPILOT_DISABLE_USAGE_COLLECTION")}
    os.environ["HOME"] = str(home)  # sky writes only $HOME/.sky/user_hash
    os.environ["SKYPILOT_DISABLE_USAGE_COLLECTION"] = "1"
    with warnings.catch_warnings():  # sky's own imports raise SQLAlchemy 2.0 deprecation warnings
        warnings.simplefilter("ignore")
        import sky as sky_module

    yield sky_module
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


@pytest.mark.slow
@pytest.mark.parametrize(
    ("pool", "chips", "accelerator", "nodes"),
    [
        ("h100", 8, {"H100": 8}, 1),
        ("v5p", 4, {"tpu-v5p-8": 1}, 1),
        ("v5p", 16, {"tpu-v5p-32": 1}, 1),
        ("v6e", 32, {"tpu-v6e-16": 1}, 2),
    ],
    ids=["h100-host", "v5p-8-counts-tensorcores", "v5p-slice-of-4-hosts", "v6e-two-slices"],
)
def test_skypilot_accepts_the_task(
    sky: object, matrix_fleet: Fleet, tmp_path: Path, pool: str, chips: int, accelerator: dict[str, int], nodes: int
) -> None:
    task = render_skypilot(
        from_experiment(experiment(chips=chips), source="e.yaml"), matrix_fleet, matrix_fleet.pool(pool)
    )
    assert task["resources"]["job_recovery"] == {
        "strategy": "EAGER_NEXT_REGION",
        "max_restarts_on_errors": 2,
        "recover_on_exit_codes": [3, 75],
    }
    path = tmp_path / "task.yaml"
    path.write_text(yaml.safe_dump(task))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        parsed = sky.Task.from_yaml(str(path))  # type: ignore[attr-defined]
    (resources,) = list(parsed.resources)
    assert resources.accelerators == accelerator
    assert parsed.num_nodes == nodes
    assert parsed.envs["TRAINING_BACKEND"] == str(matrix_fleet.pool(pool).accelerator)
    assert parsed.envs["CROSSRAIL_RUN_ID"] == "exp-042-1"
    assert parsed.run.startswith("exec python -m trainer.run --steps 200")
    assert parsed.workdir == {"url": "https://github.com/acme/trainer"}  # the code, cloned onto the VM
    assert "pip install -r requirements.txt" in parsed.setup


def test_the_skypilot_task_puts_the_runs_code_on_the_vm_and_installs_it(matrix_fleet: Fleet) -> None:
    commit = "0123456789abcdef0123456789abcdef01234567"
    code = f"{{repo: https://github.com/acme/trainer, commit: {commit}}}"
    pinned = render_skypilot(
        from_experiment(experiment(code=code), source="e.yaml"), matrix_fleet, matrix_fleet.pool("h100")
    )
    assert pinned["workdir"] == {"url": "https://github.com/acme/trainer", "ref": commit}
    assert pinned["setup"].startswith("set -euo pipefail\n")
    assert "pip install -e ." in pinned["setup"]
    no_repo = from_experiment(experiment(code="{commit: auto}"), source="e.yaml")
    assert render_skypilot(no_repo, matrix_fleet, matrix_fleet.pool("v5p"))["workdir"] == "."  # where sky launch runs


@pytest.mark.slow
def test_skypilot_accepts_a_task_with_a_local_workdir(sky: object, matrix_fleet: Fleet, tmp_path: Path) -> None:
    task = render_skypilot(
        from_experiment(experiment(code="{commit: auto}"), source="e.yaml"), matrix_fleet, matrix_fleet.pool("v5p")
    )
    (tmp_path / "train.py").write_text("print('hi')\n")
    path = tmp_path / "task.yaml"
    path.write_text(yaml.safe_dump({**task, "workdir": str(tmp_path)}))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        parsed = sky.Task.from_yaml(str(path))  # type: ignore[attr-defined]
    assert parsed.workdir == str(tmp_path)
    assert parsed.setup == task["setup"]
