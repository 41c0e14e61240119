"""crossrail-ckpt/v1 on object storage (fsspec's memory filesystem): files first, the commit marker last."""

from __future__ import annotations

from typing import Any

import pytest
import xxhash

from crossrail.runtime import Checkpointer, CheckpointNotFound, TornCheckpoint, load, resolve

from .ckpt_builders import assert_bit_identical, big_tensors_of, tensors_of

ROOT = "memory://ckpt/run-1"
PREFIX = "/ckpt/run-1"


def test_a_checkpoint_on_object_storage_restores_bit_identical(memfs: Any) -> None:
    ckpt = Checkpointer(ROOT, shard_bytes=1 << 20)
    assert ckpt.save(big_tensors_of(3), 3, {"data": {"position": 3}}, tokens=99) == f"{ROOT}/step-0000000003"
    assert sorted(memfs.ls(f"{PREFIX}/step-0000000003", detail=False)) == [
        f"{PREFIX}/step-0000000003/{name}"
        for name in ("COMMITTED", "manifest.json", *(f"model-0000{i}-of-00003.safetensors" for i in (1, 2, 3)))
    ]
    tensors, manifest = Checkpointer(ROOT).restore()
    assert_bit_identical(tensors, big_tensors_of(3))
    assert (manifest["step"], manifest["tokens"], manifest["state"]) == (3, 99, {"data": {"position": 3}})
    assert_bit_identical(Checkpointer(ROOT).restore(3, mapped=True)[0], big_tensors_of(3))  # read as without it
    assert load(f"{ROOT}/step-0000000003")[1]["step"] == 3
    assert resolve(ROOT).step == 3


def test_the_marker_is_written_last_and_holds_the_manifest_checksum(
    memfs: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    written: list[str] = []  # pipe_file writes through open too
    real_open = memfs.open

    def open_(path: str, mode: str = "rb", **kw: Any) -> Any:
        if "w" in mode:
            written.append(path)
        return real_open(path, mode, **kw)

    monkeypatch.setattr(memfs, "open", open_)
    Checkpointer(ROOT, shard_bytes=1 << 20).save(big_tensors_of(1), 1)
    names = [p.rsplit("/", 1)[1] for p in written]
    assert names[-2:] == ["manifest.json", "COMMITTED"]
    assert sorted(names[:-2]) == [f"model-0000{i}-of-00003.safetensors" for i in (1, 2, 3)]
    manifest = memfs.cat_file(f"{PREFIX}/step-0000000001/manifest.json")
    assert (
        memfs.cat_file(f"{PREFIX}/step-0000000001/COMMITTED")
        == f"xxh3-64:{xxhash.xxh3_64_hexdigest(manifest)}\n".encode()
    )


def test_a_prefix_without_its_marker_does_not_exist_for_readers(memfs: Any) -> None:
    ckpt = Checkpointer(ROOT)
    ckpt.save(tensors_of(1), 1)
    ckpt.save(tensors_of(2), 2)
    memfs.rm_file(f"{PREFIX}/step-0000000002/COMMITTED")  # as a writer that died before its commit leaves it
    skipped: list[tuple[str, str]] = []
    assert [c.step for c in ckpt.list()] == [1]
    latest = ckpt.latest(on_skip=lambda uri, why: skipped.append((uri, why)))
    assert latest is not None
    assert latest.step == 1
    assert skipped == []  # nothing was committed there, so nothing was skipped
    assert_bit_identical(ckpt.restore()[0], tensors_of(1))
    with pytest.raises(CheckpointNotFound, match=r"no checkpoint of step 2 .*newest valid one is step 1"):
        ckpt.restore(2)
    with pytest.raises(CheckpointNotFound, match="no checkpoint directory"):
        resolve(f"{ROOT}/step-0000000002")


def test_a_flipped_byte_on_object_storage_is_skipped_with_an_event(memfs: Any) -> None:
    ckpt = Checkpointer(ROOT)
    ckpt.save(tensors_of(1), 1)
    ckpt.save(tensors_of(2), 2)
    path = f"{PREFIX}/step-0000000002/model.safetensors"
    data = bytearray(memfs.cat_file(path))
    data[-1] ^= 1
    memfs.pipe_file(path, bytes(data))
    skipped: list[tuple[str, str]] = []
    tensors, manifest = ckpt.restore(on_skip=lambda uri, why: skipped.append((uri, why)))
    assert manifest["step"] == 1
    assert_bit_identical(tensors, tensors_of(1))
    assert skipped == [(f"{ROOT}/step-0000000002", skipped[0][1])]
    assert "checksum mismatch in model.safetensors" in skipped[0][1]
    with pytest.raises(TornCheckpoint, match="checksum mismatch"):
        ckpt.verify(2)


def test_saving_over_leftovers_of_a_dead_writer_replaces_them_and_a_torn_commit(memfs: Any) -> None:
    memfs.pipe_file(f"{PREFIX}/step-0000000001/model-00007-of-00009.safetensors", b"left by a writer that died")
    ckpt = Checkpointer(ROOT)
    ckpt.save(tensors_of(1), 1)
    assert sorted(p.rsplit("/", 1)[1] for p in memfs.find(f"{PREFIX}/step-0000000001")) == [
        "COMMITTED",
        "manifest.json",
        "model.safetensors",
    ]
    memfs.pipe_file(f"{PREFIX}/step-0000000001/model.safetensors", b"garbage")
    ckpt.save(tensors_of(1), 1, {"again": True})  # committed but torn: written anew
    tensors, manifest = ckpt.restore(1)
    assert manifest["state"] == {"again": True}
    assert_bit_identical(tensors, tensors_of(1))


def test_prune_removes_the_marker_first_and_old_uncommitted_prefixes(
    memfs: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    ckpt = Checkpointer(ROOT)
    for step in (1, 2, 3):
        ckpt.save(tensors_of(step), step)
    memfs.rm_file(f"{PREFIX}/step-0000000002/COMMITTED")  # 2: a save that died before its commit
    memfs.pipe_file(f"{PREFIX}/step-0000000009/model.safetensors", b"a save in flight")
    removed_paths: list[str] = []
    real_rm_file = memfs.rm_file

    def rm_file(path: str) -> None:
        removed_paths.append(path)
        real_rm_file(path)

    monkeypatch.setattr(memfs, "rm_file", rm_file)
    assert ckpt.prune(keep_last=1) == [f"{ROOT}/step-0000000001", f"{ROOT}/step-0000000002"]
    assert removed_paths[0] == f"{PREFIX}/step-0000000001/COMMITTED"
    assert sorted(memfs.ls(PREFIX, detail=False)) == [f"{PREFIX}/step-0000000003", f"{PREFIX}/step-0000000009"]
