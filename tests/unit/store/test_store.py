"""The store: migrations, idempotent run creation, guarded transitions, an append-only event log."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from sqlalchemy import create_engine, inspect

from crossrail.core import Event, EventType
from crossrail.errors import ConflictError, NotFoundError, StoreError
from crossrail.store import HEAD_REVISION, NewRun, Store

from .builders import engine_at


def new_run(name: str = "exp", key: str | None = None, digest: str = "sha256:a") -> NewRun:
    return NewRun(
        experiment=name,
        experiment_digest="sha256:e",
        experiment_spec={"name": name},
        stage="eval",
        team="t",
        owner="o",
        priority="normal",
        chips=2,
        queue="eval",
        spec={"name": name},
        spec_digest=digest,
        dataset_uri="file:///d",
        dataset_version="v1",
        image="img@sha256:" + "0" * 64,
        checkpoint_dir="file:///c",
        idempotency_key=key,
    )


def opening(ts: float) -> list[Event]:
    return [Event(EventType.SUBMITTED, ts), Event(EventType.QUEUED, ts)]


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    """Every store test runs on SQLite and on a real PostgreSQL server."""
    url = f"sqlite:///{tmp_path / 'state.db'}" if request.param == "sqlite" else request.getfixturevalue("postgres_url")
    s = Store.open(url)
    yield s
    s.close()


def test_open_migrates_a_new_database_to_head_and_reopening_keeps_data(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'state.db'}"
    s = Store.open(url)
    assert s.revision() == HEAD_REVISION
    s.create_runs([new_run()], 1.0, [opening(1.0)])
    s.close()
    names = set(inspect(create_engine(url)).get_table_names())
    assert {
        "experiments",
        "runs",
        "attempts",
        "events",
        "checkpoints",
        "metric_samples",
        "alembic_version",
    } <= names
    assert [r.id for r in Store.open(url).list_runs()] == ["exp-1"]


def test_head_revision_matches_the_alembic_scripts() -> None:
    from alembic.config import Config
    from alembic.script import ScriptDirectory

    from crossrail.store.engine import MIGRATIONS

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    assert ScriptDirectory.from_config(cfg).get_current_head() == HEAD_REVISION


def test_runs_are_numbered_per_experiment(store: Store) -> None:
    made = store.create_runs([new_run("a"), new_run("a"), new_run("b")], 1.0, [opening(1.0)] * 3)
    assert [(r.id, created) for r, created in made] == [("a-1", True), ("a-2", True), ("b-1", True)]


def test_an_idempotency_key_creates_one_run_and_one_set_of_events(store: Store) -> None:
    first = store.create_runs([new_run(key="k")], 1.0, [opening(1.0)])[0]
    again = store.create_runs([new_run(key="k")], 2.0, [opening(2.0)])[0]
    assert first[0].id == again[0].id == "exp-1"
    assert (first[1], again[1]) == (True, False)
    assert len(store.list_runs()) == 1
    assert [e.type for e in store.events()] == [EventType.SUBMITTED, EventType.QUEUED]


def test_an_idempotency_key_reused_for_another_spec_is_refused_and_writes_nothing(store: Store) -> None:
    store.create_runs([new_run(key="k")], 1.0, [opening(1.0)])
    with pytest.raises(ConflictError, match="different spec"):
        store.create_runs([new_run("other"), new_run(key="k", digest="sha256:b")], 2.0, [opening(2.0)] * 2)
    assert [r.id for r in store.list_runs()] == ["exp-1"]  # the batch was all or nothing
    assert store.last_seq() == 2


def test_transition_applies_only_from_the_allowed_states(store: Store) -> None:
    store.create_runs([new_run()], 1.0, [opening(1.0)])
    run = store.transition("exp-1", ["queued"], "cancelled", [Event(EventType.CANCELLED, 2.0, "exp-1")])
    assert (run.state, run.updated_at) == ("cancelled", 2.0)
    with pytest.raises(ConflictError, match="exp-1 is cancelled"):
        store.transition("exp-1", ["queued"], "suspended", [Event(EventType.SUSPENDED, 3.0, "exp-1")])
    assert [e.type for e in store.events(run="exp-1")][-1] == EventType.CANCELLED
    with pytest.raises(NotFoundError):
        store.transition("nope-1", ["queued"], "cancelled", [])


def test_queued_runs_are_the_queued_runs_oldest_first_with_one_decoded_spec_per_digest(store: Store) -> None:
    a = replace(new_run("a"), spec={"name": "a", "resources": {"chips": 2}})
    b = replace(new_run("b", digest="sha256:b"), spec={"name": "b", "nested": [1, {"x": None}]})
    store.create_runs([a, b, a], 1.0, [opening(1.0)] * 3)
    store.create_runs([a, b], 2.0, [opening(2.0)] * 2)
    store.transition("a-2", ["queued"], "cancelled", [Event(EventType.CANCELLED, 3.0, "a-2")])
    queued = store.queued_runs()
    assert queued == store.list_runs(states=["queued"], newest_first=False)
    assert [r.id for r in queued] == ["a-1", "b-1", "a-3", "b-2"]
    assert queued[0].spec is queued[2].spec
    assert queued[1].spec is queued[3].spec
    assert queued[1].spec == {"name": "b", "nested": [1, {"x": None}]}


def test_event_values_read_one_field_of_each_runs_events_of_some_types_in_order(store: Store) -> None:
    store.create_runs([new_run("a"), new_run("b"), new_run("c")], 1.0, [opening(1.0)] * 3)
    store.append_events(
        [
            Event(EventType.PLANNED, 2.0, "a-1", None, {"pool": "tpu", "candidates": [{"pool": "gpu"}]}),
            Event(EventType.PLANNED, 2.0, "b-1", None, {"pool": "gpu"}),
            Event(EventType.HEARTBEAT, 3.0, "a-1", 1, {"pool": "not a placement"}),
            Event(EventType.REPLACED, 4.0, "a-1", None, {"from": "tpu", "pool": "gpu"}),
            Event(EventType.REPLACED, 5.0, "b-1", None, {"reason": "no pool"}),
            Event(EventType.PLANNED, 6.0, "c-1", None, {"pool": "cpu"}),
        ]
    )
    placements = ["planned", "replaced"]
    assert store.event_values(placements, "pool") == [
        ("a-1", "tpu"),
        ("b-1", "gpu"),
        ("a-1", "gpu"),
        ("b-1", None),
        ("c-1", "cpu"),
    ]
    assert store.event_values(placements, "pool", ["b-1", "a-1"]) == [
        ("a-1", "tpu"),
        ("b-1", "gpu"),
        ("a-1", "gpu"),
        ("b-1", None),
    ]
    assert store.event_values(placements, "pool", []) == []


def test_events_filter_by_run_sequence_and_type(store: Store) -> None:
    store.create_runs([new_run("a"), new_run("b")], 1.0, [opening(1.0)] * 2)
    assert [e.seq for e in store.events()] == [1, 2, 3, 4]
    assert {e.run for e in store.events(run="b-1")} == {"b-1"}
    assert [e.seq for e in store.events(after_seq=3)] == [4]
    assert all(e.type == EventType.QUEUED for e in store.events(types=["queued"]))


def test_find_run_takes_a_run_id_or_an_experiment_name_for_its_latest_run(store: Store) -> None:
    store.create_runs([new_run("a"), new_run("a")], 1.0, [opening(1.0)] * 2)
    assert store.find_run("a").id == "a-2"  # type: ignore[union-attr]
    assert store.find_run("a-1").id == "a-1"  # type: ignore[union-attr]
    assert store.find_run("zzz") is None


def test_checkpoints_link_to_their_parent(store: Store) -> None:
    store.create_runs([new_run()], 1.0, [opening(1.0)])
    c1 = store.add_checkpoint(
        run="exp-1", attempt=1, step=10, uri="file:///c/10", fmt="crossrail-ckpt/v1", parent_id=None, ts=2.0
    )
    c2 = store.add_checkpoint(
        run="exp-1", attempt=1, step=20, uri="file:///c/20", fmt="crossrail-ckpt/v1", parent_id=c1.id, ts=3.0
    )
    assert [c.step for c in store.checkpoints("exp-1")] == [10, 20]
    assert c2.parent_id == c1.id


def test_an_unreachable_database_is_a_store_error_naming_the_url(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="cannot open the state store"):
        Store.open(f"sqlite:///{tmp_path / 'missing-dir' / 'state.db'}")


def test_a_database_at_an_older_revision_is_upgraded_on_open_keeping_its_rows(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'old.db'}"
    engine = engine_at(url, "0001")
    with engine.begin() as conn:
        conn.exec_driver_sql(
            "INSERT INTO experiments (name, digest, spec, created_at) VALUES ('old', 'sha256:o', '{}', 1.0)"
        )
    engine.dispose()
    store = Store.open(url)
    assert store.revision() == HEAD_REVISION
    indexes = {ix["name"] for ix in inspect(create_engine(url)).get_indexes("runs")}
    assert {"ix_runs_stage_state_chips", "ix_runs_state_created"} <= indexes
    made = store.create_runs([new_run("old")], 2.0, [opening(2.0)])
    assert made[0][0].id == "old-1"
