"""Inference on a GPT engine: greedy batch generation, and the held-out evaluation behind eval_loss and eval_pass_rate.

The evaluation has two definitions (docs/runtime.md, "Workload metrics"):

- a JSON-lines dataset (heldout.jsonl): for each record, `eval_loss` is the mean cross-entropy of the bytes of
  its `answer` (else `completion`) after `<prompt> => `, and the record passes when greedy decoding from
  `<prompt> => ` produces exactly the answer followed by a space or a newline. Teacher forcing computes both
  in one forward pass: greedy decoding reproduces the answer exactly when the argmax at each answer position
  is the answer's next byte;
- plain text: `eval_loss` is the mean next-byte cross-entropy over non-overlapping windows of `context + 1`
  bytes (at most MAX_EVAL_WINDOWS), and the pass rate the fraction of positions whose argmax is the next byte.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from crossrail.errors import CrossrailError
from crossrail.workloads.gpt_data import Corpus, Record, encode
from crossrail.workloads.gpt_model import Logits, ModelEngine

MAX_EVAL_WINDOWS = 512
ENDINGS = (ord(" "), ord("\n"))
NEWLINE = ord("\n")


@dataclass(frozen=True)
class Scores:
    loss: float
    pass_rate: float
    items: int
    mode: str  # "exact_match" or "next_byte"


def log_softmax(logits: Logits) -> npt.NDArray[np.float64]:
    z: npt.NDArray[np.float64] = logits.astype(np.float64)
    z -= z.max(axis=-1, keepdims=True)
    z -= np.log(np.exp(z).sum(axis=-1, keepdims=True))
    return z


def evaluate(engine: ModelEngine, corpus: Corpus, *, context: int, batch: int) -> Scores:
    if corpus.records:
        return _exact_match(engine, corpus.records, context=context, batch=batch)
    return _next_byte(engine, corpus.text, context=context, batch=batch)


def _exact_match(engine: ModelEngine, records: list[Record], *, context: int, batch: int) -> Scores:
    too_long = [i for i, r in enumerate(records, 1) if len(r.target.encode()) + 1 > context]
    if too_long:
        raise CrossrailError(
            f"records {too_long[:10]} have answers of context ({context}) bytes or more; "
            "a longer model.context or shorter answers are needed to score them"
        )
    total_loss, answer_bytes, passed = 0.0, 0, 0
    for begin in range(0, len(records), batch):
        chunk = records[begin : begin + batch]
        seqs = [encode(r.prefix() + r.target.encode())[-context:] for r in chunk]
        x = np.zeros((len(chunk), context), np.int32)
        for row, seq in enumerate(seqs):
            x[row, : len(seq)] = seq
        logp = log_softmax(engine.logits(x))
        for row, (record, seq) in enumerate(zip(chunk, seqs, strict=True)):
            n = len(record.target.encode())
            answer = seq[len(seq) - n :]
            positions = np.arange(len(seq) - n - 1, len(seq) - 1)  # each predicts one answer byte
            total_loss -= float(logp[row, positions, answer].sum())
            answer_bytes += n
            guesses = logp[row, positions].argmax(axis=-1)
            ending = int(logp[row, len(seq) - 1].argmax())
            passed += int(np.array_equal(guesses, answer) and ending in ENDINGS)
    return Scores(total_loss / answer_bytes, passed / len(records), len(records), "exact_match")


def _next_byte(engine: ModelEngine, text: npt.NDArray[np.uint8], *, context: int, batch: int) -> Scores:
    count = min(len(text) // (context + 1), MAX_EVAL_WINDOWS)
    if count == 0:
        raise CrossrailError(f"the eval text has {len(text)} bytes; it needs at least context + 1 = {context + 1}")
    windows = text[: count * (context + 1)].reshape(count, context + 1).astype(np.int32)
    total_loss, hits = 0.0, 0
    for begin in range(0, count, batch):
        x, y = windows[begin : begin + batch, :-1], windows[begin : begin + batch, 1:]
        logp = log_softmax(engine.logits(x))
        total_loss -= float(np.take_along_axis(logp, y[..., None], axis=-1).sum())
        hits += int((logp.argmax(axis=-1) == y).sum())
    positions = count * context
    return Scores(total_loss / positions, hits / positions, count, "next_byte")


def generate(
    engine: ModelEngine, prompts: list[bytes], *, context: int, batch: int, max_new_tokens: int
) -> tuple[list[bytes], int]:
    """Greedy continuations of each prompt, cut at the first newline, and the number of tokens generated.

    A batch is a [batch, context] buffer of right-padded prompts; each token is the argmax at a row's last
    position, written after it (a full row first drops its oldest byte). A row stops counting tokens after its
    newline; the batch stops when every row has one.
    """
    outputs: list[bytes] = []
    generated = 0
    for begin in range(0, len(prompts), batch):
        chunk = [encode(p)[-context:] if p else encode(b"\n") for p in prompts[begin : begin + batch]]
        buf = np.zeros((len(chunk), context), np.int32)
        lengths = np.array([len(c) for c in chunk])
        for row, tokens in enumerate(chunk):
            buf[row, : len(tokens)] = tokens
        new: list[list[int]] = [[] for _ in chunk]
        done = np.zeros(len(chunk), bool)
        rows = np.arange(len(chunk))
        for _ in range(max_new_tokens):
            nxt = engine.logits(buf)[rows, lengths - 1].argmax(axis=-1)
            full = lengths == context
            buf[full, :-1] = buf[full, 1:]
            lengths[full] -= 1
            buf[rows, lengths] = nxt
            lengths += 1
            for live in np.flatnonzero(~done):
                new[live].append(int(nxt[live]))
            generated += int((~done).sum())
            done |= nxt == NEWLINE
            if done.all():
                break
        outputs += [bytes(tokens).split(b"\n", 1)[0] for tokens in new]
    return outputs, generated
