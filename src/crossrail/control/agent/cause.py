"""The cause line of a failed attempt, from its log: what `status` and `show` say beside the exit code."""

from __future__ import annotations

import re

_EXCEPTION = re.compile(r"^(?:[\w.]+\.)?\w*(?:Error|Exception|Exit|Interrupt)\b(?::\s*(.+)|$)")
_ERRORISH = re.compile(r"\b(error|failed|cannot|could not|not a|no such|refus\w*|invalid|missing)\b", re.IGNORECASE)
_PROGRESS = re.compile(r"^step \d+/\d+")
MAX_CHARS = 300


def cause_line(log: str) -> str | None:
    """The last exception line of `log` (`ValueError: ...`, the message of it), else its last line that reads as
    an error, else None; at most MAX_CHARS characters."""
    lines = [line.strip() for line in log.splitlines() if line.strip() and not _PROGRESS.match(line.strip())]
    for line in reversed(lines):
        if _EXCEPTION.match(line):
            return _short(line)
    for line in reversed(lines):
        if _ERRORISH.search(line) and not line.startswith(("Traceback", "File ")):
            return _short(line)
    return None


def _short(line: str) -> str:
    return line if len(line) <= MAX_CHARS else line[: MAX_CHARS - 1] + "…"
