"""The queue's key read has a covering index (0012): a store at 0011 gets it on open, and SQLite reads the keys
from it alone."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import create_engine, event, inspect

from crossrail.store import HEAD_REVISION, Store

from .builders import engine_at

EXPERIMENT = "INSERT INTO experiments (id, name, digest, spec, created_at) VALUES (1, 'old', 'sha256:e', '{}', 1.0)"
RUN = (
    "INSERT INTO runs (id, experiment, n, experiment_id, stage, priority, chips, queue, state, spec, spec_digest, "
    "dataset_uri, dataset_version, image, checkpoint_dir, created_at, updated_at) VALUES ('old-{n}', 'old', {n}, 1, "
    "'eval', 'normal', 2, 'eval', '{state}', '{{}}', 'sha256:a', 'file:///d', 'v1', 'img', 'file:///c', 1.0, {n}.0)"
)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def url_at_0011(request: pytest.FixtureRequest, tmp_path: Any) -> str:
    url = f"sqlite:///{tmp_path / 'old.db'}" if request.param == "sqlite" else request.getfixturevalue("postgres_url")
    engine = engine_at(url, "0011")
    with engine.begin() as conn:
        conn.exec_driver_sql(EXPERIMENT)
        for n, state in ((1, "queued"), (2, "running"), (3, "queued")):
            conn.exec_driver_sql(RUN.format(n=n, state=state))
    engine.dispose()
    return url


def test_a_store_at_0011_gets_the_queue_keys_index_and_keeps_its_queued_runs(url_at_0011: str) -> None:
    store = Store.open(url_at_0011)
    try:
        assert store.revision() == HEAD_REVISION
        engine = create_engine(url_at_0011)
        indexes = {ix["name"]: ix["column_names"] for ix in inspect(engine).get_indexes("runs")}
        engine.dispose()
        assert indexes["ix_runs_queued_keys"][:4] == ["state", "queue", "priority", "updated_at"]
        assert [(k.id, k.queue, k.priority, k.updated_at) for k in store.queued_keys()] == [
            ("old-1", "eval", "normal", 1.0),
            ("old-3", "eval", "normal", 3.0),
        ]
    finally:
        store.close()


def test_sqlite_reads_the_queue_keys_from_the_covering_index_alone(tmp_path: Any) -> None:
    store = Store.open(f"sqlite:///{tmp_path / 'state.db'}")
    statements: list[tuple[str, Any]] = []

    def seen(_conn: Any, _cursor: Any, sql: str, params: Any, *_: Any) -> None:
        statements.append((sql, params))

    event.listen(store._engine, "before_cursor_execute", seen)
    store.queued_keys()
    event.remove(store._engine, "before_cursor_execute", seen)
    (sql, params), *_ = [(s, p) for s, p in statements if s.lstrip().upper().startswith("SELECT")]
    with store._engine.connect() as conn:
        plan = " ".join(str(row[-1]) for row in conn.exec_driver_sql(f"EXPLAIN QUERY PLAN {sql}", params))
    store.close()
    assert "COVERING INDEX ix_runs_queued_keys" in plan, plan
