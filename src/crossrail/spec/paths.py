"""Key paths inside a document, as tuples and as the text people read (`spec.command[0]`)."""

from __future__ import annotations

import re

Path = tuple[str | int, ...]

_PLAIN_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*")


def format_path(path: Path) -> str:
    """`('spec', 'command', 0)` -> `spec.command[0]`; keys with dots or slashes are quoted."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        elif _PLAIN_KEY.fullmatch(part):
            out += f".{part}" if out else part
        else:
            out += f"[{part!r}]"
    return out
