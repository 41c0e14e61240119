"""The policy's numerics in PyTorch: a warm-start step, sampling groups of completions, and the GRPO update.

Prompts of one task have one width, so a batch is a [rows, prompt + new] tensor without padding; completions
end at their first newline, and every position after it is masked out of the loss. Tensors move to the
model's device (CUDA where the engine found one); sampling draws on the CPU so a seed means the same there.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import torch
import torch.nn.functional as F

from crossrail.workloads.gpt_data import Record
from crossrail.workloads.gpt_torch import GPT

NEWLINE = ord("\n")


@dataclass(frozen=True)
class Completions:
    """Completions of `rows` prompts: new tokens, their log-probabilities under the sampling policy, and a mask."""

    tokens: npt.NDArray[np.int64]  # [rows, new]
    logp: npt.NDArray[np.float32]  # [rows, new]
    mask: npt.NDArray[np.bool_]  # [rows, new]: up to and including the first newline

    def texts(self) -> list[bytes]:
        return [bytes(row[m].tolist()) for row, m in zip(self.tokens, self.mask, strict=True)]


def _device(model: GPT) -> torch.device:
    return next(model.parameters()).device


def encode(records: list[Record]) -> torch.Tensor:
    return torch.tensor([list(r.prefix()) for r in records], dtype=torch.int64)


def answers(records: list[Record]) -> list[bytes]:
    return [(r.target + "\n").encode() for r in records]


@torch.no_grad()
def sample(model: GPT, prompts: torch.Tensor, new: int, temperature: float, generator: torch.Generator) -> Completions:
    """Sample `new` tokens after each prompt row at `temperature`; rows stop counting after their newline."""
    model.eval()
    seq = prompts.to(_device(model))
    tokens, logps = [], []
    for _ in range(new):
        logits = model(seq)[:, -1].float() / temperature
        logp = F.log_softmax(logits, dim=-1)
        nxt = torch.multinomial(logp.exp().cpu(), 1, generator=generator).to(seq.device)
        tokens.append(nxt[:, 0])
        logps.append(logp.gather(1, nxt)[:, 0])
        seq = torch.cat([seq, nxt], dim=1)
    out = torch.stack(tokens, 1)
    ended = (out == NEWLINE).long().cumsum(1)
    mask = (ended == 0) | ((ended == 1) & (out == NEWLINE))
    return Completions(out.cpu().numpy(), torch.stack(logps, 1).cpu().numpy(), mask.cpu().numpy())


def token_logp(model: GPT, prompts: torch.Tensor, new: torch.Tensor) -> torch.Tensor:
    """Log-probabilities [rows, new] of the `new` tokens after the prompts under `model` (with gradients)."""
    device = _device(model)
    seq = torch.cat([prompts.to(device), new.to(device)], dim=1)
    logits = model(seq[:, :-1])[:, prompts.shape[1] - 1 :].float()
    return F.log_softmax(logits, dim=-1).gather(2, new.to(device)[..., None])[..., 0]


def warm_step(model: GPT, optimizer: torch.optim.Optimizer, records: list[Record], new: int) -> float:
    """One supervised step on the answers of `records` (teacher forcing, loss on the answer bytes only)."""
    model.train()
    targets = torch.full((len(records), new), NEWLINE, dtype=torch.int64)
    mask = torch.zeros((len(records), new), dtype=torch.bool)
    for row, answer in enumerate(answers(records)):
        targets[row, : len(answer)] = torch.tensor(list(answer))
        mask[row, : len(answer)] = True
    mask = mask.to(_device(model))
    loss = -(token_logp(model, encode(records), targets) * mask).sum() / mask.sum()
    optimizer.zero_grad(set_to_none=True)
    loss.backward()  # type: ignore[no-untyped-call]
    optimizer.step()
    return float(loss.item())


def advantages(rewards: npt.NDArray[np.float32], group: int) -> npt.NDArray[np.float32]:
    """GRPO's group-relative advantage: each reward against its group's mean, over the group's spread."""
    r = rewards.reshape(-1, group)
    adv = (r - r.mean(1, keepdims=True)) / (r.std(1, keepdims=True) + 1e-4)
    out: npt.NDArray[np.float32] = adv.reshape(-1).astype(np.float32)
    return out


def grpo_step(
    model: GPT,
    optimizer: torch.optim.Optimizer,
    prompts: torch.Tensor,
    done: Completions,
    adv: npt.NDArray[np.float32],
    *,
    clip: float,
) -> float:
    """One clipped policy-gradient step (PPO's ratio against the sampling policy, GRPO's advantages)."""
    model.train()
    device = _device(model)
    new = torch.from_numpy(done.tokens)
    mask = torch.from_numpy(done.mask).float().to(device)
    ratio = (token_logp(model, prompts, new) - torch.from_numpy(done.logp).to(device)).exp()
    a = torch.from_numpy(adv).to(device)[:, None]
    gain = torch.minimum(ratio * a, ratio.clamp(1 - clip, 1 + clip) * a)
    loss = -(gain * mask).sum() / mask.sum()
    optimizer.zero_grad(set_to_none=True)
    loss.backward()  # type: ignore[no-untyped-call]
    optimizer.step()
    return float(loss.item())
