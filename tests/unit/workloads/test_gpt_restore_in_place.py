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


def test_a_retried_torch_run_resumes_its_own_checkpoint_with_the_losses_of_an_uninterrupted_one(
    tmp_path: Path,
) -> None:
    straight = gpt_launcher(tmp_path / "straight")
    assert run_in_process(straight, "--steps", "8", "--checkpoint-every-steps", "4") == 0
    retried = gpt_launcher(tmp_path / "retried")
    assert run_in_process(retried, "--steps", "4", "--checkpoint-every-steps", "4") == 0
    assert run_in_process(retried, "--steps", "8", "--checkpoint-every-steps", "4", attempt=2) == 0
    resumed = retried.records(2)
    uri = (retried.checkpoints / step_dirname(4)).as_uri()
    assert of_type(resumed, "event", "resumed")[0]["data"] == {"step": 4, "from": uri}
    after, want = losses(resumed), losses(straight.records(1))
    assert sorted(after) == [5, 6, 7, 8]
    np.testing.assert_allclose([after[s] for s in after], [want[s] for s in after], rtol=1e-6)
