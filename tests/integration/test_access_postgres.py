"""Tokens and the audit log on PostgreSQL (migration 0009): a token authenticates, the audit log is append-only."""

from __future__ import annotations

from pathlib import Path

import pytest
import sqlalchemy
from sqlalchemy.exc import DBAPIError

from crossrail.client import Client
from crossrail.control.access import authenticate
from crossrail.core import ManualClock
from crossrail.errors import UnauthenticatedError

pytestmark = pytest.mark.postgres


@pytest.mark.slow
def test_tokens_and_an_append_only_audit_log_on_postgresql(
    checkout: Path, postgres_url: str, monkeypatch: pytest.MonkeyPatch, clock: ManualClock
) -> None:
    monkeypatch.setenv("CROSSRAIL_STORE_URL", postgres_url)
    monkeypatch.setenv("CROSSRAIL_USER", "someone-else")
    with Client(cwd=checkout, clock=clock) as c:
        store = c.service.store
        made = c.token_create(team="alignment", role="submitter", user="grace", expires="1h")
        actor = authenticate(store, made["token"], origin="10.0.0.7:5000", now=clock.now())
        assert (actor.who, actor.team, actor.role.value) == ("grace", "alignment", "submitter")
        c.token_revoke(made["id"])
        with pytest.raises(UnauthenticatedError, match="revoked"):
            authenticate(store, made["token"], origin="10.0.0.7:5000", now=clock.now())
        rows = c.audit()["entries"]
        assert [(r["action"], r["result"], r["claimed"]) for r in rows] == [
            ("token_create", "ok", "someone-else"),
            ("token_revoke", "ok", "someone-else"),
        ]
    engine = sqlalchemy.create_engine(postgres_url)
    try:
        for statement in ("UPDATE audit SET who = 'nobody'", "DELETE FROM audit", "TRUNCATE audit"):
            with pytest.raises(DBAPIError, match="append-only"), engine.begin() as conn:
                conn.execute(sqlalchemy.text(statement))
        with engine.connect() as conn:
            assert conn.execute(sqlalchemy.text("SELECT count(*) FROM audit")).scalar_one() == 2
    finally:
        engine.dispose()
