"""An audited write carries its audit row in its own transaction: one commit, and both or neither are kept."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from sqlalchemy import event, text
from sqlalchemy.exc import DBAPIError

from crossrail.core import Event, EventType
from crossrail.errors import ConflictError
from crossrail.store import NewRun, Store
from crossrail.store.joined import JoinedAudit, joined_audit

from .test_store import new_run as store_run
from .test_store import opening

ROW = {"who": "ada", "team": "foundation", "role": "submitter", "action": "POST /v1/runs", "origin": "test"}


def new_run(name: str = "exp", key: str | None = None, digest: str = "sha256:a") -> NewRun:
    """The store tests' run, in the audit rows' team and with a uid (an audit row names it)."""
    return replace(store_run(name, key, digest), team="foundation", uid=f"uid-{name}-{digest[-1]}")


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    url = f"sqlite:///{tmp_path / 'state.db'}" if request.param == "sqlite" else request.getfixturevalue("postgres_url")
    s = Store.open(url)
    yield s
    s.close()


def _commits(store: Store) -> list[int]:
    seen: list[int] = []
    event.listen(store._engine, "commit", lambda _conn: seen.append(1))
    return seen


def _pending() -> JoinedAudit:
    return JoinedAudit(row=dict(ROW), now=lambda: 5.0, status=200, created_status=201)


def test_a_joined_write_and_its_audit_row_commit_once_together(store: Store) -> None:
    commits = _commits(store)
    with joined_audit(_pending()) as pending:
        store.create_runs([new_run()], 1.0, [opening(1.0)])
        assert pending.written
        store.transition("exp-1", ["queued"], "suspended", [Event(EventType.SUSPENDED, 2.0, "exp-1")])
    assert len(commits) == 2  # the submit with its row, then the transition (which adds no second row)
    (row,) = store.audit()
    assert (row["action"], row["target"], row["run_uid"], row["result"], row["status"], row["ts"]) == (
        "POST /v1/runs",
        "exp-1",
        "uid-exp-a",
        "ok",
        201,
        5.0,
    )


def test_an_idempotent_replay_keeps_the_success_status_of_a_write_that_created_nothing(store: Store) -> None:
    store.create_runs([new_run(key="k")], 1.0, [opening(1.0)])
    with joined_audit(_pending()):
        store.create_runs([new_run(key="k")], 2.0, [opening(2.0)])
    (row,) = store.audit()
    assert (row["target"], row["status"]) == ("exp-1", 200)


def test_a_write_that_fails_leaves_no_row_and_the_next_write_carries_it(store: Store) -> None:
    store.create_runs([new_run(key="k")], 1.0, [opening(1.0)])
    with joined_audit(_pending()) as pending:
        with pytest.raises(ConflictError, match="different spec"):
            store.create_runs([new_run("other"), new_run(key="k", digest="sha256:b")], 2.0, [opening(2.0)] * 2)
        assert not pending.written
        assert store.audit() == []  # rolled back with the write: no row claims a success
        store.create_runs([new_run("other")], 3.0, [opening(3.0)])
        assert pending.written
    assert [(r["target"], r["result"]) for r in store.audit()] == [("other-1", "ok")]


def test_an_audit_row_appended_inside_the_context_does_not_carry_the_joined_one(store: Store) -> None:
    with joined_audit(_pending()) as pending:
        store.append_audit(dict(ROW) | {"ts": 1.0, "result": "failed", "status": 500})
    assert not pending.written
    assert [r["result"] for r in store.audit()] == ["failed"]


def test_a_joined_row_is_append_only_like_every_audit_row(store: Store) -> None:
    with joined_audit(_pending()):
        store.create_runs([new_run()], 1.0, [opening(1.0)])
    for statement in ("UPDATE audit SET who = 'nobody'", "DELETE FROM audit"):
        with pytest.raises(DBAPIError, match="append-only"), store._engine.begin() as conn:
            conn.execute(text(statement))
    assert [r["who"] for r in store.audit()] == ["ada"]


def test_a_joined_row_with_a_field_the_audit_table_lacks_is_refused_before_any_write() -> None:
    with (
        pytest.raises(ValueError, match=r"no field \['colour'\]"),
        joined_audit(JoinedAudit(row=ROW | {"colour": "red"}, now=lambda: 0.0)),
    ):
        pass
