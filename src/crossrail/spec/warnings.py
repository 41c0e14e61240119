"""Findings that leave a document valid: what `validate` prints as warnings, apart from its problems."""

from __future__ import annotations

from crossrail.core import parse_topology
from crossrail.errors import Problem
from crossrail.spec.common import Accelerator, Items
from crossrail.spec.fleet import Fleet
from crossrail.spec.loader import Document
from crossrail.spec.problems import problems_at
from crossrail.spec.tpu import host_problem, shape_problem, tpu_version

CONTAINERLESS = ("local", "ray")
"""Backends whose TPU pools keep any declared shape (local chips are virtual; a Ray cluster brings its own hosts),
where a `backend: kubernetes` pool is refused for it (fleet.gke_tpu_items)."""


def fleet_warnings(fleet: Fleet, doc: Document) -> list[Problem]:
    """A TPU pool of a local or Ray backend whose slice shapes or hosts no TPU machine has: valid, as such pools
    take any shape, but no real host is built that way (spec/tpu.py), so what runs there would not run on GKE."""
    items: Items = []
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
