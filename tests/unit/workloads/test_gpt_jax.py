"""The JAX GPT and its adapter: pytree paths as neutral names, exact resumption, refusals, bf16 over fp32 params."""

from __future__ import annotations

import numpy as np
import pytest

from crossrail.runtime import CheckpointError
from crossrail.workloads import gpt_data
from crossrail.workloads.gpt_model import init_tensors, shapes

from .builders import ADAMW, TINY, train

pytest.importorskip("jax")
pytest.importorskip("optax")

from crossrail.runtime.jax_adapter import adamw_to_neutral, leaf_names, params_to_neutral
from crossrail.workloads.gpt_jax import JaxEngine, nest

pytestmark = pytest.mark.slow  # each test trains the reference GPT in JAX


def engine(tensors: dict[str, np.ndarray] | None = None, step: int | None = None, dtype: str = "fp32") -> JaxEngine:
    e = JaxEngine(TINY, ADAMW, dtype=dtype)
    e.load(tensors if tensors is not None else init_tensors(TINY, 0), step)
    return e


def test_pytree_paths_are_the_neutral_names_with_blocks_as_a_list() -> None:
    tree = nest({n: np.zeros(s, np.float32) for n, s in shapes(TINY).items()})
    assert isinstance(tree["blocks"], list)
    assert tree["blocks"][1]["attn"]["qkv"]["weight"].shape == (32, 96)
    assert sorted(leaf_names(tree)) == sorted(shapes(TINY))
    assert params_to_neutral(tree)["blocks.1.mlp.proj.weight"].shape == (128, 32)


def test_a_resume_from_neutral_tensors_continues_bit_for_bit(text: np.ndarray) -> None:
    uninterrupted = engine()
    train(uninterrupted, text, 5)
    saved = uninterrupted.tensors()
    assert adamw_to_neutral(uninterrupted.opt_state)[1] == 5
    assert {n for n in saved if n.startswith("optim.v.")} == {f"optim.v.{n}" for n in shapes(TINY)}
    resumed = engine(saved, 5)
    assert adamw_to_neutral(resumed.opt_state)[1] == 5
    assert train(resumed, text, 5) == train(uninterrupted, text, 5)


def test_a_resume_without_the_optimizer_state_takes_another_path(text: np.ndarray) -> None:
    uninterrupted = engine()
    train(uninterrupted, text, 5)
    weights_only = engine(uninterrupted.tensors(), None)
    assert weights_only.step == 0
    assert not np.allclose(train(weights_only, text, 5), train(uninterrupted, text, 5), rtol=1e-3)


def test_loading_refuses_a_renamed_or_transposed_tensor() -> None:
    renamed = init_tensors(TINY, 0)
    renamed["blocks.0.mlp.up.weight"] = renamed.pop("blocks.0.mlp.fc.weight")
    with pytest.raises(CheckpointError, match=r"missing blocks\.0\.mlp\.fc\.weight \[32, 128\]; unexpected"):
        engine(renamed)
    moments = engine().tensors()
    moments["optim.m.head.weight"] = moments["optim.m.head.weight"].T
    with pytest.raises(CheckpointError, match=r"first moments .*optim\.m\.\*.*head\.weight has shape \[256, 32\]"):
        engine(moments, 1)


@pytest.mark.slow
def test_bf16_computes_in_bf16_over_fp32_parameters(text: np.ndarray) -> None:
    fp32, bf16 = engine(), engine(dtype="bf16")
    x, _ = gpt_data.batch(text, 1, 0, 4, TINY.context)
    a, b = fp32.logits(x), bf16.logits(x)
    assert 0 < np.abs(a - b).max() / np.abs(a).max() < 5e-2
    losses = train(bf16, text, 20)
    assert np.mean(losses[-5:]) < np.mean(losses[:5]) - 0.5
    assert bf16.params["head"]["weight"].dtype == np.float32
    assert all(t.dtype == np.float32 for t in bf16.tensors().values())


def test_the_measured_peak_is_a_plausible_matmul_rate() -> None:
    assert 1e8 < engine().peak_flops() < 1e16
