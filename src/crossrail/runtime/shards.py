"""Tensor files of a checkpoint: safetensors shards split by size, written and read back with their checksums."""

from __future__ import annotations

import json
import math
import mmap
import struct
import threading
from collections.abc import Mapping
from typing import IO, Any

import numpy as np
import numpy.typing as npt

from crossrail.runtime.manifest import (
    DTYPE_CODES,
    MODEL_FILE,
    NUMPY_DTYPES,
    CheckpointError,
    TornCheckpoint,
    checksum,
    digest,
    hasher,
)
from crossrail.runtime.stores import ReadInto

Tensors = dict[str, npt.NDArray[Any]]
Entry = dict[str, Any]
CHUNK_BYTES = 64 << 20  # one write call; keeps object-store uploads in parts
READ_CHUNK_BYTES = 16 << 20  # one read call, as large as dd's blocks in the benchmark
HEADER_MAX = 100 * 1024 * 1024  # the safetensors limit on the JSON header
MAPPED_ARRAY_BYTES = 4 << 20  # from this size numpy would ask for huge pages (see new_array)
_LAYOUT_KEYS = ("dtype", "shape", "offset", "length")
_local = threading.local()


def check_tensors(tensors: Mapping[str, npt.NDArray[Any]]) -> None:
    """CheckpointError unless `tensors` maps names to numpy arrays of dtypes safetensors and numpy share."""
    if not tensors:
        raise CheckpointError("a checkpoint needs at least one tensor")
    bad = [
        n
        for n, a in tensors.items()
        if not isinstance(n, str) or n in {"", "__metadata__"} or not isinstance(a, np.ndarray)
    ]
    if bad:
        raise CheckpointError(f"tensors must map names (not empty, not __metadata__) to numpy arrays; not so for {bad}")
    unsupported = {n: str(a.dtype) for n, a in tensors.items() if a.dtype.newbyteorder("=").name not in DTYPE_CODES}
    if unsupported:
        raise CheckpointError(
            f"cannot write the tensors {unsupported} as safetensors; supported dtypes: {', '.join(DTYPE_CODES)}"
        )


def as_stored(tensors: Mapping[str, npt.NDArray[Any]]) -> Tensors:
    """The tensors as they are stored: C-contiguous little-endian arrays (copies only where they are not)."""
    # ascontiguousarray would turn a 0-d array into 1-d; astype keeps the shape.
    return {name: a.astype(a.dtype.newbyteorder("<"), order="C", copy=False) for name, a in tensors.items()}


def plan(arrays: Mapping[str, npt.NDArray[Any]], shard_bytes: int) -> dict[str, list[str]]:
    """Tensor names by file: in order, a new shard when the next tensor would take one past `shard_bytes`.

    A tensor is never split; one larger than `shard_bytes` has a shard of its own. One shard is
    `model.safetensors`, more are `model-00001-of-0000N.safetensors`, ...
    """
    shards: list[list[str]] = [[]]
    size = 0
    for name, a in arrays.items():
        if shards[-1] and size + a.nbytes > shard_bytes:
            shards.append([])
            size = 0
        shards[-1].append(name)
        size += a.nbytes
    if len(shards) == 1:
        return {MODEL_FILE: shards[0]}
    n = len(shards)
    return {f"model-{i:05d}-of-{n:05d}.safetensors": names for i, names in enumerate(shards, start=1)}


def write_shard(f: IO[bytes], file: str, names: list[str], arrays: Mapping[str, npt.NDArray[Any]]) -> list[Entry]:
    """Write one safetensors file holding `names`; returns their manifest entries."""
    entries: list[Entry] = []
    offset = 0
    for name in names:
        a = arrays[name]
        code = DTYPE_CODES[a.dtype.newbyteorder("=").name]
        entries.append(
            {"name": name, "dtype": code, "shape": list(a.shape), "file": file, "offset": offset, "length": a.nbytes}
        )
        offset += a.nbytes
    header = {
        e["name"]: {"dtype": e["dtype"], "shape": e["shape"], "data_offsets": [e["offset"], e["offset"] + e["length"]]}
        for e in entries
    }
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # the data section starts 8-byte aligned, as safetensors writes it
    _write_all(f, struct.pack("<Q", len(text)) + text)
    for e in entries:
        data = _bytes_of(arrays[e["name"]])
        e["checksum"] = checksum(data)
        for begin in range(0, len(data), CHUNK_BYTES):
            _write_all(f, data[begin : begin + CHUNK_BYTES])
    return entries


def _bytes_of(array: npt.NDArray[Any]) -> memoryview:
    """The raw bytes of a C-contiguous array, without a copy (a 0-d array too)."""
    return memoryview(array.reshape(-1).view(np.uint8))  # type: ignore[arg-type]


