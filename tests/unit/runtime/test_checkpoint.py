"""crossrail-ckpt/v1 on local disk: atomic commit, shards, verified restore, torn checkpoints skipped, pruning."""

from __future__ import annotations

import errno
import json
import mmap
import os
import re
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import safetensors.numpy
import xxhash

from crossrail.runtime import (
    FORMAT,
    Checkpointer,
    CheckpointError,
    CheckpointNotFound,
    NewerFormat,
    TornCheckpoint,
    load,
    read_checkpoint,
    resolve,
    step_dirname,
    stores,
)

from .ckpt_builders import (
    assert_bit_identical,
    big_tensors_of,
    first_cut_checkpoint,
    flip_a_data_byte,
    rewrite_manifest,
    saved,
    step_dir,
    tensors_of,
    tree,
)


def test_save_then_restore_gives_back_the_same_bits_state_tokens_and_lineage(tmp_path: Path) -> None:
    lineage = {"run": "pretrain-small-1", "attempt": 2, "hardware": {"pool": "h100-east"}, "config_digest": "sha256:c"}
    ckpt = Checkpointer(tmp_path.as_uri(), lineage=lineage)
    state = {"optimizer": {"name": "adam", "lr": 0.01}, "rng": {"seed": 3}, "data": {"position": 7}, "model": {}}
    uri = ckpt.save(tensors_of(3), 3, state, tokens=3 * 4096)
    assert uri == step_dir(tmp_path, 3).as_uri()
    tensors, manifest = ckpt.restore()
    assert_bit_identical(tensors, tensors_of(3))
    assert manifest["format"] == FORMAT
    assert (manifest["step"], manifest["tokens"]) == (3, 3 * 4096)
    assert manifest["state"] == state
    assert manifest["lineage"]["hardware"] == {"pool": "h100-east", "chip_type": None, "accelerator": None}
    assert manifest["lineage"]["run"] == "pretrain-small-1"
    assert manifest["lineage"]["parent"] is None
    assert manifest["lineage"]["config_digest"] == "sha256:c"


def test_the_manifest_locates_each_tensor_and_carries_its_xxh3_checksum(tmp_path: Path) -> None:
    saved(tmp_path, 1)
    manifest = json.loads((step_dir(tmp_path, 1) / "manifest.json").read_text())
    data = (step_dir(tmp_path, 1) / "model.safetensors").read_bytes()
    start = 8 + int.from_bytes(data[:8], "little")
    header = json.loads(data[8:start])
    want = tensors_of(1)
    assert [e["name"] for e in manifest["tensors"]] == list(want)
    for entry in manifest["tensors"]:
        raw = data[start + entry["offset"] : start + entry["offset"] + entry["length"]]
        assert raw == want[entry["name"]].astype(want[entry["name"]].dtype.newbyteorder("<")).tobytes()
        assert entry["checksum"] == f"xxh3-64:{xxhash.xxh3_64_hexdigest(raw)}"
        assert header[entry["name"]]["data_offsets"] == [entry["offset"], entry["offset"] + entry["length"]]
        assert (header[entry["name"]]["dtype"], header[entry["name"]]["shape"]) == (entry["dtype"], entry["shape"])
    assert {e["dtype"] for e in manifest["tensors"]} == {"F32", "I64", "F64", "BOOL", "F16", "I8"}
    assert start % 8 == 0  # the data section is aligned, as safetensors writes it


def test_a_big_endian_or_strided_array_is_stored_as_little_endian_contiguous_bytes(tmp_path: Path) -> None:
    ckpt = Checkpointer(str(tmp_path))
    ckpt.save({"be": np.arange(4, dtype=">i4"), "strided": np.arange(12.0).reshape(3, 4)[:, ::2]}, 1)
    tensors, _ = ckpt.restore(1)
    np.testing.assert_array_equal(tensors["be"], [0, 1, 2, 3])
    np.testing.assert_array_equal(tensors["strided"], [[0, 2], [4, 6], [8, 10]])


