"""Reading a crossrail-ckpt/v1 checkpoint: its manifest, then every tensor, verified against its checksum."""

from __future__ import annotations

import contextlib
import mmap
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import numpy as np
import numpy.typing as npt

from crossrail.runtime.manifest import MANIFEST_FILE, MARKER_FILE, CheckpointNotFound, TornCheckpoint, parse_manifest
from crossrail.runtime.shards import (
    Entry,
    Tensors,
    check_destinations,
    check_file,
    mapped_tensor,
    read_tensor,
)
from crossrail.runtime.stores import STEP_DIR, CheckpointStore

DEFAULT_READERS = 4
Restored = tuple[Tensors, dict[str, Any]]


def manifest_in(store: CheckpointStore, name: str) -> dict[str, Any]:
    """The checked manifest of the checkpoint `name` in `store`, without reading its tensors."""
    marker = store.read_small(name, MARKER_FILE)
    if marker is None and store.object_storage:
        raise TornCheckpoint(f"no {MARKER_FILE} marker (the save did not commit)")
    data = store.read_small(name, MANIFEST_FILE)
    if data is None:
        raise TornCheckpoint(f"no {MANIFEST_FILE} (the save did not finish)")
    manifest = parse_manifest(store.child(name), data, marker)
    m = STEP_DIR.match(name)
    if m and int(m.group(1)) != manifest["step"]:
        raise TornCheckpoint(f"{MANIFEST_FILE} says step {manifest['step']} but the directory is {name}")
    return manifest


def check_layout(store: CheckpointStore, name: str) -> dict[str, Any]:
    """The cheap check of the checkpoint `name` (no checksum is read); returns its manifest.

    The commit marker and the manifest are present and agree, the manifest parses, and every tensor file
    holds the tensors the manifest lists at the size its header states. A first-cut checkpoint on local
    disk, committed by its rename before markers existed, passes without a marker. CheckpointNotFound when
    there is nothing at `name`; TornCheckpoint naming what is wrong otherwise.
    """
    if not store.present(name):
        raise CheckpointNotFound(f"{store.child(name)} does not exist")
    manifest = manifest_in(store, name)
    for file, entries in _by_file(manifest).items():
        with _torn_on_os_error(file), store.open_read(name, file) as f:
            check_file(f, file, entries, store.file_size(name, file))
    return manifest


def _by_file(manifest: dict[str, Any]) -> dict[str, list[Entry]]:
    by_file: dict[str, list[Entry]] = {}
    for entry in manifest["tensors"]:
        by_file.setdefault(entry["file"], []).append(entry)
    return by_file


def read(
    store: CheckpointStore,
    name: str,
    *,
    load: bool,
    readers: int = DEFAULT_READERS,
    mapped: bool = False,
    into: Mapping[str, npt.NDArray[Any]] | None = None,
) -> Restored:
    """Verify the checkpoint `name` in `store`; its tensors (none unless `load`) and manifest.

    With `mapped` (and `load`), the tensors of a checkpoint on local disk are copy-on-write views of its
    files (see Checkpointer.restore) rather than copies in memory of their own; elsewhere `mapped` changes
    nothing. With `into` (and `load`), the tensors it names are read into its arrays, checked against the
    manifest (CheckpointError) before the first byte is read. TornCheckpoint when it is incomplete or damaged,
    NewerFormat when it is of a newer major format.
    """
    manifest = manifest_in(store, name)
    destinations = check_destinations(manifest["tensors"], into) if into is not None and load else {}
    mapped = mapped and not destinations  # the caller's arrays are filled, never replaced by views
    # Into the caller's arrays, a file on local disk is mapped too: each tensor is checksummed where the kernel
    # reads it into the page cache and then copied once into its array (the copy a read() makes anyway), on a
    # second thread while the next tensor is read and checksummed. Measured (1 GB cold, bench/ckpt.py): reading
    # into the arrays 0.57x dd, mapped and copied in turn 0.81x, mapped with the copies overlapped 1.0x.
    by_file = _by_file(manifest)
    regions: dict[str, mmap.mmap] = {}

    def check(file: str) -> int:
        with _torn_on_os_error(file):
            with store.open_read(name, file) as f:
                start = check_file(f, file, by_file[file], store.file_size(name, file))
            region = store.map_file(name, file) if load and (mapped or destinations) else None
        if region is not None:
            regions[file] = region
        return start

    starts = dict(zip(by_file, parallel(check, list(by_file), readers), strict=True))
    copier: ThreadPoolExecutor | None = None

    def tensor(entry: Entry) -> npt.NDArray[Any] | Future[npt.NDArray[Any]] | None:
        region = regions.get(entry["file"])
        if region is not None:
            with _torn_on_os_error(entry["file"]):
                array = mapped_tensor(region, entry, starts[entry["file"]])
            if array is not None:
                if mapped:
                    return array
                into = destinations.get(entry["name"])
                if into is None:  # a tensor the caller did not name: a new array of its own, as without `into`
                    return array.copy()
                # Verified first: a tensor that fails its checksum leaves its array as it was. The copy runs on
                # the copier's thread while this one checksums (and so has the kernel read) the next tensor.
                if copier is not None:
                    return copier.submit(_copied, into, array)
                return _copied(into, array)
        with _torn_on_os_error(entry["file"]), store.ranges(name, entry["file"]) as read_into:
            return read_tensor(read_into, entry, starts[entry["file"]], load=load, into=destinations.get(entry["name"]))

    # One task per tensor, in file order: several streams at once keep the disk (or the network) busy. Mapped,
    # the kernel's readahead does the reading and this side only checksums: one stream, in order, measured
    # faster there (1 GB: 0.50 s against 0.61 s with four, median of nine, cold).
    if regions and destinations:
        # Into the caller's arrays: copying one tensor overlaps reading and checksumming the next (both let go
        # of the GIL); leaving the `with` waits for every copy, so none is still writing when read returns or
        # raises.
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="crossrail-copy") as copier:
            pending = [tensor(entry) for entry in manifest["tensors"]]
        arrays: list[Any] = [a.result() if isinstance(a, Future) else a for a in pending]
    else:
        arrays = parallel(tensor, manifest["tensors"], 1 if regions else readers)
    if not load:
        return {}, manifest
    return {e["name"]: a for e, a in zip(manifest["tensors"], arrays, strict=True)}, manifest


def _copied(into: npt.NDArray[Any], array: npt.NDArray[Any]) -> npt.NDArray[Any]:
    np.copyto(into, array)
    return into


@contextlib.contextmanager
def _torn_on_os_error(file: str) -> Iterator[None]:
    try:
        yield
    except FileNotFoundError as exc:
        raise TornCheckpoint(f"{file} is missing") from exc
    except OSError as exc:
        raise TornCheckpoint(f"{file} cannot be read ({exc})") from exc


def parallel(fn: Callable[[Any], Any], items: list[Any], threads: int) -> list[Any]:
    if len(items) == 1 or threads == 1:
        return [fn(item) for item in items]
    with ThreadPoolExecutor(max_workers=min(threads, len(items)), thread_name_prefix="crossrail-shard") as pool:
        return list(pool.map(fn, items))
