"""crossrail-ckpt/v1: atomic commit, verified restore, torn checkpoints skipped, pruning, killed writers."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest

from crossrail.runtime import (
    FORMAT,
    Checkpointer,
    CheckpointError,
    CheckpointNotFound,
    TornCheckpoint,
    load,
    resolve,
    step_dirname,
)
from crossrail.runtime.manifest import safetensors_layout


def tensors_of(step: int) -> dict[str, npt.NDArray[np.generic]]:
    """Tensors whose values say which step wrote them."""
    return {
        "embed.weight": np.full((8, 4), step, np.float32),
        "layers.0.bias": np.arange(5, dtype=np.int64) + step,
        "scale": np.array(step / 2, np.float64),
        "mask": np.array([True, False, step % 2 == 0]),
        "half": np.linspace(0, 1, 6, dtype=np.float16).reshape(2, 3),
    }


def step_dir(root: Path, step: int) -> Path:
    return root / step_dirname(step)


def saved(root: Path, *steps: int, keep_last: int | None = None) -> Checkpointer:
    ckpt = Checkpointer(str(root), keep_last=keep_last)
    for s in steps:
        ckpt.save(tensors_of(s), s, {"data_position": s * 10})
    return ckpt


def test_save_then_restore_gives_back_dtype_shape_values_state_and_lineage(tmp_path: Path) -> None:
    lineage = {"run": "pretrain-small-1", "attempt": 2, "hardware": {"pool": "h100-east"}, "config_digest": "sha256:c"}
    ckpt = Checkpointer(tmp_path.as_uri(), lineage=lineage)
    uri = ckpt.save(tensors_of(3), 3, {"optimizer": {"lr": 0.01}, "rng": [1, 2]})
    assert uri == step_dir(tmp_path, 3).as_uri()
    tensors, manifest = ckpt.restore()
    assert tensors.keys() == tensors_of(3).keys()
    for name, want in tensors_of(3).items():
        assert tensors[name].dtype == want.dtype
        assert tensors[name].shape == want.shape
        np.testing.assert_array_equal(tensors[name], want)
    assert manifest["format"] == FORMAT
    assert manifest["step"] == 3
    assert manifest["state"] == {"optimizer": {"lr": 0.01}, "rng": [1, 2]}
    assert manifest["lineage"]["hardware"] == {"pool": "h100-east", "chip_type": None, "accelerator": None}
    assert manifest["lineage"]["run"] == "pretrain-small-1"
    assert manifest["lineage"]["parent"] is None
    assert manifest["lineage"]["config_digest"] == "sha256:c"


def test_the_manifest_locates_each_tensor_in_the_safetensors_data_section(tmp_path: Path) -> None:
    saved(tmp_path, 1)
    manifest = json.loads((step_dir(tmp_path, 1) / "manifest.json").read_text())
    layout = safetensors_layout(str(step_dir(tmp_path, 1) / "model.safetensors"))
    data = (step_dir(tmp_path, 1) / "model.safetensors").read_bytes()
    start = 8 + int.from_bytes(data[:8], "little")
    for entry in manifest["tensors"]:
        assert entry["file"] == "model.safetensors"
        assert {k: entry[k] for k in ("dtype", "shape", "offset", "length")} == layout[entry["name"]]
        raw = data[start + entry["offset"] : start + entry["offset"] + entry["length"]]
        assert (
            raw == tensors_of(1)[entry["name"]].astype(tensors_of(1)[entry["name"]].dtype.newbyteorder("<")).tobytes()
        )
    assert {e["dtype"] for e in manifest["tensors"]} == {"F32", "I64", "F64", "BOOL", "F16"}


def test_a_big_endian_or_strided_array_is_stored_as_little_endian_contiguous_bytes(tmp_path: Path) -> None:
    ckpt = Checkpointer(str(tmp_path))
    ckpt.save({"be": np.arange(4, dtype=">i4"), "strided": np.arange(12.0).reshape(3, 4)[:, ::2]}, 1, {})
    tensors, _ = ckpt.restore(1)
    np.testing.assert_array_equal(tensors["be"], [0, 1, 2, 3])
    np.testing.assert_array_equal(tensors["strided"], [[0, 2], [4, 6], [8, 10]])


def test_a_commit_leaves_only_committed_step_directories(tmp_path: Path) -> None:
    saved(tmp_path, 1, 2)
    assert sorted(os.listdir(tmp_path)) == [step_dirname(1), step_dirname(2)]
    assert sorted(os.listdir(step_dir(tmp_path, 2))) == ["manifest.json", "model.safetensors"]


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


def flip_a_data_byte(root: Path, step: int) -> None:
    path = step_dir(root, step) / "model.safetensors"
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))


def no_manifest(root: Path, step: int) -> None:
    (step_dir(root, step) / "manifest.json").unlink()


def no_model(root: Path, step: int) -> None:
    (step_dir(root, step) / "model.safetensors").unlink()


def garbled_manifest(root: Path, step: int) -> None:
    (step_dir(root, step) / "manifest.json").write_text('{"format": "crossrail-ckpt/v1", "step": ')


def truncated_model(root: Path, step: int) -> None:
    path = step_dir(root, step) / "model.safetensors"
    path.write_bytes(path.read_bytes()[:40])


Damage = Callable[[Path, int], None]
TORN = [
    pytest.param(flip_a_data_byte, "checksum mismatch", id="flipped-byte-in-safetensors"),
    pytest.param(no_manifest, "no manifest.json", id="final-dir-without-manifest"),
    pytest.param(no_model, "model.safetensors is missing", id="model-file-missing"),
    pytest.param(garbled_manifest, "cannot be parsed", id="unparsable-manifest"),
    pytest.param(truncated_model, "truncated", id="truncated-safetensors"),
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
    tensors, manifest = ckpt.restore()
    assert manifest["step"] == 10
    np.testing.assert_array_equal(tensors["embed.weight"], tensors_of(10)["embed.weight"])


@pytest.mark.parametrize(("damage", "reason"), TORN)
def test_restoring_a_named_torn_step_names_the_problem_and_the_newest_valid_step(
    tmp_path: Path, damage: Damage, reason: str
) -> None:
    ckpt = saved(tmp_path, 10, 20, 30)
    damage(tmp_path, 20)
    with pytest.raises(CheckpointError, match=reason) as caught:
        ckpt.restore(20)
    assert "newest valid one is step 30" in str(caught.value)


def test_a_left_behind_temp_dir_is_never_listed_or_used(tmp_path: Path) -> None:
    ckpt = saved(tmp_path, 10)
    tmp = tmp_path / ".tmp-step-0000000020-abcd"
    shutil.copytree(step_dir(tmp_path, 10), tmp)
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
    ckpt.save(tensors_of(3), 3, {})
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


def test_a_newer_major_format_is_refused_with_a_clear_message(tmp_path: Path) -> None:
    ckpt = saved(tmp_path, 1)
    path = step_dir(tmp_path, 1) / "manifest.json"
    manifest = json.loads(path.read_text())
    path.write_text(json.dumps(manifest | {"format": "crossrail-ckpt/v2"}))
    for read in (ckpt.restore, ckpt.latest, lambda: ckpt.restore(1)):
        with pytest.raises(CheckpointError, match=r"crossrail-ckpt/v2, newer than this reader \(crossrail-ckpt/v1\)"):
            read()


def test_a_minor_version_of_v1_is_read(tmp_path: Path) -> None:
    ckpt = saved(tmp_path, 1)
    path = step_dir(tmp_path, 1) / "manifest.json"
    path.write_text(json.dumps(json.loads(path.read_text()) | {"format": "crossrail-ckpt/v1.1", "extra": 1}))
    assert ckpt.restore()[1]["step"] == 1


def test_prune_keeps_the_newest_and_the_newest_valid_checkpoint(tmp_path: Path) -> None:
    ckpt = saved(tmp_path, 1, 2, 3, 4, 5)
    flip_a_data_byte(tmp_path, 5)
    flip_a_data_byte(tmp_path, 4)
    removed = ckpt.prune(keep_last=2)
    assert removed == [step_dir(tmp_path, s).as_uri() for s in (1, 2)]
    assert [c.step for c in ckpt.list()] == [3, 4, 5]  # 3 is the newest valid one
    assert not [n for n in os.listdir(tmp_path) if n.startswith(".tmp-")]


def test_keep_last_prunes_after_every_save(tmp_path: Path) -> None:
    ckpt = saved(tmp_path, 1, 2, 3, 4, keep_last=2)
    assert [c.step for c in ckpt.list()] == [3, 4]


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


@pytest.mark.parametrize(
    ("call", "message"),
    [
        pytest.param(lambda d: Checkpointer("s3://bucket/ckpt"), "local disk only", id="object-storage"),
        pytest.param(lambda d: Checkpointer(d).save({}, 1, {}), "at least one tensor", id="no-tensors"),
        pytest.param(lambda d: Checkpointer(d).save({"w": [1.0]}, 1, {}), "numpy arrays", id="a-list"),
        pytest.param(lambda d: Checkpointer(d).save(tensors_of(1), -1, {}), "step", id="negative-step"),
        pytest.param(lambda d: Checkpointer(d).save(tensors_of(1), 1, {"rng": np.ones(2)}), "JSON-able", id="state"),
        pytest.param(lambda d: Checkpointer(d, keep_last=0), "keep_last", id="keep-last-zero"),
        pytest.param(lambda d: Checkpointer(d).save({"o": np.array([None])}, 1, {}), "safetensors", id="object-dtype"),
    ],
)
def test_what_cannot_be_checkpointed_is_refused_and_leaves_nothing(
    tmp_path: Path, call: Callable[[str], object], message: str
) -> None:
    with pytest.raises(CheckpointError, match=message):
        call(str(tmp_path))
    assert [n for n in os.listdir(tmp_path) if not n.startswith(".")] == []
    assert [n for n in os.listdir(tmp_path) if n.startswith(".tmp-")] == []


WRITER = textwrap.dedent(
    """
    import os, signal, sys
    import numpy as np
    from crossrail.runtime import Checkpointer

    root, mode = sys.argv[1], sys.argv[2]
    ckpt = Checkpointer(root)

    def tensors(step):
        return {"w": np.full(4 << 20, step, np.float32), "v": np.full(1 << 20, -step, np.float64)}

    ckpt.save(tensors(1), 1, {"step": 1})
    if mode == "loop":
        print("committed", flush=True)
        step = 2
        while True:
            ckpt.save(tensors(step), step, {"step": step})
            step += 1
    if mode == "damaged-2":
        ckpt.save(tensors(2), 2, {"step": 2})
        os.unlink(os.path.join(root, "step-0000000002", "manifest.json"))
    # Die at the first rename: the commit of step 2, or moving a damaged step 2 aside to replace it.
    os.rename = lambda src, dst: os.kill(os.getpid(), signal.SIGKILL)
    ckpt.save(tensors(2), 2, {"step": 2})
    """
)


def temp_dirs(root: Path) -> set[str]:
    return {n for n in os.listdir(root) if n.startswith(".tmp-")}


def valid_steps_after_kill(root: Path) -> int:
    """Checks that what a killed writer left never yields a torn checkpoint; returns the step restored."""
    ckpt = Checkpointer(str(root))
    tensors, manifest = ckpt.restore()
    step = manifest["step"]
    np.testing.assert_array_equal(tensors["w"], np.full(4 << 20, step, np.float32))
    np.testing.assert_array_equal(tensors["v"], np.full(1 << 20, -step, np.float64))
    for info in ckpt.list():
        assert Checkpointer(str(root)).restore(info.step)[1]["step"] == info.step
    return int(step)


@pytest.mark.parametrize("mode", ["commit", "damaged-2"], ids=["killed-before-the-commit-rename", "killed-mid-replace"])
def test_a_writer_killed_at_the_rename_leaves_the_previous_checkpoint_in_use(tmp_path: Path, mode: str) -> None:
    done = subprocess.run(
        [sys.executable, "-c", WRITER, str(tmp_path), mode], capture_output=True, timeout=60, check=False
    )
    assert done.returncode == -signal.SIGKILL, done.stderr
    assert [n for n in os.listdir(tmp_path) if n.startswith(".tmp-")]  # the kill left a temp dir behind
    assert valid_steps_after_kill(tmp_path) == 1
    Checkpointer(str(tmp_path)).save({"w": np.full(4 << 20, 3, np.float32), "v": np.full(1 << 20, -3.0)}, 3, {})
    assert valid_steps_after_kill(tmp_path) == 3


def test_a_writer_killed_at_any_moment_of_a_big_save_never_yields_a_torn_checkpoint(tmp_path: Path) -> None:
    for delay_s in (0.0, 0.005, 0.02, 0.08):  # a new writer each round, into what the last one left
        left_before = temp_dirs(tmp_path)
        writer = subprocess.Popen([sys.executable, "-c", WRITER, str(tmp_path), "loop"], stdout=subprocess.PIPE)
        assert writer.stdout is not None
        assert writer.stdout.readline() == b"committed\n"
        deadline = time.monotonic() + 20
        while not temp_dirs(tmp_path) - left_before and time.monotonic() < deadline:
            time.sleep(0.001)  # until this writer is inside a save
        time.sleep(delay_s)
        writer.send_signal(signal.SIGKILL)
        writer.wait(30)
        writer.stdout.close()
        assert writer.returncode == -signal.SIGKILL
        assert valid_steps_after_kill(tmp_path) >= 1
