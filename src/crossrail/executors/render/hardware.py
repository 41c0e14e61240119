"""What a pool's chips are called on GKE, Slurm and SkyPilot, and how a request of N chips lays out on it.

Derived from the pool's accelerator, chip_type, chips_per_host and topologies unless the pool's
`kubernetes:`, `slurm:` or `skypilot:` block says otherwise. Note that XPK and SkyPilot TPU names such as
`v5p-8` count TensorCores (two per v4/v5p chip), while GKE's `google.com/tpu` counts chips.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from crossrail.core import parse_topology
from crossrail.errors import Problem, ProblemCode, SpecError
from crossrail.spec import Fleet, Pool
from crossrail.spec.targets import GKE_ACCELERATOR, GKE_NODE_POOL, GKE_SPOT, GKE_TPU_ACCELERATOR
from crossrail.spec.tpu import MULTISLICE_SOURCE, host_problem, multislice_problem, single_host, tpu_version

GPU_RESOURCE = "nvidia.com/gpu"
TPU_RESOURCE = "google.com/tpu"

# chip_type (lower case, without an `nvidia-` prefix) -> (GKE accelerator label, SkyPilot name)
GPUS: dict[str, tuple[str, str]] = {
    "h100": ("nvidia-h100-80gb", "H100"),
    "h100-80gb": ("nvidia-h100-80gb", "H100"),
    "h100-mega": ("nvidia-h100-mega-80gb", "H100-MEGA"),
    "h200": ("nvidia-h200-141gb", "H200"),
    "h200-141gb": ("nvidia-h200-141gb", "H200"),
    "b200": ("nvidia-b200", "B200"),
    "gb200": ("nvidia-gb200", "GB200"),
    "a100": ("nvidia-tesla-a100", "A100"),
    "a100-40gb": ("nvidia-tesla-a100", "A100"),
    "a100-80gb": ("nvidia-a100-80gb", "A100-80GB"),
    "l4": ("nvidia-l4", "L4"),
    "t4": ("nvidia-tesla-t4", "T4"),
    "v100": ("nvidia-tesla-v100", "V100"),
}


@dataclass(frozen=True)
class TpuGeneration:
    name: str  # v5p
    gke_accelerator: str  # tpu-v5p-slice
    cores_per_chip: int  # XPK / SkyPilot names count TensorCores
    skypilot_prefix: str  # tpu-v5p-<cores>
    runtime_version: str  # the TPU VM software SkyPilot boots


TPUS: dict[str, TpuGeneration] = {
    "v4": TpuGeneration("v4", "tpu-v4-podslice", 2, "tpu-v4", "tpu-vm-v4-base"),
    "v5e": TpuGeneration("v5e", "tpu-v5-lite-podslice", 1, "tpu-v5litepod", "v2-alpha-tpuv5-lite"),
    "v5p": TpuGeneration("v5p", "tpu-v5p-slice", 2, "tpu-v5p", "v2-alpha-tpuv5"),
    "v6e": TpuGeneration("v6e", "tpu-v6e-slice", 1, "tpu-v6e", "v2-alpha-tpuv6e"),
}
"""GKE, XPK and SkyPilot names per TPU version; the slice shapes GKE offers are in crossrail.spec.tpu."""


@dataclass(frozen=True)
class Layout:
    """How `chips` lay out on a pool: `slices` groups of `hosts_per_slice` pods with `chips_per_pod` each.

    GPU and CPU work is one pod (multi-worker GPU training on Kubernetes is a Kubeflow TrainJob, laid out by
    trainjob.gang); TPU work is one slice of `topology`, or several equal slices (multi-slice).
    """

    accelerator: str
    chips: int
    chips_per_pod: int
    hosts_per_slice: int
    slices: int
    topology: str | None = None

    @property
    def pods(self) -> int:
        return self.hosts_per_slice * self.slices

    @property
    def multi_host(self) -> bool:
        return self.pods > 1


def pool_problem(fleet: Fleet, pool: Pool, keys: tuple[str, ...], message: str, fix: str) -> SpecError:
    index = fleet.pool_names.index(pool.name)
    path = ".".join(("spec", f"pools[{index}]", *keys))
    return SpecError([Problem(f"fleet {fleet.name}", path, message, None, fix, code=ProblemCode.UNSUPPORTED)])


def _chip(chip_type: str) -> str:
    return re.sub(r"^(nvidia[-_ ]?)", "", chip_type.strip().lower())


def tpu_generation(fleet: Fleet, pool: Pool) -> TpuGeneration:
    """The pool's TPU generation from chip_type (`tpu-v5p`, `v5p`, `tpu-v6e`, `v5litepod`, ...)."""
    version = tpu_version(pool.chip_type)
    if version is None or version.name not in TPUS:
        known = ", ".join(f"tpu-{g}" for g in TPUS)
        raise pool_problem(
            fleet, pool, ("chip_type",), f"unknown TPU chip type {pool.chip_type!r}", f"use one of {known}"
        )
    return TPUS[version.name]


