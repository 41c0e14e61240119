"""`crossrail serve`: the HTTP API (and, with --agent, one agent) over a workspace (docs/api.md)."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from crossrail.cli.common import Home, guard
from crossrail.errors import UsageError

if TYPE_CHECKING:
    import uvicorn

DEFAULT_PORT = 8470


def server_config(app: Any, host: str, port: int, forwarded_allow_ips: str | None = None) -> uvicorn.Config:
    """uvicorn's settings for `app`. Proxy headers (X-Forwarded-For, X-Forwarded-Proto) are believed only from
    the addresses `forwarded_allow_ips` names (comma-separated IPs or networks, `*` for any); by default from
    none, so a request's audited origin is the peer that connected (uvicorn alone would believe loopback)."""
    import uvicorn

    trusted = [ip.strip() for ip in (forwarded_allow_ips or "").split(",") if ip.strip()]
    return uvicorn.Config(
        app,
        host=host,
        port=port,
        ws="none",
        log_level="warning",
        proxy_headers=bool(trusted),
        forwarded_allow_ips=trusted or [],
    )


def serve_command(  # noqa: PLR0917 (a typer command takes each option as a parameter)
    host: Annotated[str, typer.Option("--host", help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", min=0, max=65535, help="Port to listen on.")] = DEFAULT_PORT,
    agent: Annotated[
        bool, typer.Option("--agent", help="Also run one reconcile agent in this process (a single machine).")
    ] = False,
    require_auth: Annotated[
        bool,
        typer.Option("--require-auth", help="Require a bearer token on loopback too (always beyond loopback)."),
    ] = False,
    forwarded_allow_ips: Annotated[
        str | None,
        typer.Option(
            "--forwarded-allow-ips",
            help="Proxies whose X-Forwarded-For/-Proto headers are believed (comma-separated IPs or networks, "
            "'*' for any); none by default.",
            show_default=False,
        ),
    ] = None,
    home: Home = None,
) -> None:
    """Serve the workspace's JSON API under /v1 (OpenAPI at /v1/openapi.json); agents run apart unless --agent.

    Listening beyond loopback, every request needs a token (`crossrail token create`); docs/auth.md."""

    def go() -> None:
        try:
            import uvicorn

            from crossrail.api import create_app
        except ImportError as exc:
            raise UsageError(
                f"serve needs the api extra ({exc.name} is missing): pip install 'crossrail[api]'"
            ) from None
        from crossrail.api.auth import is_loopback

        auth = require_auth or not is_loopback(host)
        app = create_app(Path(home) if home else None, agent=agent, require_auth=auth)
        needs = "tokens required" if auth else "no token needed on loopback"
        typer.echo(f"crossrail serve on http://{host}:{port}/v1, {needs} (Ctrl-C stops it)", err=True)
        server = uvicorn.Server(server_config(app, host, port, forwarded_allow_ips))
        app.state.stop_requested = lambda: server.should_exit  # Ctrl-C ends the streams following events or logs
        with contextlib.suppress(KeyboardInterrupt):  # uvicorn stops on Ctrl-C, then raises it again
            server.run()

    guard(go)