def _write_all(f: IO[bytes], data: bytes | memoryview) -> None:
    view = memoryview(data)
    while view:
        written = f.write(view)
        if written is None:  # a non-blocking raw file; a regular file never says so
            raise OSError("the write would block")
        view = view[written:]


def check_file(f: IO[bytes], file: str, entries: list[Entry], size: int) -> int:
    """Check one safetensors file's header and size against its manifest entries; returns where its data starts.

    TornCheckpoint names the file, and the tensor when one is at fault.
    """
    header, start = _read_header(f, file, size)
    listed = {e["name"] for e in entries}
    if listed != header.keys():
        unlisted, lacking = sorted(header.keys() - listed), sorted(listed - header.keys())
        raise TornCheckpoint(
            f"{file} does not hold the manifest's tensors (in the file, not the manifest: {unlisted}; "
            f"in the manifest, not the file: {lacking})"
        )
    for e in entries:
        got = header[e["name"]]
        for key in _LAYOUT_KEYS:
            if got[key] != e[key]:
                raise TornCheckpoint(
                    f"tensor {e['name']}: {file} disagrees with the manifest on its {key} "
                    f"(manifest {e[key]!r}, file {got[key]!r})"
                )
    end = max(e["offset"] + e["length"] for e in entries)
    if start + end != size:
        raise TornCheckpoint(f"{file} is truncated or has extra bytes ({size} bytes; its header makes {start + end})")
    return start


def read_tensor(
    read_into: ReadInto, e: Entry, start: int, *, load: bool, into: npt.NDArray[Any] | None = None
) -> npt.NDArray[Any] | None:
    """Read one tensor of a checked file and verify its checksum; the array when `load`.

    `read_into(offset, view)` fills `view` from that offset of the file and returns how many bytes it read.
    With `into` (an array check_destinations passed), the bytes are read into it and it is returned: straight
    into its memory when it is C-contiguous, else through this thread's scratch buffer, a stretch of rows at
    a time.
    """
    if into is not None and not into.flags.c_contiguous:
        _read_strided(read_into, e, start, into)
        return into
    if into is not None:
        array: npt.NDArray[Any] | None = into
    else:
        array = new_array(e["shape"], numpy_dtype(e)) if load else None
    view = _scratch() if array is None else _bytes_of(array)
    h = hasher(e["checksum"])
    for begin in range(0, e["length"], READ_CHUNK_BYTES):
        size = min(READ_CHUNK_BYTES, e["length"] - begin)
        chunk = view[:size] if array is None else view[begin : begin + size]
        _fill(read_into, e, start + e["offset"] + begin, chunk)
        h.update(chunk)
    _check_digest(e, h)
    return array


