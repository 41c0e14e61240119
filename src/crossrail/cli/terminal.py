"""The rich console the command prints tables and lines on, loaded on first use (output.console, output.err): a
command that prints only JSON never loads rich."""

from __future__ import annotations

from typing import Any

from rich.console import Console as RichConsole
from rich.measure import Measurement
from rich.table import Table


class Console(RichConsole):
    """A rich console whose tables are never cut: printed to anything but a terminal, or with `--wide`, a
    table is as wide as its widest row needs (full ids a script can read back), whatever the width."""

    wide = False

    def print(self, *objects: Any, **kwargs: Any) -> None:
        tables = [o for o in objects if isinstance(o, Table)]
        if not tables or not (self.wide or not self.is_terminal):
            super().print(*objects, **kwargs)
            return
        roomy = self.options.update(width=1_000_000)
        needed = max(Measurement.get(self, roomy, t).maximum for t in tables)
        before = self.width
        self.width = max(before, needed)
        try:
            super().print(*objects, **kwargs)
        finally:
            self.width = before
