"""crossrail-ckpt/v1 checkpoints: commit, async and sharded saves, verified restore, retention.

The format and the commit protocol: docs/formats/checkpoint.md.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from crossrail.runtime.asyncsave import (
    OnError,
    ReadOnlyWhileStaged,
    SaveHandle,
    Staging,
    background_copiers,
    run_in_background,
)
from crossrail.runtime.manifest import (
    FORMAT,
    MANIFEST_FILE,
    CheckpointError,
    CheckpointNotFound,
    InvalidCheckpoint,
    lineage_block,
    marker_content,
    parse_manifest,
)
from crossrail.runtime.reading import DEFAULT_READERS, check_layout, manifest_in, parallel, read
from crossrail.runtime.shards import Entry, Tensors, as_stored, check_tensors, plan, write_shard
from crossrail.runtime.stores import (
    STEP_DIR,
    CheckpointStore,
    Draft,
    StorageOptions,
    open_store,
    split,
    step_dirname,
)

OnSkip = Callable[[str, str], None]
Prepare = Callable[["CheckpointInfo", dict[str, Any]], Mapping[str, npt.NDArray[Any]] | None]
DEFAULT_SHARD_BYTES = 256 << 20
DEFAULT_WRITERS = 4
Step = int | Literal["latest"] | None
StagingMode = Literal["caller", "background"]


@dataclass(frozen=True)
class CheckpointInfo:
    step: int
    uri: str
    path: str


# Named here because Checkpointer.list shadows the builtin inside the class body.
Infos = list[CheckpointInfo]
Uris = list[str]
Names = list[str]


class Checkpointer:
    """The checkpoints of one run: `<directory>/step-<step:010d>/`, on local disk or object storage.

    `lineage` is written into every manifest (missing keys as null). `keep_last` and `keep_every` prune after
    each save. `storage_options` go to fsspec for object storage (endpoint_url, credentials, ...).
    `shard_bytes` bounds each safetensors file; `writers` threads write shards in parallel, `readers` threads
    read and verify tensors in parallel.
    `on_error(error)` is called when a background save fails; the error is also raised by the next
    save, save_async, wait or close.
    """

    def __init__(
        self,
        directory_uri: str,
        lineage: Mapping[str, Any] | None = None,
        keep_last: int | None = None,
        *,
        keep_every: int | None = None,
        storage_options: StorageOptions | None = None,
        shard_bytes: int = DEFAULT_SHARD_BYTES,
        writers: int = DEFAULT_WRITERS,
        readers: int = DEFAULT_READERS,
        on_error: OnError | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        _check_retention(keep_last, keep_every)
        if min(shard_bytes, writers, readers) < 1:
            raise CheckpointError(
                f"shard_bytes, writers and readers must be >= 1 (got {shard_bytes}, {writers}, {readers})"
            )
        self.store = open_store(directory_uri, storage_options)
        self.uri = self.store.uri
        self.lineage = lineage_block(lineage or {})
        self.keep_last, self.keep_every = keep_last, keep_every
        self.shard_bytes, self.writers, self.readers = shard_bytes, writers, readers
        self.on_error = on_error
        self._clock = clock
        self._lock = threading.RLock()  # one save (or prune) starts at a time
        self._inflight: tuple[SaveHandle, threading.Thread] | None = None
        self.staging = Staging()
        self._removed: Uris = []  # pruned since the last take_removed(), for the report channel
        self._removed_lock = threading.Lock()  # a background save prunes while the caller may take

    # ---- writing ----------------------------------------------------------------------------------------

    def save(
        self,
        tensors: Mapping[str, npt.NDArray[Any]],
        step: int,
        state: Mapping[str, Any] | None = None,
        *,
        tokens: int | None = None,
    ) -> str:
        """Commit a checkpoint of `step` and return its URI; a valid one already there is kept as is."""
        with self._lock:
            self._settle()
            head = self._head(step, state, tokens)
            check_tensors(tensors)
            uri = self._write(as_stored(tensors), head)
            self._retain()
            return uri

    def save_async(
        self,
        tensors: Mapping[str, npt.NDArray[Any]],
        step: int,
        state: Mapping[str, Any] | None = None,
        *,
        tokens: int | None = None,
        staging: StagingMode = "caller",
    ) -> SaveHandle:
        """Copy the tensors into host staging buffers, then write and commit them in the background.

        With `staging="caller"` this blocks for the copy, and first for a save still in flight (one at a
        time); the caller may change the arrays as soon as it returns. With `staging="background"` the copy
        is made in the background too: the arrays stay read-only until it is done, and the caller must call
        `wait_staged()` before it changes them (a training loop: before its next optimizer step), which
        lets the copy overlap the next forward and backward pass. The state is snapshotted now either way.
        """
        if staging not in ("caller", "background"):
            raise CheckpointError(f"staging must be 'caller' or 'background' (got {staging!r})")
        with self._lock:
            self._settle()
            head = self._head(step, state, tokens)
            check_tensors(tensors)
            uri = self.store.child(step_dirname(head["step"]))
            if staging == "caller":
                staged = self.staging.copy(tensors)
                handle = SaveHandle(head["step"], uri)

                def work() -> None:
                    # Without the lock: whoever holds it waits for this thread (prune, the next save) to end.
                    self._write(staged, head)
                    self._retain()

            else:
                guard = ReadOnlyWhileStaged(tensors)
                copied, job = self.staging.prepare(tensors)
                handle = SaveHandle(head["step"], uri, staged=False, copy=job)

                def work() -> None:
                    try:
                        job.run(background_copiers(self.staging.copiers))
                    finally:
                        job.stop()  # the arrays are let go only once no thread copies from them
                        guard.release()
                        handle.mark_staged()
                    self._write(copied, head)
                    self._retain()

            try:
                self._inflight = (handle, run_in_background(handle, work, self.on_error))
            except BaseException:
                if staging == "background":
                    guard.release()
                raise
            return handle

    def wait_staged(self) -> None:
        """Block until the save in flight no longer reads the caller's arrays (see save_async's `staging`).

        Returns at once when there is none, or when it was staged by the caller; its failure, if any, is
        raised by the next save, save_async, wait or close, as always.
        """
        inflight = self._inflight
        if inflight is not None:
            inflight[0].wait_staged()

    def wait(self) -> str | None:
        """Wait for the save in flight; returns its URI (None when there was none) or raises its failure."""
        with self._lock:
            inflight = self._inflight
            self._settle()
            return inflight[0].uri if inflight else None

    def close(self) -> None:
        """Wait for the save in flight, let the staging buffers go, and raise a failure not yet reported."""
        with self._lock:
            try:
                self._settle()
            finally:
                self.staging.release()

    def __enter__(self) -> Checkpointer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _join(self) -> SaveHandle | None:
        """Wait for the save in flight to end; returns its handle."""
        if self._inflight is None:
            return None
        handle, thread = self._inflight
        if thread is not threading.current_thread():
            thread.join()
            self._inflight = None
        return handle

    def _settle(self) -> None:
        """Wait for the save in flight and raise its failure once, unless the caller already saw it."""
        handle = self._join()
        if handle is not None and handle.error is not None and not handle.reported:
            handle.reported = True
            raise handle.error

    def _head(self, step: int, state: Mapping[str, Any] | None, tokens: int | None) -> dict[str, Any]:
        """The manifest without its tensors, checked and snapshotted (later changes to `state` do not leak in)."""
        step = _whole("a checkpoint step", step)
        if tokens is not None:
            tokens = _whole("tokens", tokens)
        head = {"format": FORMAT, "step": step, "tokens": tokens, "created_at": self._clock()}
        head |= {"state": dict(state or {}), "lineage": self.lineage}
        try:
            return dict(json.loads(json.dumps(head, allow_nan=False)))
        except (TypeError, ValueError) as exc:
            message = f"the state of step {step} is not JSON-able ({exc}); store arrays as tensors"
            raise CheckpointError(message) from exc

    def _write(self, arrays: Tensors, head: dict[str, Any]) -> str:
        """Write and commit; returns the URI. A committed checkpoint of the step that verifies is kept."""
        name = step_dirname(head["step"])
        self.store.remove_stale()
        if self.store.committed(name) and self._problem(name) is None:
            return self.store.child(name)  # a retry of a save that committed: the first commit stands
        try:
            draft = self.store.draft(name)
        except OSError as exc:
            raise CheckpointError(f"cannot write a checkpoint into {self.uri}: {exc}") from exc
        try:
            entries = self._write_shards(draft, arrays)
            manifest = {k: head[k] for k in ("format", "step", "tokens", "created_at")} | {"tensors": entries}
            data = (
                json.dumps(manifest | {"state": head["state"], "lineage": head["lineage"]}, indent=2) + "\n"
            ).encode()
            draft.write_small(MANIFEST_FILE, data)
            draft.commit(marker_content(data))
        except BaseException as exc:
            draft.abort()
            if isinstance(exc, OSError):
                raise CheckpointError(
                    f"cannot write the checkpoint of step {head['step']} to {self.uri}: {exc}"
                ) from exc
            raise
        return self.store.child(name)

    def _write_shards(self, draft: Draft, arrays: Tensors) -> list[Entry]:
        """Every shard, in parallel; the manifest lists the tensors in the caller's order."""
        files = plan(arrays, self.shard_bytes)

        def write(file: str) -> list[Entry]:
            f = draft.open_write(file)
            try:
                entries = write_shard(f, file, files[file], arrays)
            except BaseException:
                f.close()
                raise
            draft.close_file(f)
            return entries

        by_name = {e["name"]: e for entries in parallel(write, list(files), self.writers) for e in entries}
        return [by_name[name] for name in arrays]

    def _retain(self) -> None:
        if self.keep_last is not None or self.keep_every is not None:
            self._prune(self.keep_last, self.keep_every)

    # ---- reading ----------------------------------------------------------------------------------------

    def list(self, *, damaged: bool = False) -> Infos:
        """Committed checkpoints, oldest first; not verified.

        With `damaged`, also those a reader would consider but that cannot be committed whole: on local disk
        a `step-*` directory that lost its manifest, on object storage a marker whose manifest is gone.
        """
        return self._candidates() if damaged else self._infos(self.store.committed_names())

    def take_removed(self) -> Uris:
        """URIs of the checkpoints retention removed since the last call (each returned once), oldest first."""
        with self._removed_lock:
            removed, self._removed = self._removed, []
        return removed

    def latest(self, on_skip: OnSkip | None = None) -> CheckpointInfo | None:
        """The newest checkpoint that verifies; each newer unusable one is passed to `on_skip(uri, reason)`."""
        for info in reversed(self._candidates()):
            problem = self._problem(step_dirname(info.step))
            if problem is None:
                return info
            if on_skip is not None:
                on_skip(info.uri, problem)
        return None

    def restore(
        self,
        step: Step = None,
        *,
        on_skip: OnSkip | None = None,
        mapped: bool = False,
        into: Mapping[str, npt.NDArray[Any]] | None = None,
    ) -> tuple[Tensors, dict[str, Any]]:
        """Tensors and manifest of checkpoint `step`, or of the newest valid one when `step` is None or "latest".

        Newer unusable checkpoints are passed over, each to `on_skip(uri, reason)`. A named step that is
        missing raises CheckpointNotFound; one that is damaged, TornCheckpoint; one of a newer format,
        NewerFormat. Nothing is changed on storage either way.

        With `mapped`, a checkpoint on local disk gives its tensors as copy-on-write mappings of its files,
        each still read whole and verified before this returns, but no memory is allocated and nothing is
        copied for them: a cold restore runs at the disk's speed (on a 2-core VM, faulting in 1 GB of fresh
        memory took 0.4-0.7 s, as long as reading it cold). What that trades: a write to a restored array
        pays then for each page it changes; the files stay on disk until those arrays are freed (a checkpoint
        pruned meanwhile frees its space only then); and the pages not yet written to come from the file, the
        kernel reading again, unverified, those it drops under memory pressure: a file changed in place or cut
        short (crossrail does neither to a committed checkpoint) changes those arrays or stops the process
        with SIGBUS, as an I/O error then does. For arrays that are copied into a model or onto an accelerator
        and let go, little of this matters. Tensors whose bytes are not aligned to their dtype, and checkpoints
        on object storage, are read as without it.

        With `into` (names to the caller's numpy arrays: a model's parameters, its optimizer's moments, already
        allocated), each tensor it names is filled into its array, verified: on local disk checksummed in the
        file's mapping and then copied once into the array, elsewhere read straight into it and verified there.
        The cheapest resume into a built model: no memory is allocated or faulted in (bench/ckpt.py measures it
        against a cold dd read). The arrays must be writable numpy arrays of the
        tensor's shape and dtype (of a torch CPU tensor, its `.numpy()` view); one that is not C-contiguous,
        such as a transposed view, is filled through a bounded buffer. Every name, shape and dtype is checked
        before anything is written (CheckpointError naming each mismatch), and so is the layout of every
        file: a checkpoint found incomplete leaves the arrays as they were. A checksum that fails (or an I/O
        error) is found only as the tensor is read, so then some arrays hold the damaged checkpoint's bytes:
        when an older checkpoint is restored instead (`step` None), all of them are filled again from it;
        when the restore raises, the caller must treat every array as garbage (a trainer fails the attempt or
        reinitialises). The tensors returned are those of the checkpoint: `into`'s arrays themselves for the
        names it gives, new arrays for the rest. `into` and `mapped` exclude each other.
        """
        if into is not None and mapped:
            raise CheckpointError("restore takes `into` (read into your arrays) or `mapped` (views), not both")
        if step is not None and step != "latest":
            return self._restore_step(_whole("a checkpoint step", step), mapped=mapped, into=into)
        for info in reversed(self._candidates()):
            try:
                name = step_dirname(info.step)
                return read(self.store, name, load=True, readers=self.readers, mapped=mapped, into=into)
            except InvalidCheckpoint as exc:
                if on_skip is not None:
                    on_skip(info.uri, str(exc))
        raise CheckpointNotFound(f"no valid checkpoint in {self.uri}; start from scratch or name another directory")

    def restore_newest(
        self, prepare: Prepare, *, on_skip: OnSkip | None = None
    ) -> tuple[CheckpointInfo, Tensors, dict[str, Any]] | None:
        """What `restore(latest().step, ...)` gives, read once: the newest checkpoint that verifies, with its tensors
        and manifest; None when none does.

        For each checkpoint, newest first, `prepare(info, manifest)` is given its manifest (its layout checked, no
        checksum read yet: reading.check_layout) and returns the arrays to read it into (restore's `into`; the
        caller builds its model from the manifest here), or None to restore it mapped. It is then read and
        every checksum verified. One that fails either way is passed to `on_skip(uri, reason)`, as latest()
        passes it, and the next older one is prepared afresh (the arrays given for the one that failed may hold
        part of it: prepare gives them again and they are filled whole).
        """
        for info in reversed(self._candidates()):
            name = step_dirname(info.step)
            try:
                head = check_layout(self.store, name)
            except (InvalidCheckpoint, CheckpointNotFound) as exc:  # not found: removed since it was listed
                _skip(on_skip, info, exc)
                continue
            into = prepare(info, head)
            try:
                tensors, manifest = read(
                    self.store, name, load=True, readers=self.readers, mapped=into is None, into=into
                )
            except InvalidCheckpoint as exc:
                _skip(on_skip, info, exc)
                continue
            return info, tensors, manifest
        return None

    def verify(self, step: int) -> dict[str, Any]:
        """Check every checksum of checkpoint `step`; returns its manifest, or raises as restore(step) does."""
        return self._restore_step(_whole("a checkpoint step", step), load=False)[1]

    def size(self, step: int) -> int:
        """Bytes the checkpoint of `step` takes on storage."""
        return self.store.size(step_dirname(step))

    def _restore_step(
        self,
        step: int,
        *,
        load: bool = True,
        mapped: bool = False,
        into: Mapping[str, npt.NDArray[Any]] | None = None,
    ) -> tuple[Tensors, dict[str, Any]]:
        name = step_dirname(step)
        if step in {c.step for c in self._candidates()}:
            try:
                return read(self.store, name, load=load, readers=self.readers, mapped=mapped, into=into)
            except InvalidCheckpoint as exc:
                problem = f"the checkpoint of step {step} in {self.uri} cannot be used: {exc}"
                raise type(exc)(f"{problem}; {self._instead()}") from exc
        raise CheckpointNotFound(f"there is no checkpoint of step {step} in {self.uri}; {self._instead()}")

    def _instead(self) -> str:
        newest = self.latest()
        return f"the newest valid one is step {newest.step}" if newest else "there is no valid checkpoint there"

    def _candidates(self) -> Infos:
        """What a reader considers, oldest first.

        On local disk every `step-*` dir: the rename commits a whole directory, so one without a manifest
        was damaged and is reported. On object storage only those with their marker: a prefix without one
        is a save in progress or one that died, and does not exist.
        """
        names = self.store.committed_names() if self.store.object_storage else self.store.names()
        return self._infos(names)

    def _infos(self, names: Names) -> Infos:
        found = []
        for name in names:
            m = STEP_DIR.match(name)
            if m:
                found.append(CheckpointInfo(int(m.group(1)), self.store.child(name), self.store.path(name)))
        return sorted(found, key=lambda c: c.step)

    def _problem(self, name: str) -> str | None:
        """Why the checkpoint `name` is not usable, or None when it verifies."""
        try:
            read(self.store, name, load=False, readers=self.readers)
        except InvalidCheckpoint as exc:
            return str(exc)
        return None

    # ---- retention --------------------------------------------------------------------------------------

    def prune(self, keep_last: int | None = None, keep_every: int | None = None) -> Uris:
        """Remove old checkpoints; returns their URIs. Waits first for a save in flight to commit.

        Kept: the newest `keep_last` committed ones, those whose step is a multiple of `keep_every`, and
        always the newest one that verifies. Only checkpoints older than that one are removed (committed,
        damaged, or on object storage never committed). With nothing valid, nothing is removed.
        """
        keep_last = self.keep_last if keep_last is None else keep_last
        keep_every = self.keep_every if keep_every is None else keep_every
        _check_retention(keep_last, keep_every)
        with self._lock:
            self._join()  # never before an async save has committed; its failure stays for the next save
            return self._prune(keep_last, keep_every)

    def _prune(self, keep_last: int | None, keep_every: int | None) -> Uris:
        if keep_last is None and keep_every is None:
            return []
        newest = self.latest()
        if newest is None:
            return []
        keep = {newest.step}
        if keep_last is not None:
            keep |= {c.step for c in self.list()[-keep_last:]}
        removed: Uris = []
        for info in self._infos(self.store.names()):
            if info.step < newest.step and info.step not in keep and not (keep_every and info.step % keep_every == 0):
                self.store.remove(step_dirname(info.step))
                removed.append(info.uri)
        with self._removed_lock:
            self._removed.extend(removed)
        return removed


