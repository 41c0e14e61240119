"""A PyTorch GPT resumes its own checkpoint in place: read straight into its parameters and AdamW moments."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from crossrail.runtime import Checkpointer, step_dirname
from crossrail.workloads.gpt_model import init_tensors

from .builders import ADAMW, TINY, gpt_launcher, losses, of_type, run_in_process, train

pytest.importorskip("torch")

from crossrail.workloads.gpt_torch import TorchEngine

pytestmark = pytest.mark.slow  # each test trains the reference GPT in PyTorch


def test_a_checkpoint_read_into_the_engines_own_memory_continues_bit_for_bit(text: np.ndarray, tmp_path: Path) -> None:
    uninterrupted = TorchEngine(TINY, ADAMW)
    uninterrupted.load(init_tensors(TINY, 0), None)
    train(uninterrupted, text, 5)
    saved = uninterrupted.tensors()
    Checkpointer(str(tmp_path)).save(saved, 5)
    resumed = TorchEngine(TINY, ADAMW)  # its own random weights and no optimizer state until now
    views = resumed.host_state(5)
    assert views is not None
    assert sorted(views) == sorted(saved)
    restored, _ = Checkpointer(str(tmp_path)).restore(5, into=views)
    assert all(restored[name] is views[name] for name in saved)
    assert resumed.step == 5
    assert all(np.array_equal(a, saved[name]) for name, a in resumed.tensors().items())
    assert train(resumed, text, 5) == train(uninterrupted, text, 5)


def test_a_retried_torch_run_skips_its_damaged_newest_checkpoint_and_continues_the_losses_from_the_one_before(
    tmp_path: Path,
) -> None:
    launcher = gpt_launcher(tmp_path / "run")
    assert run_in_process(launcher, "--steps", "8", "--checkpoint-every-steps", "4") == 0
    shard = launcher.checkpoints / step_dirname(8) / "model.safetensors"
    data = bytearray(shard.read_bytes())
    data[-1] ^= 0xFF  # its layout still checks out: only reading it against its checksums finds the damage
    shard.write_bytes(bytes(data))
    assert run_in_process(launcher, "--steps", "8", "--checkpoint-every-steps", "4", attempt=2) == 0
    records = launcher.records(2)
    skipped = of_type(records, "event", "checkpoint_skipped")
    assert [s["data"]["uri"] for s in skipped] == [(launcher.checkpoints / step_dirname(8)).as_uri()]
    assert "checksum mismatch" in skipped[0]["data"]["reason"]
    uri = (launcher.checkpoints / step_dirname(4)).as_uri()
    assert of_type(records, "event", "resumed")[0]["data"] == {"step": 4, "from": uri}
    after, first = losses(records), losses(launcher.records(1))
    assert sorted(after) == [5, 6, 7, 8]
    np.testing.assert_allclose([after[s] for s in after], [first[s] for s in after], rtol=1e-6)
