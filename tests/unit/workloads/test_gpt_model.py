"""The GPT's framework-free parts: neutral shapes, initialisation, FLOPs, datasets, and the eval and generate rules."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from crossrail.errors import CrossrailError
from crossrail.workloads import gpt_data
from crossrail.workloads.gpt_data import Corpus, Record
from crossrail.workloads.gpt_model import GPTConfig, init_tensors, param_count, shapes, train_flops_per_token
from crossrail.workloads.gpt_tasks import evaluate, generate

from .builders import pairs_dataset

TINY = GPTConfig(n_layer=2, n_head=2, d_model=32, context=16)


class Oracle:
    """An engine stand-in that knows some texts: at each position it predicts the byte that follows the prefix."""

    framework, device, step = "oracle", "cpu", 0

    def __init__(self, texts: list[bytes], context: int = 64) -> None:
        self.texts, self.context, self.calls = texts, context, 0

    def logits(self, x: np.ndarray) -> np.ndarray:
        self.calls += 1
        out = np.zeros((*x.shape, 256), np.float32)
        for row in range(x.shape[0]):
            for pos in range(x.shape[1]):
                seen = bytes(x[row, : pos + 1].astype(np.uint8).tolist())
                known = [t for t in self.texts if t.startswith(seen) and len(t) > pos + 1]
                if known:
                    out[row, pos, known[0][pos + 1]] = 30.0
        return out


def test_matmul_weights_are_in_x_at_w_layout_and_every_block_is_named() -> None:
    s = shapes(TINY)
    assert s["tok_emb.weight"] == (256, 32)
    assert s["pos_emb.weight"] == (16, 32)
    assert s["blocks.1.attn.qkv.weight"] == (32, 96)
    assert s["blocks.1.attn.proj.weight"] == (32, 32)
    assert s["blocks.1.mlp.fc.weight"] == (32, 128)
    assert s["blocks.1.mlp.proj.weight"] == (128, 32)
    assert s["head.weight"] == (32, 256)
    assert "blocks.2.ln1.weight" not in s
    assert len(s) == 4 + 12 * 2 + 2 + 1 - 2  # embeddings, 12 per block, final norm, head (which has no bias)
    assert param_count(TINY) == sum(math.prod(v) for v in s.values())


def test_the_flop_count_is_palms_six_n_plus_attention() -> None:
    cfg = GPTConfig(n_layer=4, n_head=4, d_model=256, context=256)
    matmul = 12 * 4 * 256 * 256 + 256 * 256
    assert train_flops_per_token(cfg) == 6 * matmul + 12 * 4 * 256 * 256 == 22_413_312


def test_initial_weights_depend_only_on_the_seed() -> None:
    a, b, c = init_tensors(TINY, 0), init_tensors(TINY, 0), init_tensors(TINY, 1)
    assert all(np.array_equal(a[n], b[n]) for n in a)
    assert not np.array_equal(a["head.weight"], c["head.weight"])
    assert np.all(a["blocks.0.ln1.weight"] == 1)
    assert np.all(a["blocks.0.attn.qkv.bias"] == 0)
    assert a["blocks.0.mlp.proj.weight"].std() < a["blocks.0.mlp.fc.weight"].std()  # residual projections scaled


def test_problems_name_every_bad_model_setting() -> None:
    assert GPTConfig(n_layer=0, n_head=3, d_model=32).problems() == [
        "model.n_layer must be > 0 (got 0)",
        "model.d_model (32) must be a multiple of model.n_head (3)",
    ]


def test_prompt_records_become_training_text_and_prompts(tmp_path: Path) -> None:
    path = pairs_dataset(tmp_path / "sft.jsonl")
    corpus = gpt_data.parse(path.read_bytes(), str(path))
    assert corpus.records[0] == Record("chip slice", "slice chip")
    assert corpus.text.tobytes().startswith(b"chip slice => slice chip\nslice pool => pool slice\n")
    assert gpt_data.prompts(corpus)[:2] == [b"chip slice => ", b"slice pool => "]


def test_plain_text_is_trained_on_as_is_and_prompted_line_by_line() -> None:
    corpus = gpt_data.parse(b"one line\n\nanother line\n", "t.txt")
    assert corpus.records == []
    assert gpt_data.prompts(corpus) == [b"one line", b"another line"]


def test_a_json_lines_dataset_with_a_bad_line_is_refused_naming_the_lines() -> None:
    raw = b'{"prompt": "a", "completion": "b"}\n{"prompt": "c"}\nnot json\n'
    with pytest.raises(CrossrailError, match=r"lines 2, 3 are not JSON objects"):
        gpt_data.parse(raw, "bad.jsonl")


def test_batches_are_seeded_by_step_and_targets_are_the_next_bytes() -> None:
    text = np.frombuffer(bytes(range(200)), np.uint8)
    x, y = gpt_data.batch(text, 7, 0, 4, 16)
    again, _ = gpt_data.batch(text, 7, 0, 4, 16)
    other, _ = gpt_data.batch(text, 8, 0, 4, 16)
    assert x.shape == y.shape == (4, 16)
    assert np.array_equal(x, again)
    assert not np.array_equal(x, other)
    assert np.array_equal(x[:, 1:], y[:, :-1])


def records(*pairs: tuple[str, str]) -> Corpus:
    rs = [Record(p, a) for p, a in pairs]
    return Corpus(np.frombuffer("".join(r.text() for r in rs).encode(), np.uint8), rs)


def test_an_answer_passes_when_greedy_decoding_produces_it_and_then_ends_the_word() -> None:
    heldout = records(("pool pool", "pool"), ("step step", "step"))
    knows = Oracle([b"pool pool => pool ", b"step step => step\n"])
    scores = evaluate(knows, heldout, context=32, batch=8)
    assert (scores.pass_rate, scores.items, scores.mode) == (1.0, 2, "exact_match")
    assert scores.loss < 1e-6
    # The right bytes not followed by a space or newline ("pools") do not pass; nor does a wrong answer.
    unended = Oracle([b"pool pool => pools", b"step step => step\n"])
    assert evaluate(unended, heldout, context=32, batch=8).pass_rate == 0.5
    wrong = evaluate(Oracle([b"pool pool => pull ", b"step step => stop "]), heldout, context=32, batch=1)
    assert wrong.pass_rate == 0.0
    assert wrong.loss > 1.0


def test_an_answer_that_cannot_fit_the_context_is_refused() -> None:
    with pytest.raises(CrossrailError, match=r"longer model\.context"):
        evaluate(Oracle([]), records(("p", "a" * 16)), context=16, batch=4)


def test_plain_text_scores_next_byte_accuracy() -> None:
    text = b"abcdefghijklmnopq" * 8
    corpus = Corpus(np.frombuffer(text, np.uint8))
    scores = evaluate(Oracle([text]), corpus, context=16, batch=4)
    assert scores.mode == "next_byte"
    assert scores.items == len(text) // 17
    assert scores.pass_rate == 1.0
    uniform = evaluate(Oracle([]), corpus, context=16, batch=4)
    assert uniform.loss == pytest.approx(math.log(256))
    assert uniform.pass_rate == 0.0


def test_generation_is_greedy_stops_at_the_newline_and_counts_the_tokens_made() -> None:
    oracle = Oracle([b"chip slice => slice chip\n", b"ab => ba\n"], context=16)
    outputs, tokens = generate(oracle, [b"chip slice => ", b"ab => "], context=32, batch=2, max_new_tokens=20)
    assert outputs == [b"slice chip", b"ba"]
    assert tokens == len(b"slice chip\n") + len(b"ba\n")
    assert oracle.calls == len(b"slice chip\n")  # the batch ends when its last row has its newline


def test_generation_slides_a_full_window_and_honours_the_token_budget() -> None:
    text = bytes(range(65, 91))  # A..Z: each byte's successor
    oracle = Oracle([text[i:] for i in range(26)], context=4)
    outputs, tokens = generate(oracle, [b"ABCD"], context=4, batch=1, max_new_tokens=3)
    assert (outputs, tokens) == ([b"EFG"], 3)