def read_checkpoint(
    uri: str, *, load: bool = True, storage_options: StorageOptions | None = None, mapped: bool = False
) -> tuple[Tensors, dict[str, Any]]:
    """Verify the checkpoint directory `uri` and return its tensors (none when `load` is False) and manifest.

    `mapped` as in Checkpointer.restore. Raises TornCheckpoint when it is incomplete or damaged, NewerFormat
    when it is from a newer major format.
    """
    store, name = split(uri, storage_options)
    return read(store, name, load=load, mapped=mapped)


def read_manifest(uri: str, *, storage_options: StorageOptions | None = None) -> dict[str, Any]:
    """The checked manifest of the checkpoint directory `uri`; its tensors are not read or verified."""
    store, name = split(uri, storage_options)
    return manifest_in(store, name)


def resolve(uri: str, *, storage_options: StorageOptions | None = None) -> CheckpointInfo:
    """The checkpoint a URI names: a `step-*` directory as is, a run's checkpoint directory as its newest valid one.

    CheckpointNotFound when there is nothing there; a named `step-*` directory is not verified here.
    """
    store, name = split(uri, storage_options)
    m = STEP_DIR.match(name)
    if m and store.present(name):
        return CheckpointInfo(int(m.group(1)), store.child(name), store.path(name))
    if m or not (store.object_storage or store.present(name)):
        raise CheckpointNotFound(f"there is no checkpoint directory at {uri}")
    data = store.read_small(name, MANIFEST_FILE)
    if data is not None and store.present(name):  # a checkpoint directory of another name
        manifest = parse_manifest(store.child(name), data, None)
        return CheckpointInfo(manifest["step"], store.child(name), store.path(name))
    newest = Checkpointer(uri, storage_options=storage_options).latest()
    if newest is None:
        raise CheckpointNotFound(f"no valid checkpoint in {uri}")
    return newest


