"""Requests that name more than the store's columns hold, or a NUL, on PostgreSQL: answered and audited, never
a 500.

SQLite keeps a string of any length in a `VARCHAR(n)`, and NUL; PostgreSQL refuses both, which made the audit
row of the request (written before the request's own validation), and with it the request, fail.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi import FastAPI
from tests.security.test_no_500s import CLOCK, admitted, call, is_error_shape

from crossrail.api import create_app
from crossrail.client import Client
from crossrail.control.agent.secrets import attempt_secret

pytestmark = pytest.mark.postgres


@pytest.fixture
def app(checkout: Path, postgres_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[FastAPI]:
    monkeypatch.setenv("CROSSRAIL_STORE_URL", postgres_url)
    app = create_app(checkout / ".crossrail", clock=CLOCK, require_auth=True)
    yield app
    app.state.client.close()


def test_long_or_nul_names_in_audited_requests_are_answered_on_postgresql(app: FastAPI, checkout: Path) -> None:
    with Client(checkout / ".crossrail", clock=CLOCK) as c:
        admin = {"Authorization": f"Bearer {c.token_create(team='foundation', role='admin', user='pg')['token']}"}
    long = "r" * 300
    cases = [
        ("POST", f"/v1/runs/{long}/cancel", admin, 422),  # a write: audited with its target as asked
        ("POST", f"/v1/fleet/pools/{long}/drain", admin, 422),
        ("POST", "/v1/" + "x" * 300, {}, 401),  # a refusal of an unknown path: audited with the path as action
        ("GET", f"/v1/runs/{long}", {"Authorization": "Bearer " + "t" * 300}, 401),
        ("POST", "/v1/runs/%00/resubmit", admin, 422),  # PostgreSQL refuses NUL in a query or a row
        ("POST", "/v1/runs/a%00b/cancel", {}, 401),
    ]
    for method, url, headers, status in cases:
        answer = call(app, method, url, headers=headers)
        assert is_error_shape(answer, status), (url[:40], answer.status_code, answer.text[:300])
    with Client(checkout / ".crossrail", clock=CLOCK) as c:
        rows = c.audit()["entries"]
    assert len(rows) >= len(cases)


def test_ingest_of_names_longer_than_their_columns_is_answered_on_postgresql(app: FastAPI, checkout: Path) -> None:
    home = checkout / ".crossrail"
    run = admitted(home, "pg-long", "http://testserver/v1/ingest/{run}/1", CLOCK)
    auth = {"Authorization": f"Bearer {attempt_secret(home, run, 1)}"}
    envelope = {"v": 1, "ts": CLOCK.now(), "run": run, "attempt": 1}
    records = [
        envelope | {"seq": 1, "type": "metric", "name": "m" * 300, "value": 1.0, "step": 1},
        envelope | {"seq": 2, "type": "event", "name": "e" * 300, "data": {}},
        envelope | {"seq": 3, "type": "metric", "name": "loss", "value": 2.0, "step": 2},
    ]
    batch = {"incarnation": int(CLOCK.now() * 1000), "records": records}
    answer = call(app, "POST", f"/v1/ingest/{run}/1", headers=auth, json=batch)
    assert answer.status_code == 200, answer.text  # the long metric name is an `invalid` record, the rest stored
    with Client(home, clock=CLOCK) as c:
        assert [s["name"] for s in c.service.store.metric_samples(run)] == ["loss"]
        invalid = [e for e in c.service.store.events(run=run) if e.data.get("name") == "invalid"]
        assert len(invalid) == 1
