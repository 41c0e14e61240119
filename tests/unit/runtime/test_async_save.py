"""Asynchronous saves: the caller is blocked only for the copy, one save in flight, failures never swallowed."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import crossrail.runtime.checkpoint as checkpoint_module
from crossrail.runtime import Checkpointer, CheckpointError, SaveHandle, asyncsave
from crossrail.runtime.stores import LocalDraft

from .ckpt_builders import assert_bit_identical, big_tensors_of, flip_a_data_byte, step_dir, tensors_of


def slow_writes(monkeypatch: pytest.MonkeyPatch, delay_s: float) -> threading.Event:
    """Each shard write waits `delay_s` first; returns an event set when a write has begun."""
    began = threading.Event()
    real = checkpoint_module.write_shard

    def write_shard(*args: Any) -> Any:
        began.set()
        time.sleep(delay_s)
        return real(*args)

    monkeypatch.setattr(checkpoint_module, "write_shard", write_shard)
    return began


def test_the_saved_checkpoint_is_the_state_at_the_call_not_what_the_caller_changes_next(tmp_path: Path) -> None:
    tensors, state = big_tensors_of(1), {"data": {"position": 1}}
    want = {name: a.copy() for name, a in tensors.items()}
    with Checkpointer(str(tmp_path), shard_bytes=1 << 20) as ckpt:
        handle = ckpt.save_async(tensors, 1, state, tokens=10)
        for a in tensors.values():
            a[...] = 0  # the next training step overwrites the arrays in place
        state["data"]["position"] = 2
        assert handle.wait() == step_dir(tmp_path, 1).as_uri()
        assert handle.done()
        assert handle.error is None
    restored, manifest = Checkpointer(str(tmp_path)).restore()
    assert_bit_identical(restored, want)
    assert (manifest["state"], manifest["tokens"]) == ({"data": {"position": 1}}, 10)


def test_the_caller_is_blocked_only_for_the_copy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    began = slow_writes(monkeypatch, 0.5)
    ckpt = Checkpointer(str(tmp_path))
    t0 = time.perf_counter()
    handle = ckpt.save_async(big_tensors_of(1), 1)
    blocked_s = time.perf_counter() - t0
    assert blocked_s < 0.25
    assert began.wait(5)
    assert not handle.done()
    assert ckpt.list() == []  # nothing committed while the write is under way
    ckpt.wait()
    assert [c.step for c in ckpt.list()] == [1]


def test_staging_buffers_are_reused_between_saves_and_reallocated_only_when_a_shape_changes(tmp_path: Path) -> None:
    ckpt = Checkpointer(str(tmp_path))
    ckpt.save_async(tensors_of(1), 1)
    staged = dict(ckpt.staging.buffers)
    assert ckpt.staging.allocations == len(tensors_of(1))
    for step in (2, 3):
        ckpt.save_async(tensors_of(step), step)
    assert ckpt.staging.allocations == len(tensors_of(1))
    assert all(ckpt.staging.buffers[name] is staged[name] for name in staged)
    ckpt.save_async(tensors_of(4) | {"embed.weight": np.zeros((16, 4), np.float32)}, 4)
    assert ckpt.staging.allocations == len(tensors_of(1)) + 1
    assert ckpt.staging.buffers["embed.weight"] is not staged["embed.weight"]
    assert ckpt.staging.buffers["half"] is staged["half"]
    ckpt.close()
    assert ckpt.staging.buffers == {}
    assert [c.step for c in Checkpointer(str(tmp_path)).list()] == [1, 2, 3, 4]
    assert_bit_identical(Checkpointer(str(tmp_path)).restore(3)[0], tensors_of(3))


def test_a_second_save_waits_for_the_first(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    slow_writes(monkeypatch, 0.3)
    ckpt = Checkpointer(str(tmp_path))
    first = ckpt.save_async(tensors_of(1), 1)
    second = ckpt.save_async(tensors_of(2), 2)
    assert first.done()  # the second call returned only once the first had committed
    assert [c.step for c in ckpt.list()] == [1]
    assert second.wait() == step_dir(tmp_path, 2).as_uri()
    uri = ckpt.save(tensors_of(3), 3)  # a synchronous save waits too
    assert uri == step_dir(tmp_path, 3).as_uri()
    assert [c.step for c in ckpt.list()] == [1, 2, 3]


def failing_commits(monkeypatch: pytest.MonkeyPatch) -> None:
    def commit(self: LocalDraft, marker: bytes) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(LocalDraft, "commit", commit)


def test_a_failed_background_write_goes_to_on_error_and_is_raised_by_the_next_save(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    errors: list[BaseException] = []
    ckpt = Checkpointer(str(tmp_path), on_error=errors.append)
    failing_commits(monkeypatch)
    handle = ckpt.save_async(tensors_of(1), 1)
    while not handle.done():
        time.sleep(0.01)
    assert isinstance(handle.error, CheckpointError)
    assert "background save of step 1" in str(handle.error)
    assert "No space left on device" in str(handle.error)
    assert errors == [handle.error]
    monkeypatch.undo()
    with pytest.raises(CheckpointError, match="No space left on device"):
        ckpt.save(tensors_of(2), 2)
    assert ckpt.save(tensors_of(2), 2) == step_dir(tmp_path, 2).as_uri()  # raised once, then saves go on
    assert [c.step for c in ckpt.list()] == [2]
    assert [n.name for n in tmp_path.iterdir()] == ["step-0000000002"]  # the failed save left nothing


@pytest.mark.parametrize("how", ["wait", "close", "save_async", "handle"])
def test_a_failed_background_write_is_raised_once_by_whichever_call_comes_next(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    ckpt = Checkpointer(str(tmp_path))
    failing_commits(monkeypatch)
    handle: SaveHandle = ckpt.save_async(tensors_of(1), 1)
    calls = {
        "wait": ckpt.wait,
        "close": ckpt.close,
        "save_async": lambda: ckpt.save_async(tensors_of(2), 2),
        "handle": handle.wait,
    }
    with pytest.raises(CheckpointError, match="No space left on device"):
        calls[how]()
    monkeypatch.undo()
    ckpt.wait()  # reported once: it is not raised again
    assert ckpt.save(tensors_of(3), 3) == step_dir(tmp_path, 3).as_uri()


def test_prune_waits_for_the_async_save_in_flight_to_commit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ckpt = Checkpointer(str(tmp_path))
    ckpt.save(tensors_of(1), 1)
    slow_writes(monkeypatch, 0.3)
    handle = ckpt.save_async(tensors_of(2), 2)
    assert ckpt.prune(keep_last=1) == [step_dir(tmp_path, 1).as_uri()]
    assert handle.done()
    assert [c.step for c in ckpt.list()] == [2]


def test_retention_racing_async_saves_never_removes_the_last_good_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ckpt = Checkpointer(str(tmp_path), keep_last=1)
    ckpt.save(tensors_of(1), 1)
    slow_writes(monkeypatch, 0.1)
    stop, newest_valid = threading.Event(), []

    def prune_all_the_time() -> None:
        while not stop.is_set():
            ckpt.prune(keep_last=1)
            newest_valid.append(Checkpointer(str(tmp_path)).latest())

    pruner = threading.Thread(target=prune_all_the_time)
    pruner.start()
    try:
        for step in (2, 3, 4):
            ckpt.save_async(tensors_of(step), step)
            time.sleep(0.05)
    finally:
        ckpt.wait()
        stop.set()
        pruner.join()
    assert newest_valid
    assert None not in newest_valid  # at no moment was there no valid checkpoint
    monkeypatch.undo()
    # The newest checkpoint goes bad right after its commit: retention keeps the last good one.
    real_commit = LocalDraft.commit

    def commit_then_rot(self: LocalDraft, marker: bytes) -> None:
        real_commit(self, marker)
        flip_a_data_byte(tmp_path, 5)

    monkeypatch.setattr(LocalDraft, "commit", commit_then_rot)
    ckpt.save_async(tensors_of(5), 5).wait()
    assert [c.step for c in ckpt.list()] == [4, 5]
    skipped: list[str] = []
    assert_bit_identical(ckpt.restore(on_skip=lambda uri, why: skipped.append(uri))[0], tensors_of(4))
    assert skipped == [step_dir(tmp_path, 5).as_uri()]
    # A save that fails leaves retention nothing to act on: the last good one stays.
    failing_commits(monkeypatch)
    with pytest.raises(CheckpointError):
        ckpt.save_async(tensors_of(6), 6).wait()
    assert ckpt.prune() == []
    assert [c.step for c in ckpt.list()] == [4, 5]


def test_a_large_state_is_staged_on_several_threads_bit_for_bit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(asyncsave, "COPY_CHUNK_BYTES", 64 << 10)  # many chunks from a few MiB
    tensors = big_tensors_of(3) | {
        "odd": np.arange((1 << 18) + 7, dtype=np.int16),  # a last chunk shorter than the rest
        "strided": np.arange(1 << 18, dtype=np.float32)[::2],  # not contiguous: copied whole
        "big_endian": np.arange(1 << 16, dtype=">f8"),  # converted while copied
    }
    threads: set[str] = set()
    real = asyncsave.np.copyto

    def copyto(*args: Any, **kwargs: Any) -> None:
        threads.add(threading.current_thread().name)
        time.sleep(0.002)  # as long as a real chunk's copy: the calling thread does not finish alone first
        real(*args, **kwargs)

    monkeypatch.setattr(asyncsave.np, "copyto", copyto)
    staging = asyncsave.Staging(copiers=4)
    staged = staging.copy(tensors)
    monkeypatch.setattr(asyncsave.np, "copyto", real)
    assert len(threads) > 1  # one thread's memcpy leaves the training step waiting longer
    assert list(staged) == list(tensors)
    for name, a in tensors.items():
        assert staged[name].dtype == a.dtype.newbyteorder("<")
        assert staged[name].flags.c_contiguous
        np.testing.assert_array_equal(staged[name], a)
    tensors["w"][...] = 0  # the caller changes its arrays; the staged copy keeps the values of the call
    assert staged["w"].any()


def test_a_failed_copy_is_raised_to_the_caller(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(asyncsave, "COPY_CHUNK_BYTES", 64 << 10)

    def copyto(*args: Any, **kwargs: Any) -> None:
        raise MemoryError("no room")

    monkeypatch.setattr(asyncsave.np, "copyto", copyto)
    with pytest.raises(MemoryError, match="no room"):
        asyncsave.Staging(copiers=4).copy(big_tensors_of(1))


def slow_copies(monkeypatch: pytest.MonkeyPatch, delay_s: float) -> threading.Event:
    """Each staging copy waits `delay_s` first; returns an event set when a copy has begun."""
    began = threading.Event()
    real = asyncsave.np.copyto

    def copyto(*args: Any, **kwargs: Any) -> None:
        began.set()
        time.sleep(delay_s)
        real(*args, **kwargs)

    monkeypatch.setattr(asyncsave.np, "copyto", copyto)
    return began


def test_a_background_staged_save_keeps_the_arrays_read_only_until_they_are_copied(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tensors = big_tensors_of(1)
    want = {name: a.copy() for name, a in tensors.items()}
    began = slow_copies(monkeypatch, 0.3)
    with Checkpointer(str(tmp_path)) as ckpt:
        handle = ckpt.save_async(tensors, 1, staging="background")
        assert began.wait(5)
        assert not handle.staged()
        with pytest.raises(ValueError, match="read-only"):
            tensors["w"][0] = 0  # an optimizer step before wait_staged would tear the copy: refused
        ckpt.wait_staged()
        assert handle.staged()
        assert all(a.flags.writeable for a in tensors.values())
        for a in tensors.values():
            a[...] = 0  # the next optimizer step, after the copy
        handle.wait()
    assert_bit_identical(Checkpointer(str(tmp_path)).restore(1)[0], want)


def test_a_background_staged_save_does_not_block_the_caller_for_the_copy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    slow_copies(monkeypatch, 0.5)
    ckpt = Checkpointer(str(tmp_path))
    t0 = time.perf_counter()
    handle = ckpt.save_async(big_tensors_of(1), 1, staging="background")
    assert time.perf_counter() - t0 < 0.25
    monkeypatch.undo()  # the copies under way stay slow
    caller = ckpt.save_async(tensors_of(2), 2)  # the next save waits for the first to commit, then copies now
    assert handle.done()
    assert caller.staged()
    ckpt.wait_staged()  # nothing to wait for: the caller staged it
    ckpt.close()
    assert [c.step for c in Checkpointer(str(tmp_path)).list()] == [1, 2]


def test_a_view_staged_beside_its_base_is_writable_again_after_the_copy(tmp_path: Path) -> None:
    base = np.arange(64, dtype=np.float32)
    tensors = {"head": base[:8], "all": base, "tail": base[-8:]}  # views before and after their base
    with Checkpointer(str(tmp_path)) as ckpt:
        ckpt.save_async(tensors, 1, staging="background")
        ckpt.wait_staged()
        assert all(a.flags.writeable for a in tensors.values())


def test_two_background_saves_never_share_the_staging_buffers_while_in_flight(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    slow_writes(monkeypatch, 0.3)  # the first is still writing from its buffers when the second is asked for
    ckpt = Checkpointer(str(tmp_path))
    first = ckpt.save_async(big_tensors_of(1), 1, staging="background")
    first.wait_staged()
    buffers = dict(ckpt.staging.buffers)
    second = ckpt.save_async(big_tensors_of(2), 2, staging="background")
    assert first.done()  # the second copies into the same buffers only after the first committed
    second.wait()
    assert all(ckpt.staging.buffers[name] is buffers[name] for name in buffers)  # reused, one save at a time
    for step in (1, 2):
        assert_bit_identical(Checkpointer(str(tmp_path)).restore(step)[0], big_tensors_of(step))


def test_a_failed_background_copy_frees_the_arrays_and_is_raised_by_wait(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(asyncsave, "COPY_CHUNK_BYTES", 64 << 10)

    def copyto(*args: Any, **kwargs: Any) -> None:
        raise MemoryError("no room")

    monkeypatch.setattr(asyncsave.np, "copyto", copyto)
    tensors = big_tensors_of(1)
    ckpt = Checkpointer(str(tmp_path))
    handle = ckpt.save_async(tensors, 1, staging="background")
    handle.wait_staged(5)
    assert all(a.flags.writeable for a in tensors.values())
    with pytest.raises(CheckpointError, match="no room"):
        handle.wait()
    assert ckpt.list() == []


def test_an_unknown_staging_mode_is_refused_and_nothing_is_written(tmp_path: Path) -> None:
    ckpt = Checkpointer(str(tmp_path))
    with pytest.raises(CheckpointError, match="staging must be 'caller' or 'background'"):
        ckpt.save_async(tensors_of(1), 1, staging="later")  # type: ignore[arg-type]
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(("cores", "copiers"), [(1, 1), (2, 1), (4, 3), (16, 8)], ids=["1-core", "2", "4", "16"])
def test_a_background_copy_leaves_one_core_to_the_training_step(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cores: int, copiers: int
) -> None:
    monkeypatch.setattr(asyncsave, "COPY_CHUNK_BYTES", 64 << 10)  # enough chunks for every copier
    monkeypatch.setattr(asyncsave.os, "cpu_count", lambda: cores)
    threads: set[str] = set()
    real = asyncsave.np.copyto

    def copyto(*args: Any, **kwargs: Any) -> None:
        threads.add(threading.current_thread().name)
        time.sleep(0.01)  # long enough for the pool to start every thread it may
        real(*args, **kwargs)

    monkeypatch.setattr(asyncsave.np, "copyto", copyto)
    with Checkpointer(str(tmp_path)) as ckpt:
        ckpt.staging.copiers = 8
        ckpt.save_async(big_tensors_of(1), 1, staging="background").wait()
    assert len(threads) == copiers


def test_a_caller_waiting_for_a_background_copy_copies_a_share_of_it_and_gets_the_whole_state(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(asyncsave, "COPY_CHUNK_BYTES", 256 << 10)  # a dozen chunks of the state
    monkeypatch.setattr(asyncsave.os, "cpu_count", lambda: 2)  # one background copier
    tensors = big_tensors_of(4)
    want = {name: a.copy() for name, a in tensors.items()}
    threads: list[str] = []
    real = asyncsave.np.copyto

    def copyto(*args: Any, **kwargs: Any) -> None:
        threads.append(threading.current_thread().name)
        time.sleep(0.02)
        real(*args, **kwargs)

    monkeypatch.setattr(asyncsave.np, "copyto", copyto)
    with Checkpointer(str(tmp_path)) as ckpt:
        handle = ckpt.save_async(tensors, 4, staging="background")
        ckpt.wait_staged()  # the training step's wait before its update: it copies instead of idling
        assert handle.staged()
        assert all(a.flags.writeable for a in tensors.values())
        for a in tensors.values():
            a[...] = 0
        handle.wait()
    assert threading.current_thread().name in threads
    assert len(set(threads)) == 2  # the save's copier and the caller, no more
    assert len(threads) > 2
    assert_bit_identical(Checkpointer(str(tmp_path)).restore(4)[0], want)


def test_a_copy_that_fails_on_the_waiting_caller_fails_the_save_not_the_wait(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(asyncsave, "COPY_CHUNK_BYTES", 256 << 10)
    monkeypatch.setattr(asyncsave.os, "cpu_count", lambda: 2)
    caller = threading.current_thread()
    real = asyncsave.np.copyto

    def copyto(*args: Any, **kwargs: Any) -> None:
        time.sleep(0.02)
        if threading.current_thread() is caller:
            raise MemoryError("no room on the caller")
        real(*args, **kwargs)

    monkeypatch.setattr(asyncsave.np, "copyto", copyto)
    tensors = big_tensors_of(1)
    ckpt = Checkpointer(str(tmp_path))
    handle = ckpt.save_async(tensors, 1, staging="background")
    ckpt.wait_staged()
    assert all(a.flags.writeable for a in tensors.values())
    with pytest.raises(CheckpointError, match="no room on the caller"):
        handle.wait()
    assert ckpt.list() == []
