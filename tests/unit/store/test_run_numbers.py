"""Run numbers under concurrent submissions: a lost race is tried again, any other refusal is reported."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from crossrail.core import Event, EventType
from crossrail.errors import StoreError
from crossrail.store import NewRun, Store, runs


def new_run(key: str | None = None) -> NewRun:
    return NewRun(
        experiment="exp",
        experiment_digest="sha256:e",
        experiment_spec={"name": "exp"},
        stage="eval",
        team="t",
        owner="o",
        priority="normal",
        chips=2,
        queue="eval",
        spec={"name": "exp"},
        spec_digest="sha256:a",
        dataset_uri="file:///d",
        dataset_version="v1",
        image="img@sha256:" + "0" * 64,
        checkpoint_dir="file:///c",
        idempotency_key=key,
    )


def opening(ts: float) -> list[Event]:
    return [Event(EventType.SUBMITTED, ts), Event(EventType.QUEUED, ts)]


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    s = Store.open(f"sqlite:///{tmp_path / 'state.db'}")
    yield s
    s.close()


def test_a_submission_that_lost_the_race_for_a_run_number_takes_the_next_one(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    store.create_runs([new_run()], 1.0, [opening(1.0)])
    real = runs._Batch._next_numbers
    stale = iter([{"exp": 1}])  # read before the other submission committed exp-1

    def next_numbers(self: runs._Batch, names: set[str]) -> dict[str, int]:
        return next(stale, None) or real(self, names)

    monkeypatch.setattr(runs._Batch, "_next_numbers", next_numbers)
    ((run, created),) = store.create_runs([new_run()], 2.0, [opening(2.0)])
    assert (run.id, created) == ("exp-2", True)


def test_a_refusal_that_is_no_race_for_numbers_is_reported_and_writes_nothing(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    store.create_runs([new_run(key="k")], 1.0, [opening(1.0)])
    monkeypatch.setattr(runs._Batch, "_existing_keys", lambda self, keys: {})  # blind to the used key
    with pytest.raises(StoreError, match="cannot create the run"):
        store.create_runs([new_run(key="k")], 2.0, [opening(2.0)])
    assert [r.id for r in store.list_runs()] == ["exp-1"]
