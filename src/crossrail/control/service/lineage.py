"""Resolving what an experiment leaves open at submit: code commit, dataset version, config and image digests."""

from __future__ import annotations

import hashlib
import os
import re
import stat
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from crossrail.errors import InputRefused as InputRefused  # noqa: PLC0414  # re-exported: callers import it here
from crossrail.errors import Problem

_DIGEST = re.compile(r"@(sha256:[0-9a-f]{64})$")


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


@dataclass(frozen=True)
class InputLimits:
    """How much submit reads to digest a config or an unversioned dataset, and for how long.

    A config is read whole up to `config_max_bytes`; a dataset file up to `dataset_max_bytes`; a dataset
    directory is listed (names, sizes, times; no content) up to `dataset_max_files` files. Each digest ends
    within `deadline_s` seconds or is refused.
    """

    deadline_s: float = 20.0
    config_max_bytes: int = 16 * 1024 * 1024
    dataset_max_bytes: int = 4 * 1024**3
    dataset_max_files: int = 10_000


DEFAULT_LIMITS = InputLimits()
CONFIG_MAX_BYTES = DEFAULT_LIMITS.config_max_bytes
SYSTEM_ROOTS = ("/proc", "/sys", "/dev")
_HASH_CHUNK = 1024 * 1024


class _Deadline:
    """A read that must end by a moment; `check()` refuses once it has passed."""

    def __init__(self, uri: str, seconds: float, fix: str) -> None:
        self.uri, self.seconds, self.fix = uri, seconds, fix
        self.ends = time.monotonic() + seconds

    def check(self) -> None:
        if time.monotonic() > self.ends:
            raise InputRefused(f"reading {self.uri} took longer than {self.seconds:g} s", self.fix)


def dataset_version(uri: str, limits: InputLimits = DEFAULT_LIMITS) -> str:
    """A version for the data at `uri`: object generation or etag, else a digest of local content.

    Raises InputRefused (not a regular file or directory, a system path, past the limits), OSError
    (missing, unreadable) or ImportError/ValueError (no filesystem for the scheme).
    """
    import fsspec

    fix = "give spec.dataset.version (any label naming this data, e.g. a date or a release)"
    deadline = _Deadline(uri, limits.deadline_s, fix)
    fs, path = fsspec.core.url_to_fs(uri)
    if _is_local(fs):
        return _local_dataset_version(uri, path, limits, deadline)
    info: dict[str, Any] = fs.info(path)
    for key in ("generation", "version_id", "VersionId", "ETag", "etag"):
        if info.get(key):
            return f"{key.lower()}:{str(info[key]).strip(chr(34))}"
    if info.get("type") == "directory":
        return "listing-sha256:" + _listing_digest(_remote_listing(fs, path, limits, deadline))
    _check_size(uri, int(info.get("size") or 0), limits.dataset_max_bytes, fix)
    with fs.open(path, "rb") as f:
        return "sha256:" + _content_digest(f.read, uri, limits.dataset_max_bytes, deadline)


def config_digest(uri: str, limits: InputLimits = DEFAULT_LIMITS) -> str:
    """The content digest of the config at `uri`; raises as dataset_version does."""
    import fsspec

    fix = "point spec.config at a regular file of at most " + _size(limits.config_max_bytes)
    deadline = _Deadline(uri, limits.deadline_s, fix)
    fs, path = fsspec.core.url_to_fs(uri)
    if _is_local(fs):
        return "sha256:" + _local_content_digest(uri, path, limits.config_max_bytes, deadline, directory_ok=False)[1]
    info: dict[str, Any] = fs.info(path)
    if info.get("type") != "file":
        raise InputRefused(f"{uri} is a {info.get('type') or 'thing of unknown type'}, not a file", fix)
    _check_size(uri, int(info.get("size") or 0), limits.config_max_bytes, fix)
    with fs.open(path, "rb") as f:
        return "sha256:" + _content_digest(f.read, uri, limits.config_max_bytes, deadline)


def _is_local(fs: Any) -> bool:
    protocol = fs.protocol if isinstance(fs.protocol, tuple) else (fs.protocol,)
    return bool({"file", "local"} & set(protocol))


def _local_dataset_version(uri: str, path: str, limits: InputLimits, deadline: _Deadline) -> str:
    kind, digest = _local_content_digest(uri, path, limits.dataset_max_bytes, deadline, directory_ok=True)
    if kind == "directory":
        return "listing-sha256:" + _listing_digest(_local_listing(uri, path, limits, deadline))
    return "sha256:" + digest


