"""Run uids in the store: recorded, unique, found by `find_run`, and NULL for runs migrated from before 0005."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from crossrail.core import Event, EventType
from crossrail.errors import StoreError
from crossrail.store import HEAD_REVISION, Store

from .builders import engine_at
from .test_store import new_run, opening

UID_A, UID_B = "01kdvdna3v000g40r40m30e209", "01kdvdna3v7zzzzzzzzzzzzzzz"


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    """On SQLite and on a real PostgreSQL server, as the other store tests."""
    url = f"sqlite:///{tmp_path / 'state.db'}" if request.param == "sqlite" else request.getfixturevalue("postgres_url")
    s = Store.open(url)
    yield s
    s.close()


def test_a_run_keeps_its_uid_and_is_found_by_it_or_by_its_id(store: Store) -> None:
    made = store.create_runs(
        [replace(new_run("a"), uid=UID_A), replace(new_run("a"), uid=UID_B)], 1.0, [opening(1.0)] * 2
    )
    assert [(r.id, r.uid) for r, _ in made] == [("a-1", UID_A), ("a-2", UID_B)]
    assert store.get_run("a-1").uid == UID_A
    assert store.find_run(UID_A).id == "a-1"  # type: ignore[union-attr]
    assert store.find_run("a-2").uid == UID_B  # type: ignore[union-attr]
    assert store.find_run("01kdvdna3v000000000000000z") is None
    assert store.get_run("a-1").run_checkpoint_dir == f"file:///c/a-1-{UID_A}"


def test_a_uid_used_twice_is_refused_and_nothing_is_written(store: Store) -> None:
    store.create_runs([replace(new_run("a"), uid=UID_A)], 1.0, [opening(1.0)])
    with pytest.raises(StoreError, match="uid"):
        store.create_runs([replace(new_run("b"), uid=UID_A)], 2.0, [opening(2.0)])
    assert [r.id for r in store.list_runs()] == ["a-1"]


def test_a_store_at_0004_upgrades_its_runs_to_legacy_ones_that_still_load(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'old.db'}"
    engine = engine_at(url, "0004")
    with engine.begin() as conn:  # a run and its event as a crossrail of revision 0004 wrote them: no uid column
        conn.exec_driver_sql(
            "INSERT INTO experiments (id, name, digest, spec, created_at) VALUES (1, 'old', 'sha256:e', '{}', 1.0)"
        )
        conn.exec_driver_sql(
            "INSERT INTO runs (id, experiment, n, experiment_id, stage, priority, chips, queue, state, spec, "
            "spec_digest, dataset_uri, dataset_version, image, checkpoint_dir, created_at, updated_at) VALUES "
            "('old-1', 'old', 1, 1, 'eval', 'normal', 2, 'eval', 'succeeded', '{}', 'sha256:a', 'file:///d', 'v1', "
            "'img', 'file:///c', 1.0, 1.0)"
        )
        conn.exec_driver_sql("INSERT INTO events (ts, type, run_id, data) VALUES (1.0, 'submitted', 'old-1', '{}')")
    engine.dispose()

    store = Store.open(url)
    assert store.revision() == HEAD_REVISION
    legacy = store.get_run("old-1")
    assert (legacy.uid, legacy.state) == (None, "succeeded")
    assert legacy.run_checkpoint_dir == "file:///c/old-1"  # its checkpoints stay where they were written
    assert store.find_run("old").id == "old-1"  # type: ignore[union-attr]
    assert [e.type for e in store.events(run="old-1")] == [EventType.SUBMITTED]
    made = store.create_runs([replace(new_run("old"), uid=UID_A)], 2.0, [[Event(EventType.SUBMITTED, 2.0)]])
    assert (made[0][0].id, made[0][0].uid) == ("old-2", UID_A)
    assert store.find_run(UID_A).id == "old-2"  # type: ignore[union-attr]
