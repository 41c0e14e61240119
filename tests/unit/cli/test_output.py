"""How tables print: cut to a terminal's width there, whole when piped or with --wide."""

from __future__ import annotations

import io
import json
import time
from collections.abc import Iterator

import pytest
from rich.table import Table

from crossrail.cli import output, render

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


@pytest.fixture
def kolkata(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("TZ", "Asia/Kolkata")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def test_times_read_as_iso_8601_local_with_the_zone_and_json_keeps_seconds_beside_them(
    kolkata: None, capsys: pytest.CaptureFixture[str]
) -> None:
    start = 1_800_000_000.0  # 2027-01-15 08:00:00 UTC
    held = {"name": "h100-1", "pool": "h100", "chips": 8, "start": start, "end": start + 3600, "state": "upcoming"}
    render.reservations({"reservations": [held]})
    shown = capsys.readouterr().out
    assert "2027-01-15T13:30:00+05:30" in shown
    assert "2027-01-15T14:30:00+05:30" in shown
    assert "1800000000" not in shown

    output.emit({"reservations": [held], "run": {"created_at": start, "ended_at": None}}, True, render.reservations)
    printed = json.loads(capsys.readouterr().out)
    (row,) = printed["reservations"]
    assert (row["start"], row["start_iso"]) == (start, "2027-01-15T13:30:00+05:30")
    assert row["end_iso"] == "2027-01-15T14:30:00+05:30"
    assert printed["run"] == {"created_at": start, "created_at_iso": "2027-01-15T13:30:00+05:30", "ended_at": None}
