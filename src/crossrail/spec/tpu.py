"""The TPU slice shapes GKE offers for each TPU version, and the version a pool's chip_type names.

Source: GKE's "Plan TPUs in GKE" (topology reference tables) and the Cloud TPU version pages they link,
https://cloud.google.com/kubernetes-engine/docs/concepts/plan-tpus#topology,
https://cloud.google.com/tpu/docs/v4, https://cloud.google.com/tpu/docs/v5p,
https://cloud.google.com/tpu/docs/v5e, https://cloud.google.com/tpu/docs/v6e (read 2026-12).

- v5e (GKE `tpu-v5-lite-podslice`) and v6e (`tpu-v6e-slice`) are 2D: 1x1, 2x2 and 2x4 on one host,
  then 4x4, 4x8, 8x8, 8x16 and 16x16 (up to 256 chips).
- v4 (`tpu-v4-podslice`) and v5p (`tpu-v5p-slice`) are 3D, four chips per host: below a 4x4x4 cube the
  shapes 2x2x1, 2x2x2, 2x2x4 and 2x4x4; from a cube up, AxBxC with A <= B <= C, each a multiple of 4, up
  to 16x16x16 (v4, 4096 chips) or 16x16x24 (v5p, 6144 chips).

The hosts GKE builds a slice from (the same "Plan TPUs in GKE" tables, by machine type, and
https://cloud.google.com/tpu/docs/v5e#vm-types: "Each TPU VM in a v5e TPU slice contains 1, 4 or 8
chips"):

- v4 and v5p: every host has 4 chips (`ct4p-hightpu-4t`, `ct5p-hightpu-4t`); 2x2x1 is one host, every
  larger shape is multi-host.
- v5e and v6e: 1x1 is a 1-chip host (`ct5lp-hightpu-1t`, `ct6e-standard-1t`), 2x2 one 4-chip host
  (`-4t`), 2x4 one 8-chip host (`-8t`) or two 4-chip hosts (`-4t`, multi-host); 4x4 and larger are
  multi-host slices of 4-chip hosts (`-4t`).

GKE Multislice joins multi-host slices only: "Multislice only supports multi-host TPU slice node pools.
For example, you cannot use Multislice with a ct4p-hightpu-4t with a 2x2x1 topology or a ct5lp-hightpu-4t
with a 2x2 topology" (https://cloud.google.com/kubernetes-engine/docs/how-to/tpu-multislice, read 2026-12).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from functools import cache

SOURCE = "https://cloud.google.com/kubernetes-engine/docs/concepts/plan-tpus#topology"
MULTISLICE_SOURCE = "https://cloud.google.com/kubernetes-engine/docs/how-to/tpu-multislice"
_MACHINES = {
    "v4": {4: "ct4p-hightpu-4t"},
    "v5p": {4: "ct5p-hightpu-4t"},
    "v5e": {1: "ct5lp-hightpu-1t", 4: "ct5lp-hightpu-4t", 8: "ct5lp-hightpu-8t"},
    "v6e": {1: "ct6e-standard-1t", 4: "ct6e-standard-4t", 8: "ct6e-standard-8t"},
}
"""GKE's machine type per TPU version and chips per host."""
_SUB_CUBE = ((2, 2, 1), (2, 2, 2), (2, 2, 4), (2, 4, 4))
_PLANAR = ((1, 1), (2, 2), (2, 4), (4, 4), (4, 8), (8, 8), (8, 16), (16, 16))
_ALIASES = {
    "v5litepod": "v5e",
    "v5-lite": "v5e",
    "v5lite": "v5e",
    "trillium": "v6e",
    # GKE's own accelerator names (cloud.google.com/gke-tpu-accelerator)
    "v4-podslice": "v4",
    "v5-lite-podslice": "v5e",
    "v5p-slice": "v5p",
    "v6e-slice": "v6e",
}


@dataclass(frozen=True)
class TpuVersion:
    """One TPU version's slice shapes on GKE: a fixed list (2D) or sub-cube shapes plus whole-cube ones (3D)."""

    name: str
    fixed: tuple[tuple[int, ...], ...]
    max_dims: tuple[int, ...] | None = None  # 3D versions: the largest A, B, C of a multi-cube shape

    def allows(self, shape: tuple[int, ...]) -> bool:
        if shape in self.fixed:
            return True
        if self.max_dims is None or len(shape) != len(self.max_dims):
            return False
        ordered = list(shape) == sorted(shape)
        return ordered and all(d % 4 == 0 and d <= top for d, top in zip(shape, self.max_dims, strict=True))

    def shapes(self, max_chips: int | None = None) -> list[str]:
        """Every shape GKE offers for this version, smallest first (at most `max_chips` chips when given)."""
        found = [s for s in _all_shapes(self) if max_chips is None or math.prod(s) <= max_chips]
        return [topology_text(s) for s in found]


