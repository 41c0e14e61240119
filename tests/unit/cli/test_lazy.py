"""Commands registered lazily (cli/lazy.py) are listed in help in their place and run like the others."""

from __future__ import annotations

import re

import typer
from typer.testing import CliRunner

from crossrail.cli import app
from crossrail.cli.app import lazy
from crossrail.cli.lazy import Registry

runner = CliRunner()


def _listed(output: str) -> list[str]:
    return re.findall(r"^│ ([a-z]\S*)\s", output, flags=re.MULTILINE)


def test_help_lists_every_command_eager_and_lazy_once() -> None:
    done = runner.invoke(app, ["--help"], env={"COLUMNS": "200"})

    assert done.exit_code == 0, done.output
    listed = _listed(done.output)
    assert set(lazy.entries) <= set(listed)
    assert {"status", "submit", "fleet"} <= set(listed)
    assert len(listed) == len(set(listed))


def test_lazy_commands_keep_the_order_they_were_registered_in_among_the_apps_own() -> None:
    demo = typer.Typer(add_completion=False)
    registry = Registry(demo)

    @demo.callback()
    def _root() -> None:
        """Root."""

    @demo.command()
    def first() -> None:
        """First."""

    registry.command("second", "crossrail.cli.readiness:readiness_command")

    @demo.command()
    def third() -> None:
        """Third."""

    registry.group("grouped", "crossrail.cli.verdict:policy_app")
    done = runner.invoke(demo, ["--help"], env={"COLUMNS": "200"})

    assert done.exit_code == 0, done.output
    assert _listed(done.output) == ["first", "second", "third", "grouped"]
    assert "Check the placement policy" in done.output  # a lazy group's own help


def test_a_lazy_group_runs_its_subcommands() -> None:
    done = runner.invoke(app, ["policy", "check", "--help"], env={"COLUMNS": "200"})

    assert done.exit_code == 0, done.output
    assert "policy check [OPTIONS]" in done.output
