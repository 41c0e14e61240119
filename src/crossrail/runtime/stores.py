"""Where checkpoints live: a run's checkpoint directory on local disk or on object storage, and its commit step.

Local disk commits by renaming a finished temp directory into place. Object storage (s3://, gs://, memory://,
any other fsspec scheme) has no atomic rename: files are written under the final prefix and the commit marker
is written last; a prefix without its marker does not exist for readers.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import re
import shutil
import sys
import tempfile
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping
from typing import IO, Any

from crossrail.runtime.manifest import MANIFEST_FILE, MARKER_FILE, CheckpointError
from crossrail.runtime.storage import file_uri, fsync_dir, local_path

try:
    import fcntl
except ImportError:  # no flock here: drafts of dead writers go by the age rule alone
    fcntl = None  # type: ignore[assignment]

TMP_PREFIX = ".tmp-"
STALE_TMP_S = 3600.0
WRITER_LOCK = ".writer.lock"
"""In a local draft while its writer lives: the writer holds an flock on it, which the kernel lets go when
the writer dies, so the next save sweeps a dead writer's draft at once rather than after STALE_TMP_S."""
STEP_DIR = re.compile(r"^step-(\d+)$")
StorageOptions = Mapping[str, Any]
ReadInto = Callable[[int, memoryview], int]


def step_dirname(step: int) -> str:
    return f"step-{step:010d}"


class Draft(ABC):
    """A checkpoint being written: its files, then one commit."""

    @abstractmethod
    def open_write(self, file: str) -> IO[bytes]:
        """A new file of the checkpoint, open for writing."""

    @abstractmethod
    def close_file(self, f: IO[bytes]) -> None:
        """Make a written file durable and close it."""

    @abstractmethod
    def write_small(self, file: str, data: bytes) -> None:
        """Write a whole small file (the manifest) durably."""

    @abstractmethod
    def commit(self, marker: bytes) -> None:
        """Write the commit marker and make the checkpoint visible to readers, in one step."""

    @abstractmethod
    def abort(self) -> None:
        """Remove what was written; the checkpoint was never committed."""


class CheckpointStore(ABC):
    """The checkpoint directory of one run: its `step-*` entries and the files in each."""

    uri: str
    object_storage: bool

    @abstractmethod
    def child(self, name: str) -> str:
        """The URI of the entry `name`."""

    @abstractmethod
    def path(self, name: str) -> str:
        """The entry's path on its filesystem."""

    @abstractmethod
    def names(self) -> list[str]:
        """Every `step-*` entry, committed or not."""

    def committed_names(self) -> list[str]:
        """The committed `step-*` entries."""
        return [name for name in self.names() if self.committed(name)]

    @abstractmethod
    def present(self, name: str) -> bool:
        """Whether there is something to read at `name`: a directory on disk, a committed prefix in a bucket."""

    @abstractmethod
    def committed(self, name: str) -> bool:
        """Whether the entry `name` is committed: renamed into place, or holding its marker."""

    @abstractmethod
    def read_small(self, name: str, file: str) -> bytes | None:
        """A small file's content, or None when it does not exist."""

    @abstractmethod
    def open_read(self, name: str, file: str) -> IO[bytes]:
        """A file of the entry `name`, open for reading; FileNotFoundError when it is missing."""

    @abstractmethod
    def ranges(self, name: str, file: str) -> contextlib.AbstractContextManager[ReadInto]:
        """A reader of byte ranges of one file, meant to read one stretch of it in order.

        `read_into(offset, view)` fills `view` from `offset` and returns the bytes read (fewer at the end).
        """

    def map_file(self, name: str, file: str) -> mmap.mmap | None:
        """A whole file of the entry `name` mapped copy-on-write, or None where this store cannot map files
        (object storage): writes to the mapping stay in this process, the file is never changed."""
        return None

    @abstractmethod
    def file_size(self, name: str, file: str) -> int:
        """The size of a file of the entry `name`."""

    @abstractmethod
    def size(self, name: str) -> int:
        """Bytes stored under the entry `name`."""

    @abstractmethod
    def remove(self, name: str) -> None:
        """Remove a checkpoint so that no reader ever sees it half removed."""

    @abstractmethod
    def draft(self, name: str) -> Draft:
        """Where a new checkpoint named `name` is written before its commit."""

    @abstractmethod
    def remove_stale(self) -> None:
        """Remove what writers that died long ago left behind."""


