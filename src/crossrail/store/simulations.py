"""Stored simulation results: the per-run records of a `simulate --store`, named by a content id."""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

from sqlalchemy import insert, select

from crossrail.errors import NotFoundError, UsageError
from crossrail.store import schema as t
from crossrail.store.engine import StoreBase

SIM_ID = re.compile(r"[0-9a-f]{12}")
"""A stored result's id: the first 12 hex digits of the sha256 of its records."""


def simulation_id(records: list[dict[str, Any]]) -> str:
    text = json.dumps(records, sort_keys=True, separators=(",", ":"), allow_nan=True)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


class SimulationRecords(StoreBase):
    """Mixed into Store: add a result's records once, read them back by id."""

    def add_simulation(self, records: list[dict[str, Any]], *, policy: str, by: str, now: float) -> str:
        """Keep `records` (RunFacts.as_dict of each run) and return their id; the same records keep one row."""
        sim_id = simulation_id(records)
        with self._write() as conn:
            found = conn.execute(select(t.simulations.c.id).where(t.simulations.c.id == sim_id)).first()
            if found is None:
                row = {"id": sim_id, "created_at": now, "created_by": by, "policy": policy[:64]}
                conn.execute(insert(t.simulations).values(**row, runs=len(records), records=records))
        return sim_id

    def simulation(self, sim_id: str) -> list[dict[str, Any]]:
        """The records of stored result `sim_id`; UsageError for a malformed id, NotFoundError for none stored."""
        if not SIM_ID.fullmatch(sim_id):
            raise UsageError(
                f"{sim_id[:40]!r} is not a stored simulation id (12 hex digits); `crossrail simulate ... --store` "
                "prints one"
            )
        with self._read() as conn:
            row = conn.execute(select(t.simulations.c.records).where(t.simulations.c.id == sim_id)).first()
        if row is None:
            raise NotFoundError(f"no stored simulation {sim_id}; store one with `crossrail simulate ... --store`")
        return list(row[0])

    def simulations(self) -> list[dict[str, Any]]:
        """Every stored result without its records, newest first."""
        cols = [t.simulations.c[n] for n in ("id", "created_at", "created_by", "policy", "runs")]
        with self._read() as conn:
            rows = conn.execute(select(*cols).order_by(t.simulations.c.created_at.desc())).all()
        return [dict(r._mapping) for r in rows]
