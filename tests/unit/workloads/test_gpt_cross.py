"""A checkpoint written by one framework resumes in the other: same logits, same loss, and training goes on.

"Agree within 1e-4 relative" is max |a - b| / max |b| over all logits, in fp32. The test that transposes or
renames a tensor shows that this comparison and the loader's checks catch a wrong mapping.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from crossrail.runtime import Checkpointer, CheckpointError
from crossrail.workloads import gpt_data
from crossrail.workloads.gpt_model import ModelEngine, init_tensors

from .builders import ADAMW, TINY, train

pytest.importorskip("torch")
pytest.importorskip("jax")

from crossrail.workloads.gpt_jax import JaxEngine
from crossrail.workloads.gpt_torch import TorchEngine

pytestmark = pytest.mark.slow  # each test trains in one framework and resumes in the other

ENGINES = {"torch": TorchEngine, "jax": JaxEngine}
BEFORE, AFTER = 30, 20
MOVES = pytest.mark.parametrize(
    ("source", "target"), [("torch", "jax"), ("jax", "torch")], ids=["torch-to-jax", "jax-to-torch"]
)


def make(framework: str) -> ModelEngine:
    engine: ModelEngine = ENGINES[framework](TINY, ADAMW)
    return engine


def heldout_loss(e: ModelEngine, text: np.ndarray) -> float:
    """Mean loss on eight fixed batches that training never draws (seed 99)."""
    return float(np.mean([e.loss(*gpt_data.batch(text, s, 99, 4, TINY.context)) for s in range(8)]))


def relative(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.abs(a - b).max() / np.abs(b).max())


def moved(source: ModelEngine, tmp_path: Path, target: str) -> ModelEngine:
    """Save `source` as crossrail-ckpt/v1, restore it, and load it into a `target` engine, optimizer included."""
    checkpointer = Checkpointer(str(tmp_path / "ckpt"))
    checkpointer.save(source.tensors(), source.step, {"model": TINY.state()})
    tensors, manifest = checkpointer.restore()
    engine = make(target)
    engine.load(tensors, manifest["step"])
    return engine


@MOVES
@pytest.mark.slow
def test_a_checkpoint_resumes_in_the_other_framework_with_the_same_numbers(
    source: str, target: str, text: np.ndarray, tmp_path: Path
) -> None:
    first = make(source)
    first.load(init_tensors(TINY, 0), None)
    train(first, text, BEFORE)
    second = moved(first, tmp_path, target)
    assert second.step == BEFORE
    x, y = gpt_data.batch(text, 1, 7, 4, TINY.context)
    assert relative(second.logits(x), first.logits(x)) < 1e-4
    assert second.loss(x, y) == pytest.approx(first.loss(x, y), rel=1e-4)
    # The optimizer moments and step count came across: both frameworks now take the same path ...
    at_move = heldout_loss(second, text)
    continued_there, continued_here = train(second, text, AFTER), train(first, text, AFTER)
    np.testing.assert_allclose(continued_there, continued_here, rtol=2e-3)
    # ... and that path keeps reducing the loss.
    assert heldout_loss(second, text) < at_move - 0.1


@MOVES
def test_the_check_fails_on_a_transposed_tensor_and_loading_fails_on_a_renamed_one(
    source: str, target: str, text: np.ndarray
) -> None:
    first = make(source)
    first.load(init_tensors(TINY, 0), None)
    train(first, text, 10)
    x, _ = gpt_data.batch(text, 1, 7, 4, TINY.context)
    # A square weight transposed still loads (the shapes agree), but the model it makes computes something else.
    transposed = first.tensors()
    transposed["blocks.0.attn.proj.weight"] = transposed["blocks.0.attn.proj.weight"].T.copy()
    wrong = make(target)
    wrong.load(transposed, first.step)
    assert relative(wrong.logits(x), first.logits(x)) > 1e-2
    right = make(target)
    right.load(first.tensors(), first.step)
    assert relative(right.logits(x), first.logits(x)) < 1e-4
    # A renamed weight is refused before anything is computed.
    renamed = first.tensors()
    renamed["blocks.0.attn.o.weight"] = renamed.pop("blocks.0.attn.proj.weight")
    with pytest.raises(CheckpointError, match=r"missing blocks\.0\.attn\.proj\.weight"):
        make(target).load(renamed, first.step)
