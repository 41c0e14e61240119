"""The `crossrail` command: a typer app over the client, one module per group of commands (docs/cli.md)."""

from crossrail.cli.app import app, main

__all__ = ["app", "main"]
