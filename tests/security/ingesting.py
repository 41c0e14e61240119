"""What the security tests of the ingest and the API share: one request in process, one admitted attempt."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx
from fastapi import FastAPI

from crossrail.client import Client
from crossrail.control.attempts import new_attempt
from crossrail.core import Event, EventType, ManualClock


def call(app: FastAPI, method: str, url: str, **kw: Any) -> httpx.Response:
    """One request through the ASGI app in process; a failure inside the app is its 500, not an exception here."""

    async def go() -> httpx.Response:
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as client:
            return await client.request(method, url, **kw)

    return asyncio.run(go())


def admitted(home: Path, name: str, report: str, clock: ManualClock) -> str:
    """A run of the workspace's pretraining experiment, admitted as attempt 1 reporting to `report`."""
    with Client(home, clock=clock) as c:
        submitted = c.submit(home / "experiments" / "pretrain-small.yaml", sets=[f"metadata.name={name}"])
        run_id = str(submitted["run"]["id"])
        run = c.service.store.get_run(run_id)
        pool = c.service.fleet.pools[0]
        att = new_attempt(run, 1, pool, run.chips, report=report.format(run=run_id), now=clock.now())
        assert c.service.store.admit(att, [Event(EventType.ADMITTED, clock.now(), run_id, 1, {"pool": pool.name})])
        return run_id