def test_a_commit_leaves_only_committed_step_directories_each_with_its_marker(tmp_path: Path) -> None:
    saved(tmp_path, 1, 2)
    assert sorted(os.listdir(tmp_path)) == [step_dirname(1), step_dirname(2)]
    assert sorted(os.listdir(step_dir(tmp_path, 2))) == ["COMMITTED", "manifest.json", "model.safetensors"]
    manifest = (step_dir(tmp_path, 2) / "manifest.json").read_bytes()
    marker = (step_dir(tmp_path, 2) / "COMMITTED").read_text()
    assert marker == f"xxh3-64:{xxhash.xxh3_64_hexdigest(manifest)}\n"


def test_a_large_state_is_split_into_shards_by_size_that_any_safetensors_reader_loads(tmp_path: Path) -> None:
    want = big_tensors_of(5, mib=2)  # w: 2 MiB, v: 2 MiB, u: 0.5 MiB
    ckpt = Checkpointer(str(tmp_path), shard_bytes=3 << 20)
    ckpt.save(want, 5)
    files = sorted(p.name for p in step_dir(tmp_path, 5).glob("*.safetensors"))
    assert files == ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]
    first = safetensors.numpy.load_file(str(step_dir(tmp_path, 5) / files[0]))
    second = safetensors.numpy.load_file(str(step_dir(tmp_path, 5) / files[1]))
    assert (list(first), list(second)) == (["w"], ["v", "u"])
    assert_bit_identical(first | second, want)
    assert_bit_identical(ckpt.restore(5)[0], want)


def test_large_tensors_are_restored_into_their_own_mappings_and_still_verified(tmp_path: Path) -> None:
    want = big_tensors_of(1, mib=8)  # w, v: 8 MiB each, mapped; u: 2 MiB, an ordinary numpy array
    ckpt = Checkpointer(str(tmp_path), shard_bytes=8 << 20)
    ckpt.save(want, 1)
    got = ckpt.restore(1)[0]
    assert_bit_identical(got, want)
    assert all(a.flags.writeable and a.flags.c_contiguous for a in got.values())
    assert [n for n, a in got.items() if not a.flags.owndata] == ["w", "v"]
    got["w"][...] = 0  # the caller's own memory: nothing of the checkpoint changes
    assert_bit_identical(ckpt.restore(1)[0], want)
    flip_a_data_byte(tmp_path, 1, "model-00001-of-00003.safetensors")
    with pytest.raises(TornCheckpoint, match="tensor w: checksum mismatch"):
        ckpt.restore(1)


def mapped_files() -> set[str]:
    """The files this process has mapped, from /proc/self/maps."""
    with open("/proc/self/maps", encoding="utf-8") as f:
        return {line.split(maxsplit=5)[5].strip() for line in f if len(line.split(maxsplit=5)) == 6}


@pytest.mark.skipif(not os.path.exists("/proc/self/maps"), reason="needs /proc/self/maps (Linux)")
def test_a_mapped_restore_views_the_files_copy_on_write_and_verifies_every_tensor(tmp_path: Path) -> None:
    want = big_tensors_of(1, mib=2) | tensors_of(1)  # "half" lies at an odd offset, "empty" has no bytes: both read
    ckpt = Checkpointer(str(tmp_path), shard_bytes=3 << 20)
    ckpt.save(want, 1)
    shards = {str(p) for p in step_dir(tmp_path, 1).glob("*.safetensors")}
    got, manifest = ckpt.restore(1, mapped=True)
    assert manifest["step"] == 1
    assert_bit_identical(got, want)
    assert [n for n, a in got.items() if a.flags.owndata] == ["half", "empty"]
    assert shards <= mapped_files()
    assert all(a.flags.writeable for a in got.values())
    got["w"][...] = 0  # copy-on-write: the file keeps its bytes
    got["v"][:3] = 1
    assert_bit_identical(ckpt.restore(1)[0], want)
    assert_bit_identical(ckpt.restore(1, mapped=True)[0], want)
    del got
    flip_a_data_byte(tmp_path, 1, "model-00001-of-00002.safetensors")
    with pytest.raises(TornCheckpoint, match="tensor w: checksum mismatch"):
        ckpt.restore(1, mapped=True)