class LocalStore(CheckpointStore):
    object_storage = False

    def __init__(self, path: str) -> None:
        if not path:
            raise CheckpointError("the checkpoint directory is empty; set CROSSRAIL_CHECKPOINT_DIR")
        self.root = os.path.abspath(path)
        self.uri = file_uri(self.root)

    def child(self, name: str) -> str:
        return file_uri(self.path(name))

    def path(self, name: str) -> str:
        return os.path.join(self.root, name)

    def names(self) -> list[str]:
        try:
            entries = list(os.scandir(self.root))
        except (FileNotFoundError, NotADirectoryError):
            return []
        return [e.name for e in entries if STEP_DIR.match(e.name) and e.is_dir(follow_symlinks=False)]

    def present(self, name: str) -> bool:
        return os.path.isdir(self.path(name))

    def committed(self, name: str) -> bool:
        # The rename is the commit; a first-cut checkpoint has no marker, so the manifest is what counts.
        return os.path.isfile(os.path.join(self.root, name, MANIFEST_FILE))

    def read_small(self, name: str, file: str) -> bytes | None:
        try:
            with open(os.path.join(self.root, name, file), "rb") as f:
                return f.read()
        except FileNotFoundError:
            return None

    def open_read(self, name: str, file: str) -> IO[bytes]:
        return open(os.path.join(self.root, name, file), "rb", buffering=0)

    @contextlib.contextmanager
    def ranges(self, name: str, file: str) -> Iterator[ReadInto]:
        # One descriptor per reader, so the kernel's readahead follows each stretch read in order; positional
        # reads go straight into the caller's memory.
        fd = os.open(os.path.join(self.root, name, file), os.O_RDONLY)

        def read_into(offset: int, view: memoryview) -> int:
            os.posix_fadvise(fd, offset, len(view), os.POSIX_FADV_SEQUENTIAL)
            done = 0
            while done < len(view):
                n = os.preadv(fd, [view[done:]], offset + done)
                if n == 0:
                    break
                done += n
            return done

        try:
            yield read_into
        finally:
            os.close(fd)

    def map_file(self, name: str, file: str) -> mmap.mmap | None:
        fd = os.open(os.path.join(self.root, name, file), os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_SEQUENTIAL)  # the mapping shares this open file's readahead
            return mmap.mmap(fd, 0, access=mmap.ACCESS_COPY)
        except (ValueError, OSError):  # an empty file, or a file system that cannot map files: read instead
            return None
        finally:
            os.close(fd)

    def file_size(self, name: str, file: str) -> int:
        return os.stat(os.path.join(self.root, name, file)).st_size

    def size(self, name: str) -> int:
        return sum(e.stat().st_size for e in os.scandir(self.path(name)) if e.is_file(follow_symlinks=False))

    def remove(self, name: str) -> None:
        # Renamed away first, so a half-removed checkpoint never looks committed.
        aside = tempfile.mkdtemp(prefix=f"{TMP_PREFIX}pruned-{name}-", dir=self.root)
        os.rename(self.path(name), os.path.join(aside, "old"))
        shutil.rmtree(aside, ignore_errors=True)

    def draft(self, name: str) -> Draft:
        os.makedirs(self.root, exist_ok=True)
        return LocalDraft(self, name)

    def remove_stale(self) -> None:
        """Drafts whose writer died (its lock is free), and temp dirs of saves that died more than an hour
        ago; a younger one without a lock may belong to a live writer (or one on a file system without locks)."""
        cutoff = time.time() - STALE_TMP_S
        try:
            entries = list(os.scandir(self.root))
        except FileNotFoundError:
            return
        for entry in entries:
            if not entry.name.startswith(TMP_PREFIX):
                continue
            try:
                old = entry.stat(follow_symlinks=False).st_mtime < cutoff
            except FileNotFoundError:
                continue  # committed or removed meanwhile
            if old or _writer_dead(entry.path):
                shutil.rmtree(entry.path, ignore_errors=True)


