"""Commands registered lazily (cli/lazy.py) are listed in help in their place and run like the others."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated

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


def _coercions() -> typer.Typer:
    """An app with every kind of option a crossrail command has, printing what it was given."""
    demo = typer.Typer(add_completion=False)

    @demo.command()
    def show(
        interval: Annotated[float, typer.Option(min=0.05)] = 2.0,
        count: Annotated[int | None, typer.Option(min=1)] = None,
        home: Annotated[Path | None, typer.Option()] = None,
        name: Annotated[str, typer.Option()] = "all",
        sets: Annotated[list[str] | None, typer.Option("--set")] = None,
        on: Annotated[bool, typer.Option("--on")] = False,
    ) -> None:
        print(repr((interval, count, home, name, sets, on)))

    return demo


def test_options_not_given_are_their_defaults_and_given_ones_are_coerced_and_checked() -> None:
    demo = _coercions()  # crossrail.cli is imported above: its coercion (cli/lazy.py) is in force

    assert runner.invoke(demo, []).output.strip() == repr((2.0, None, None, "all", None, False))
    given = runner.invoke(
        demo, ["--interval", "3", "--count", "2", "--home", "w", "--name", "x", "--set", "a=1", "--on"]
    )
    assert given.exit_code == 0, given.output
    assert given.output.strip() == repr((3.0, 2, Path("w"), "x", ["a=1"], True))
    for args, option in [(["--interval", "0.01"], "--interval"), (["--count", "0"], "--count")]:
        refused = runner.invoke(demo, args)
        assert refused.exit_code == 2, refused.output
        assert option in refused.output
