"""Restoring a checkpoint into the caller's own arrays: verified in place, mismatches named before any write."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from crossrail.runtime import Checkpointer, CheckpointError, TornCheckpoint, shards

from .ckpt_builders import Arrays, assert_bit_identical, flip_a_data_byte, step_dir, tensors_of, truncate_a_tensor_file


def filled_like(tensors: Arrays, value: int = 7) -> Arrays:
    """Arrays of the tensors' shapes and dtypes, already written to, as a built model's are."""
    return {name: np.full(a.shape, value, a.dtype) for name, a in tensors.items()}


def test_a_restore_into_fills_the_callers_arrays_and_returns_them(tmp_path: Path) -> None:
    want = tensors_of(3)
    ckpt = Checkpointer(str(tmp_path))
    ckpt.save(want, 3, {"data": {"position": 3}})
    into = filled_like(want)
    got, manifest = ckpt.restore(into=into)
    assert manifest["state"] == {"data": {"position": 3}}
    assert all(got[name] is into[name] for name in want)
    assert_bit_identical(into, want)


def test_tensors_it_does_not_name_come_back_as_new_arrays(tmp_path: Path) -> None:
    want = tensors_of(2)
    ckpt = Checkpointer(str(tmp_path))
    ckpt.save(want, 2)
    into = {"embed.weight": np.zeros((8, 4), np.float32)}
    got, _ = ckpt.restore(2, into=into)
    assert got["embed.weight"] is into["embed.weight"]
    assert_bit_identical(got, want)


@pytest.mark.parametrize("chunk_bytes", [shards.READ_CHUNK_BYTES, 4096], ids=["one-chunk", "rows-over-many-chunks"])
def test_a_transposed_view_is_filled_as_its_tensor_reads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chunk_bytes: int
) -> None:
    # torch keeps an nn.Linear weight [out, in]; its .numpy().T is the neutral [in, out] layout, not C-contiguous
    rng = np.random.default_rng(0)
    want = {"fc.weight": rng.standard_normal((300, 64), dtype=np.float32), "wide": rng.random((3, 2000))}
    ckpt = Checkpointer(str(tmp_path))
    ckpt.save(want, 1)
    monkeypatch.setattr(shards, "READ_CHUNK_BYTES", chunk_bytes)  # a "wide" row (16 kB) then outgrows a chunk
    torch_like = {name: np.zeros(a.shape[::-1], a.dtype) for name, a in want.items()}
    into = {name: a.T for name, a in torch_like.items()}
    assert not into["fc.weight"].flags.c_contiguous
    ckpt.restore(1, into=into)
    for name, a in want.items():
        assert np.array_equal(torch_like[name], a.T), name


@pytest.mark.parametrize("readers", [1, 4])
def test_a_checksum_mismatch_is_found_in_place(tmp_path: Path, readers: int) -> None:
    want = tensors_of(5)
    ckpt = Checkpointer(str(tmp_path), readers=readers)
    ckpt.save(want, 5)
    flip_a_data_byte(tmp_path, 5)
    with pytest.raises(TornCheckpoint, match="checksum mismatch"):
        ckpt.restore(5, into=filled_like(want))


def test_a_damaged_newest_checkpoint_is_passed_over_and_the_older_one_fills_every_array(tmp_path: Path) -> None:
    ckpt = Checkpointer(str(tmp_path))
    ckpt.save(tensors_of(1), 1)
    ckpt.save(tensors_of(2), 2)
    flip_a_data_byte(tmp_path, 2)  # the last tensor's last byte: every other array is written before it is found
    skipped: list[tuple[str, str]] = []
    into = filled_like(tensors_of(1))
    _, manifest = ckpt.restore(into=into, on_skip=lambda uri, why: skipped.append((uri, why)))
    assert manifest["step"] == 1
    assert [uri for uri, _ in skipped] == [step_dir(tmp_path, 2).as_uri()]
    assert "checksum mismatch" in skipped[0][1]
    assert_bit_identical(into, tensors_of(1))


def test_a_truncated_checkpoint_is_found_before_any_array_is_written(tmp_path: Path) -> None:
    want = tensors_of(4)
    ckpt = Checkpointer(str(tmp_path))
    ckpt.save(want, 4)
    truncate_a_tensor_file(tmp_path, 4)
    into = filled_like(want)
    with pytest.raises(TornCheckpoint, match="truncated"):
        ckpt.restore(4, into=into)
    assert_bit_identical(into, filled_like(want))


def test_every_mismatch_is_named_at_once_and_nothing_is_written(tmp_path: Path) -> None:
    want = tensors_of(6)
    ckpt = Checkpointer(str(tmp_path))
    ckpt.save(want, 6)
    read_only = np.zeros(5, np.int64)
    read_only.flags.writeable = False
    into: dict[str, Any] = filled_like(want) | {
        "embed.weight": np.zeros((4, 8), np.float32),  # transposed shape
        "scale": np.zeros((), np.float32),  # float64 in the checkpoint
        "half": np.zeros((2, 3), np.dtype(">f2")),  # the other byte order
        "layers.0.bias": read_only,
        "mask": [True, False, True],  # not numpy
        "layers.1.bias": np.zeros(5, np.int64),  # not in the checkpoint
    }
    before = {name: np.array(a) for name, a in into.items()}
    with pytest.raises(CheckpointError) as raised:
        ckpt.restore(6, into=into)
    message = str(raised.value)
    assert "embed.weight: the checkpoint holds float32 [8, 4], the array is float32 [4, 8]" in message
    assert "scale: the checkpoint holds float64 [], the array is float32 []" in message
    assert "half: the checkpoint holds float16 [2, 3], the array is float16 of the other byte order [2, 3]" in message
    assert "layers.0.bias: the array is read-only" in message
    assert "mask: the array is a list, not numpy" in message
    assert "layers.1.bias: the checkpoint holds no such tensor" in message
    assert "restore without `into` and convert" in message
    assert not isinstance(raised.value, TornCheckpoint)  # the caller's mistake, not a damaged checkpoint
    assert all(np.array_equal(np.asarray(into[name]), a) for name, a in before.items())


def test_into_and_mapped_exclude_each_other(tmp_path: Path) -> None:
    ckpt = Checkpointer(str(tmp_path))
    ckpt.save(tensors_of(1), 1)
    with pytest.raises(CheckpointError, match="not both"):
        ckpt.restore(1, mapped=True, into=filled_like(tensors_of(1)))


def test_a_checkpoint_on_object_storage_is_read_into_the_arrays_too(memfs: Any) -> None:
    want = tensors_of(8)
    ckpt = Checkpointer("memory://ckpt/run-into")
    ckpt.save(want, 8)
    into = filled_like(want)
    ckpt.restore(8, into=into)
    assert_bit_identical(into, want)


def test_restore_newest_reads_the_newest_that_verifies_once_into_arrays_prepared_from_its_manifest(
    tmp_path: Path,
) -> None:
    ckpt = Checkpointer(str(tmp_path))
    for step in (1, 2, 3):
        ckpt.save(tensors_of(step), step, {"data": {"position": step}})
    flip_a_data_byte(tmp_path, 3)  # found only by its checksum
    (step_dir(tmp_path, 2) / "manifest.json").unlink()  # found by the cheap check, before anything is prepared
    prepared: list[tuple[int, int]] = []
    given: list[Arrays] = []

    def prepare(info: Any, manifest: dict[str, Any]) -> Arrays:
        prepared.append((info.step, manifest["state"]["data"]["position"]))
        given.append(filled_like(tensors_of(info.step)))
        return given[-1]

    skipped: list[str] = []
    found = ckpt.restore_newest(prepare, on_skip=lambda uri, why: skipped.append(uri))
    assert found is not None
    info, tensors, manifest = found
    assert (info.step, manifest["step"]) == (1, 1)
    assert prepared == [(3, 3), (1, 1)]
    assert skipped == [step_dir(tmp_path, 3).as_uri(), step_dir(tmp_path, 2).as_uri()]
    assert all(tensors[name] is given[-1][name] for name in given[-1])
    assert_bit_identical(given[-1], tensors_of(1))


def test_restore_newest_maps_what_prepare_gives_no_arrays_for_and_says_when_none_verifies(tmp_path: Path) -> None:
    ckpt = Checkpointer(str(tmp_path))
    ckpt.save(tensors_of(4), 4)
    found = ckpt.restore_newest(lambda info, manifest: None)
    assert found is not None
    assert_bit_identical(found[1], tensors_of(4))
    flip_a_data_byte(tmp_path, 4)
    assert ckpt.restore_newest(lambda info, manifest: None) is None
    assert Checkpointer(str(tmp_path / "none")).restore_newest(lambda info, manifest: None) is None
