"""`GET /metrics`: the workspace's Prometheus metrics (names and labels: docs/metrics.md#prometheus)."""

from __future__ import annotations

import threading
from typing import Any

from fastapi import APIRouter, FastAPI, Request, Response

router = APIRouter()
_lock = threading.Lock()


@router.get("/metrics", include_in_schema=False)
def metrics(request: Request) -> Response:
    from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

    return Response(generate_latest(_registry(request.app)), media_type=CONTENT_TYPE_LATEST)


def _registry(app: FastAPI) -> Any:
    """The app's one registry: its collector keeps its place in the event log from scrape to scrape."""
    with _lock:
        registry = getattr(app.state, "prometheus_registry", None)
        if registry is None:
            from crossrail.control.prometheus import registry_for

            client = app.state.client
            queues = [q.name for q in client.fleet.spec.queues]
            registry = app.state.prometheus_registry = registry_for(client.service.store, client.clock, queues)
        return registry
