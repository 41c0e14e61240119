"""What every command shares: the options `--home`, `--json`, `--server`, the client they open, one error wrapper."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from crossrail.errors import CrossrailError, SpecError, UsageError

if TYPE_CHECKING:
    from crossrail.client import Client

Home = Annotated[
    Path | None,
    typer.Option("--home", envvar="CROSSRAIL_HOME", help="Workspace directory (default: nearest .crossrail/ above)."),
]
Json = Annotated[bool, typer.Option("--json", help="Print the crossrail/v1 JSON object instead of tables.")]
Server = Annotated[
    str | None,
    typer.Option(
        "--server",
        help="Talk to a `crossrail serve` at this URL instead of the workspace (default: $CROSSRAIL_SERVER).",
        show_default=False,
    ),
]
Policy = Annotated[
    Path | None, typer.Option("--policy", help="Placement policy to lint against (default: the workspace's).")
]
Interval = Annotated[float, typer.Option("--interval", min=0.05, help="Seconds between reads when following.")]
RunRef = Annotated[str, typer.Argument(help="Run id, run uid, or an experiment name for its latest run.")]


def client(home: Path | None, server: str | None = None, policy: Path | None = None) -> Client:
    """The client the options name: a server when `--server` (or CROSSRAIL_SERVER) is given, else the workspace."""
    from crossrail.client import Client

    return Client(home, policy=policy, server=server)


def local_client(home: Path | None) -> Client:
    """The workspace of this machine, whatever CROSSRAIL_SERVER says (an agent runs beside its store)."""
    from crossrail.client import Client

    return Client.local(home)


def guard(fn: Callable[[], None]) -> None:
    """Call `fn`, turning crossrail errors into their message and exit code (never a traceback).

    A SpecError prints every problem, one line each; any other error prints `crossrail: <message>`.
    """
    try:
        fn()
    except CrossrailError as exc:
        typer.echo(exc.render() if isinstance(exc, SpecError) else f"crossrail: {exc}", err=True)
        raise typer.Exit(exc.exit_code) from None


def refuse_json(as_json: bool, flag: str) -> None:
    """`flag` draws for a terminal: refuse `--json` beside it rather than mix the two."""
    if as_json:
        raise UsageError(f"{flag} redraws tables for a terminal; leave out --json (or drop {flag} for one JSON object)")
