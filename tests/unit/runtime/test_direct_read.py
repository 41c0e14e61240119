"""A cold restore reads large tensors straight from the disk into their arrays, and still refuses damaged bytes."""

from __future__ import annotations

import mmap
import os
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from crossrail.runtime import Checkpointer, TornCheckpoint
from crossrail.runtime.direct import ALIGN, DirectFile, cached
from crossrail.runtime.stores import LocalStore

from .ckpt_builders import assert_bit_identical, step_dir

MiB = 1 << 20


def odd_sized_state() -> dict[str, npt.NDArray[Any]]:
    """Large tensors at offsets that are not page-aligned, one of them not even 4-byte aligned in its file."""
    rng = np.random.default_rng(7)
    return {
        "tiny": rng.standard_normal(3, dtype=np.float32),
        "w": rng.standard_normal(5 * MiB // 4 + 3, dtype=np.float32),
        "bytes": rng.integers(0, 255, 5 * MiB + 1, dtype=np.uint8),
        "after_odd": rng.standard_normal(5 * MiB // 4, dtype=np.float32),  # its offset is odd: read buffered
        "w64": rng.standard_normal((1024, 700)),
    }


def evict(directory: Path) -> None:
    """Drop the files' pages from the page cache, as a restore on a fresh machine finds them."""
    for path in directory.iterdir():
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fdatasync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def direct_reads_work(path: Path) -> bool:
    direct = DirectFile(str(path))
    usable = direct.usable
    direct.close()
    fd = os.open(path, os.O_RDONLY)
    try:
        return usable and not cached(fd, 0, os.fstat(fd).st_size)
    finally:
        os.close(fd)


def saved_cold(tmp_path: Path) -> tuple[Checkpointer, Path]:
    ckpt = Checkpointer(str(tmp_path))
    ckpt.save(odd_sized_state(), 1)
    evict(step_dir(tmp_path, 1))
    shard = step_dir(tmp_path, 1) / "model.safetensors"
    if not direct_reads_work(shard):
        pytest.skip("this filesystem does not read directly or keeps the pages cached")
    return ckpt, shard


def test_a_cold_restore_gives_back_every_tensor_bit_for_bit_placed_for_direct_reads(tmp_path: Path) -> None:
    ckpt, shard = saved_cold(tmp_path)
    tensors, _ = Checkpointer(str(tmp_path)).restore(1)
    assert_bit_identical(tensors, odd_sized_state())
    data_start = 8 + int.from_bytes(shard.read_bytes()[:8], "little")
    manifest = ckpt.verify(1)
    for entry in manifest["tensors"]:
        a = tensors[entry["name"]]
        assert a.flags.writeable, entry["name"]
        assert a.flags.aligned, entry["name"]
        if a.nbytes >= 4 * MiB and (data_start + entry["offset"]) % a.dtype.itemsize == 0:
            assert a.ctypes.data % ALIGN == (data_start + entry["offset"]) % ALIGN, entry["name"]


def test_a_cold_restore_leaves_the_page_cache_to_others_and_a_warm_one_reads_from_it(tmp_path: Path) -> None:
    ckpt, shard = saved_cold(tmp_path)
    Checkpointer(str(tmp_path)).restore(1)
    fd = os.open(shard, os.O_RDONLY)
    try:
        assert not cached(fd, 0, os.fstat(fd).st_size)  # read around the cache
        ckpt.verify(1)  # a verify reads through the cache, which the restore after it then uses
        assert cached(fd, 0, os.fstat(fd).st_size)
    finally:
        os.close(fd)
    tensors, _ = Checkpointer(str(tmp_path)).restore(1)
    assert_bit_identical(tensors, odd_sized_state())


@pytest.mark.parametrize("where", [0, 4095, 1 * MiB + 17, 2 * MiB], ids=["first-byte", "page-edge", "mid", "late"])
def test_a_byte_flipped_where_the_disk_reads_directly_is_refused(tmp_path: Path, where: int) -> None:
    _, shard = saved_cold(tmp_path)
    data_start = 8 + int.from_bytes(shard.read_bytes()[:8], "little")
    offset = data_start + 12 + where  # inside "w", after the 12 bytes of "tiny"
    with open(shard, "r+b") as f:
        f.seek(offset)
        byte = f.read(1)[0]
        f.seek(offset)
        f.write(bytes([byte ^ 0x10]))
    evict(shard.parent)
    with pytest.raises(TornCheckpoint, match="tensor w: checksum mismatch"):
        Checkpointer(str(tmp_path)).restore(1)


def test_a_range_read_past_the_end_of_the_file_returns_what_the_file_holds(tmp_path: Path) -> None:
    data = np.random.default_rng(3).integers(0, 255, 3 * MiB + 100, dtype=np.uint8).tobytes()
    (tmp_path / "step-0000000001").mkdir()
    path = tmp_path / "step-0000000001" / "blob"
    path.write_bytes(data)
    evict(path.parent)
    if not direct_reads_work(path):
        pytest.skip("this filesystem does not read directly or keeps the pages cached")
    region = mmap.mmap(-1, 5 * MiB, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    view = memoryview(region)
    try:
        with LocalStore(str(tmp_path)).ranges("step-0000000001", "blob") as read_into:
            assert read_into(ALIGN + 5, view[ALIGN + 5 :]) == len(data) - ALIGN - 5
        assert view[ALIGN + 5 : len(data)] == data[ALIGN + 5 :]
    finally:
        view.release()
        region.close()