def test_a_mapped_restore_reads_the_tensors_where_the_file_system_cannot_map_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    want = big_tensors_of(1, mib=2)
    ckpt = Checkpointer(str(tmp_path))
    ckpt.save(want, 1)

    class NoMapping:  # what mmap does on a file system without it (ENODEV)
        ACCESS_COPY = mmap.ACCESS_COPY

        @staticmethod
        def mmap(*args: Any, **kwargs: Any) -> Any:
            raise OSError(errno.ENODEV, os.strerror(errno.ENODEV))

    monkeypatch.setattr(stores, "mmap", NoMapping)
    got = ckpt.restore(1, mapped=True)[0]
    assert_bit_identical(got, want)
    assert all(a.flags.owndata for a in got.values())  # each read into an array of its own (all under 4 MiB)


def test_the_files_do_not_depend_on_how_many_threads_wrote_them(tmp_path: Path) -> None:
    for writers in (1, 4):
        Checkpointer(str(tmp_path / str(writers)), shard_bytes=1 << 20, writers=writers, clock=lambda: 7.0).save(
            big_tensors_of(2), 2
        )
    one, four = step_dir(tmp_path / "1", 2), step_dir(tmp_path / "4", 2)
    assert len(list(one.iterdir())) == 5  # three shards (one tensor each), the manifest and the marker
    assert {p.name: p.read_bytes() for p in one.iterdir()} == {p.name: p.read_bytes() for p in four.iterdir()}


def test_saving_a_step_again_keeps_the_first_commit(tmp_path: Path) -> None:
    ckpt = saved(tmp_path, 4)
    first = (step_dir(tmp_path, 4) / "manifest.json").read_bytes()
    assert ckpt.save(tensors_of(99), 4, {"again": True}) == step_dir(tmp_path, 4).as_uri()
    assert (step_dir(tmp_path, 4) / "manifest.json").read_bytes() == first
    assert [c.step for c in ckpt.list()] == [4]


def test_saving_over_a_damaged_step_replaces_it(tmp_path: Path) -> None:
    ckpt = saved(tmp_path, 4)
    (step_dir(tmp_path, 4) / "manifest.json").unlink()
    ckpt.save(tensors_of(4), 4, {"replaced": True})
    assert ckpt.restore(4)[1]["state"] == {"replaced": True}
    assert sorted(os.listdir(tmp_path)) == [step_dirname(4)]


def no_manifest(root: Path, step: int) -> None:
    (step_dir(root, step) / "manifest.json").unlink()


def no_model(root: Path, step: int) -> None:
    (step_dir(root, step) / "model.safetensors").unlink()


def garbled_manifest(root: Path, step: int) -> None:
    (step_dir(root, step) / "manifest.json").write_text('{"format": "crossrail-ckpt/v1", "step": ')


def truncated_model(root: Path, step: int) -> None:
    path = step_dir(root, step) / "model.safetensors"
    path.write_bytes(path.read_bytes()[:40])


def bytes_appended(root: Path, step: int) -> None:
    with (step_dir(root, step) / "model.safetensors").open("ab") as f:
        f.write(b"\0" * 8)


def manifest_edited_after_commit(root: Path, step: int) -> None:
    path = step_dir(root, step) / "manifest.json"
    path.write_text(path.read_text().replace('"position": 200', '"position": 201'))


Damage = Callable[[Path, int], None]
TORN = [
    pytest.param(flip_a_data_byte, "tensor half: checksum mismatch in model.safetensors", id="flipped-byte"),
    pytest.param(no_manifest, "no manifest.json", id="final-dir-without-manifest"),
    pytest.param(no_model, "model.safetensors is missing", id="model-file-missing"),
    pytest.param(garbled_manifest, "cannot be parsed", id="unparsable-manifest"),
    pytest.param(truncated_model, "truncated", id="truncated-safetensors"),
    pytest.param(bytes_appended, "extra bytes", id="bytes-appended"),
    pytest.param(manifest_edited_after_commit, "COMMITTED does not match manifest.json", id="manifest-edited"),
]