def _local_content_digest(
    uri: str, path: str, max_bytes: int, deadline: _Deadline, *, directory_ok: bool
) -> tuple[str, str]:
    """("file", digest) of a local regular file, or ("directory", "") when it is one and `directory_ok`.

    Devices, FIFOs, sockets and anything under /proc, /sys or /dev are refused before they are opened, and
    the open itself never waits (O_NONBLOCK), so a FIFO swapped in after the check cannot hang it either.
    """
    real = os.path.realpath(path)
    for root in SYSTEM_ROOTS:
        if real == root or real.startswith(root + "/"):
            raise InputRefused(
                f"{uri} is under {root}, where devices and kernel state live; crossrail reads none of it", deadline.fix
            )
    mode = os.stat(real).st_mode
    if stat.S_ISDIR(mode) and directory_ok:
        return "directory", ""
    _require_regular(uri, mode, deadline.fix)
    fd = os.open(real, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0))
    try:
        st = os.fstat(fd)
        _require_regular(uri, st.st_mode, deadline.fix)
        _check_size(uri, st.st_size, max_bytes, deadline.fix)
        return "file", _content_digest(lambda n: os.read(fd, n), uri, max_bytes, deadline)
    finally:
        os.close(fd)


def _require_regular(uri: str, mode: int, fix: str) -> None:
    if not stat.S_ISREG(mode):
        raise InputRefused(f"{uri} is {_kind(mode)}, not a regular file", fix)


def _kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISFIFO, "a FIFO (named pipe)"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return name
    return "not a regular file"


def _size(n: int) -> str:
    for unit, name in ((1024**3, "GiB"), (1024**2, "MiB")):
        if n >= unit and n % (unit // 1024) == 0:
            return f"{n / unit:g} {name}"
    return f"{n} bytes"


def _check_size(uri: str, size: int, max_bytes: int, fix: str) -> None:
    if size > max_bytes:
        raise InputRefused(f"{uri} is {size} bytes; crossrail digests at most {_size(max_bytes)} of it", fix)


def _content_digest(read: Callable[[int], bytes], uri: str, max_bytes: int, deadline: _Deadline) -> str:
    """sha256 of what `read` gives, refused past `max_bytes` (a file that grew) or past the deadline."""
    h = hashlib.sha256()
    total = 0
    while chunk := read(_HASH_CHUNK):
        total += len(chunk)
        _check_size(uri, total, max_bytes, deadline.fix)
        h.update(chunk)
        deadline.check()
    return h.hexdigest()


Listing = list[tuple[str, object, object]]


def _too_many(uri: str, limits: InputLimits, fix: str) -> InputRefused:
    return InputRefused(
        f"{uri} holds more than {limits.dataset_max_files} files; crossrail digests the listing of at most "
        f"{limits.dataset_max_files}",
        fix,
    )


def _local_listing(uri: str, path: str, limits: InputLimits, deadline: _Deadline) -> Listing:
    """(relative name, size, mtime) of every file below `path`; symbolic links to directories are not followed."""
    found: Listing = []
    stack = [path]
    while stack:
        top = stack.pop()
        with os.scandir(top) as entries:
            for entry in entries:
                deadline.check()
                if entry.is_dir(follow_symlinks=False):
                    stack.append(entry.path)
                    continue
                try:
                    st = entry.stat()  # a link's target (stat opens nothing, so a FIFO there cannot block it)
                except OSError:
                    st = entry.stat(follow_symlinks=False)  # a dangling link
                found.append((os.path.relpath(entry.path, path), st.st_size, st.st_mtime))
                if len(found) > limits.dataset_max_files:
                    raise _too_many(uri, limits, deadline.fix)
    return found


def _remote_listing(fs: Any, path: str, limits: InputLimits, deadline: _Deadline) -> Listing:
    found: Listing = []
    for top, _dirs, files in fs.walk(path, detail=True):
        deadline.check()
        for name, info in files.items():
            rel = os.path.relpath(f"{str(top).rstrip('/')}/{name}", path)
            found.append((rel, info.get("size"), info.get("mtime") or info.get("LastModified") or ""))
        if len(found) > limits.dataset_max_files:
            raise _too_many(deadline.uri, limits, deadline.fix)
    return found


def _listing_digest(listing: Listing) -> str:
    """Names, sizes and modification times of every file (content is not read)."""
    h = hashlib.sha256()
    for rel, size, mtime in sorted(listing):
        h.update(f"{rel}\0{size}\0{mtime or ''}\n".encode())
    return h.hexdigest()
