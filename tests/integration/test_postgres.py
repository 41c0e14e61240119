"""The whole submit path on PostgreSQL, selected by CROSSRAIL_STORE_URL."""

from __future__ import annotations

from pathlib import Path

import pytest

from crossrail.client import Client
from crossrail.core import ManualClock

pytestmark = pytest.mark.postgres


def test_submit_show_and_cancel_on_postgresql(
    checkout: Path, postgres_url: str, monkeypatch: pytest.MonkeyPatch, clock: ManualClock
) -> None:
    monkeypatch.setenv("CROSSRAIL_STORE_URL", postgres_url)
    exp = checkout / ".crossrail" / "experiments" / "eval-smoke.yaml"
    with Client(cwd=checkout, clock=clock) as c:
        assert c.service.store.url.startswith("postgresql+psycopg://")
        first = c.submit(exp, idempotency_key="pg", sets=["spec.resources.chips=2"])
        again = c.submit(exp, idempotency_key="pg", sets=["spec.resources.chips=2"])
        assert (first["created"], again["created"]) == (True, False)
        assert c.show("eval-smoke")["spec"]["spec"]["resources"]["chips"] == 2
        c.cancel("eval-smoke")
        assert [e["type"] for e in c.events("eval-smoke")["events"]] == ["submitted", "queued", "cancelled"]
    assert not (checkout / ".crossrail" / "state.db").exists()  # nothing went to the SQLite default


def test_store_check_uses_amcheck_where_it_is_installed_and_backup_points_at_pg_dump(
    checkout: Path, postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sqlalchemy

    from crossrail.control.ops import storeops
    from crossrail.control.ops.workspace import find
    from crossrail.errors import StoreError

    monkeypatch.setenv("CROSSRAIL_STORE_URL", postgres_url)
    ws = find(cwd=checkout)
    first = storeops.check(ws)
    assert first["integrity"]["checked"] is False
    assert "CREATE EXTENSION amcheck" in first["integrity"]["note"]
    assert first["events"]["problems"] == []
    engine = sqlalchemy.create_engine(postgres_url, isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        conn.exec_driver_sql("CREATE EXTENSION amcheck")
    engine.dispose()
    second = storeops.check(ws)
    assert second["integrity"] == {"checked": True, "problems": [], "note": None}
    assert second["ok"] is True
    with pytest.raises(StoreError, match="pg_dump --format=custom"):
        storeops.backup(ws, checkout / "b.db")
    with pytest.raises(StoreError, match="pg_restore"):
        storeops.restore(ws, checkout / "b.db", ManualClock())
