"""What the GPT workloads read: the dataset as bytes or prompt records, training batches, prompts, eval items.

A dataset is plain text, or JSON lines whose every line is an object with a `prompt` and a `completion` or an
`answer` (the workspace's sft.jsonl and heldout.jsonl). A record is trained on as the text
`<prompt> => <completion>\\n`; generation continues `<prompt> => `.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from crossrail.errors import CrossrailError

SEP = " => "
Bytes = npt.NDArray[np.uint8]
Tokens = npt.NDArray[np.int32]


@dataclass(frozen=True)
class Record:
    prompt: str
    target: str  # the completion, else the answer

    def text(self) -> str:
        return f"{self.prompt}{SEP}{self.target}\n"

    def prefix(self) -> bytes:
        return f"{self.prompt}{SEP}".encode()


@dataclass(frozen=True)
class Corpus:
    """The bytes to train on and, for a JSON-lines dataset, its records."""

    text: Bytes
    records: list[Record] = field(default_factory=list)


def parse(raw: bytes, uri: str) -> Corpus:
    """Plain text as is; JSON lines of prompt records as their training text."""
    lines = [line for line in raw.splitlines() if line.strip()]
    records = _records(lines, uri)
    if records is None:
        return Corpus(np.frombuffer(raw, np.uint8))
    text = "".join(r.text() for r in records).encode()
    return Corpus(np.frombuffer(text, np.uint8), records)


def _records(lines: list[bytes], uri: str) -> list[Record] | None:
    """The records of a JSON-lines dataset, or None when the first line is not a prompt object (plain text)."""
    if not lines or not _is_prompt_object(lines[0]):
        return None
    records, problems = [], []
    for number, line in enumerate(lines, 1):
        value = _is_prompt_object(line)
        target = value.get("completion", value.get("answer")) if value else None
        if not value or not isinstance(target, str):
            problems.append(str(number))
            continue
        records.append(Record(str(value["prompt"]), target))
    if problems:
        shown = ", ".join(problems[:10]) + (", ..." if len(problems) > 10 else "")
        raise CrossrailError(
            f"{uri}: non-empty lines {shown} are not JSON objects with a string prompt and a string "
            "completion or answer; every line of a JSON-lines dataset must be one"
        )
    return records


def _is_prompt_object(line: bytes) -> dict[str, object] | None:
    try:
        value = json.loads(line)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None
    return value if isinstance(value, dict) and isinstance(value.get("prompt"), str) else None


HELDOUT_FRACTION = 0.1
"""The share of a dataset a training run with eval_every holds out: its last records, else its last bytes."""


def split_heldout(corpus: Corpus, context: int, prog: str) -> tuple[Corpus, Corpus]:
    """(what to train on, the held-out split): the last tenth of the records, else of the bytes.

    Plain text keeps at least one eval window (`context + 1` bytes) out; records keep at least one record out.
    """
    if corpus.records:
        if len(corpus.records) < 2:
            raise CrossrailError(f"{prog}: eval_every holds out records for eval, and the dataset has only one")
        held = max(1, round(len(corpus.records) * HELDOUT_FRACTION))
        train, heldout = corpus.records[:-held], corpus.records[-held:]
        text = "".join(r.text() for r in train).encode()
        held_text = "".join(r.text() for r in heldout).encode()
        return Corpus(np.frombuffer(text, np.uint8), train), Corpus(np.frombuffer(held_text, np.uint8), heldout)
    held = max(context + 1, round(len(corpus.text) * HELDOUT_FRACTION))
    if len(corpus.text) - held <= context:
        raise CrossrailError(
            f"{prog}: the dataset has {len(corpus.text)} bytes; with eval_every it needs more than {held + context} "
            f"(a held-out tenth of at least model.context + 1 bytes, and more than model.context to train on)"
        )
    return Corpus(corpus.text[:-held]), Corpus(corpus.text[-held:])


def encode(text: bytes) -> Tokens:
    return np.frombuffer(text, np.uint8).astype(np.int32)


def batch(text: Bytes, step: int, seed: int, rows: int, context: int) -> tuple[Tokens, Tokens]:
    """The windows of step `step`: `rows` x `context` inputs and their next bytes, seeded by (seed, step).

    Seeding by step makes a resumed run, in either framework, see exactly the batches an uninterrupted one would.
    """
    rng = np.random.default_rng([seed, step])
    starts = rng.integers(0, len(text) - context, size=rows)
    windows = text[starts[:, None] + np.arange(context + 1)].astype(np.int32)
    return windows[:, :-1], windows[:, 1:]


def prompts(corpus: Corpus) -> list[bytes]:
    """What `generate` continues: each record's `<prompt> => `, else each non-empty line of the text."""
    if corpus.records:
        return [r.prefix() for r in corpus.records]
    return [line for line in corpus.text.tobytes().splitlines() if line.strip()]
