"""Resolving what an experiment leaves open at submit: code commit, dataset version, config and image digests."""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from crossrail.errors import Problem

_DIGEST = re.compile(r"@(sha256:[0-9a-f]{64})$")
CONFIG_MAX_BYTES = 16 * 1024 * 1024
_HASH_CHUNK = 1024 * 1024


@dataclass
class Resolution:
    """What submit resolved, and what it could not (problems) or only partly (warnings)."""

    code_commit: str | None = None
    dataset_version: str | None = None
    config_digest: str | None = None
    image_digest: str | None = None
    problems: list[Problem] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def image_digest(image: str) -> str | None:
    m = _DIGEST.search(image)
    return m.group(1) if m else None


def git_head(cwd: Path) -> tuple[str | None, bool, str | None]:
    """(commit, dirty, error) of the git checkout containing `cwd`; `error` completes "<cwd> ..." for a message."""
    try:
        head = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True, timeout=10, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, False, f"git could not be run ({exc})"
    if head.returncode != 0:
        inside = subprocess.run(
            ["git", "rev-parse", "--git-dir"], cwd=cwd, capture_output=True, text=True, timeout=10, check=False
        )
        if inside.returncode == 0:
            return None, False, "is a git checkout with no commit yet"
        return None, False, "is not a git checkout"
    status = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=no"],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=10,
        check=False,
    )
    return head.stdout.strip(), bool(status.stdout.strip()), None


def dataset_version(uri: str) -> str:
    """A version for the data at `uri`: object generation or etag, else a digest of local content.

    Raises OSError (missing, unreadable) or ImportError/ValueError (no filesystem for the scheme).
    """
    import fsspec

    fs, path = fsspec.core.url_to_fs(uri)
    info: dict[str, Any] = fs.info(path)
    for key in ("generation", "version_id", "VersionId", "ETag", "etag"):
        if info.get(key):
            return f"{key.lower()}:{str(info[key]).strip(chr(34))}"
    if info.get("type") == "directory":
        return "listing-sha256:" + _listing_digest(fs, path)
    return "sha256:" + _content_digest(fs, path)


def config_digest(uri: str) -> str:
    import fsspec

    fs, path = fsspec.core.url_to_fs(uri)
    size = fs.info(path).get("size") or 0
    if size > CONFIG_MAX_BYTES:
        raise ValueError(f"config is {size} bytes; crossrail reads configs up to {CONFIG_MAX_BYTES} bytes")
    return "sha256:" + _content_digest(fs, path)


def _content_digest(fs: Any, path: str) -> str:
    h = hashlib.sha256()
    with fs.open(path, "rb") as f:
        while chunk := f.read(_HASH_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def _listing_digest(fs: Any, path: str) -> str:
    """Names, sizes and modification times of every file below `path` (content is not read)."""
    h = hashlib.sha256()
    for name, info in sorted(fs.find(path, detail=True).items()):
        rel = os.path.relpath(name, path)
        h.update(f"{rel}\0{info.get('size')}\0{info.get('mtime') or info.get('LastModified') or ''}\n".encode())
    return h.hexdigest()
