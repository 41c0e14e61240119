"""`crossrail serve`: the HTTP API (and, with --agent, one agent) over a workspace (docs/api.md)."""

from __future__ import annotations

import contextlib
import errno
import os
import socket
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
        from crossrail.api.session import is_loopback

        auth = require_auth or not is_loopback(host)
        sock = listening_socket(host, port)  # before anything is opened or printed: a busy port is one line
        with sock:
            app = create_app(Path(home) if home else None, agent=agent, require_auth=auth)
            needs = "tokens required" if auth else "no token needed on loopback"
            bound = sock.getsockname()[1]  # --port 0 picks a free one: print the one picked
            typer.echo(f"crossrail serve on http://{host}:{bound}/v1, {needs} (Ctrl-C stops it)", err=True)
            server = uvicorn.Server(server_config(app, host, bound, forwarded_allow_ips))
            app.state.stop_requested = lambda: server.should_exit  # Ctrl-C ends the streams following events
            with contextlib.suppress(KeyboardInterrupt):  # uvicorn stops on Ctrl-C, then raises it again
                server.run(sockets=[sock])

    guard(go)


def listening_socket(host: str, port: int) -> socket.socket:
    """A socket bound to `host`:`port` (what uvicorn would bind), or a UsageError naming the port and, where
    this machine shows it, the process that holds it."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    except socket.gaierror as exc:
        raise UsageError(f"--host {host!r} is not an address this machine can listen on ({exc.strerror})") from None
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn does: a restart reuses the port
    try:
        sock.bind(address)
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            held = port_holder(port)
            by = f" by {held}" if held else ""
            raise UsageError(
                f"port {port} on {host} is in use{by}; stop it or pass another --port (e.g. --port {port + 1})"
            ) from None
        raise UsageError(f"cannot listen on {host}:{port}: {exc.strerror}") from None
    sock.set_inheritable(True)
    return sock


def port_holder(port: int) -> str | None:
    """`pid N (command)` of the process listening on TCP `port`, from /proc (Linux); None where it cannot be
    seen (another user's process, another system)."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError):
            for line in Path(table).read_text().splitlines()[1:]:
                cells = line.split()
                if len(cells) > 9 and cells[3] == "0A" and int(cells[1].rpartition(":")[2], 16) == port:
                    inodes.add(f"socket:[{cells[9]}]")
    if not inodes:
        return None
    for fd_dir in Path("/proc").glob("[0-9]*/fd"):
        with contextlib.suppress(OSError):
            if any(os.readlink(fd) in inodes for fd in fd_dir.iterdir()):
                command = (fd_dir.parent / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                return f"pid {fd_dir.parent.name} ({command.strip()[:120]})"
    return None
