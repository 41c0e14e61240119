"""Checkpoint states in the store: what the runtime reports (deleted by retention, skipped as damaged, where an
attempt really started) and what a store of revision 0005 becomes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from crossrail.core import Event, EventType
from crossrail.store import HEAD_REVISION, AttemptRecord, Store

from .builders import engine_at
from .test_store import new_run, opening


@pytest.fixture
def store(tmp_path: Path) -> Store:
    return Store.open(f"sqlite:///{tmp_path / 'state.db'}")


def attempt(run: str, parent_checkpoint: str | None = None) -> AttemptRecord:
    return AttemptRecord(
        run_id=run, number=1, state="starting", pool="p", accelerator="gpu", chip_type="h100", chips=2,
        cost_per_chip_hour=1.0, dataset_uri="file:///d", dataset_version="v1", code_commit=None,
        config_digest=None, image_digest=None, started_at=None, ended_at=None, exit_code=None, reason=None,
        report_uri="r", created_at=1.0, parent_checkpoint=parent_checkpoint,
    )  # fmt: skip


def reported(run: str, name: str, **data: Any) -> Event:
    return Event(EventType.REPORTED, 2.0, run, 1, {"name": name, "data": data})


def ingest(store: Store, run: str, cursor: str, events: list[Event], steps: tuple[int, ...] = ()) -> None:
    old = store.attempts(run)[0].report_cursor
    checkpoints = [{"step": s, "uri": f"file:///c/{run}/step-{s}", "ts": 2.0} for s in steps]
    assert store.ingest(
        run, 1, old_cursor=old, new_cursor=cursor, events=events, samples=[], checkpoints=checkpoints, heartbeat=None
    )


def test_retention_and_restores_move_checkpoints_out_of_the_usable_ones(store: Store) -> None:
    store.create_runs([new_run("a")], 1.0, [opening(1.0)])
    store.admit(attempt("a-1"), [])
    ingest(store, "a-1", "1", [], steps=(10, 20, 30))
    ingest(store, "a-1", "2", [reported("a-1", "checkpoint_deleted", uri="file:///c/a-1/step-10", reason="keep_last")])
    ingest(store, "a-1", "3", [reported("a-1", "checkpoint_skipped", uri="file:///c/a-1/step-30", reason="torn")])
    states = [(c.step, c.state, c.skipped_reason) for c in store.checkpoints("a-1")]
    assert states == [(10, "deleted", None), (20, "committed", None), (30, "damaged", "torn")]
    assert [c.step for c in store.checkpoints("a-1", usable=True)] == [20]


def test_a_child_records_the_parent_step_it_really_started_from_on_its_attempt_and_first_checkpoint(
    store: Store,
) -> None:
    store.create_runs([new_run("pre"), new_run("post")], 1.0, [opening(1.0)] * 2)
    store.admit(attempt("pre-1"), [])
    ingest(store, "pre-1", "1", [], steps=(10, 20))
    store.admit(attempt("post-1", parent_checkpoint="file:///c/pre-1/step-20"), [])
    assert store.attempts("post-1")[0].parent_checkpoint == "file:///c/pre-1/step-20"  # resolved at launch
    # The runtime found step 20 damaged, fell back to step 10 and said so; then it checkpointed.
    fell_back = [
        reported("post-1", "checkpoint_skipped", uri="file:///c/pre-1/step-20", reason="checksum mismatch"),
        reported("post-1", "initialised", step=10, **{"from": "file:///c/pre-1/step-10"}),
    ]
    ingest(store, "post-1", "1", fell_back, steps=(1, 2))
    assert store.attempts("post-1")[0].parent_checkpoint == "file:///c/pre-1/step-10"
    pre = {c.step: c for c in store.checkpoints("pre-1")}
    assert pre[20].state == "damaged"  # the parent's checkpoint, reported by the child
    first, second = store.checkpoints("post-1")
    assert first.parent_id == pre[10].id
    assert second.parent_id == first.id


def test_a_store_at_0005_upgrades_with_skipped_checkpoints_damaged_and_the_rest_committed(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'old.db'}"
    engine = engine_at(url, "0005")
    with engine.begin() as conn:
        conn.exec_driver_sql(
            "INSERT INTO experiments (id, name, digest, spec, created_at) VALUES (1, 'old', 'sha256:e', '{}', 1.0)"
        )
        conn.exec_driver_sql(
            "INSERT INTO runs (id, experiment, n, experiment_id, stage, priority, chips, queue, state, spec, "
            "spec_digest, dataset_uri, dataset_version, image, checkpoint_dir, created_at, updated_at) VALUES "
            "('old-1', 'old', 1, 1, 'eval', 'normal', 2, 'eval', 'succeeded', '{}', 'sha256:a', 'file:///d', 'v1', "
            "'img', 'file:///c', 1.0, 1.0)"
        )
        for step, skipped in ((10, None), (20, "checksum mismatch")):
            conn.exec_driver_sql(
                "INSERT INTO checkpoints (run_id, step, uri, format, committed_at, skipped_reason) "
                "VALUES ('old-1', ?, ?, 'crossrail-ckpt/v1', 1.0, ?)",
                (step, f"file:///c/old-1/step-{step}", skipped),
            )
    engine.dispose()

    store = Store.open(url)
    assert store.revision() == HEAD_REVISION
    assert [(c.step, c.state) for c in store.checkpoints("old-1")] == [(10, "committed"), (20, "damaged")]
    assert [c.step for c in store.checkpoints("old-1", usable=True)] == [10]
