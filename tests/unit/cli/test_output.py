"""How tables print: cut to a terminal's width there, whole when piped or with --wide."""

from __future__ import annotations

import io

from rich.table import Table

from crossrail.cli import output

TOKEN_ID = "b75bd0d46e1f4a2c9d3e"


def _printed(*, terminal: bool, wide: bool) -> str:
    shown = output._Console(file=io.StringIO(), width=30, force_terminal=terminal, color_system=None)
    shown.wide = wide
    table = Table(title="tokens")
    for col in ("id", "team", "role"):
        table.add_column(col)
    table.add_row(TOKEN_ID, "foundation", "viewer")
    shown.print(table)
    assert isinstance(shown.file, io.StringIO)
    return shown.file.getvalue()


def test_a_table_is_cut_on_a_narrow_terminal_and_whole_with_wide_or_when_piped() -> None:
    assert TOKEN_ID not in _printed(terminal=True, wide=False)
    assert TOKEN_ID in _printed(terminal=True, wide=True)
    assert TOKEN_ID in _printed(terminal=False, wide=False)


def test_wide_is_taken_from_anywhere_before_a_double_dash() -> None:
    before = output.console.wide
    try:
        assert output.take_wide(["token", "list", "--wide"]) == ["token", "list"]
        assert output.console.wide
        assert output.take_wide(["logs", "--", "--wide"]) == ["logs", "--", "--wide"]
    finally:
        output.console.wide = output.err.wide = before