def _read_strided(read_into: ReadInto, e: Entry, start: int, into: npt.NDArray[Any]) -> None:
    """Read a tensor into an array that is not C-contiguous (a transposed view): whole rows of its first axis
    into the scratch buffer (one row's own buffer when a row is larger), each copied out once verified."""
    rows = into.shape[0]
    row_bytes = e["length"] // rows
    per = max(1, READ_CHUNK_BYTES // row_bytes)
    buffer = _scratch() if row_bytes <= READ_CHUNK_BYTES else memoryview(bytearray(row_bytes))
    h = hasher(e["checksum"])
    for row in range(0, rows, per):
        n = min(per, rows - row)
        chunk = buffer[: n * row_bytes]
        _fill(read_into, e, start + e["offset"] + row * row_bytes, chunk)
        h.update(chunk)
        into[row : row + n] = np.frombuffer(chunk, into.dtype).reshape(n, *into.shape[1:])
    _check_digest(e, h)


def _fill(read_into: ReadInto, e: Entry, offset: int, chunk: memoryview) -> None:
    if read_into(offset, chunk) != len(chunk):
        raise TornCheckpoint(f"{e['file']} is truncated (tensor {e['name']} ends past the end of the file)")


def check_destinations(entries: list[Entry], into: Mapping[str, Any]) -> dict[str, npt.NDArray[Any]]:
    """The arrays of `into` by tensor name, once each is found fit to restore its tensor in place.

    CheckpointError listing every problem before anything is written: a name the checkpoint does not hold, an
    array of another shape or dtype (byte order included), one that is not a writable numpy array.
    """
    by_name = {e["name"]: e for e in entries}
    problems = []
    for name, array in into.items():
        e = by_name.get(name)
        if e is None:
            problems.append(f"{name}: the checkpoint holds no such tensor")
        elif not isinstance(array, np.ndarray) or not array.flags.writeable:
            bad = "is read-only" if isinstance(array, np.ndarray) else f"is a {type(array).__name__}, not numpy"
            problems.append(f"{name}: the array {bad} (of a torch CPU tensor, pass its .numpy() view)")
        elif list(array.shape) != e["shape"] or array.dtype != numpy_dtype(e):
            problems.append(
                f"{name}: the checkpoint holds {_described(numpy_dtype(e))} {e['shape']}, the array is "
                f"{_described(array.dtype)} {list(array.shape)}"
            )
    if problems:
        listed = "; ".join(problems[:8]) + (f"; and {len(problems) - 8} more" if len(problems) > 8 else "")
        raise CheckpointError(
            f"cannot restore in place: {listed}. Give arrays of the checkpoint's names, shapes and dtypes "
            "(read_manifest lists them), or restore without `into` and convert"
        )
    return dict(into)


def mapped_tensor(region: mmap.mmap, e: Entry, start: int) -> npt.NDArray[Any] | None:
    """One tensor of a checked file as a copy-on-write view of `region` (the whole file, mapped private),
    verified against its checksum: every byte is read from the file once, by the checksum, and not copied.

    None where the tensor cannot be viewed in place (its bytes not aligned to its dtype, or none at all):
    read_tensor reads it instead.
    """
    dtype = numpy_dtype(e)
    begin = start + e["offset"]
    if e["length"] == 0 or begin % dtype.itemsize:
        return None
    if begin + e["length"] > len(region):
        raise TornCheckpoint(f"{e['file']} is truncated (tensor {e['name']} ends past the end of the file)")
    array = np.frombuffer(region, dtype, count=e["length"] // dtype.itemsize, offset=begin).reshape(e["shape"])
    h = hasher(e["checksum"])
    h.update(_bytes_of(array))  # both hashes let go of the GIL: other tensors are read meanwhile
    _check_digest(e, h)
    return array


def numpy_dtype(e: Entry) -> np.dtype[Any]:
    """The numpy dtype of a manifest entry; CheckpointError when numpy has none (bfloat16, float8, ...)."""
    dtype = NUMPY_DTYPES.get(e["dtype"])
    if dtype is None:
        raise CheckpointError(
            f"tensor {e['name']} in {e['file']} is {e['dtype']}, which numpy cannot hold; "
            "read this checkpoint with safetensors' torch or jax loader"
        )
    return dtype


def _described(dtype: np.dtype[Any]) -> str:
    return dtype.name if dtype.isnative or dtype.byteorder == "|" else f"{dtype.name} of the other byte order"


def _check_digest(e: Entry, h: Any) -> None:
    got = digest(e["checksum"], h)
    if got != e["checksum"]:
        raise TornCheckpoint(
            f"tensor {e['name']}: checksum mismatch in {e['file']} (manifest {e['checksum']}, data {got})"
        )


def new_array(shape: list[int], dtype: np.dtype[Any]) -> npt.NDArray[Any]:
    """An uninitialised array for a restored tensor; a large one in its own anonymous mapping.

    numpy asks the kernel for transparent huge pages for every large array (madvise); where the host's memory
    is fragmented, each first touch of such memory then waits for the kernel to compact it: restores measured
    seconds per GB slower that way under load. Plain pages fault in at a steady rate.
    """
    nbytes = math.prod(shape) * dtype.itemsize
    if nbytes < MAPPED_ARRAY_BYTES:
        return np.empty(shape, dtype)
    region = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    return np.frombuffer(region, dtype).reshape(shape)  # the array keeps the mapping; unmapped with it


def _scratch() -> memoryview:
    """This thread's buffer for data that is checked and not kept; reused, so a verify allocates nothing."""
    buffer = getattr(_local, "buffer", None)
    if buffer is None or len(buffer) < READ_CHUNK_BYTES:
        buffer = _local.buffer = memoryview(bytearray(READ_CHUNK_BYTES))
    return buffer


def _read_header(f: IO[bytes], file: str, size: int) -> tuple[dict[str, Entry], int]:
    """The safetensors header as manifest-style layouts by tensor name, and where the data section starts."""
    if size < 8:
        raise TornCheckpoint(f"{file} is truncated ({size} bytes)")
    (length,) = struct.unpack("<Q", _read_exactly(f, file, 8))
    if length > HEADER_MAX or 8 + length > size:
        raise TornCheckpoint(f"{file} is truncated or not safetensors (header of {length} bytes)")
    try:
        header = json.loads(_read_exactly(f, file, length))
        layouts = {}
        for name, h in header.items():
            if name != "__metadata__":
                begin, end = h["data_offsets"]
                layouts[name] = {"dtype": h["dtype"], "shape": list(h["shape"]), "offset": begin, "length": end - begin}
    except (ValueError, AttributeError, KeyError, TypeError) as exc:
        raise TornCheckpoint(f"{file} has an unreadable safetensors header ({exc})") from exc
    return layouts, 8 + length


def _read_exactly(f: IO[bytes], file: str, n: int) -> bytes:
    data = f.read(n)
    if len(data) != n:
        raise TornCheckpoint(f"{file} is truncated ({len(data)} of {n} header bytes)")
    return data
