"""TPU hosts as GKE builds them (crossrail.spec.tpu, GKE's tables cited there): `validate` refuses a GKE pool
whose chips_per_host would lay a slice on hosts GKE does not build, with the fix, and a multi-slice render is
made of multi-host slices only (GKE Multislice)."""

from __future__ import annotations

from pathlib import Path

import pytest

from crossrail.errors import SpecError
from crossrail.executors.render.kubernetes import render_kubernetes
from crossrail.executors.render.workload import from_experiment
from crossrail.spec import default_policy, parse_document, parse_fleet, validate_files
from crossrail.spec.tpu import TPU_VERSIONS, host_chips, host_problem

from .builders import experiment

FLEET = """
apiVersion: crossrail/v1
kind: Fleet
metadata: {{name: hosts}}
spec:
  pools:
    - {{name: tpu, accelerator: tpu, chip_type: {chip}, chips: 256, chips_per_host: {per_host},
       topologies: [{shape}], backend: {backend}}}
  queues:
    - {{name: q, stage: pretraining, quota: {{tpu: 256}}}}
"""


@pytest.mark.parametrize(
    ("chip", "shape", "per_host", "says", "fix"),
    [
        ("tpu-v5p", "2x2x2", 8, "from 2 host(s) of 4 chips (ct5p-hightpu-4t); chips_per_host: 8 would make it 1", 4),
        ("tpu-v5e", "4x4", 8, "from 4 host(s) of 4 chips (ct5lp-hightpu-4t); chips_per_host: 8 would make it 2", 4),
        ("tpu-v6e", "4x4", 16, "from 4 host(s) of 4 chips (ct6e-standard-4t); chips_per_host: 16 would make it 1", 4),
        ("tpu-v4", "2x2x4", 16, "from 4 host(s) of 4 chips (ct4p-hightpu-4t)", 4),
        ("tpu-v5e", "2x4", 2, "from 1 host(s) of 8 chips (ct5lp-hightpu-8t) or 2 host(s) of 4 chips", 4),
    ],
    ids=["v5p-2x2x2-as-one-8-chip-host", "v5e-4x4-as-2x8", "v6e-4x4-as-1x16", "v4-as-16-chip-host", "v5e-2-chip"],
)
def test_validate_refuses_hosts_gke_does_not_build_with_the_fix(
    tmp_path: Path, chip: str, shape: str, per_host: int, says: str, fix: int
) -> None:
    path = tmp_path / "fleet.yaml"
    path.write_text(FLEET.format(chip=chip, shape=shape, per_host=per_host, backend="kubernetes"))
    (problem,) = validate_files([path], default_policy())
    assert problem.path == "spec.pools[0].topologies[0]"
    assert says in problem.message
    assert problem.fix is not None
    assert f"set chips_per_host: {fix}" in problem.fix
    assert "plan-tpus" in problem.fix
    good = tmp_path / "good.yaml"
    good.write_text(FLEET.format(chip=chip, shape=shape, per_host=fix, backend="kubernetes"))
    assert validate_files([good], default_policy()) == []  # the fix is one GKE builds
    local = tmp_path / "local.yaml"
    local.write_text(FLEET.format(chip=chip, shape=shape, per_host=per_host, backend="local"))
    assert validate_files([local], default_policy()) == []  # virtual chips: crossrail's own hosts


def test_every_shape_gke_offers_has_hosts_and_single_host_shapes_are_the_small_ones() -> None:
    for version in TPU_VERSIONS.values():
        for text in version.shapes(256):
            shape = tuple(int(d) for d in text.split("x"))
            built = host_chips(version, shape)
            assert all(host_problem(version, shape, k) is None for k in built), (version.name, text)
    v5e = TPU_VERSIONS["v5e"]
    assert host_chips(v5e, (1, 1)) == (1,)
    assert host_chips(v5e, (2, 2)) == (4,)
    assert host_chips(v5e, (2, 4)) == (8, 4)
    assert host_chips(TPU_VERSIONS["v5p"], (2, 2, 1)) == (4,)


MULTI = """
apiVersion: crossrail/v1
kind: Fleet
metadata: {{name: multi}}
spec:
  pools:
    - {{name: tpu, accelerator: tpu, chip_type: {chip}, chips: 256, chips_per_host: {per_host},
       topologies: [{shapes}], backend: kubernetes}}
  queues:
    - {{name: q, stage: post_training, quota: {{tpu: 256}}}}
"""


@pytest.mark.parametrize(
    ("chip", "per_host", "shapes", "chips", "one"),
    [
        ("tpu-v4", 4, "2x2x1", 12, "ct4p-hightpu-4t"),
        ("tpu-v5e", 4, "2x2", 8, "ct5lp-hightpu-4t"),
        ("tpu-v6e", 8, "2x4", 16, "ct6e-standard-8t"),
        ("tpu-v5p", 4, "2x2x1", 8, "ct5p-hightpu-4t"),
    ],
)
def test_multi_slice_from_single_host_slices_is_refused(
    chip: str, per_host: int, shapes: str, chips: int, one: str
) -> None:
    fleet = parse_fleet(parse_document(MULTI.format(chip=chip, per_host=per_host, shapes=shapes), "f.yaml"))
    work = from_experiment(experiment(chips=chips), source="e.yaml")
    with pytest.raises(SpecError) as caught:
        render_kubernetes(work, fleet, fleet.pool("tpu"))
    (problem,) = caught.value.problems
    assert f"is one {one} host" in problem.message
    assert "Multislice joins multi-host slices only" in problem.message
    assert "tpu-multislice" in (problem.fix or "")


def test_multi_slice_takes_the_largest_multi_host_shape() -> None:
    # 2x4 on 4-chip hosts is multi-host (two ct6e-standard-4t): 16 chips are two such slices, never 4 x 2x2
    fleet = parse_fleet(parse_document(MULTI.format(chip="tpu-v6e", per_host=4, shapes="2x2, 2x4"), "f.yaml"))
    obj = render_kubernetes(from_experiment(experiment(chips=16), source="e.yaml"), fleet, fleet.pool("tpu"))
    (job,) = obj["spec"]["replicatedJobs"]
    assert (job["replicas"], job["template"]["spec"]["parallelism"]) == (2, 2)
