"""The bigram model's numerics: gradients, step-seeded batches, exact resumption and a reference loss curve."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from crossrail.runtime import Checkpointer
from crossrail.workloads.bigram_model import (
    VOCAB,
    Adam,
    Bigram,
    Bytes,
    batch,
    evaluate,
    loss_and_grad,
    train_step,
)

from .builders import write_corpus

# Losses at steps 1, 5, 10 and 20 on write_corpus() with seed 0, lr 0.05, 16 windows of 64 bytes. A change that
# should not move numerics keeps these; one that does must update them on purpose.
REFERENCE_LOSSES = {1: 5.545178413391113, 5: 5.158529281616211, 10: 4.683734893798828, 20: 3.780076026916504}


@pytest.fixture
def corpus(tmp_path: Path) -> Bytes:
    return np.frombuffer(write_corpus(tmp_path / "corpus.txt").read_bytes(), np.uint8)


def train(model: Bigram, data: Bytes, steps: range, adam: Adam) -> dict[int, float]:
    return {s: train_step(model, *batch(data, s, 0, 16, 64), adam) for s in steps}


def test_the_gradient_matches_finite_differences() -> None:
    rng = np.random.default_rng(3)
    weight = rng.normal(size=(VOCAB, VOCAB)).astype(np.float32)
    x, y = rng.integers(0, 4, 50).astype(np.uint8), rng.integers(0, 4, 50).astype(np.uint8)
    _, grad = loss_and_grad(weight, x, y)
    for row, col in [(0, 0), (1, 3), (2, 2), (3, 1), (0, 200)]:
        bumped = weight.astype(np.float64)
        eps = 1e-3
        bumped[row, col] += eps
        up, _ = loss_and_grad(bumped, x, y)
        bumped[row, col] -= 2 * eps
        down, _ = loss_and_grad(bumped, x, y)
        assert grad[row, col] == pytest.approx((up - down) / (2 * eps), abs=1e-5)


def test_batches_are_seeded_by_step_and_are_real_byte_pairs(corpus: Bytes) -> None:
    x1, y1 = batch(corpus, 7, 0, 16, 64)
    x2, y2 = batch(corpus, 7, 0, 16, 64)
    x3, _ = batch(corpus, 8, 0, 16, 64)
    x4, _ = batch(corpus, 7, 1, 16, 64)
    assert np.array_equal(x1, x2)
    assert np.array_equal(y1, y2)
    assert not np.array_equal(x1, x3)
    assert not np.array_equal(x1, x4)
    assert len(x1) == 16 * 64
    windows_x, windows_y = x1.reshape(16, 64), y1.reshape(16, 64)
    assert np.array_equal(windows_x[:, 1:], windows_y[:, :-1])  # each y is the byte after its x


def test_the_reference_loss_curve_is_unchanged(corpus: Bytes) -> None:
    loss = train(Bigram(), corpus, range(1, 21), Adam(0.05))
    assert {s: loss[s] for s in REFERENCE_LOSSES} == pytest.approx(REFERENCE_LOSSES, rel=1e-5)
    assert REFERENCE_LOSSES[1] == pytest.approx(math.log(256), rel=1e-6)


def test_a_model_restored_from_a_checkpoint_continues_bit_for_bit(corpus: Bytes, tmp_path: Path) -> None:
    adam = Adam(0.05)
    straight = Bigram()
    expected = train(straight, corpus, range(1, 11), adam)
    interrupted = Bigram()
    train(interrupted, corpus, range(1, 6), adam)
    ckpt = Checkpointer(str(tmp_path / "ckpt"))
    ckpt.save(interrupted.tensors(), interrupted.step, {})
    tensors, manifest = ckpt.restore()
    resumed = Bigram.from_tensors(tensors, manifest["step"])
    assert train(resumed, corpus, range(6, 11), adam) == {s: expected[s] for s in range(6, 11)}
    assert np.array_equal(resumed.weight, straight.weight)


def test_a_child_model_takes_the_weights_and_a_fresh_optimizer(corpus: Bytes) -> None:
    parent = Bigram()
    train(parent, corpus, range(1, 4), Adam(0.05))
    child = Bigram.from_tensors(parent.tensors(), parent.step, weights_only=True)
    assert np.array_equal(child.weight, parent.weight)
    assert child.step == 0
    assert not child.exp_avg.any()
    child.weight[0, 0] += 1
    assert child.weight[0, 0] != parent.weight[0, 0]  # a copy, not a view


def test_eval_scores_a_model_that_knows_the_text_as_perfect() -> None:
    data = np.frombuffer(b"abcabcabcabc", np.uint8)
    weight = np.zeros((VOCAB, VOCAB), np.float32)
    for a, b in (("a", "b"), ("b", "c"), ("c", "a")):
        weight[ord(a), ord(b)] = 50.0
    loss, pass_rate = evaluate(weight, data)
    assert pass_rate == 1.0
    assert loss < 1e-10
    loss, pass_rate = evaluate(np.zeros((VOCAB, VOCAB), np.float32), data)
    assert loss == pytest.approx(math.log(256))
