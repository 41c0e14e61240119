"""A store that notices: its id, agent registrations, append-only events with per-run hash chains, damage found."""

from __future__ import annotations

import os
import shutil
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.exc import DBAPIError

from crossrail.core import Event, EventType
from crossrail.errors import StoreDamagedError, StoreError
from crossrail.store import Store
from crossrail.store.append_only import drop_statements, statements

from .builders import engine_at


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    url = f"sqlite:///{tmp_path / 'state.db'}" if request.param == "sqlite" else request.getfixturevalue("postgres_url")
    s = Store.open(url)
    yield s
    s.close()


def cancelled(run: str, ts: float, by: str = "alice") -> Event:
    return Event(EventType.CANCELLED, ts, run, None, {"by": by})


def fill(store: Store) -> None:
    """Two runs and a fleet event, interleaved: three chains."""
    store.append_events([Event(EventType.SUBMITTED, 1.0, "a-1"), Event(EventType.SUBMITTED, 1.0, "b-1")])
    store.append_events([Event(EventType.CAPACITY_CHANGED, 2.0, None, None, {"pool": "p", "chips": 4})])
    store.append_events(
        [Event(EventType.QUEUED, 3.0, "a-1"), cancelled("b-1", 4.0), Event(EventType.QUEUED, 5.0, "a-1")]
    )


def raw(store: Store, sql: str) -> None:
    engine = create_engine(store._engine.url)
    try:
        with engine.begin() as conn:
            for stmt in sql.split(";;"):
                conn.execute(text(stmt))
    finally:
        engine.dispose()


def around_triggers(store: Store, sql: str) -> None:
    """What someone with the database's password can do: drop the triggers, change rows, put the triggers back."""
    dialect = store._engine.dialect.name
    parts = [*drop_statements(dialect, "events"), sql, *statements(dialect, "events")[-2:]]
    raw(store, ";;".join(parts))


@pytest.mark.slow
def test_a_store_has_one_id_made_once_and_kept_across_opens(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'state.db'}"
    first = Store.open(url)
    assert first.id is not None
    assert len(first.id) == 32
    first.close()
    again = Store.open(url)
    assert again.id == first.id
    assert Store.open(f"sqlite:///{tmp_path / 'other.db'}").id != first.id


def test_agents_register_beat_and_stop(store: Store) -> None:
    agent = store.register_agent(host="h", pid=123, workspace="/w", now=10.0)
    store.agent_heartbeat(agent, 15.0)
    (row,) = store.agents(running=True)
    assert (row["host"], row["pid"], row["started_at"], row["heartbeat_at"]) == ("h", 123, 10.0, 15.0)
    store.agent_stopped(agent, 20.0)
    assert store.agents(running=True) == []
    assert store.agents()[0]["stopped_at"] == 20.0


@pytest.mark.parametrize(
    "sql",
    [
        pytest.param("UPDATE events SET data = '{\"by\": \"mallory\"}' WHERE type = 'cancelled'", id="update-who"),
        pytest.param("DELETE FROM events WHERE type = 'cancelled'", id="delete-one"),
        pytest.param("DELETE FROM events", id="delete-all"),
    ],
)
def test_events_cannot_be_updated_or_deleted_through_the_database(store: Store, sql: str) -> None:
    fill(store)
    with pytest.raises(DBAPIError, match="append-only"):
        raw(store, sql)
    assert [e.data for e in store.events(run="b-1", types=["cancelled"])] == [{"by": "alice"}]
    assert store.verify_events().problems == []


@pytest.mark.postgres
def test_postgresql_refuses_truncating_events(postgres_url: str) -> None:
    store = Store.open(postgres_url)
    try:
        fill(store)
        with pytest.raises(DBAPIError, match="append-only"):
            raw(store, "TRUNCATE events")
        assert len(store.events()) == 6
    finally:
        store.close()


def test_an_intact_log_verifies_with_one_chain_per_run(store: Store) -> None:
    fill(store)
    check = store.verify_events()
    assert (check.events, check.chains, check.problems) == (6, 3, [])
    assert store.verify_events("a-1").events == 3


def test_a_rewrite_around_the_triggers_is_found_and_named_by_run_and_seq(store: Store) -> None:
    fill(store)
    seq = store.events(run="b-1", types=["cancelled"])[0].seq
    around_triggers(store, "UPDATE events SET data = '{\"by\": \"mallory\"}' WHERE type = 'cancelled'")
    assert store.events(run="b-1", types=["cancelled"])[0].data == {"by": "mallory"}  # the rewrite happened
    (problem,) = store.verify_events().problems
    assert (problem.run, problem.seq) == ("b-1", seq)
    assert problem.render().startswith(f"run b-1 seq {seq}: does not match its hash")


def test_a_deleted_event_is_found_at_the_event_after_it(store: Store) -> None:
    fill(store)
    _first, second, third = (e.seq for e in store.events(run="a-1"))
    around_triggers(store, f"DELETE FROM events WHERE seq = {second}")
    assert [(p.run, p.seq) for p in store.verify_events().problems] == [("a-1", third)]


def test_an_event_inserted_around_the_store_has_no_hash_and_is_named(store: Store) -> None:
    fill(store)
    raw(store, "INSERT INTO events (ts, type, run_id, data) VALUES (9.0, 'succeeded', 'a-1', '{}')")
    (problem,) = store.verify_events().problems
    assert problem.run == "a-1"
    assert "no hash" in problem.message