def gke_selectors(fleet: Fleet, pool: Pool) -> dict[str, str]:
    """The node labels a pod on `pool` selects, before the TPU topology: GKE's own, then the pool's
    `kubernetes.node_selector` (that alone where the pool says `gke: false`). `node_labels` are Ray's label
    selector and never reach a manifest."""
    k8s = pool.kubernetes
    if k8s is not None and not k8s.gke:  # not GKE's nodes: only the labels the team put on them
        return dict(k8s.node_selector)
    selectors: dict[str, str] = {}
    if pool.accelerator == "gpu":
        label = k8s.gke_accelerator if k8s and k8s.gke_accelerator else None
        if label is None and _chip(pool.chip_type) in GPUS:
            label = GPUS[_chip(pool.chip_type)][0]
        if label is None:
            fix = f"set spec.pools[].kubernetes.gke_accelerator (known chip types: {', '.join(GPUS)})"
            raise pool_problem(fleet, pool, ("kubernetes", "gke_accelerator"), "cannot derive it from chip_type", fix)
        selectors[GKE_ACCELERATOR] = label
    elif pool.accelerator == "tpu":
        tpu = k8s.tpu_accelerator if k8s and k8s.tpu_accelerator else tpu_generation(fleet, pool).gke_accelerator
        selectors[GKE_TPU_ACCELERATOR] = tpu
    if k8s is not None and k8s.spot:
        selectors[GKE_SPOT] = "true"
    if k8s is not None and k8s.node_pool is not None:
        selectors[GKE_NODE_POOL] = k8s.node_pool
    return {**selectors, **(k8s.node_selector if k8s is not None else {})}


def accelerator_resource(pool: Pool) -> str | None:
    return {"gpu": GPU_RESOURCE, "tpu": TPU_RESOURCE}.get(str(pool.accelerator))


def layout(fleet: Fleet, pool: Pool, chips: int) -> Layout:
    """How `chips` lay out on `pool`; SpecError saying what the pool can hold when they do not fit."""
    if chips > pool.chips:
        raise pool_problem(
            fleet, pool, ("chips",), f"the pool has {pool.chips} chips; the work asks for {chips}", "pick a larger pool"
        )
    if pool.accelerator != "tpu":
        if chips > pool.chips_per_host:
            message = (
                f"{chips} chips span several {pool.chips_per_host}-chip hosts; this target renders one host of "
                f"{pool.accelerator} work (multi-host GPU work renders for Kubernetes, as a Kubeflow TrainJob)"
            )
            fix = f"ask for at most {pool.chips_per_host} chips on this pool, or render it for Kubernetes"
            raise pool_problem(fleet, pool, ("chips_per_host",), message, fix)
        return Layout(str(pool.accelerator), chips, chips, 1, 1)
    return _tpu_layout(fleet, pool, chips)


