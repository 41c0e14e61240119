"""Metric samples: what attempts measured, read per run, per group and per degree."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from sqlalchemy import func, insert, select

from crossrail.store import schema as t
from crossrail.store.engine import StoreBase, chunks


class SampleRecords(StoreBase):
    """Mixed into Store: the metric_samples table."""

    def add_metric_samples(self, samples: Sequence[dict[str, Any]]) -> None:
        if samples:
            with self._write() as conn:
                conn.execute(insert(t.metric_samples), list(samples))

    def metric_by_group(self, name: str) -> dict[tuple[str, str], list[float]]:
        """Every sample of metric `name`, grouped by (stage of its run, pool of its attempt)."""
        ms, a, r = t.metric_samples, t.attempts, t.runs
        q = (
            select(r.c.stage, a.c.pool, ms.c.value)
            .select_from(
                ms.join(r, r.c.id == ms.c.run_id).join(a, (a.c.run_id == ms.c.run_id) & (a.c.number == ms.c.attempt))
            )
            .where(ms.c.name == name)
        )
        out: dict[tuple[str, str], list[float]] = {}
        with self._read() as conn:
            for stage, pool, value in conn.execute(q):
                out.setdefault((stage, pool), []).append(float(value))
        return out

    def metrics_by_degree(self, experiments: Iterable[str], name: str) -> dict[str, dict[str, dict[int, list[float]]]]:
        """Every sample of metric `name` reported by attempts of each experiment's runs, per chip: experiment ->
        chip type -> chips the reporting attempt held (its degree) -> samples; experiments without samples are
        absent. One query per 500 experiments."""
        ms, a, r = t.metric_samples, t.attempts, t.runs
        q = (
            select(r.c.experiment, a.c.chip_type, a.c.chips, ms.c.value)
            .select_from(
                ms.join(r, r.c.id == ms.c.run_id).join(a, (a.c.run_id == ms.c.run_id) & (a.c.number == ms.c.attempt))
            )
            .where(ms.c.name == name, a.c.chips > 0)
        )
        out: dict[str, dict[str, dict[int, list[float]]]] = {}
        with self._read() as conn:
            for chunk in chunks(sorted(set(experiments))):
                for experiment, chip_type, chips, value in conn.execute(q.where(r.c.experiment.in_(chunk))):
                    by_degree = out.setdefault(experiment, {}).setdefault(chip_type, {})
                    by_degree.setdefault(int(chips), []).append(float(value) / chips)
        return out

    def latest_samples(self, ids: Iterable[str], name: str | None = None) -> dict[str, dict[str, Any]]:
        """Each run's newest metric sample (of metric `name`, or of any), by run id; runs with none are absent.

        One query per 500 runs. With `name`, one lookup per run down ix_metric_samples_run_name, whatever the
        run's sample count (the newest by `ts`; of equal ones, the last written); without, a walk of the runs'
        entries in that index.
        """
        ms = t.metric_samples
        out: dict[str, dict[str, Any]] = {}
        with self._read() as conn:
            for chunk in chunks(sorted(set(ids))):
                if name is None:
                    newest = select(func.max(ms.c.id)).where(ms.c.run_id.in_(chunk)).group_by(ms.c.run_id)
                else:  # each run's newest sample of `name`, a subquery per run of `chunk` (samples need their run)
                    first = (
                        select(ms.c.id)
                        .where(ms.c.run_id == t.runs.c.id, ms.c.name == name)
                        .order_by(ms.c.ts.desc(), ms.c.id.desc())
                        .limit(1)
                        .correlate(t.runs)
                        .scalar_subquery()
                    )
                    newest = select(first).where(t.runs.c.id.in_(chunk))
                rows = conn.execute(select(ms).where(ms.c.id.in_(newest.scalar_subquery())))
                out.update({r.run_id: dict(r._mapping) for r in rows})
        return out

    def metric_samples(self, rid: str, name: str | None = None) -> list[dict[str, Any]]:
        q = select(t.metric_samples).where(t.metric_samples.c.run_id == rid)
        if name is not None:
            q = q.where(t.metric_samples.c.name == name)
        with self._read() as conn:
            return [dict(r._mapping) for r in conn.execute(q.order_by(t.metric_samples.c.ts))]
