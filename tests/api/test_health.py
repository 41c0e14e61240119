"""GET /v1/health (open to probes): on a shared PostgreSQL store which agent leads and which stand by."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from crossrail.control.agent.leader import Leadership, LeaseConfig
from crossrail.core import SystemClock
from crossrail.store import Store

from .conftest import serving_home

pytestmark = pytest.mark.postgres


@pytest.mark.slow
def test_health_names_the_leader_and_the_standbys_by_id_and_host_only(
    checkout: Path, postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CROSSRAIL_STORE_URL", postgres_url)
    clock = SystemClock()  # the server judges liveness on its own clock
    stores = [Store.open(postgres_url) for _ in range(2)]
    ids = [
        s.register_agent(host=f"host-{i}", pid=100 + i, workspace=None, now=clock.now()) for i, s in enumerate(stores)
    ]
    assert Leadership(stores[0], clock, ids[0], "host-0", LeaseConfig()).step()
    with serving_home(checkout / ".crossrail") as url:
        body = httpx.get(f"{url}/v1/health", timeout=10).json()
    assert body["ok"] is True
    assert body["agents"] == {
        "alive": True,
        "term": 1,
        "leader": {"id": ids[0], "host": "host-0", "term": 1},
        "standbys": [{"id": ids[1], "host": "host-1"}],
    }
    for s in stores:
        s.close()
