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
