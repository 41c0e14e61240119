"""Findings that leave a document valid: what `validate` prints as warnings, apart from its problems."""

from __future__ import annotations

from crossrail.core import parse_topology
from crossrail.errors import Problem
from crossrail.spec.common import Accelerator, Items
from crossrail.spec.fleet import ROUND_BASED_POLICIES, Fleet
from crossrail.spec.loader import Document
from crossrail.spec.problems import problems_at
from crossrail.spec.tpu import host_problem, shape_problem, tpu_version

CONTAINERLESS = ("local", "ray")
"""Backends whose TPU pools keep any declared shape (local chips are virtual; a Ray cluster brings its own hosts),
where a `backend: kubernetes` pool is refused for it (fleet.gke_tpu_items)."""


def fleet_warnings(fleet: Fleet, doc: Document) -> list[Problem]:
    """A TPU pool of a local or Ray backend whose slice shapes or hosts no TPU machine has: valid, as such pools
    take any shape, but no real host is built that way (spec/tpu.py), so what runs there would not run on GKE.
    A round-based scheduling policy with no pool marked `time_sliced`: valid, but nothing is time-sliced. A local
    pool whose `slowdown` and `relative_speed` disagree with the other local pools' (see _slowdown_items)."""
    items: Items = []
    policy = fleet.spec.scheduling.policy
    if policy in ROUND_BASED_POLICIES and not any(p.time_sliced for p in fleet.spec.pools):
        said = f"policy {policy} time-slices only pools marked time_sliced, and none is: it only orders admission"
        fix = "mark the pools whose runs it may stop and move each round `time_sliced: true`, or use another policy"
        items.append((("spec", "scheduling", "policy"), said, fix))
    items.extend(_slowdown_items(fleet))
    for i, pool in enumerate(fleet.spec.pools):
        version = tpu_version(pool.chip_type) if pool.accelerator is Accelerator.TPU else None
        if version is None or str(pool.backend) not in CONTAINERLESS:
            continue
        for j, text in enumerate(pool.topologies):
            shape = parse_topology(text)
            found = shape_problem(version, shape, pool.chips) or host_problem(version, shape, pool.chips_per_host)
            if found is not None:
                message, fix = found
                said = f"{message}; a {pool.backend} pool keeps it, though no TPU machine is built that way"
                items.append((("spec", "pools", i, "topologies", j), said, fix))
    return problems_at(doc, items)


def _slowdown_items(fleet: Fleet) -> Items:
    """Local pools run on one machine, a pool with `slowdown: s` at 1/s of its speed; placement and the simulator
    weigh pools by `relative_speed` alone. So relative_speed x slowdown, the machine's own speed as each pool
    declares it, should be one figure across the local pools; a slowed pool that says otherwise runs at a speed
    neither placement nor the simulator expects."""
    local = [(i, p) for i, p in enumerate(fleet.spec.pools) if str(p.backend) == "local"]
    plain = sorted({p.relative_speed for _, p in local if p.slowdown == 1.0})
    if not plain:
        return []
    items: Items = []
    for i, pool in local:
        expected = plain[-1] / pool.slowdown
        if pool.slowdown != 1.0 and abs(pool.relative_speed - expected) > 1e-9 * expected:
            said = (
                f"pool {pool.name} runs at 1/{pool.slowdown:g} of this machine's speed (slowdown), but declares "
                f"relative_speed {pool.relative_speed:g}, not 1/{pool.slowdown:g} of the unslowed local pools' "
                f"{plain[-1]:g}: placement and the simulator weigh it by relative_speed"
            )
            fix = f"set relative_speed: {expected:g} on {pool.name}, or change its slowdown"
            items.append((("spec", "pools", i, "relative_speed"), said, fix))
    return items
