"""The byte-level bigram language model: a 256x256 logits table trained with Adam, in numpy."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

VOCAB = 256
WEIGHT = "embed.weight"  # row t holds the logits of the byte after byte t
EXP_AVG = "optimizer.exp_avg.embed.weight"
EXP_AVG_SQ = "optimizer.exp_avg_sq.embed.weight"
MODEL_KIND = {"kind": "bigram", "vocab": VOCAB}
EVAL_CHUNK = 1 << 20

Floats = npt.NDArray[np.float32]
Bytes = npt.NDArray[np.uint8]


@dataclass(frozen=True)
class Adam:
    lr: float
    beta1: float = 0.9
    beta2: float = 0.999
    eps: float = 1e-8


def _zeros() -> Floats:
    return np.zeros((VOCAB, VOCAB), np.float32)


@dataclass
class Bigram:
    """Weights and Adam moments; `step` counts the updates applied so far."""

    weight: Floats = field(default_factory=_zeros)
    exp_avg: Floats = field(default_factory=_zeros)
    exp_avg_sq: Floats = field(default_factory=_zeros)
    step: int = 0

    def tensors(self) -> dict[str, npt.NDArray[Any]]:
        return {WEIGHT: self.weight, EXP_AVG: self.exp_avg, EXP_AVG_SQ: self.exp_avg_sq}

    @classmethod
    def from_tensors(cls, tensors: dict[str, npt.NDArray[Any]], step: int, *, weights_only: bool = False) -> Bigram:
        """A model from checkpoint tensors; `weights_only` starts a fresh optimizer (a child run)."""
        weight = np.asarray(tensors[WEIGHT], np.float32)
        if weights_only:
            return cls(weight=weight.copy())
        moments = (np.asarray(tensors[EXP_AVG], np.float32), np.asarray(tensors[EXP_AVG_SQ], np.float32))
        return cls(weight.copy(), moments[0].copy(), moments[1].copy(), step)


def batch(data: Bytes, step: int, seed: int, rows: int, block: int) -> tuple[Bytes, Bytes]:
    """The (byte, next byte) pairs of step `step`: `rows` windows of `block` pairs, seeded by (seed, step).

    Seeding by step makes a resumed run see exactly the batches an uninterrupted one would.
    """
    rng = np.random.default_rng([seed, step])
    starts = rng.integers(0, len(data) - block, size=rows)
    windows = data[starts[:, None] + np.arange(block + 1)]
    return windows[:, :-1].ravel(), windows[:, 1:].ravel()


def loss_and_grad(weight: Floats, x: Bytes, y: Bytes) -> tuple[float, Floats]:
    """Mean softmax cross-entropy of predicting y from x, and its gradient with respect to the table."""
    logits = weight[x]
    logits -= logits.max(axis=1, keepdims=True)
    probs = np.exp(logits)
    probs /= probs.sum(axis=1, keepdims=True)
    rows = np.arange(len(x))
    loss = float(-np.log(probs[rows, y]).mean())
    probs[rows, y] -= 1.0
    probs /= len(x)
    grad = np.zeros_like(weight)
    np.add.at(grad, x, probs)
    return loss, grad


def train_step(model: Bigram, x: Bytes, y: Bytes, adam: Adam) -> float:
    """One Adam update in place; returns the loss before it."""
    loss, grad = loss_and_grad(model.weight, x, y)
    model.step += 1
    model.exp_avg *= adam.beta1
    model.exp_avg += (1 - adam.beta1) * grad
    model.exp_avg_sq *= adam.beta2
    model.exp_avg_sq += (1 - adam.beta2) * grad * grad
    m_hat = model.exp_avg / (1 - adam.beta1**model.step)
    v_hat = model.exp_avg_sq / (1 - adam.beta2**model.step)
    model.weight -= (adam.lr * m_hat / (np.sqrt(v_hat) + adam.eps)).astype(np.float32)
    return loss


def evaluate(weight: Floats, data: Bytes) -> tuple[float, float]:
    """Mean loss over every (byte, next byte) pair of `data`, and the fraction the argmax predicts exactly."""
    shifted = weight - weight.max(axis=1, keepdims=True)
    log_norm = np.log(np.exp(shifted).sum(axis=1))
    guess = weight.argmax(axis=1)
    total_loss, hits, pairs = 0.0, 0, len(data) - 1
    for begin in range(0, pairs, EVAL_CHUNK):
        x = data[begin : min(begin + EVAL_CHUNK, pairs)]
        y = data[begin + 1 : begin + 1 + len(x)]
        total_loss += float((log_norm[x] - shifted[x, y]).sum(dtype=np.float64))
        hits += int((guess[x] == y).sum())
    return total_loss / pairs, hits / pairs