TPU_VERSIONS: dict[str, TpuVersion] = {
    "v4": TpuVersion("v4", _SUB_CUBE, (16, 16, 16)),
    "v5e": TpuVersion("v5e", _PLANAR),
    "v5p": TpuVersion("v5p", _SUB_CUBE, (16, 16, 24)),
    "v6e": TpuVersion("v6e", _PLANAR),
}


@cache
def _all_shapes(version: TpuVersion) -> list[tuple[int, ...]]:
    shapes = set(version.fixed)
    if version.max_dims is not None:
        a_top, b_top, c_top = version.max_dims
        for a in range(4, a_top + 1, 4):
            for b in range(a, b_top + 1, 4):
                shapes.update((a, b, c) for c in range(b, c_top + 1, 4))
    return sorted(shapes, key=lambda s: (math.prod(s), s))


def topology_text(shape: tuple[int, ...]) -> str:
    return "x".join(str(d) for d in shape)


def tpu_version(chip_type: str) -> TpuVersion | None:
    """The version `chip_type` names (`tpu-v5p`, `v5p`, `tpu-v5litepod`, `tpu-v6e`, ...), None when unknown."""
    name = re.sub(r"^tpu[-_ ]?", "", chip_type.strip().lower())
    return TPU_VERSIONS.get(_ALIASES.get(name, name))


def shape_problem(version: TpuVersion, shape: tuple[int, ...], pool_chips: int) -> tuple[str, str] | None:
    """(message, fix) when GKE offers no `shape` slice of `version`; the fix lists the shapes that fit the pool."""
    if version.allows(shape):
        return None
    offered = version.shapes(pool_chips) or version.shapes()[:1]
    listed = ", ".join(offered[:12]) + (", ..." if len(offered) > 12 else "")
    message = f"GKE offers no {topology_text(shape)} slice of TPU {version.name}"
    return message, f"use a {version.name} shape GKE offers ({listed}; {SOURCE})"


def host_chips(version: TpuVersion, shape: tuple[int, ...]) -> tuple[int, ...]:
    """The chips per host GKE builds a `shape` slice of `version` from (the module's table)."""
    chips = math.prod(shape)
    if version.max_dims is not None:  # v4, v5p: 4-chip hosts only
        return (4,)
    if chips <= 4:  # 1x1: a 1-chip host; 2x2: one 4-chip host
        return (chips,)
    if chips == 8:  # 2x4: one 8-chip host, or two 4-chip hosts
        return (8, 4)
    return (4,)


def machine_type(version: TpuVersion, chips_per_host: int) -> str | None:
    return _MACHINES.get(version.name, {}).get(chips_per_host)


def hosts_of(shape: tuple[int, ...], chips_per_host: int) -> tuple[int, int]:
    """(pods, chips per pod) of one `shape` slice on a pool of `chips_per_host`: one pod per host, a host
    never larger than the slice."""
    chips = math.prod(shape)
    per_pod = min(chips, chips_per_host)
    return chips // per_pod if chips % per_pod == 0 else 0, per_pod


def host_problem(version: TpuVersion, shape: tuple[int, ...], chips_per_host: int) -> tuple[str, str] | None:
    """(message, fix) when a pool of `chips_per_host` would lay a `shape` slice on hosts GKE does not build."""
    pods, per_pod = hosts_of(shape, chips_per_host)
    built = host_chips(version, shape)
    if pods and per_pod in built:
        return None
    text, chips = topology_text(shape), math.prod(shape)
    ways = " or ".join(f"{chips // k} host(s) of {k} chips ({machine_type(version, k)})" for k in built)
    message = (
        f"GKE builds a TPU {version.name} {text} slice from {ways}; chips_per_host: {chips_per_host} would make it "
        f"{pods or chips / per_pod:g} pod(s) of {per_pod} chips"
    )
    fix = f"set chips_per_host: {built[-1]}, or put {text} in a pool of its own ({SOURCE})"
    return message, fix


def single_host(shape: tuple[int, ...], chips_per_host: int) -> bool:
    return hosts_of(shape, chips_per_host)[0] == 1


def multislice_problem(version: TpuVersion, shape: tuple[int, ...], chips_per_host: int) -> tuple[str, str] | None:
    """(message, fix) when several `shape` slices cannot be one GKE Multislice: its slices are single-host."""
    if not single_host(shape, chips_per_host):
        return None
    machine = machine_type(version, min(math.prod(shape), chips_per_host)) or f"{version.name} host"
    message = (
        f"GKE Multislice joins multi-host slices only; a {topology_text(shape)} slice is one {machine} host "
        f"({MULTISLICE_SOURCE})"
    )
    return message, "ask for one slice's chips, or a multiple of a multi-host shape the pool lists"
