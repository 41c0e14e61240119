"""Store.latest_samples: each run's newest sample, read for many runs at once (what `status` shows)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from crossrail.store import Store

from .test_store import new_run, opening


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    s = Store.open(f"sqlite:///{tmp_path / 'state.db'}")
    yield s
    s.close()


def sample(run: str, ts: float, step: int, name: str = "loss", value: float = 1.0) -> dict[str, Any]:
    return {"run_id": run, "attempt": 1, "ts": ts, "step": step, "name": name, "value": value}


def runs(store: Store, n: int) -> list[str]:
    made = store.create_runs([new_run(f"exp{i}") for i in range(n)], 1.0, [opening(1.0)] * n)
    return [run.id for run, _ in made]


def test_each_run_gets_its_newest_sample_of_the_metric_and_a_run_without_one_is_absent(store: Store) -> None:
    a, b, quiet = runs(store, 3)
    store.add_metric_samples(
        [sample(a, 5.0, 50), sample(a, 9.0, 90), sample(a, 7.0, 70), sample(a, 99.0, 990, name="acc")]
    )
    store.add_metric_samples([sample(b, 3.0, 30), sample(b, 2.0, 20), sample(quiet, 8.0, 80, name="acc")])

    latest = store.latest_samples([a, b, quiet, "no-such-run"], "loss")

    assert {rid: s["step"] for rid, s in latest.items()} == {a: 90, b: 30}
    assert latest[a]["name"] == "loss"
    assert {rid: s["step"] for rid, s in store.latest_samples([a, quiet]).items()} == {a: 990, quiet: 80}


def test_of_samples_at_the_same_time_the_last_written_is_the_newest(store: Store) -> None:
    (a,) = runs(store, 1)
    store.add_metric_samples([sample(a, 4.0, 1), sample(a, 4.0, 2), sample(a, 4.0, 3), sample(a, 1.0, 4)])

    assert store.latest_samples([a], "loss")[a]["step"] == 3


def test_runs_beyond_one_query_of_500_each_get_their_own_sample(store: Store) -> None:
    ids = runs(store, 501)
    store.add_metric_samples([sample(rid, float(i % 7), i) for i, rid in enumerate(ids)])

    latest = store.latest_samples(ids, "loss")

    assert {rid: s["step"] for rid, s in latest.items()} == {rid: i for i, rid in enumerate(ids)}