@pytest.mark.parametrize(("damage", "reason"), TORN)
def test_latest_skips_a_torn_checkpoint_and_says_why(tmp_path: Path, damage: Damage, reason: str) -> None:
    ckpt = saved(tmp_path, 10, 20)
    damage(tmp_path, 20)
    skipped: list[tuple[str, str]] = []
    latest = ckpt.latest(on_skip=lambda uri, why: skipped.append((uri, why)))
    assert latest is not None
    assert latest.step == 10
    assert [uri for uri, _ in skipped] == [step_dir(tmp_path, 20).as_uri()]
    assert reason in skipped[0][1]
    skipped.clear()
    tensors, manifest = ckpt.restore(on_skip=lambda uri, why: skipped.append((uri, why)))
    assert manifest["step"] == 10
    assert_bit_identical(tensors, tensors_of(10))
    assert [uri for uri, _ in skipped] == [step_dir(tmp_path, 20).as_uri()]


@pytest.mark.parametrize(("damage", "reason"), TORN)
def test_restoring_a_named_torn_step_names_the_problem_and_the_newest_valid_step(
    tmp_path: Path, damage: Damage, reason: str
) -> None:
    ckpt = saved(tmp_path, 10, 20, 30)
    damage(tmp_path, 20)
    for call in (
        lambda: ckpt.restore(20),
        lambda: ckpt.restore(20, mapped=True),
        lambda: ckpt.verify(20),
        lambda: read_checkpoint(str(step_dir(tmp_path, 20))),
    ):
        with pytest.raises(TornCheckpoint, match=reason):
            call()
    with pytest.raises(TornCheckpoint, match=r"step 20 in .* cannot be used: .*; the newest valid one is step 30"):
        ckpt.restore(20)


def newer_major(manifest: dict[str, Any]) -> dict[str, Any]:
    return manifest | {"format": "crossrail-ckpt/v2"}


def lacks_a_tensor(manifest: dict[str, Any]) -> dict[str, Any]:
    return manifest | {"tensors": [e for e in manifest["tensors"] if e["name"] != "scale"]}


def lists_a_tensor_the_file_lacks(manifest: dict[str, Any]) -> dict[str, Any]:
    ghost = manifest["tensors"][0] | {"name": "ghost.weight"}
    return manifest | {"tensors": [*manifest["tensors"], ghost]}


def wrong_shape(manifest: dict[str, Any]) -> dict[str, Any]:
    tensors = [e | {"shape": [4, 8]} if e["name"] == "embed.weight" else e for e in manifest["tensors"]]
    return manifest | {"tensors": tensors}


def escaping_path(manifest: dict[str, Any]) -> dict[str, Any]:
    return manifest | {"tensors": [e | {"file": "../outside.safetensors"} for e in manifest["tensors"]]}


UNUSABLE = [
    pytest.param(newer_major, NewerFormat, r"crossrail-ckpt/v2, newer than this reader \(crossrail-ckpt/v1\)", id="v2"),
    pytest.param(lacks_a_tensor, TornCheckpoint, r"in the file, not the manifest: \['scale'\]", id="lacks-a-tensor"),
    pytest.param(
        lists_a_tensor_the_file_lacks, TornCheckpoint, r"in the manifest, not the file: \['ghost.weight'\]", id="ghost"
    ),
    pytest.param(
        wrong_shape, TornCheckpoint, r"embed.weight: .* on its shape \(manifest \[4, 8\], file \[8, 4\]\)", id="shape"
    ),
    pytest.param(
        escaping_path, TornCheckpoint, r"file '\.\./outside\.safetensors' is not a plain file name", id="dot-dot-path"
    ),
]


@pytest.mark.parametrize(("change", "error", "message"), UNUSABLE)
def test_a_named_unusable_checkpoint_fails_clearly_and_touches_nothing(
    tmp_path: Path, change: Callable[[dict[str, Any]], dict[str, Any]], error: type[Exception], message: str
) -> None:
    root = tmp_path / "run"
    ckpt = saved(root, 1, 2)
    # A valid tensor file where the escaping path points: following the path would succeed.
    shutil.copy(step_dir(root, 2) / "model.safetensors", tmp_path / "outside.safetensors")
    rewrite_manifest(root, 2, change)
    before = tree(root)
    for call in (lambda: ckpt.restore(2), lambda: ckpt.verify(2), lambda: load(str(step_dir(root, 2)))):
        with pytest.raises(error, match=message):
            call()
    assert tree(root) == before


