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
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from functools import cache

SOURCE = "https://cloud.google.com/kubernetes-engine/docs/concepts/plan-tpus#topology"
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
