"""The reference GPT without a framework: its config, neutral tensor names and shapes, initial weights, FLOP count.

gpt_torch.py and gpt_jax.py implement this one architecture (pre-LN, learned positions, causal self-attention,
tanh-GELU MLP, final LN, untied head); both start from `init_tensors`, so equal seeds give equal weights.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from crossrail.errors import CrossrailError

MODEL_KIND = "gpt"
VOCAB = 256  # byte-level: a token is a byte
LN_EPS = 1e-5
INIT_STD = 0.02

Arrays = dict[str, npt.NDArray[Any]]
Tokens = npt.NDArray[np.int32]
Logits = npt.NDArray[np.float32]


@dataclass(frozen=True)
class GPTConfig:
    """The architecture; a checkpoint carries it in `state.model` so it can be rebuilt."""

    n_layer: int = 2
    n_head: int = 2
    d_model: int = 64
    context: int = 64
    vocab: int = VOCAB

    def problems(self) -> list[str]:
        found = [f"model.{f.name} must be > 0 (got {v})" for f in fields(self) if (v := getattr(self, f.name)) <= 0]
        if self.n_head > 0 and self.d_model % self.n_head:
            found.append(f"model.d_model ({self.d_model}) must be a multiple of model.n_head ({self.n_head})")
        return found

    def state(self) -> dict[str, Any]:
        return {"kind": MODEL_KIND, **asdict(self)}

    @classmethod
    def from_state(cls, state: Mapping[str, Any], uri: str) -> GPTConfig:
        if not isinstance(state, Mapping) or state.get("kind") != MODEL_KIND:
            kind = state.get("kind") if isinstance(state, Mapping) else state
            raise CrossrailError(f"{uri} holds model {kind!r}, not a {MODEL_KIND}; point at a gpt checkpoint")
        try:
            return cls(**{f.name: int(state[f.name]) for f in fields(cls)})
        except (KeyError, TypeError, ValueError) as exc:
            raise CrossrailError(f"{uri}: state.model lacks or garbles {exc}; it is not a gpt checkpoint") from exc


@dataclass(frozen=True)
class AdamW:
    """Decoupled weight decay on every tensor of two or more dimensions; none on biases and norms."""

    lr: float = 3e-3
    beta1: float = 0.9
    beta2: float = 0.95
    eps: float = 1e-8
    weight_decay: float = 0.1

    def state(self, step: int) -> dict[str, Any]:
        return {"name": "adamw", **asdict(self), "step": step}


def shapes(cfg: GPTConfig) -> dict[str, tuple[int, ...]]:
    """Every weight's neutral name and shape; matmul weights are [in, out] (`y = x @ W`)."""
    d, f = cfg.d_model, 4 * cfg.d_model
    out: dict[str, tuple[int, ...]] = {"tok_emb.weight": (cfg.vocab, d), "pos_emb.weight": (cfg.context, d)}
    for i in range(cfg.n_layer):
        b = f"blocks.{i}"
        out |= {f"{b}.ln1.weight": (d,), f"{b}.ln1.bias": (d,)}
        out |= {f"{b}.attn.qkv.weight": (d, 3 * d), f"{b}.attn.qkv.bias": (3 * d,)}
        out |= {f"{b}.attn.proj.weight": (d, d), f"{b}.attn.proj.bias": (d,)}
        out |= {f"{b}.ln2.weight": (d,), f"{b}.ln2.bias": (d,)}
        out |= {f"{b}.mlp.fc.weight": (d, f), f"{b}.mlp.fc.bias": (f,)}
        out |= {f"{b}.mlp.proj.weight": (f, d), f"{b}.mlp.proj.bias": (d,)}
    return out | {"ln_f.weight": (d,), "ln_f.bias": (d,), "head.weight": (d, cfg.vocab)}


def init_tensors(cfg: GPTConfig, seed: int) -> Arrays:
    """GPT-2 initialisation: N(0, 0.02) weights, residual projections scaled by 1/sqrt(2 * n_layer), zero biases."""
    rng = np.random.default_rng([seed, 0x6770])
    out: Arrays = {}
    for name, shape in shapes(cfg).items():
        if name.endswith(".bias"):
            out[name] = np.zeros(shape, np.float32)
        elif ".ln" in name or name.startswith("ln_"):
            out[name] = np.ones(shape, np.float32)
        else:
            std = INIT_STD / math.sqrt(2 * cfg.n_layer) if name.endswith("proj.weight") else INIT_STD
            out[name] = rng.normal(0.0, std, shape).astype(np.float32)
    return out


def param_count(cfg: GPTConfig) -> int:
    return sum(math.prod(s) for s in shapes(cfg).values())


def matmul_params(cfg: GPTConfig) -> int:
    """Parameters that take part in a matmul: attention, MLP and head weights (not embeddings, norms, biases)."""
    return 12 * cfg.n_layer * cfg.d_model**2 + cfg.d_model * cfg.vocab


def train_flops_per_token(cfg: GPTConfig) -> int:
    """PaLM's estimate (Chowdhery et al. 2022, appendix B): 6 N + 12 L d T per token, forward and backward.

    N is `matmul_params`, L layers, d the model width, T the context; the attention term counts the full
    T x T score matrix, as PaLM does, although a causal mask makes half of it zeros.
    """
    return 6 * matmul_params(cfg) + 12 * cfg.n_layer * cfg.d_model * cfg.context


class ModelEngine(Protocol):
    """One framework's implementation of the model and its AdamW training step, spoken to in numpy."""

    framework: str
    device: str
    step: int

    def load(self, tensors: Mapping[str, npt.NDArray[Any]], step: int | None) -> None:
        """Neutral weights; with `step`, the AdamW moments and step count too, else a fresh optimizer at 0."""

    def host_state(self, step: int) -> Arrays | None:
        """Writable neutral views of the weights and AdamW moments (those made now, at `step`) to restore a
        checkpoint into in place; None where the state is not in host memory, and load() takes the tensors."""

    def tensors(self) -> Arrays:
        """Neutral weights and AdamW moments (`optim.m.*`, `optim.v.*`)."""

    def train_step(self, x: Tokens, y: Tokens) -> float:
        """One AdamW update on the batch; the loss before it."""

    def loss(self, x: Tokens, y: Tokens) -> float:
        """Mean cross-entropy of predicting `y` from `x`, without updating."""

    def logits(self, x: Tokens) -> Logits:
        """[batch, time, vocab] fp32 logits."""

    def peak_flops(self) -> float:
        """Matmul FLOP/s this framework reaches on this device in the engine's compute dtype."""

    def utilization(self) -> float | None:
        """The fraction of recent time the accelerator was busy, or None where it cannot be read (a CPU)."""
