"""Per-attempt report secrets: what an attempt shows the API when it posts its report records.

Each secret is HMAC-SHA256 of the attempt's name (`run/attempt`) under the workspace's ingest key
(`.crossrail/ingest.key`, 32 random bytes, mode 0600, made on first use). The secrets themselves are
never stored: the server derives the one an attempt must show and compares in constant time, so the
store holds nothing a reader could replay, and one attempt's secret opens no other attempt's channel.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
from pathlib import Path

KEY_FILE = "ingest.key"
KEY_BYTES = 32


def ingest_key(root: Path) -> bytes:
    """The workspace's ingest key, made (atomically, owner-only) the first time it is asked for."""
    path = root / KEY_FILE
    try:
        return path.read_bytes()
    except FileNotFoundError:
        pass
    tmp = root / f".{KEY_FILE}.{os.getpid()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.write(fd, secrets.token_bytes(KEY_BYTES))
        os.fsync(fd)
    finally:
        os.close(fd)
    try:
        os.link(tmp, path)  # the first writer wins; a concurrent one reads the winner's key
    except FileExistsError:
        pass
    finally:
        tmp.unlink()
    return path.read_bytes()


def attempt_secret(root: Path, run: str, attempt: int) -> str:
    """The secret attempt `attempt` of `run` reports with (hex)."""
    return hmac.new(ingest_key(root), f"{run}/{attempt}".encode(), hashlib.sha256).hexdigest()


def secret_matches(root: Path, run: str, attempt: int, shown: str) -> bool:
    # As bytes: compare_digest refuses str with non-ASCII characters, which a header may carry.
    return hmac.compare_digest(attempt_secret(root, run, attempt).encode(), shown.encode("utf-8", "replace"))