def check(uri: str, *, storage_options: StorageOptions | None = None) -> dict[str, Any]:
    """The cheap check of the checkpoint directory `uri` (reading.check_layout): no checksum is read.

    Returns its manifest; CheckpointNotFound when nothing is there, TornCheckpoint naming what is wrong.
    """
    store, name = split(uri, storage_options)
    return check_layout(store, name)


def listing(ckpt: Checkpointer, *, verify: bool, storage_options: StorageOptions | None = None) -> list[dict[str, Any]]:
    """Each checkpoint of `ckpt`, oldest first, damaged ones too: its step, uri, size, and whether it verifies
    (every tensor's checksum with `verify`; otherwise only the cheap check, `verified` None when it passes)."""
    items = []
    for info in ckpt.list(damaged=True):
        item: dict[str, Any] = {"step": info.step, "uri": info.uri, "sizeBytes": ckpt.size(info.step)}
        item |= {"verified": None, "problem": None}
        try:
            if verify:
                ckpt.verify(info.step)
                item["verified"] = True
            else:
                check(info.uri, storage_options=storage_options)
        except InvalidCheckpoint as exc:
            item |= {"verified": False, "problem": str(exc)}
        items.append(item)
    return items


def verification(store: CheckpointStore, name: str) -> dict[str, Any]:
    """Every tensor of the checkpoint `name` in `store` read against its checksums: its uri, step (from its
    manifest, else its directory's name), whether it verifies and, when not, why."""
    named = STEP_DIR.match(name)
    result: dict[str, Any] = {"uri": store.child(name), "step": int(named.group(1)) if named else None}
    result |= {"ok": False, "problem": None}
    try:
        result["step"] = read(store, name, load=False)[1]["step"]
        result["ok"] = True
    except (CheckpointError, OSError) as exc:
        result["problem"] = str(exc)
    return result