@pytest.mark.parametrize(("change", "error", "message"), UNUSABLE)
def test_restore_latest_passes_over_an_unusable_checkpoint_with_an_event(
    tmp_path: Path, change: Callable[[dict[str, Any]], dict[str, Any]], error: type[Exception], message: str
) -> None:
    ckpt = saved(tmp_path, 1, 2)
    rewrite_manifest(tmp_path, 2, change)
    skipped: list[tuple[str, str]] = []
    tensors, manifest = ckpt.restore(on_skip=lambda uri, why: skipped.append((uri, why)))
    assert manifest["step"] == 1
    assert_bit_identical(tensors, tensors_of(1))
    assert len(skipped) == 1
    assert skipped[0][0] == step_dir(tmp_path, 2).as_uri()
    assert re.search(message, skipped[0][1])
    assert ckpt.latest() == ckpt.list()[0]


def test_a_minor_version_of_v1_with_keys_it_does_not_know_is_read(tmp_path: Path) -> None:
    ckpt = saved(tmp_path, 1)
    rewrite_manifest(tmp_path, 1, lambda m: m | {"format": "crossrail-ckpt/v1.3", "topology": {"mesh": [2, 4]}})
    tensors, manifest = ckpt.restore()
    assert manifest["format"] == "crossrail-ckpt/v1.3"
    assert_bit_identical(tensors, tensors_of(1))


def test_a_first_cut_checkpoint_with_sha256_checksums_and_no_marker_is_read_and_verified(tmp_path: Path) -> None:
    want = first_cut_checkpoint(tmp_path, 3)
    ckpt = Checkpointer(str(tmp_path))
    tensors, manifest = ckpt.restore()
    assert manifest["step"] == 3
    assert "tokens" not in manifest
    assert_bit_identical(tensors, want)
    flip_a_data_byte(tmp_path, 3)
    with pytest.raises(TornCheckpoint, match=r"tensor embed.weight: checksum mismatch .*manifest sha256:"):
        ckpt.verify(3)


def test_a_left_behind_temp_dir_is_never_listed_or_used(tmp_path: Path) -> None:
    ckpt = saved(tmp_path, 10)
    shutil.copytree(step_dir(tmp_path, 10), tmp_path / ".tmp-step-0000000020-abcd")
    assert [c.step for c in ckpt.list()] == [10]
    latest = ckpt.latest()
    assert latest is not None
    assert latest.step == 10


def test_save_removes_temp_dirs_older_than_an_hour_and_keeps_younger_ones(tmp_path: Path) -> None:
    ckpt = saved(tmp_path, 1)
    old, young = tmp_path / ".tmp-step-0000000002-old", tmp_path / ".tmp-step-0000000002-young"
    old.mkdir()
    young.mkdir()
    two_hours_ago = time.time() - 7200
    os.utime(old, (two_hours_ago, two_hours_ago))
    ckpt.save(tensors_of(3), 3)
    assert not old.exists()
    assert young.exists()


def test_restore_with_nothing_valid_and_a_missing_step_say_so(tmp_path: Path) -> None:
    ckpt = Checkpointer(str(tmp_path / "empty"))
    assert ckpt.list() == []
    assert ckpt.latest() is None
    with pytest.raises(CheckpointNotFound, match="no valid checkpoint"):
        ckpt.restore()
    saved(tmp_path / "empty", 5)
    with pytest.raises(CheckpointNotFound, match=r"no checkpoint of step 6 .*; the newest valid one is step 5"):
        ckpt.restore(6)
    assert ckpt.restore("latest")[1]["step"] == 5


def test_prune_keeps_the_newest_and_the_newest_valid_checkpoint(tmp_path: Path) -> None:
    ckpt = saved(tmp_path, 1, 2, 3, 4, 5)
    flip_a_data_byte(tmp_path, 5)
    flip_a_data_byte(tmp_path, 4)
    removed = ckpt.prune(keep_last=2)
    assert removed == [step_dir(tmp_path, s).as_uri() for s in (1, 2)]
    assert [c.step for c in ckpt.list()] == [3, 4, 5]  # 3 is the newest valid one
    assert not [n for n in os.listdir(tmp_path) if n.startswith(".tmp-")]


