"""The fleet's optional kubernetes/slurm/skypilot blocks: bad values are errors with their path and line, and
names derived from chip_type (GKE labels, XPK and SkyPilot TPU names in TensorCores) are right."""

from __future__ import annotations

import pytest

from crossrail.errors import SpecError
from crossrail.executors.render.hardware import gke_selectors, layout, skypilot_accelerator, tpu_generation, xpk_name
from crossrail.spec import Fleet, parse_document, parse_fleet

from .conftest import MATRIX_FLEET


def _fleet(text: str) -> Fleet:
    return parse_fleet(parse_document(text, "fleet.yaml"))


@pytest.mark.parametrize(
    ("old", "new", "path", "says"),
    [
        (
            "kubernetes: {flavor: trillium}",
            "kubernetes: {gke_accelerator: nvidia-l4}",
            "spec.pools[3].kubernetes.gke_accelerator",
            "only a GPU pool",
        ),
        (
            "kubernetes: {spot: true, service_account: spot-trainer}",
            "kubernetes: {tpu_accelerator: tpu-v5p-slice}",
            "spec.pools[1].kubernetes.tpu_accelerator",
            "only a TPU pool",
        ),
        (
            "kubernetes: {flavor: trillium}",
            "kubernetes: {flavour: trillium}",
            "spec.pools[3].kubernetes.flavour",
            "unknown key",
        ),
        (
            "kubernetes: {flavor: trillium}",
            "kubernetes: {flavor: Trillium_Pool}",
            "spec.pools[3].kubernetes.flavor",
            "not a valid name",
        ),
        (
            "kubernetes: {flavor: trillium}",
            "slurm: {gres: 'gpu h100 8'}",
            "spec.pools[3].slurm.gres",
            "not a Slurm gres",
        ),
        (
            "service_account: trainer-wi}",
            "service_account: trainer-wi, kubernetes_version: '1.3'}",
            "spec.kubernetes.kubernetes_version",
            "not a Kubernetes minor version",
        ),
    ],
    ids=[
        "gpu-label-on-tpu-pool",
        "tpu-label-on-gpu-pool",
        "misspelt-key",
        "flavor-not-a-name",
        "gres-with-spaces",
        "bad-version",
    ],
)
def test_bad_target_settings_are_errors_at_their_path_with_a_line(old: str, new: str, path: str, says: str) -> None:
    assert old in MATRIX_FLEET
    with pytest.raises(SpecError) as caught:
        _fleet(MATRIX_FLEET.replace(old, new, 1))
    (problem,) = caught.value.problems
    assert problem.path == path
    assert says in problem.message
    assert problem.line is not None


def test_tpu_names_count_tensorcores_where_xpk_and_skypilot_do(matrix_fleet: Fleet) -> None:
    v5p, v6e = matrix_fleet.pool("v5p"), matrix_fleet.pool("v6e")
    assert xpk_name(matrix_fleet, v5p, 4) == "v5p-8"
    assert xpk_name(matrix_fleet, v6e, 8) == "v6e-8"
    assert skypilot_accelerator(matrix_fleet, v5p, layout(matrix_fleet, v5p, 4)) == "tpu-v5p-8"
    assert skypilot_accelerator(matrix_fleet, v6e, layout(matrix_fleet, v6e, 16)) == "tpu-v6e-16"
    assert tpu_generation(matrix_fleet, v5p).gke_accelerator == "tpu-v5p-slice"


@pytest.mark.parametrize(
    ("chip_type", "label"),
    [("tpu-v5e", "tpu-v5-lite-podslice"), ("v5litepod", "tpu-v5-lite-podslice"), ("tpu-v4", "tpu-v4-podslice")],
)
def test_tpu_chip_types_map_to_gke_accelerators(chip_type: str, label: str) -> None:
    text = MATRIX_FLEET.replace("chip_type: tpu-v6e", f"chip_type: {chip_type}")
    if chip_type == "tpu-v4":  # a 3D version: GKE offers it 3D slices only
        text = text.replace("topologies: [1x1, 2x2, 2x4, 4x4]", "topologies: [2x2x1, 2x2x2]")
    fleet = _fleet(text)
    assert gke_selectors(fleet, fleet.pool("v6e"))["cloud.google.com/gke-tpu-accelerator"] == label


def test_an_unknown_chip_type_asks_for_the_field_to_set() -> None:
    fleet = _fleet(MATRIX_FLEET.replace("chip_type: h100,", "chip_type: mi300x,"))
    with pytest.raises(SpecError) as caught:
        gke_selectors(fleet, fleet.pool("h100"))
    (problem,) = caught.value.problems
    assert problem.path == "spec.pools[0].kubernetes.gke_accelerator"
    assert "gke_accelerator" in (problem.fix or "")
    tpu = _fleet(MATRIX_FLEET.replace("chip_type: tpu-v6e", "chip_type: tpu-v9z"))
    with pytest.raises(SpecError, match="unknown TPU chip type 'tpu-v9z'"):
        gke_selectors(tpu, tpu.pool("v6e"))
    named = _fleet(
        MATRIX_FLEET.replace("chip_type: h100,", "chip_type: mi300x, kubernetes: {gke_accelerator: amd-mi300x},")
    )
    assert gke_selectors(named, named.pool("h100"))["cloud.google.com/gke-accelerator"] == "amd-mi300x"
