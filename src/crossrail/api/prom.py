"""`GET /metrics`: the workspace's Prometheus metrics (names, labels and their Kueue counterparts:
docs/kubernetes.md#prometheus)."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterable
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from fastapi import APIRouter, FastAPI, Request, Response

from crossrail.client import Client
from crossrail.core.extras import require

router = APIRouter()
_lock = threading.Lock()


@router.get("/metrics", include_in_schema=False)
def metrics(request: Request) -> Response:
    require("prometheus_client", extra="api", needed_for="/metrics")
    from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

    return Response(generate_latest(_registry(request.app)), media_type=CONTENT_TYPE_LATEST)


def _registry(app: FastAPI) -> Any:
    """The app's one registry: its collector keeps its place in the event log from scrape to scrape."""
    with _lock:
        registry = getattr(app.state, "prometheus_registry", None)
        if registry is None:
            from crossrail.control.reports.prometheus import registry_for

            client = app.state.client
            registry = app.state.prometheus_registry = registry_for(client.service.store, client.clock, client.fleet)
        return registry


# --- `crossrail agent --metrics-port`: the same metrics from the agent's process, under the same rule --------


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _Quiet(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        """No line per scrape on the agent's console."""


def serve_metrics(client: Client, host: str, port: int, *, require_auth: bool = False) -> WSGIServer:
    """Serve `client`'s workspace metrics at http://host:port/metrics from a daemon thread; the server, to
    `shutdown()` when done. The API's rule and check (api/middleware.py): beyond loopback, or with `require_auth`,
    a scrape needs a bearer token of a role that may read; a refusal is answered 401/403 and audited.
    `AGENT_HEALTH` is open to probes."""
    require("prometheus_client", extra="api", needed_for="the agent's metrics port")
    from prometheus_client import make_wsgi_app

    from crossrail.api import errors
    from crossrail.api.middleware import request_actor, request_row
    from crossrail.api.route_access import check_action
    from crossrail.api.session import is_loopback
    from crossrail.control.ops.deploy import AGENT_HEALTH
    from crossrail.control.reports.prometheus import registry_for
    from crossrail.core.access import Action
    from crossrail.errors import ForbiddenError, UnauthenticatedError

    registry = registry_for(client.service.store, client.clock, client.fleet)
    metrics, auth = make_wsgi_app(registry), require_auth or not is_loopback(host)

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        method, path = environ.get("REQUEST_METHOD", "GET"), environ.get("PATH_INFO", "/")
        if path == AGENT_HEALTH:  # the probe's, open as serve's /v1/health is: it says the process answers, no more
            start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", "3")])
            return [b"ok\n"]
        origin = f"{environ.get('REMOTE_ADDR', 'unknown')}:{environ.get('REMOTE_PORT', '')}".rstrip(":")
        header = str(environ.get("HTTP_AUTHORIZATION", ""))
        secret = header[7:].strip() if header.lower().startswith("bearer ") else None
        actor = None
        try:
            actor = request_actor(client, secret, origin, require_auth=auth)
            check_action(actor, Action.READ, method, path)
        except (UnauthenticatedError, ForbiddenError) as exc:
            status = errors.status_of(exc)
            client.service.store.append_audit(
                request_row(client, actor, origin, f"{method} /metrics", {}, status, str(exc))
            )
            body = json.dumps(errors.body(exc, status)).encode()
            headers = [("Content-Type", "application/json"), ("Content-Length", str(len(body)))]
            if status == 401:
                headers.append(("WWW-Authenticate", 'Bearer realm="crossrail"'))
            start_response(f"{status} {'Unauthorized' if status == 401 else 'Forbidden'}", headers)
            return [body]
        return metrics(environ, start_response)  # type: ignore[no-any-return]

    server = make_server(host, port, app, server_class=_Server, handler_class=_Quiet)
    threading.Thread(target=server.serve_forever, name="crossrail-metrics", daemon=True).start()
    return server
