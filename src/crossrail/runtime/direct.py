"""Reading a file's bytes straight from the disk into the caller's memory (O_DIRECT), when the page cache lacks them.

A cold restore read through the page cache costs, per byte, a page-cache page to allocate and a copy out of
it into the array; on a small machine that CPU time, not the disk, is what a restore waits for. A direct read
lets the disk write into the array itself. It needs the memory address, the file offset and the length to be
multiples of the block size, so only the aligned middle of a range is read that way (arrays are placed so
that their address and their file offset agree modulo ALIGN; see shards.new_array). Bytes the page cache
already holds (a checkpoint just written or just verified) are read from it: a direct read would fetch them
from the disk again.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import mmap
import os
from typing import Any

import numpy as np

ALIGN = 4096  # a multiple of every block size O_DIRECT asks alignment to
MIN_DIRECT_BYTES = 1 << 20  # below this a direct read saves less than it costs
O_DIRECT: int | None = getattr(os, "O_DIRECT", None)
_UNSUPPORTED = (errno.EINVAL, errno.EOPNOTSUPP, errno.ENOTSUP)


def address(view: memoryview) -> int:
    """The memory address of the first byte of `view`."""
    return int(np.frombuffer(view, np.uint8).__array_interface__["data"][0])


def aligned_middle(offset: int, view: memoryview) -> tuple[int, int] | None:
    """(begin, end) within `view` of the part a direct read may fill, or None when there is none worth it."""
    if (address(view) - offset) % ALIGN:
        return None
    begin = -offset % ALIGN
    end = len(view) - (offset + len(view)) % ALIGN
    return (begin, end) if end - begin >= MIN_DIRECT_BYTES else None


class DirectFile:
    """A second descriptor of a file opened for direct reads; `usable` turns False where the filesystem refuses."""

    def __init__(self, path: str) -> None:
        self.fd: int | None = None
        if O_DIRECT is not None:
            try:
                self.fd = os.open(path, os.O_RDONLY | O_DIRECT)
            except OSError as exc:
                if exc.errno not in _UNSUPPORTED:
                    raise

    @property
    def usable(self) -> bool:
        return self.fd is not None

    def read_into(self, offset: int, view: memoryview) -> int:
        """Fill the aligned `view` from the aligned `offset`; how many bytes were read (fewer at the end of the file).

        -1 when the filesystem refuses direct reads after all (the descriptor is then closed and unusable): the
        caller reads the whole range through the page cache instead.
        """
        assert self.fd is not None
        done = 0
        try:
            while done < len(view):
                n = os.preadv(self.fd, [view[done:]], offset + done)
                if n <= 0 or n % ALIGN:  # the end of the file: the caller reads what is left buffered
                    return done + max(n, 0)
                done += n
        except OSError as exc:
            if exc.errno not in _UNSUPPORTED:
                raise
            self.close()
            return -1
        return done

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def cached(fd: int, offset: int, length: int) -> bool:
    """Whether the page cache holds every page of the file range (mincore on a mapping of it); False if unknown."""
    if _mincore is None or length <= 0:
        return False
    start = offset - offset % mmap.ALLOCATIONGRANULARITY
    span = offset + length - start
    try:
        region = mmap.mmap(fd, span, mmap.MAP_SHARED, mmap.PROT_READ, offset=start)
    except (OSError, ValueError):
        return False
    try:
        pages = -(-span // mmap.PAGESIZE)
        vec = (ctypes.c_ubyte * pages)()
        base = np.frombuffer(region, np.uint8)
        try:
            failed = _mincore(ctypes.c_void_p(base.__array_interface__["data"][0]), ctypes.c_size_t(span), vec)
        finally:
            del base
        first = (offset - start) // mmap.PAGESIZE
        return failed == 0 and bool((np.frombuffer(bytes(vec), np.uint8)[first:] & 1).all())
    finally:
        region.close()


def _load_mincore() -> Any:
    name = ctypes.util.find_library("c")
    if name is None or not hasattr(os, "O_DIRECT"):
        return None
    try:
        fn = ctypes.CDLL(name, use_errno=True).mincore
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_ubyte)]
    fn.restype = ctypes.c_int
    return fn


_mincore = _load_mincore()
