"""The cheap check submit runs, the runtime's fallback from a damaged step, and what retention removed."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from crossrail.runtime import (
    Checkpointer,
    CheckpointNotFound,
    TornCheckpoint,
    check,
    restore_from,
)

from .ckpt_builders import (
    DAMAGE,
    assert_bit_identical,
    delete_manifest,
    first_cut_checkpoint,
    flip_a_data_byte,
    saved,
    step_dir,
    tensors_of,
    truncate_a_tensor_file,
)


def test_the_cheap_check_passes_a_good_checkpoint_and_a_flipped_byte_it_does_not_read(tmp_path: Path) -> None:
    saved(tmp_path, 10)
    assert check(str(step_dir(tmp_path, 10)))["step"] == 10
    flip_a_data_byte(tmp_path, 10)
    assert check(str(step_dir(tmp_path, 10)))["step"] == 10  # checksums are the runtime's job at restore


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        pytest.param(truncate_a_tensor_file, "model.safetensors is truncated", id="truncated-tensor"),
        pytest.param(delete_manifest, "no manifest.json", id="deleted-manifest"),
    ],
)
def test_the_cheap_check_refuses_a_truncated_tensor_and_a_lost_manifest(
    tmp_path: Path, damage: object, message: str
) -> None:
    saved(tmp_path, 10)
    damage(tmp_path, 10)  # type: ignore[operator]
    with pytest.raises(TornCheckpoint, match=message):
        check(str(step_dir(tmp_path, 10)))


def test_the_cheap_check_says_when_a_checkpoint_is_gone_and_passes_a_first_cut_one(tmp_path: Path) -> None:
    with pytest.raises(CheckpointNotFound, match="does not exist"):
        check(str(step_dir(tmp_path, 10)))
    first_cut_checkpoint(tmp_path, 3)  # committed by its rename, before markers existed
    assert check(str(step_dir(tmp_path, 3)))["step"] == 3


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_a_damaged_named_step_falls_back_to_the_newest_older_one_that_verifies(tmp_path: Path, damage: str) -> None:
    saved(tmp_path, 10, 20, 30, 40, 50)
    DAMAGE[damage](tmp_path, 50)
    flip_a_data_byte(tmp_path, 40)
    skipped: list[tuple[str, str]] = []
    info, tensors, manifest = restore_from(str(step_dir(tmp_path, 50)), on_skip=lambda u, r: skipped.append((u, r)))
    assert (info.step, manifest["step"]) == (30, 30)
    assert_bit_identical(tensors, tensors_of(30))
    assert [u for u, _ in skipped] == [step_dir(tmp_path, s).as_uri() for s in (50, 40)]
    assert "checksum mismatch" in skipped[1][1]


def test_without_a_skip_callback_or_anything_to_fall_back_to_the_damage_is_raised(tmp_path: Path) -> None:
    saved(tmp_path, 10, 20)
    flip_a_data_byte(tmp_path, 20)
    with pytest.raises(TornCheckpoint, match="step-0000000020 cannot be used: tensor"):
        restore_from(str(step_dir(tmp_path, 20)))
    flip_a_data_byte(tmp_path, 10)
    with pytest.raises(TornCheckpoint, match=r"no older checkpoint in .* verifies"):
        restore_from(str(step_dir(tmp_path, 20)), on_skip=lambda u, r: None)


def test_a_deleted_named_step_falls_back_to_the_previous_one_and_is_reported_deleted(tmp_path: Path) -> None:
    saved(tmp_path, 10, 20)
    shutil.rmtree(step_dir(tmp_path, 20))
    skipped: list[tuple[str, str]] = []
    info, tensors, _ = restore_from(str(step_dir(tmp_path, 20)), on_skip=lambda u, r: skipped.append((u, r)))
    assert info.step == 10
    assert_bit_identical(tensors, tensors_of(10))
    assert [(u, r.split(":")[0]) for u, r in skipped] == [(step_dir(tmp_path, 20).as_uri(), "deleted")]
    with pytest.raises(CheckpointNotFound):  # without the callback, a missing step is not passed over
        restore_from(str(step_dir(tmp_path, 20)))


def test_a_good_named_step_is_restored_as_named(tmp_path: Path) -> None:
    saved(tmp_path, 10, 20)
    info, tensors, _ = restore_from(str(step_dir(tmp_path, 10)), on_skip=lambda u, r: pytest.fail(u))
    assert info.step == 10
    assert_bit_identical(tensors, tensors_of(10))


def test_listing_with_damaged_includes_a_step_that_lost_its_manifest(tmp_path: Path) -> None:
    ckpt = saved(tmp_path, 10, 20)
    delete_manifest(tmp_path, 20)
    assert [i.step for i in ckpt.list()] == [10]
    assert [i.step for i in ckpt.list(damaged=True)] == [10, 20]


def test_retention_hands_over_each_removed_checkpoint_once(tmp_path: Path) -> None:
    ckpt = Checkpointer(str(tmp_path), keep_last=2)
    for step in (10, 20):
        ckpt.save(tensors_of(step), step)
    assert ckpt.take_removed() == []
    ckpt.save(tensors_of(30), 30)
    ckpt.save(tensors_of(40), 40)
    assert ckpt.take_removed() == [step_dir(tmp_path, 10).as_uri(), step_dir(tmp_path, 20).as_uri()]
    assert ckpt.take_removed() == []
    ckpt.save_async(tensors_of(50), 50)
    ckpt.wait()
    assert ckpt.take_removed() == [step_dir(tmp_path, 30).as_uri()]
