"""The reference GPT in PyTorch, and its engine: AdamW steps, fp32 or bf16 autocast, optional torch.compile.

Module names are the neutral names (`blocks.0.attn.qkv`), so crossrail.runtime.torch_adapter only transposes
the nn.Linear weights between torch's [out, in] and the neutral [in, out].
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import numpy.typing as npt
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from crossrail.runtime.torch_adapter import (
    adamw_from_neutral,
    adamw_to_neutral,
    neutral_views,
    state_from_neutral,
    state_to_neutral,
)
from crossrail.workloads.gpt_model import LN_EPS, AdamW, Arrays, GPTConfig, Logits, Tokens
from crossrail.workloads.parallel import rows

PEAK_SIZE_CPU, PEAK_SIZE_ACCELERATOR = 1024, 4096


class Attention(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.n_head = cfg.n_head
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model)
        self.proj = nn.Linear(cfg.d_model, cfg.d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=-1)
        q, k, v = (z.view(b, t, self.n_head, d // self.n_head).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        out: torch.Tensor = self.proj(y.transpose(1, 2).reshape(b, t, d))
        return out


class MLP(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.fc = nn.Linear(cfg.d_model, 4 * cfg.d_model)
        self.proj = nn.Linear(4 * cfg.d_model, cfg.d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.proj(F.gelu(self.fc(x), approximate="tanh"))
        return out


class Block(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(cfg.d_model, eps=LN_EPS)
        self.attn = Attention(cfg)
        self.ln2 = nn.LayerNorm(cfg.d_model, eps=LN_EPS)
        self.mlp = MLP(cfg)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        out: torch.Tensor = x + self.mlp(self.ln2(x))
        return out


class GPT(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.tok_emb = nn.Embedding(cfg.vocab, cfg.d_model)
        self.pos_emb = nn.Embedding(cfg.context, cfg.d_model)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
        self.ln_f = nn.LayerNorm(cfg.d_model, eps=LN_EPS)
        self.head = nn.Linear(cfg.d_model, cfg.vocab, bias=False)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.tok_emb(idx) + self.pos_emb.weight[: idx.shape[1]]
        for block in self.blocks:
            x = block(x)
        logits: torch.Tensor = self.head(self.ln_f(x))
        return logits


class TorchEngine:
    """The GPT and its AdamW on CUDA when there is one, else the CPU."""

    framework = "torch"

    def __init__(
        self,
        cfg: GPTConfig,
        adamw: AdamW,
        *,
        dtype: str = "fp32",
        compile: bool = False,
        micro_batch: int | None = None,
    ) -> None:
        """`micro_batch`: at most this many rows in one forward and backward pass; a worker's rows beyond it are
        taken in several passes whose gradients add up (gradient accumulation), the update unchanged."""
        self.cfg, self.adamw, self.dtype, self.compile, self.micro_batch = cfg, adamw, dtype, compile, micro_batch
        # Data-parallel when this process joined a group (crossrail.workloads.parallel.join): one worker of many.
        grouped = dist.is_available() and dist.is_initialized()
        self.rank, self.world = (dist.get_rank(), dist.get_world_size()) if grouped else (0, 1)
        cuda = torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else None
        self._device = cuda or torch.device("cpu")
        self.device = str(self._device)
        self.model = GPT(cfg).to(self._device)
        self.optimizer = self._optimizer()
        self._forward: Callable[[torch.Tensor], torch.Tensor] = self._wrap(self.model)
        self.step = 0

    def _wrap(self, model: nn.Module) -> Callable[[torch.Tensor], torch.Tensor]:
        """The model as training calls it: in DistributedDataParallel across workers, compiled if asked."""
        self._ddp = DistributedDataParallel(model) if self.world > 1 else None  # broadcasts rank 0's weights
        model = self._ddp or model
        return torch.compile(model) if self.compile else model

    def _optimizer(self) -> torch.optim.AdamW:
        params = list(self.model.parameters())
        groups = [
            {"params": [p for p in params if p.dim() >= 2], "weight_decay": self.adamw.weight_decay},
            {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
        ]
        a = self.adamw
        return torch.optim.AdamW(groups, lr=a.lr, betas=(a.beta1, a.beta2), eps=a.eps)

    def _autocast(self) -> contextlib.AbstractContextManager[Any]:
        return torch.autocast(self._device.type, dtype=torch.bfloat16, enabled=self.dtype == "bf16")

    def _tokens(self, x: Tokens) -> torch.Tensor:
        return torch.from_numpy(np.asarray(x, np.int64)).to(self._device, non_blocking=True)

    def load(self, tensors: Mapping[str, npt.NDArray[Any]], step: int | None) -> None:
        state_from_neutral(self.model, tensors)
        self.optimizer = self._optimizer()
        if step is not None:
            adamw_from_neutral(self.model, self.optimizer, tensors, step)
        self.step = step or 0
        if self.world > 1:
            self._forward = self._wrap(self.model)

    def host_state(self, step: int) -> Arrays | None:
        """Neutral views of the parameters and of AdamW moments made now (zeros, at `step`), for a checkpoint
        read into them in place; None on an accelerator. Every worker reads the same checkpoint, so the
        workers agree without the broadcast load() makes."""
        views = neutral_views(self.model, self.optimizer, step)
        if views is not None:
            self.step = step
        return views

    def tensors(self) -> Arrays:
        moments, _ = adamw_to_neutral(self.model, self.optimizer)
        return state_to_neutral(self.model) | moments

    def _loss(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        with self._autocast():
            logits = self._forward(x)
        return F.cross_entropy(logits.float().reshape(-1, self.cfg.vocab), y.reshape(-1))

    def train_step(self, x: Tokens, y: Tokens) -> float:
        """One AdamW step on the global batch `x`, `y`; the mean loss over all of it.

        Across workers each trains on its rows (parallel.rows) and DistributedDataParallel averages the
        gradients; weighting each worker's mean by its share of rows makes that average the gradient of the
        whole batch's mean, whatever the degree.
        """
        if not self.model.training:  # nn.Module.train() walks every submodule: about 1% of a small CPU step
            self.model.train()
        if self.world == 1 and (self.micro_batch is None or self.micro_batch >= len(x)):
            loss = self._loss(self._tokens(x), self._tokens(y))
            self.optimizer.zero_grad(set_to_none=True)
            torch.autograd.backward(loss)
            self.optimizer.step()
            self.step += 1
            return float(loss.item())
        part = rows(len(x), self.rank, self.world)
        chunk = self.micro_batch or (part.stop - part.start)
        self.optimizer.zero_grad(set_to_none=True)
        total = torch.zeros(1, device=self._device)
        for start in range(part.start, part.stop, chunk):
            piece = slice(start, min(start + chunk, part.stop))
            share = (piece.stop - piece.start) / len(x)
            last = piece.stop == part.stop
            # DistributedDataParallel averages over workers once, after the last pass (no_sync before it).
            with self._ddp.no_sync() if self._ddp is not None and not last else contextlib.nullcontext():
                loss = self._loss(self._tokens(x[piece]), self._tokens(y[piece]))
                torch.autograd.backward(loss * (share * self.world))
            total += loss.detach() * share
        self.optimizer.step()
        self.step += 1
        if self.world > 1:
            dist.all_reduce(total)
        return float(total.item())

    @torch.no_grad()
    def loss(self, x: Tokens, y: Tokens) -> float:
        return float(self._loss(self._tokens(x), self._tokens(y)).item())

    @torch.no_grad()
    def logits(self, x: Tokens) -> Logits:
        with self._autocast():
            out = self._forward(self._tokens(x))
        return out.float().cpu().numpy()

    def peak_flops(self) -> float:
        return measure_peak(self._device, torch.bfloat16 if self.dtype == "bf16" else torch.float32)

    def utilization(self) -> float | None:
        """NVML's busy fraction of the GPU over its last sample period; None on the CPU or without nvidia-ml-py."""
        if self._device.type != "cuda":
            return None
        try:
            return float(torch.cuda.utilization(self._device)) / 100
        except (ImportError, RuntimeError):
            return None


def measure_peak(device: torch.device, dtype: torch.dtype, trials: int = 5) -> float:
    """Best matmul FLOP/s over `trials` timed runs of n x n matmuls (n = 1024 on CPU, 4096 on an accelerator).

    The best, not the median: a trial can only be slowed down (by other processes, a clock ramping up).
    """
    n = PEAK_SIZE_CPU if device.type == "cpu" else PEAK_SIZE_ACCELERATOR
    a, b = (torch.randn(n, n, device=device).to(dtype) for _ in range(2))

    def run(reps: int) -> float:
        began = time.perf_counter()
        for _ in range(reps):
            torch.mm(a, b)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        return time.perf_counter() - began

    run(1)
    reps = max(1, min(100, int(0.1 / max(run(1), 1e-6))))  # about 100 ms a trial
    return max(2 * n**3 * reps / run(reps) for _ in range(trials))