def _open_as_umask_allows(directory: str) -> None:
    """mkdtemp makes a directory 0700 whatever the umask: open a checkpoint's as far as the process's umask
    lets its files be (umask 027 under isolation: the team's group reads it, as teams it shares with do)."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            umask = next((int(line.split()[1], 8) for line in f if line.startswith("Umask:")), None)
    except (OSError, ValueError, IndexError):
        return
    if umask is not None:
        os.chmod(directory, 0o777 & ~umask)


def _lock(path: str) -> int | None:
    """An open descriptor holding an exclusive flock on `path` (made if missing), or None where there is none."""
    if fcntl is None:
        return None
    fd = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    return fd


def _writer_dead(draft: str) -> bool:
    """Whether the draft's writer lock exists and is free: its writer died (a live one, this process's
    own async save included, holds it). No lock, or a file system without locks, says nothing."""
    if fcntl is None:
        return False
    path = os.path.join(draft, WRITER_LOCK)
    try:
        fd = os.open(path, os.O_RDWR | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        # A writer unlinks its lock before it lets go, as it commits: a lock still in place was let go by death.
        held = os.fstat(fd)
        now = os.stat(path)
        return (held.st_dev, held.st_ino) == (now.st_dev, now.st_ino)
    except OSError:
        return False
    finally:
        os.close(fd)


class LocalDraft(Draft):
    """Files go into a fresh `.tmp-<name>-*` sibling, fsynced; the commit renames it to `<name>`.

    The writer holds WRITER_LOCK in it until the commit or abort, so a later save can tell a dead writer's
    draft from a live one's."""

    def __init__(self, store: LocalStore, name: str) -> None:
        self.store, self.name = store, name
        self.tmp = tempfile.mkdtemp(prefix=f"{TMP_PREFIX}{name}-", dir=store.root)
        _open_as_umask_allows(self.tmp)
        lock = os.path.join(self.tmp, WRITER_LOCK)
        try:
            self._lock = _lock(lock)
        except OSError:
            self._lock = None
        if self._lock is None:
            with contextlib.suppress(OSError):
                os.unlink(lock)  # no lock to hold: the draft is left to the age rule

    def _unlock(self) -> None:
        """Unlink the lock, then let it go: a sweeper that takes it then sees it was not let go by death."""
        if self._lock is None:
            return
        with contextlib.suppress(OSError):
            os.unlink(os.path.join(self.tmp, WRITER_LOCK))
        os.close(self._lock)
        self._lock = None

    def open_write(self, file: str) -> IO[bytes]:
        return open(os.path.join(self.tmp, file), "wb", buffering=0)

    def close_file(self, f: IO[bytes]) -> None:
        os.fsync(f.fileno())
        f.close()

    def write_small(self, file: str, data: bytes) -> None:
        f = self.open_write(file)
        try:
            f.write(data)
        except BaseException:
            f.close()
            raise
        self.close_file(f)

    def commit(self, marker: bytes) -> None:
        """Marker and directory fsynced, then one rename; a damaged dir already there is moved aside first."""
        self.write_small(MARKER_FILE, marker)
        if self._lock is not None:  # the lock file goes before the commit; the lock itself is held through it
            os.unlink(os.path.join(self.tmp, WRITER_LOCK))
        fsync_dir(self.tmp)
        final, aside = self.store.path(self.name), None
        if os.path.lexists(final):
            aside = tempfile.mkdtemp(prefix=f"{TMP_PREFIX}replaced-{self.name}-", dir=self.store.root)
            os.rename(final, os.path.join(aside, "old"))
        try:
            os.rename(self.tmp, final)
        finally:
            self._unlock()
        fsync_dir(self.store.root)
        if aside is not None:
            shutil.rmtree(aside, ignore_errors=True)

    def abort(self) -> None:
        self._unlock()
        shutil.rmtree(self.tmp, ignore_errors=True)


