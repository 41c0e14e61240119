"""GET /v1/health lists as standbys only agents whose heartbeat has not expired: a killed agent (which never records
its stop) drops out within HEARTBEAT_EXPIRY_S, not after the 30 s `status` allows before calling no agent alive."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx
from fastapi import FastAPI

from crossrail.api import create_app
from crossrail.api.app import HEARTBEAT_EXPIRY_S
from crossrail.client import Client
from crossrail.control.agent.leader import Leadership, LeaseConfig
from crossrail.core import ManualClock


def health(app: FastAPI) -> dict[str, Any]:
    async def get() -> httpx.Response:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://testserver") as client:
            return await client.get("/v1/health")

    resp = asyncio.run(get())
    assert resp.status_code == 200, resp.text
    agents: dict[str, Any] = resp.json()["agents"]
    return agents


def test_a_standby_whose_heartbeat_expired_is_no_longer_listed_while_the_beating_ones_stay(checkout: Path) -> None:
    home, clock = checkout / ".crossrail", ManualClock()
    app = create_app(home, clock=clock)
    with Client(home, clock=clock) as c:
        store = c.service.store
        leader, live, killed = (
            store.register_agent(host=f"host-{i}", pid=100 + i, workspace=None, now=clock.now()) for i in range(3)
        )
        lead = Leadership(store, clock, leader, "host-0", LeaseConfig())
        assert lead.step()
        assert sorted(s["id"] for s in health(app)["standbys"]) == sorted([live, killed])
        # `killed` stops beating; the leader and `live` beat every 10 s as agents do
        seen = []
        for _ in range(2):
            clock.advance(10)
            lead.step()
            for agent in (leader, live):
                store.agent_heartbeat(agent, clock.now())
            seen.append(sorted(s["id"] for s in health(app)["standbys"]))
        body = health(app)
    assert HEARTBEAT_EXPIRY_S < 20
    assert seen == [sorted([live, killed]), [live]]  # 10 s silent: a beat may be late; 20 s: expired
    assert body["alive"] is True
    assert body["leader"]["id"] == leader
    assert body["standbys"] == [{"id": live, "host": "host-1"}]
