"""The PyTorch GPT and its adapter: neutral layout, exact resumption from neutral tensors, refusals, bf16."""

from __future__ import annotations

import numpy as np
import pytest

from crossrail.runtime import CheckpointError
from crossrail.runtime.torch_adapter import adamw_to_neutral, linear_weights, state_from_neutral, state_to_neutral
from crossrail.workloads import gpt_data
from crossrail.workloads.gpt_model import init_tensors

from .builders import ADAMW, TINY, train

pytest.importorskip("torch")

import torch

from crossrail.workloads.gpt_torch import GPT, TorchEngine

pytestmark = pytest.mark.slow  # each test trains the reference GPT in PyTorch


def engine(tensors: dict[str, np.ndarray] | None = None, step: int | None = None, dtype: str = "fp32") -> TorchEngine:
    e = TorchEngine(TINY, ADAMW, dtype=dtype)
    e.load(tensors if tensors is not None else init_tensors(TINY, 0), step)
    return e


def test_linear_weights_leave_torch_transposed_into_x_at_w_layout() -> None:
    model = GPT(TINY)
    neutral = state_to_neutral(model)
    fc = model.blocks[0].mlp.fc
    assert "blocks.0.mlp.fc.weight" in linear_weights(model)
    assert "tok_emb.weight" not in linear_weights(model)  # an embedding is a lookup table, stored as is
    assert fc.weight.shape == (128, 32)
    assert neutral["blocks.0.mlp.fc.weight"].shape == (32, 128)
    x = np.random.default_rng(0).normal(size=(3, 32)).astype(np.float32)
    expected = fc(torch.from_numpy(x)).detach().numpy()
    w, b = neutral["blocks.0.mlp.fc.weight"], neutral["blocks.0.mlp.fc.bias"]
    np.testing.assert_allclose(x @ w + b, expected, rtol=1e-5, atol=1e-6)


def test_neutral_weights_round_trip_into_a_fresh_model() -> None:
    tensors = init_tensors(TINY, 3)
    model = GPT(TINY)
    state_from_neutral(model, tensors)
    back = state_to_neutral(model)
    assert sorted(back) == sorted(tensors)
    assert all(np.array_equal(back[n], tensors[n]) for n in tensors)


def test_a_resume_from_neutral_tensors_continues_bit_for_bit(text: np.ndarray) -> None:
    uninterrupted = engine()
    train(uninterrupted, text, 5)
    saved, step = uninterrupted.tensors(), uninterrupted.step
    assert step == 5
    assert {n for n in saved if n.startswith("optim.m.")} == {f"optim.m.{n}" for n in init_tensors(TINY, 0)}
    assert saved["optim.v.blocks.0.attn.qkv.weight"].shape == (32, 96)  # moments share their weight's layout
    assert saved["optim.v.blocks.0.attn.qkv.weight"].min() >= 0
    resumed = engine(saved, step)
    assert train(resumed, text, 5) == train(uninterrupted, text, 5)


def test_a_resume_without_the_optimizer_state_takes_another_path(text: np.ndarray) -> None:
    uninterrupted = engine()
    train(uninterrupted, text, 5)
    weights_only = engine(uninterrupted.tensors(), None)
    assert weights_only.step == 0
    assert adamw_to_neutral(weights_only.model, weights_only.optimizer)[1] == 0
    assert not np.allclose(train(weights_only, text, 5), train(uninterrupted, text, 5), rtol=1e-3)


def test_loading_refuses_a_renamed_a_missing_or_a_misshapen_tensor_listing_each() -> None:
    tensors = init_tensors(TINY, 0)
    tensors["blocks.0.attn.out.weight"] = tensors.pop("blocks.0.attn.proj.weight")
    tensors["blocks.1.attn.qkv.weight"] = tensors["blocks.1.attn.qkv.weight"].T
    del tensors["head.weight"]
    with pytest.raises(CheckpointError) as raised:
        engine(tensors)
    message = str(raised.value)
    assert "missing blocks.0.attn.proj.weight [32, 32]" in message
    assert "missing head.weight [32, 256]" in message
    assert "unexpected blocks.0.attn.out.weight" in message
    assert "blocks.1.attn.qkv.weight has shape [96, 32], expected [32, 96]" in message


def test_bf16_autocast_trains_and_stays_near_fp32(text: np.ndarray) -> None:
    fp32, bf16 = engine(), engine(dtype="bf16")
    x, _ = gpt_data.batch(text, 1, 0, 4, TINY.context)
    a, b = fp32.logits(x), bf16.logits(x)
    assert b.dtype == np.float32
    assert 0 < np.abs(a - b).max() / np.abs(a).max() < 5e-2
    losses = train(bf16, text, 20)
    assert np.mean(losses[-5:]) < np.mean(losses[:5]) - 0.5
    assert bf16.tensors()["head.weight"].dtype == np.float32  # parameters stay fp32


def test_the_measured_peak_is_a_plausible_matmul_rate() -> None:
    peak = engine().peak_flops()
    assert 1e8 < peak < 1e16


def test_the_engine_runs_where_torch_sees_a_device() -> None:
    e = engine()
    assert e.device == ("cuda" if torch.cuda.is_available() else "cpu")
    assert e.utilization() is None or 0.0 <= e.utilization() <= 1.0
    if not torch.cuda.is_available():
        assert e.utilization() is None  # a CPU has no accelerator to report on
