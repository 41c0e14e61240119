"""Where runtime files live: local paths and `file://` URIs on disk, other schemes through fsspec."""

from __future__ import annotations

import os
import stat
from typing import Any
from urllib.parse import quote, unquote

from crossrail.errors import CrossrailError


def local_path(uri: str) -> str | None:
    """The filesystem path `uri` names, or None when it is on another scheme (`s3://`, `memory://`, ...)."""
    if uri.startswith("file://"):
        rest = uri.removeprefix("file://")
        if rest.startswith("localhost/"):
            rest = rest.removeprefix("localhost")
        return unquote(rest)
    if "://" in uri:
        return None
    return uri


def file_uri(path: str) -> str:
    """`file://` URI of a local path, made absolute; the inverse of local_path."""
    return "file://" + quote(os.path.abspath(path))


def filesystem(uri: str) -> tuple[Any, str]:
    """The fsspec filesystem of a remote `uri` and the path within it."""
    import fsspec.core

    try:
        fs, path = fsspec.core.url_to_fs(uri)
    except (ImportError, ValueError) as exc:
        raise CrossrailError(f"{uri}: fsspec cannot open it ({exc}); install the fsspec backend it names") from exc
    return fs, str(path)


def read_bytes(uri: str) -> bytes:
    """The whole content of a file at a local path or any fsspec URI; CrossrailError says what failed."""
    try:
        path = local_path(uri)
        if path is not None:
            # Opened without waiting (a FIFO would block the open) and refused unless regular (a device never ends).
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
            with open(fd, "rb") as f:
                if not stat.S_ISREG(os.fstat(fd).st_mode):
                    raise CrossrailError(f"cannot read {uri}: it is not a regular file; point it at one")
                return f.read()
        fs, rpath = filesystem(uri)
        if not rpath.strip("/"):
            raise CrossrailError(f"cannot read {uri}: it names no bucket or path")
        return bytes(fs.cat_file(rpath))
    except CrossrailError:
        raise
    except Exception as exc:  # each fsspec backend fails its own way (botocore, google-auth, aiohttp, ...)
        raise CrossrailError(f"cannot read {uri}: {type(exc).__name__}: {exc}") from exc


def read_text(uri: str) -> str:
    """The content of a UTF-8 text file at a local path or any fsspec URI (a config, a dataset)."""
    data = read_bytes(uri)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CrossrailError(f"{uri} is not UTF-8 text ({exc}); pass a text file") from exc


def fsync_dir(path: str) -> None:
    """Make a directory's entries (a create, a rename) durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