def test_events_appended_before_the_chain_get_hashes_when_the_store_is_upgraded(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'state.db'}"
    engine = engine_at(url, "0006")
    with engine.begin() as conn:
        for ts, run in ((1.0, "a-1"), (2.0, None), (3.0, "a-1")):
            conn.execute(
                text("INSERT INTO events (ts, type, run_id, data) VALUES (:ts, 'queued', :run, '{}')"),
                {"ts": ts, "run": run},
            )
    engine.dispose()
    store = Store.open(url)
    store.append_events([Event(EventType.ADMITTED, 4.0, "a-1")])
    check = store.verify_events()
    assert (check.events, check.chains, check.problems) == (4, 2, [])


# --- the SQLite file under the store --------------------------------------------------------------------


def test_a_deleted_store_file_is_noticed_and_never_written(tmp_path: Path) -> None:
    store = Store.open(f"sqlite:///{tmp_path / 'state.db'}")
    fill(store)
    (tmp_path / "state.db").unlink()
    with pytest.raises(StoreDamagedError, match=r"state\.db was deleted while in use"):
        store.check_identity()
    with pytest.raises(StoreDamagedError, match="was deleted"):
        store.append_events([cancelled("a-1", 9.0)])
    assert not (tmp_path / "state.db").exists()


def test_a_replaced_store_file_is_noticed(tmp_path: Path) -> None:
    store = Store.open(f"sqlite:///{tmp_path / 'state.db'}")
    Store.open(f"sqlite:///{tmp_path / 'other.db'}").close()
    os.replace(tmp_path / "other.db", tmp_path / "state.db")
    with pytest.raises(StoreDamagedError, match="replaced by another file"):
        store.check_identity()


def test_a_copy_of_another_store_at_the_same_inode_is_noticed_by_its_id(tmp_path: Path) -> None:
    store = Store.open(f"sqlite:///{tmp_path / 'state.db'}")
    store.close()
    Store.open(f"sqlite:///{tmp_path / 'other.db'}").close()
    reopened = Store.open(f"sqlite:///{tmp_path / 'state.db'}")
    reopened.check_identity()
    with sqlite3.connect(tmp_path / "other.db") as src, sqlite3.connect(tmp_path / "state.db") as dst:
        src.backup(dst)  # writes into the same file: same inode, another store's content
    with pytest.raises(StoreDamagedError, match="no longer the store opened"):
        reopened.check_identity()


def test_overwritten_bytes_are_reported_as_damage_not_a_traceback(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    store = Store.open(f"sqlite:///{path}")
    store.append_events([Event(EventType.SUBMITTED, float(i), f"r-{i}", None, {"pad": "x" * 500}) for i in range(300)])
    store.close()
    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    with path.open("r+b") as f:  # 8 KiB of garbage in the middle of the file
        f.seek(path.stat().st_size // 2)
        f.write(bytes(range(256)) * 32)
    reopened = Store.open(f"sqlite:///{path}")
    with pytest.raises(StoreDamagedError, match=r"is damaged.*crossrail store restore"):
        reopened.check_identity(integrity=True)
    with pytest.raises(StoreDamagedError, match="is damaged"):
        reopened.events()
    with path.open("r+b") as f:  # and the header: the file is no database at all
        f.write(b"\0" * 100)
    with pytest.raises(StoreDamagedError, match="is damaged"):
        Store.open(f"sqlite:///{path}")


def test_a_read_only_store_reads_but_refuses_writes_and_leaves_the_file_alone(tmp_path: Path) -> None:
    store = Store.open(f"sqlite:///{tmp_path / 'state.db'}")
    fill(store)
    store.close()
    copy = tmp_path / "ro"
    copy.mkdir()
    shutil.copy(tmp_path / "state.db", copy / "state.db")
    before = (copy / "state.db").read_bytes()
    ro = Store.open(f"sqlite:///{copy / 'state.db'}", read_only=True)
    assert len(ro.events()) == 6
    with pytest.raises(StoreError, match="read-only"):
        ro.append_events([cancelled("a-1", 9.0)])
    ro.close()
    assert (copy / "state.db").read_bytes() == before


def test_checking_a_store_files_header_keeps_this_processs_sqlite_locks(tmp_path: Path) -> None:
    """Closing any descriptor of a SQLite file drops every POSIX lock the process holds on it. If the agent's
    per-pass header check did that, a CLI closing its last connection would take the file's exclusive lock,
    checkpoint and delete the WAL under the agent's open connections: the store ends up malformed."""
    import subprocess
    import sys

    from crossrail.store import health

    db = tmp_path / "state.db"
    held = sqlite3.connect(db)
    held.execute("PRAGMA journal_mode=WAL")
    held.execute("CREATE TABLE t (x INTEGER)")
    held.execute("INSERT INTO t VALUES (1)")
    held.commit()
    for _ in range(3):  # the agent checks every pass
        assert health.header_problem(db) is None
    writer = (
        "import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); "
        "c.execute('INSERT INTO t VALUES (2)'); c.commit(); c.close()"
    )
    subprocess.run([sys.executable, "-c", writer, str(db)], check=True, timeout=60)
    # Another process's close found a connection still open here, so it left the WAL for it.
    assert (tmp_path / "state.db-wal").exists()
    assert held.execute("SELECT count(*) FROM t").fetchone() == (2,)
    held.close()


def test_a_database_without_append_only_triggers_is_a_store_error_naming_the_supported_ones() -> None:
    with pytest.raises(StoreError, match="no append-only triggers for mysql; crossrail supports sqlite and postgresql"):
        statements("mysql", "events")