def restore_from(
    uri: str,
    *,
    on_skip: OnSkip | None = None,
    storage_options: StorageOptions | None = None,
    mapped: bool = False,
) -> tuple[CheckpointInfo, Tensors, dict[str, Any]]:
    """The checkpoint `uri` names (see resolve), every checksum verified: its info, tensors and manifest.

    With `mapped`, tensors on local disk are copy-on-write views of the files, as Checkpointer.restore gives
    them: for a caller that copies them into its model and lets them go (the reference trainers do), a cold
    read at the disk's speed with no fresh memory faulted in.

    When a named `step-*` checkpoint is damaged, it is passed to `on_skip(uri, reason)` and the newest older
    checkpoint of the same directory that verifies is restored instead, each damaged one passed over in turn.
    A named `step-*` checkpoint that is gone (deleted) is passed over the same way, with a reason that starts
    `deleted:`. Without `on_skip`, or with nothing valid to fall back to, the first problem is raised.
    """
    first: CheckpointError
    try:
        info = resolve(uri, storage_options=storage_options)
    except CheckpointNotFound as exc:
        store, name = split(uri, storage_options)
        m = STEP_DIR.match(name)
        if on_skip is None or m is None:
            raise
        info = CheckpointInfo(int(m.group(1)), store.child(name), store.path(name))
        on_skip(info.uri, f"deleted: {exc}")
        first = exc
    else:
        try:
            tensors, manifest = read_checkpoint(info.uri, storage_options=storage_options, mapped=mapped)
            return info, tensors, manifest
        except InvalidCheckpoint as bad:
            if on_skip is None:
                raise type(bad)(f"the checkpoint {info.uri} cannot be used: {bad}") from bad
            on_skip(info.uri, str(bad))
            first = bad
    store, _ = split(info.uri, storage_options)
    older = Checkpointer(store.uri, storage_options=storage_options)
    for candidate in reversed([c for c in older.list(damaged=True) if c.step < info.step]):
        try:
            tensors, manifest = read(
                store, step_dirname(candidate.step), load=True, readers=older.readers, mapped=mapped
            )
        except InvalidCheckpoint as exc:
            on_skip(candidate.uri, str(exc))
            continue
        return candidate, tensors, manifest
    message = f"the checkpoint {info.uri} cannot be used: {first}; no older checkpoint in {store.uri} verifies"
    raise type(first)(message) from first


def load(uri: str, *, storage_options: StorageOptions | None = None) -> tuple[Tensors, dict[str, Any]]:
    """Tensors and manifest of the checkpoint `uri` names (see resolve); TornCheckpoint when it is damaged."""
    info = resolve(uri, storage_options=storage_options)
    try:
        return read_checkpoint(info.uri, storage_options=storage_options)
    except InvalidCheckpoint as exc:
        raise type(exc)(f"the checkpoint {info.uri} cannot be used: {exc}") from exc


def _skip(on_skip: OnSkip | None, info: CheckpointInfo, exc: CheckpointError) -> None:
    if on_skip is not None:
        on_skip(info.uri, str(exc))


def _check_retention(keep_last: int | None, keep_every: int | None) -> None:
    for key, value in (("keep_last", keep_last), ("keep_every", keep_every)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise CheckpointError(
                f"{key} must be a whole number >= 1 (got {value!r}); use None to keep every checkpoint"
            )


def _whole(what: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 0:
        raise CheckpointError(f"{what} must be a whole number >= 0 (got {value!r})")
    return int(value)