class ObjectStore(CheckpointStore):
    object_storage = True

    def __init__(self, uri: str, storage_options: StorageOptions | None = None) -> None:
        import fsspec.core

        self.uri = uri.rstrip("/")
        options = dict(storage_options or {})
        _quiet_gcs_emulator(self.uri, options)
        try:
            self.fs, root = fsspec.core.url_to_fs(self.uri, **options)
        except (ImportError, ValueError) as exc:
            hint = "pip install 'crossrail[gcs]' or 'crossrail[s3]'" if "://" in uri else "check the URI"
            raise CheckpointError(f"{uri}: fsspec cannot open it ({exc}); {hint}") from exc
        self.root = str(root).rstrip("/")

    def child(self, name: str) -> str:
        return f"{self.uri}/{name}"

    def path(self, name: str) -> str:
        return f"{self.root}/{name}"

    def _listing(self) -> dict[str, set[str]]:
        """Each entry under the root and the files in it, read fresh (a listing cache would hide new commits)."""
        self.fs.invalidate_cache()
        try:
            found = self.fs.find(self.root)
        except FileNotFoundError:
            return {}
        entries: dict[str, set[str]] = {}
        for path in found:
            parts = str(path)[len(self.root) + 1 :].split("/")
            if len(parts) >= 2:
                entries.setdefault(parts[0], set()).add("/".join(parts[1:]))
        return entries

    def names(self) -> list[str]:
        return [name for name in self._listing() if STEP_DIR.match(name)]

    def committed_names(self) -> list[str]:
        return [name for name, files in self._listing().items() if STEP_DIR.match(name) and MARKER_FILE in files]

    def present(self, name: str) -> bool:
        return self.committed(name)

    def committed(self, name: str) -> bool:
        self.fs.invalidate_cache()
        return bool(self.fs.exists(f"{self.path(name)}/{MARKER_FILE}"))

    def read_small(self, name: str, file: str) -> bytes | None:
        try:
            return bytes(self.fs.cat_file(f"{self.path(name)}/{file}"))
        except FileNotFoundError:
            return None

    def open_read(self, name: str, file: str) -> IO[bytes]:
        f: IO[bytes] = self.fs.open(f"{self.path(name)}/{file}", "rb", cache_type="none")
        return f

    @contextlib.contextmanager
    def ranges(self, name: str, file: str) -> Iterator[ReadInto]:
        path = f"{self.path(name)}/{file}"

        def read_into(offset: int, view: memoryview) -> int:
            data = self.fs.cat_file(path, start=offset, end=offset + len(view))  # one ranged GET
            view[: len(data)] = data
            return len(data)

        yield read_into

    def file_size(self, name: str, file: str) -> int:
        return int(self.fs.size(f"{self.path(name)}/{file}"))

    def size(self, name: str) -> int:
        self.fs.invalidate_cache()
        return sum(int(info["size"]) for info in self.fs.find(self.path(name), detail=True).values())

    def remove(self, name: str) -> None:
        """The marker first: from then on the checkpoint does not exist, whatever is left of it."""
        marker = f"{self.path(name)}/{MARKER_FILE}"
        self.fs.invalidate_cache()
        if self.fs.exists(marker):
            self.fs.rm_file(marker)
        self.fs.invalidate_cache()
        if self.fs.exists(self.path(name)):
            self.fs.rm(self.path(name), recursive=True)
        self.fs.invalidate_cache()

    def draft(self, name: str) -> Draft:
        self.remove(name)  # a torn or uncommitted earlier try: its marker goes first, then its files
        return ObjectDraft(self, name)

    def remove_stale(self) -> None:
        """Nothing to do here: object storage has no temp dirs, and prune removes uncommitted prefixes."""


class ObjectDraft(Draft):
    """Files go straight under the final prefix; the commit writes the marker object, last."""

    def __init__(self, store: ObjectStore, name: str) -> None:
        self.store, self.name = store, name
        self.prefix = store.path(name)

    def open_write(self, file: str) -> IO[bytes]:
        f: IO[bytes] = self.store.fs.open(f"{self.prefix}/{file}", "wb")
        return f

    def close_file(self, f: IO[bytes]) -> None:
        f.close()  # completes the upload; the object is durable once the store acknowledges it

    def write_small(self, file: str, data: bytes) -> None:
        self.store.fs.pipe_file(f"{self.prefix}/{file}", data)

    def commit(self, marker: bytes) -> None:
        self.store.fs.pipe_file(f"{self.prefix}/{MARKER_FILE}", marker)
        self.store.fs.invalidate_cache()

    def abort(self) -> None:
        with contextlib.suppress(OSError):  # uncommitted, so invisible to readers; prune removes it later
            self.store.remove(self.name)


def open_store(uri: str, storage_options: StorageOptions | None = None) -> CheckpointStore:
    """The store of a checkpoint directory: a local path or `file://` URI, or any fsspec URI."""
    path = local_path(uri)
    if path is not None:
        return LocalStore(path)
    return ObjectStore(uri, storage_options)


def split(uri: str, storage_options: StorageOptions | None = None) -> tuple[CheckpointStore, str]:
    """The store holding the checkpoint `uri` names, and the checkpoint's name in it."""
    path = local_path(uri)
    if path is not None:
        if not path:
            raise CheckpointError("the checkpoint URI is empty")
        full = os.path.abspath(path)
        return LocalStore(os.path.dirname(full)), os.path.basename(full)
    parent, _, name = uri.rstrip("/").rpartition("/")
    if not name or parent.endswith((":/", ":")):
        raise CheckpointError(f"{uri} names no checkpoint directory; give <scheme>://<bucket>/<path>/step-<step>")
    return ObjectStore(parent, storage_options), name


def _quiet_gcs_emulator(uri: str, options: dict[str, Any]) -> None:
    """Against a GCS emulator, turn off gcsfs's bucket-layout probe before gcsfs is imported.

    With it on, gcsfs asks the emulator for a gRPC storage layout on every open; the call fails, is never
    cached, and each operation stalls for 20-90 s. Real GCS is unaffected: no emulator, no change.
    """
    emulated = options.get("endpoint_url") or os.environ.get("STORAGE_EMULATOR_HOST")
    if uri.startswith(("gs://", "gcs://")) and emulated and "gcsfs" not in sys.modules:
        os.environ.setdefault("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")
