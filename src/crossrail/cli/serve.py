"""`crossrail serve`: the HTTP API (and, with --agent, one agent) over a workspace (docs/api.md)."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Annotated

import typer

from crossrail.cli.common import Home, guard
from crossrail.errors import UsageError

DEFAULT_PORT = 8470


def serve_command(
    host: Annotated[str, typer.Option("--host", help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", min=0, max=65535, help="Port to listen on.")] = DEFAULT_PORT,
    agent: Annotated[
        bool, typer.Option("--agent", help="Also run one reconcile agent in this process (a single machine).")
    ] = False,
    home: Home = None,
) -> None:
    """Serve the workspace's JSON API under /v1 (OpenAPI at /v1/openapi.json); agents run apart unless --agent."""

    def go() -> None:
        try:
            import uvicorn

            from crossrail.api import create_app
        except ImportError as exc:
            raise UsageError(
                f"serve needs the api extra ({exc.name} is missing): pip install 'crossrail[api]'"
            ) from None
        app = create_app(Path(home) if home else None, agent=agent)
        typer.echo(f"crossrail serve on http://{host}:{port}/v1 (Ctrl-C stops it)", err=True)
        server = uvicorn.Server(uvicorn.Config(app, host=host, port=port, ws="none", log_level="warning"))
        app.state.stop_requested = lambda: server.should_exit  # Ctrl-C ends the streams following events or logs
        with contextlib.suppress(KeyboardInterrupt):  # uvicorn stops on Ctrl-C, then raises it again
            server.run()

    guard(go)
