"""Warnings apart from problems: a local or Ray TPU pool whose hosts no TPU machine has is valid, and said so."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from crossrail.cli import app
from crossrail.spec import default_policy
from crossrail.spec.validate import check_files, validate_files

FLEET = """\
apiVersion: crossrail/v1
kind: Fleet
metadata: {name: f}
spec:
  pools:
    - name: v5p
      accelerator: tpu
      chip_type: tpu-v5p
      chips: 8
      chips_per_host: PER_HOST
      topologies: [2x2x2]
      BACKEND
"""
RAY = "ray: {address: 'ray://head:10001'}\n      backend: ray"


def fleet_file(tmp_path: Path, per_host: int, backend: str = "backend: local", name: str = "fleet.yaml") -> Path:
    path = tmp_path / name
    path.write_text(FLEET.replace("PER_HOST", str(per_host)).replace("BACKEND", backend))
    return path


@pytest.mark.parametrize("backend", [pytest.param("backend: local", id="local"), pytest.param(RAY, id="ray")])
def test_hosts_no_tpu_machine_has_are_a_warning_on_a_local_or_ray_pool(tmp_path: Path, backend: str) -> None:
    path = fleet_file(tmp_path, per_host=8, backend=backend)

    found = check_files([path], default_policy())

    assert found.problems == []
    (warning,) = found.warnings
    assert (warning.source, warning.path, warning.line) == (str(path), "spec.pools[0].topologies[0]", 11)
    assert "4 chips" in warning.message  # what GKE builds a v5p 2x2x2 slice from
    assert warning.fix is not None
    assert "chips_per_host: 4" in warning.fix
    assert validate_files([path], default_policy()) == []


def test_hosts_gke_builds_are_no_warning(tmp_path: Path) -> None:
    assert check_files([fleet_file(tmp_path, per_host=4)], default_policy()).warnings == []


def test_validate_prints_warnings_apart_and_exits_0_on_warnings_alone(tmp_path: Path) -> None:
    warned = fleet_file(tmp_path, per_host=8)
    broken = tmp_path / "broken.yaml"
    broken.write_text(FLEET.replace("PER_HOST", "0").replace("BACKEND", "backend: local"))

    alone = CliRunner().invoke(app, ["validate", "--offline", str(warned)], env={"COLUMNS": "400"})
    both = CliRunner().invoke(app, ["validate", "--offline", str(warned), str(broken)], env={"COLUMNS": "400"})

    assert alone.exit_code == 0, alone.output
    assert "valid" in alone.stdout
    assert "warning:" not in alone.stdout
    assert "warning:" in alone.stderr
    assert "spec.pools[0].topologies[0]" in alone.stderr
    assert both.exit_code == 1
    assert "1 problem in" in both.stderr  # the broken file's problem, printed apart from the warning
    assert both.stderr.count("warning:") == 1


ROUND_FLEET = """\
apiVersion: crossrail/v1
kind: Fleet
metadata: {name: f}
spec:
  scheduling: {policy: POLICY}
  pools:
    - {name: gpu, accelerator: gpu, chip_type: h100, chips: 8, chips_per_host: 8SLICED}
"""


@pytest.mark.parametrize(
    ("policy", "sliced", "warned"),
    [
        pytest.param("max_min_fairness_hetero", "", True, id="round-based-with-nothing-to-slice"),
        pytest.param("las", ", time_sliced: true", False, id="round-based-with-a-sliced-pool"),
        pytest.param("fifo_hetero", "", False, id="an-ordering-policy-slices-nothing-anyway"),
    ],
)
def test_a_round_based_policy_with_no_time_sliced_pool_is_a_warning(
    tmp_path: Path, policy: str, sliced: str, warned: bool
) -> None:
    path = tmp_path / "fleet.yaml"
    path.write_text(ROUND_FLEET.replace("POLICY", policy).replace("SLICED", sliced))

    found = check_files([path], default_policy())

    assert found.problems == []
    assert [(w.path, w.line) for w in found.warnings] == ([("spec.scheduling.policy", 5)] if warned else [])
    if warned:
        assert found.warnings[0].fix is not None
        assert "time_sliced: true" in found.warnings[0].fix


SLOWED = """\
apiVersion: crossrail/v1
kind: Fleet
metadata: {name: f}
spec:
  pools:
    - {name: fast, accelerator: gpu, chip_type: h100, chips: 1, chips_per_host: 1}
    - {name: slow, accelerator: gpu, chip_type: a100, chips: 1, chips_per_host: 1, slowdown: 2SPEED}
"""


@pytest.mark.parametrize(
    ("speed", "warned"),
    [
        pytest.param("", True, id="slowed-but-declared-as-fast"),
        pytest.param(", relative_speed: 0.5", False, id="declared-as-slowed"),
    ],
)
def test_a_slowed_local_pool_whose_relative_speed_disagrees_is_a_warning(
    tmp_path: Path, speed: str, warned: bool
) -> None:
    path = tmp_path / "fleet.yaml"
    path.write_text(SLOWED.replace("SPEED", speed))

    found = check_files([path], default_policy())

    assert found.problems == []
    assert [w.path for w in found.warnings] == (["spec.pools[1].relative_speed"] if warned else [])
    if warned:
        assert "relative_speed: 0.5" in (found.warnings[0].fix or "")