def _tpu_layout(fleet: Fleet, pool: Pool, chips: int) -> Layout:
    shapes = {math.prod(shape): text for shape, text in zip(pool.topology_shapes, pool.topologies, strict=True)}
    if not shapes:
        fix = "list the slice shapes the node pools have, e.g. topologies: [2x2x1, 2x2x2]"
        raise pool_problem(fleet, pool, ("topologies",), "a TPU pool on GKE needs slice topologies", fix)
    version = tpu_version(pool.chip_type)
    if chips in shapes:
        size, slices = chips, 1
    else:  # multi-slice (GKE Multislice): equal multi-host slices of the largest shape that divides the request
        dividing = [size for size in shapes if chips % size == 0]
        multi_host = [size for size in dividing if not single_host(parse_topology(shapes[size]), pool.chips_per_host)]
        if not multi_host:
            listed = ", ".join(f"{text} ({size} chips)" for size, text in sorted(shapes.items()))
            fix = f"ask for one slice's chips or a multiple of a multi-host one: {listed} ({MULTISLICE_SOURCE})"
            message = f"no slice shape or multi-slice makes {chips} chips"
            found = None
            if dividing and version is not None:
                found = multislice_problem(version, parse_topology(shapes[max(dividing)]), pool.chips_per_host)
            if found is not None:
                message = f"{chips} chips would be {chips // max(dividing)} slices, but {found[0]}"
            raise pool_problem(fleet, pool, ("topologies",), message, fix)
        size = max(multi_host)
        slices = chips // size
    per_pod = min(size, pool.chips_per_host)
    if size % per_pod:
        fix = f"use slice shapes whose chips are a multiple of chips_per_host ({pool.chips_per_host})"
        raise pool_problem(fleet, pool, ("topologies",), f"a {size}-chip slice is not whole hosts", fix)
    if version is not None and pool.backend == "kubernetes":
        wrong = host_problem(version, parse_topology(shapes[size]), pool.chips_per_host)
        if wrong is not None:
            raise pool_problem(fleet, pool, ("chips_per_host",), *wrong)
    return Layout("tpu", chips, per_pod, size // per_pod, slices, shapes[size])


def xpk_name(fleet: Fleet, pool: Pool, slice_chips: int) -> str:
    """XPK's name for one slice, counting TensorCores for v4/v5p: 4 v5p chips -> `v5p-8`."""
    gen = tpu_generation(fleet, pool)
    return f"{'v5litepod' if gen.name == 'v5e' else gen.name}-{slice_chips * gen.cores_per_chip}"


def skypilot_accelerator(fleet: Fleet, pool: Pool, lay: Layout) -> str:
    """SkyPilot's accelerator for one node: `H100:8`, or `tpu-v5p-8` for a 4-chip v5p slice."""
    own = pool.skypilot.accelerator if pool.skypilot and pool.skypilot.accelerator else None
    if pool.accelerator == "tpu":
        gen = tpu_generation(fleet, pool)
        slice_chips = lay.chips_per_pod * lay.hosts_per_slice
        return f"{own or gen.skypilot_prefix}-{slice_chips * gen.cores_per_chip}"
    name = own or (GPUS[_chip(pool.chip_type)][1] if _chip(pool.chip_type) in GPUS else None)
    if name is None:
        fix = f"set spec.pools[].skypilot.accelerator (known chip types: {', '.join(GPUS)})"
        raise pool_problem(fleet, pool, ("skypilot", "accelerator"), "cannot derive it from chip_type", fix)
    return f"{name}:{lay.chips_per_pod}"


def slurm_gres(pool: Pool, lay: Layout) -> str | None:
    """`--gres` per node: the pool's, else `gpu:<chip>:<chips per node>` (None for CPU pools)."""
    if pool.slurm and pool.slurm.gres:
        return pool.slurm.gres
    if pool.accelerator == "cpu":
        return None
    chip = re.sub(r"[^a-z0-9_.-]", "", _chip(pool.chip_type)) or "any"
    return f"{pool.accelerator}:{chip}:{lay.chips_per_pod}"