def test_prune_keep_every_keeps_milestones_beside_the_newest(tmp_path: Path) -> None:
    ckpt = saved(tmp_path, 10, 20, 30, 40, 50, 60)
    assert ckpt.prune(keep_last=1, keep_every=30) == [step_dir(tmp_path, s).as_uri() for s in (10, 20, 40, 50)]
    assert [c.step for c in ckpt.list()] == [30, 60]


def test_prune_with_nothing_valid_removes_nothing(tmp_path: Path) -> None:
    ckpt = saved(tmp_path, 1, 2)
    flip_a_data_byte(tmp_path, 1)
    flip_a_data_byte(tmp_path, 2)
    assert ckpt.prune(keep_last=1) == []
    assert [c.step for c in ckpt.list()] == [1, 2]


def test_keep_last_and_keep_every_prune_after_every_save(tmp_path: Path) -> None:
    ckpt = saved(tmp_path, 1, 2, 3, 4, 5, keep_last=2, keep_every=2)
    assert [c.step for c in ckpt.list()] == [2, 4, 5]


def test_load_and_resolve_take_a_step_directory_or_a_run_directory(tmp_path: Path) -> None:
    saved(tmp_path, 7, 8)
    flip_a_data_byte(tmp_path, 8)
    assert resolve(tmp_path.as_uri()).step == 7
    assert load(str(tmp_path))[1]["step"] == 7
    assert load(step_dir(tmp_path, 7).as_uri())[1]["step"] == 7
    with pytest.raises(TornCheckpoint, match="checksum mismatch"):
        load(step_dir(tmp_path, 8).as_uri())
    with pytest.raises(CheckpointNotFound, match="no checkpoint directory"):
        load(str(tmp_path / "elsewhere"))
    with pytest.raises(CheckpointNotFound, match="no checkpoint directory"):
        resolve(str(step_dir(tmp_path, 9)))


@pytest.mark.parametrize(
    ("call", "message"),
    [
        pytest.param(lambda d: Checkpointer("nosuchscheme://b/ckpt"), "fsspec cannot open it", id="unknown-scheme"),
        pytest.param(lambda d: Checkpointer(d).save({}, 1), "at least one tensor", id="no-tensors"),
        pytest.param(lambda d: Checkpointer(d).save({"w": [1.0]}, 1), "numpy arrays", id="a-list"),  # type: ignore[dict-item]
        pytest.param(lambda d: Checkpointer(d).save({"__metadata__": np.ones(1)}, 1), "names", id="reserved-name"),
        pytest.param(lambda d: Checkpointer(d).save(tensors_of(1), -1), "step", id="negative-step"),
        pytest.param(lambda d: Checkpointer(d).save(tensors_of(1), True), "step", id="bool-step"),  # type: ignore[arg-type]
        pytest.param(lambda d: Checkpointer(d).save(tensors_of(1), 1, tokens=-5), "tokens", id="negative-tokens"),
        pytest.param(lambda d: Checkpointer(d).save(tensors_of(1), 1, {"rng": np.ones(2)}), "JSON-able", id="state"),
        pytest.param(lambda d: Checkpointer(d).save(tensors_of(1), 1, {"loss": float("nan")}), "JSON-able", id="nan"),
        pytest.param(lambda d: Checkpointer(d, keep_last=0), "keep_last", id="keep-last-zero"),
        pytest.param(lambda d: Checkpointer(d, keep_every=0), "keep_every", id="keep-every-zero"),
        pytest.param(lambda d: Checkpointer(d, shard_bytes=0), "shard_bytes", id="shard-bytes-zero"),
        pytest.param(lambda d: Checkpointer(d).save({"o": np.array([None])}, 1), "safetensors", id="object-dtype"),
        pytest.param(lambda d: Checkpointer(d).save({"c": np.ones(2, np.complex64)}, 1), "complex64", id="complex"),
    ],
)
def test_what_cannot_be_checkpointed_is_refused_and_leaves_nothing(
    tmp_path: Path, call: Callable[[str], object], message: str
) -> None:
    with pytest.raises(CheckpointError, match=message):
        call(str(tmp_path))
    assert os.listdir(tmp_path) == []
