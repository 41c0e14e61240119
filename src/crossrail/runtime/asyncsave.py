"""Asynchronous saves: host staging buffers reused between saves, and the handle of a save in flight."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any

import numpy as np
import numpy.typing as npt

from crossrail.runtime.manifest import CheckpointError

Tensors = dict[str, npt.NDArray[Any]]
OnError = Callable[[BaseException], None]


COPY_CHUNK_BYTES = 16 << 20  # one copy task; small enough to spread a few large tensors over every copier


def default_copiers() -> int:
    return max(1, min(8, os.cpu_count() or 1))


def background_copiers(copiers: int) -> int:
    """Copiers of a copy made beside the training step: one core is left to the step (its forward pass)."""
    return max(1, min(copiers, (os.cpu_count() or 1) - 1))


class Staging:
    """Host buffers shaped like the state, kept between saves; reallocated only when a shape or dtype changes.

    The copy is what a save_async blocks the training step for, so it runs on `copiers` threads at once
    (numpy copies without the GIL): one thread's memcpy leaves most of the memory bandwidth unused.
    """

    def __init__(self, copiers: int | None = None) -> None:
        self.buffers: Tensors = {}
        self.allocations = 0  # how many buffers were (re)allocated; a steady training loop stops adding
        self.copiers = copiers or default_copiers()

    def copy(self, arrays: Mapping[str, npt.NDArray[Any]], copiers: int | None = None) -> Tensors:
        """Copy `arrays` into C-contiguous little-endian buffers on `copiers` threads (default: the staging's);
        returns the buffers, in `arrays`' order."""
        staged, job = self.prepare(arrays)
        job.run(copiers or self.copiers)
        return staged

    def prepare(self, arrays: Mapping[str, npt.NDArray[Any]]) -> tuple[Tensors, CopyJob]:
        """The buffers `arrays` will be copied into, in their order, and the copy still to be run."""
        staged: Tensors = {}
        for name, a in arrays.items():
            dtype = a.dtype.newbyteorder("<")
            buffer = self.buffers.get(name)
            if buffer is None or buffer.shape != a.shape or buffer.dtype != dtype:
                buffer = np.empty(a.shape, dtype)
                self.allocations += 1
            staged[name] = buffer
        self.buffers = staged  # buffers of tensors no longer in the state are let go
        return staged, CopyJob([task for name, a in arrays.items() for task in _copy_tasks(staged[name], a)])

    def release(self) -> None:
        self.buffers = {}


class ReadOnlyWhileStaged:
    """The caller's arrays made read-only until their copy is done, so an early write raises, not tears the copy.

    A write through another view of the same memory (a torch tensor the array shares memory with) is not
    caught: the caller's side of the contract is to call `wait_staged()` before it changes the arrays.
    """

    def __init__(self, arrays: Mapping[str, npt.NDArray[Any]]) -> None:
        self.arrays = [a for a in arrays.values() if a.flags.writeable]
        for a in self.arrays:
            a.flags.writeable = False

    def release(self) -> None:
        """Writable again; a view whose base array is in the state too becomes so once its base has."""
        pending = self.arrays
        while pending:
            refused = []
            for a in pending:
                try:
                    a.flags.writeable = True
                except ValueError:  # its base is still read-only: the next pass; or made so by the caller
                    refused.append(a)
            if len(refused) == len(pending):
                break
            pending = refused
        self.arrays = []


class CopyJob:
    """The copy tasks of one staging, in order; any thread may take a share: the copiers, and a caller that would
    otherwise only wait for them (see SaveHandle.wait_staged)."""

    def __init__(self, tasks: list[Callable[[], None]]) -> None:
        self._tasks = tasks
        self._taken = 0
        self._running = 0
        self._lock = threading.Lock()
        self._done = threading.Event()
        self.error: BaseException | None = None  # the first failed task's; no task is started after it
        if not tasks:
            self._done.set()

    def run(self, copiers: int) -> None:
        """Run the tasks on `copiers` threads, this one among them, until they are done; raise the first failure."""
        helpers = min(copiers, len(self._tasks)) - 1
        if helpers < 1:
            self.help()
        else:
            with ThreadPoolExecutor(helpers, thread_name_prefix="crossrail-stage") as pool:
                for _ in range(helpers):
                    pool.submit(self.help)
                self.help()
        self.wait()

    def help(self) -> None:
        """Run tasks no thread has taken yet until none are left; a failure is kept for `wait`, not raised here."""
        while True:
            with self._lock:
                if self._taken == len(self._tasks) or self.error is not None:
                    return
                task = self._tasks[self._taken]
                self._taken += 1
                self._running += 1
            try:
                task()
            except BaseException as exc:
                with self._lock:
                    self.error = self.error or exc
            finally:
                with self._lock:
                    self._running -= 1
                    if self._running == 0 and (self._taken == len(self._tasks) or self.error is not None):
                        self._done.set()

    def stop(self) -> None:
        """No task is started from now on; returns once every task already taken has ended."""
        with self._lock:
            if self._taken < len(self._tasks) and self.error is None:
                self.error = CheckpointError("the staging copy was stopped before it ended")
            if self._running == 0:
                self._done.set()
        self._done.wait()

    def wait(self) -> None:
        """Block until every task taken has ended and none is left to take; raise the first failure."""
        self._done.wait()
        if self.error is not None:
            raise self.error


def _copy_tasks(buffer: npt.NDArray[Any], a: npt.NDArray[Any]) -> list[Callable[[], None]]:
    """The copy of `a` into `buffer` as tasks: byte ranges of a plain copy, or one task that converts."""
    if a.dtype != buffer.dtype or not a.flags.c_contiguous or a.nbytes <= COPY_CHUNK_BYTES:
        return [partial(np.copyto, buffer, a, casting="equiv")]  # also swaps the bytes of a big-endian array
    src, dst = a.reshape(-1).view(np.uint8), buffer.reshape(-1).view(np.uint8)
    step = COPY_CHUNK_BYTES
    return [partial(np.copyto, dst[i : i + step], src[i : i + step]) for i in range(0, a.nbytes, step)]


class SaveHandle:
    """A save running in the background: `done()`, `wait()`, and `error` once it failed."""

    def __init__(self, step: int, uri: str, *, staged: bool = True, copy: CopyJob | None = None) -> None:
        self.step = step
        self.uri = uri
        self._copy = copy  # the background staging copy, which a caller waiting for it helps with
        self._finished = threading.Event()
        self._staged = threading.Event()
        if staged:
            self._staged.set()
        self._error: BaseException | None = None
        self.reported = False  # the error was raised to the caller once; later calls do not raise it again

    def done(self) -> bool:
        return self._finished.is_set()

    def staged(self) -> bool:
        """Whether the caller's arrays are no longer read: copied into the staging buffers, or the save ended."""
        return self._staged.is_set()

    def wait_staged(self, timeout: float | None = None) -> None:
        """Block until `staged()`; the caller may then change its arrays. A failure is raised by `wait()`.

        Without a `timeout` the calling thread copies a share of what is left to copy instead of idling while the
        background copiers finish. TimeoutError when `timeout` seconds pass first.
        """
        if timeout is None and self._copy is not None and not self._staged.is_set():
            self._copy.help()
        if not self._staged.wait(timeout):
            raise TimeoutError(f"the tensors of step {self.step} are still being copied after {timeout} s")

    def mark_staged(self) -> None:
        self._staged.set()

    @property
    def error(self) -> BaseException | None:
        """The failure of the background write, or None (also while it is still running)."""
        return self._error

    def wait(self, timeout: float | None = None) -> str:
        """Block until the save is committed and return its URI; raise its failure if it failed.

        TimeoutError when `timeout` seconds pass first; the save goes on.
        """
        if not self._finished.wait(timeout):
            raise TimeoutError(f"the save of step {self.step} to {self.uri} is still running after {timeout} s")
        if self._error is not None:
            self.reported = True
            raise self._error
        return self.uri

    def fail(self, error: BaseException) -> BaseException:
        """Record the failure of the background write; returns it as the CheckpointError callers see."""
        wrapped = CheckpointError(f"the background save of step {self.step} to {self.uri} failed: {error}")
        wrapped.__cause__ = error
        self._error = wrapped
        return wrapped

    def finish(self) -> None:
        self._staged.set()  # a save that failed before its copy ended no longer reads the arrays either
        self._finished.set()


def run_in_background(handle: SaveHandle, work: Callable[[], Any], on_error: OnError | None) -> threading.Thread:
    """Start `work` in a thread that finishes `handle`; a failure goes to the handle and to `on_error`.

    Not a daemon: a process that ends while a save is in flight waits for it to commit.
    """

    def run() -> None:
        try:
            work()
        except BaseException as exc:
            error = handle.fail(exc)
            if on_error is not None:
                on_error(error)  # before the handle is done, so a caller that waited sees the callback's effect
        finally:
            handle.finish()

    thread = threading.Thread(target=run, name=f"crossrail-save-{handle.step}")
    thread.start()
    return thread
