"""crossrail-ckpt/v1 checkpoints on local disk: atomic commit, verified restore, pruning.

The format: docs/formats/checkpoint.md.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import safetensors
import safetensors.numpy

from crossrail.runtime.manifest import (
    FORMAT,
    MANIFEST_FILE,
    MODEL_FILE,
    CheckpointError,
    CheckpointNotFound,
    TornCheckpoint,
    checksum,
    lineage_block,
    read_manifest,
    safetensors_layout,
    verify_tensors,
)
from crossrail.runtime.storage import file_uri, fsync_dir, local_path

Tensors = dict[str, npt.NDArray[Any]]
OnSkip = Callable[[str, str], None]
TMP_PREFIX = ".tmp-"
STALE_TMP_S = 3600.0
_STEP_DIR = re.compile(r"^step-(\d+)$")


@dataclass(frozen=True)
class CheckpointInfo:
    step: int
    uri: str
    path: str


# Named here because Checkpointer.list shadows the builtin inside the class body.
Infos = list[CheckpointInfo]
Uris = list[str]


def step_dirname(step: int) -> str:
    return f"step-{step:010d}"


class Checkpointer:
    """The checkpoints of one run: `<directory>/step-<step:010d>/{model.safetensors, manifest.json}`.

    `lineage` is written into every manifest (missing keys as null); `keep_last` prunes after each save.
    """

    def __init__(
        self,
        directory_uri: str,
        lineage: Mapping[str, Any] | None = None,
        keep_last: int | None = None,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.uri = directory_uri
        self.directory = _local(directory_uri)
        self.lineage = lineage_block(lineage or {})
        if keep_last is not None and keep_last < 1:
            raise CheckpointError(f"keep_last must be >= 1 (got {keep_last}); use None to keep every checkpoint")
        self.keep_last = keep_last
        self._clock = clock

    # ---- writing ----------------------------------------------------------------------------------------

    def save(self, tensors: Mapping[str, npt.NDArray[Any]], step: int, state: Mapping[str, Any]) -> str:
        """Commit a checkpoint of `step` and return its URI; a valid one already there is kept as is."""
        step = _step(step)
        final = os.path.join(self.directory, step_dirname(step))
        os.makedirs(self.directory, exist_ok=True)
        self._remove_stale_tmp()
        if os.path.isdir(final) and self._reason(final) is None:
            return file_uri(final)  # a retry of a save that committed: the first commit stands
        tmp = tempfile.mkdtemp(prefix=f"{TMP_PREFIX}{step_dirname(step)}-", dir=self.directory)
        try:
            self._write(tmp, tensors, step, state)
            self._commit(tmp, final)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        if self.keep_last is not None:
            self.prune(self.keep_last)
        return file_uri(final)

    def _write(self, tmp: str, tensors: Mapping[str, npt.NDArray[Any]], step: int, state: Mapping[str, Any]) -> None:
        arrays = _arrays(tensors)
        model = os.path.join(tmp, MODEL_FILE)
        try:
            safetensors.numpy.save_file(arrays, model)
        except (safetensors.SafetensorError, ValueError, TypeError) as exc:
            raise CheckpointError(f"cannot write the tensors of step {step} as safetensors: {exc}") from exc
        _fsync_file(model)
        layout = safetensors_layout(model)
        entries = [
            {"name": name, **layout[name], "file": MODEL_FILE, "checksum": checksum(arrays[name])} for name in arrays
        ]
        manifest = {
            "format": FORMAT,
            "step": step,
            "created_at": self._clock(),
            "tensors": entries,
            "state": dict(state),
            "lineage": self.lineage,
        }
        try:
            text = json.dumps(manifest, indent=2, allow_nan=False)
        except (TypeError, ValueError) as exc:
            message = f"the state of step {step} is not JSON-able ({exc}); store arrays as tensors"
            raise CheckpointError(message) from exc
        with open(os.path.join(tmp, MANIFEST_FILE), "w", encoding="utf-8") as f:
            f.write(text + "\n")
            f.flush()
            os.fsync(f.fileno())
        fsync_dir(tmp)

    def _commit(self, tmp: str, final: str) -> None:
        """Rename the finished temp dir into place; a damaged dir already there is moved aside first."""
        aside = None
        if os.path.lexists(final):
            aside = tempfile.mkdtemp(prefix=f"{TMP_PREFIX}replaced-{os.path.basename(final)}-", dir=self.directory)
            os.rename(final, os.path.join(aside, "old"))
        os.rename(tmp, final)
        fsync_dir(self.directory)
        if aside is not None:
            shutil.rmtree(aside, ignore_errors=True)

    def _remove_stale_tmp(self) -> None:
        """Temp dirs of saves that died more than an hour ago; a younger one may belong to a live writer."""
        cutoff = time.time() - STALE_TMP_S
        for entry in os.scandir(self.directory):
            if entry.name.startswith(TMP_PREFIX) and entry.stat(follow_symlinks=False).st_mtime < cutoff:
                shutil.rmtree(entry.path, ignore_errors=True)

    # ---- reading ----------------------------------------------------------------------------------------

    def list(self) -> Infos:
        """Committed checkpoints (a step dir holding a manifest), oldest first; not verified."""
        return [c for c in self._step_dirs() if os.path.isfile(os.path.join(c.path, MANIFEST_FILE))]

    def latest(self, on_skip: OnSkip | None = None) -> CheckpointInfo | None:
        """The newest checkpoint that verifies; each newer damaged one is passed to `on_skip(uri, reason)`."""
        for info in reversed(self._step_dirs()):
            reason = self._reason(info.path)
            if reason is None:
                return info
            if on_skip is not None:
                on_skip(info.uri, reason)
        return None

    def restore(self, step: int | None = None, *, on_skip: OnSkip | None = None) -> tuple[Tensors, dict[str, Any]]:
        """Tensors and manifest of checkpoint `step`, or of the newest valid one when `step` is None."""
        if step is not None:
            return self._restore_step(step)
        for info in reversed(self._step_dirs()):
            try:
                return read_checkpoint(info.path)
            except TornCheckpoint as torn:
                if on_skip is not None:
                    on_skip(info.uri, str(torn))
        raise CheckpointNotFound(f"no valid checkpoint in {self.uri}; start from scratch or name another directory")

    def _restore_step(self, step: int) -> tuple[Tensors, dict[str, Any]]:
        path = os.path.join(self.directory, step_dirname(step))
        problem = f"there is no checkpoint of step {step} in {self.uri}"
        if os.path.isdir(path):
            try:
                return read_checkpoint(path)
            except TornCheckpoint as torn:
                problem = f"the checkpoint of step {step} in {self.uri} is damaged: {torn}"
        newest = self.latest()
        instead = f"the newest valid one is step {newest.step}" if newest else "there is no valid checkpoint there"
        raise CheckpointNotFound(f"{problem}; {instead}")

    def prune(self, keep_last: int | None = None) -> Uris:
        """Remove checkpoints older than the newest `keep_last` and the newest valid one; returns their URIs."""
        keep_last = self.keep_last if keep_last is None else keep_last
        if keep_last is None:
            return []
        if keep_last < 1:
            raise CheckpointError(f"keep_last must be >= 1 (got {keep_last})")
        newest = self.latest()
        if newest is None:
            return []
        keep = {c.step for c in self.list()[-keep_last:]} | {newest.step}
        removed: Uris = []
        for info in self._step_dirs():
            if info.step < newest.step and info.step not in keep:
                # Renamed away first, so a half-removed checkpoint never looks committed.
                aside = tempfile.mkdtemp(prefix=f"{TMP_PREFIX}pruned-{step_dirname(info.step)}-", dir=self.directory)
                os.rename(info.path, os.path.join(aside, "old"))
                shutil.rmtree(aside, ignore_errors=True)
                removed.append(info.uri)
        return removed

    def _step_dirs(self) -> Infos:
        """Every `step-*` directory, committed or not, oldest first."""
        try:
            entries = list(os.scandir(self.directory))
        except FileNotFoundError:
            return []
        found = []
        for entry in entries:
            m = _STEP_DIR.match(entry.name)
            if m and entry.is_dir(follow_symlinks=False):
                found.append(CheckpointInfo(int(m.group(1)), file_uri(entry.path), entry.path))
        return sorted(found, key=lambda c: c.step)

    def _reason(self, path: str) -> str | None:
        """Why the checkpoint at `path` is not usable, or None when it verifies."""
        try:
            read_checkpoint(path, load=False)
        except TornCheckpoint as torn:
            return str(torn)
        return None


def read_checkpoint(path: str, *, load: bool = True) -> tuple[Tensors, dict[str, Any]]:
    """Verify the checkpoint directory `path` and return its tensors (none when `load` is False) and manifest.

    Raises TornCheckpoint when it is incomplete or damaged, CheckpointError when it is from a newer format.
    """
    manifest = read_manifest(path)
    want = _STEP_DIR.match(os.path.basename(os.path.normpath(path)))
    if want and int(want.group(1)) != manifest["step"]:
        raise TornCheckpoint(f"manifest.json says step {manifest['step']} but the directory is {want.group(0)}")
    files = verify_tensors(path, manifest)
    if not load:
        return {}, manifest
    tensors: Tensors = {}
    for name, data in files.items():
        try:
            tensors |= safetensors.numpy.load(data)
        except safetensors.SafetensorError as exc:
            raise TornCheckpoint(f"{name} cannot be read ({exc})") from exc
    return tensors, manifest


def resolve(uri: str) -> CheckpointInfo:
    """The checkpoint a URI names: a `step-*` directory as is, a run's checkpoint directory as its newest valid one.

    CheckpointNotFound when there is nothing there; a named `step-*` directory is not verified here.
    """
    path = _local(uri)
    if not os.path.isdir(path):
        raise CheckpointNotFound(f"there is no checkpoint directory at {uri}")
    m = _STEP_DIR.match(os.path.basename(path))
    if m:
        return CheckpointInfo(int(m.group(1)), file_uri(path), path)
    if os.path.isfile(os.path.join(path, MANIFEST_FILE)):
        return CheckpointInfo(read_manifest(path)["step"], file_uri(path), path)
    newest = Checkpointer(uri).latest()
    if newest is None:
        raise CheckpointNotFound(f"no valid checkpoint in {uri}")
    return newest


def load(uri: str) -> tuple[Tensors, dict[str, Any]]:
    """Tensors and manifest of the checkpoint `uri` names (see resolve); TornCheckpoint when it is damaged."""
    info = resolve(uri)
    try:
        return read_checkpoint(info.path)
    except TornCheckpoint as torn:
        raise TornCheckpoint(f"the checkpoint {info.uri} is damaged: {torn}") from torn


def _local(uri: str) -> str:
    path = local_path(uri)
    if path is None:
        raise CheckpointError(
            f"{uri}: this version writes and reads checkpoints on local disk only; "
            "use a local path or a file:// URI (object storage with commit markers comes next)"
        )
    if not path:
        raise CheckpointError("the checkpoint directory is empty; set CROSSRAIL_CHECKPOINT_DIR")
    return os.path.abspath(path)


def _step(step: int) -> int:
    if isinstance(step, bool) or not isinstance(step, int | np.integer) or step < 0:
        raise CheckpointError(f"a checkpoint step must be a whole number >= 0 (got {step!r})")
    return int(step)


def _arrays(tensors: Mapping[str, npt.NDArray[Any]]) -> Tensors:
    if not tensors:
        raise CheckpointError("a checkpoint needs at least one tensor")
    bad = [name for name, a in tensors.items() if not isinstance(name, str) or not isinstance(a, np.ndarray)]
    if bad:
        raise CheckpointError(f"tensors must map names to numpy arrays; not so for {bad}")
    # ascontiguousarray would turn a 0-d array into 1-d; astype keeps the shape.
    return {name: a.astype(a.dtype.newbyteorder("<"), order="C", copy=False) for name, a in tensors.items()}


def _fsync_file(path: str) -> None:
    with open(path, "rb") as f:
        os.fsync(f.fileno())
