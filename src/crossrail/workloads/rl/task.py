"""Verifiable tasks the RL pipeline learns: problems generated from a seed, a held-out split, pluggable verifiers.

A problem is a fixed-width prompt and its answer (`07+45` -> `52`, `cabd` -> `dbac`); the model reads
`<prompt> => ` and writes the answer and a newline, the record format of crossrail.workloads.gpt_data. Every
prompt of a task falls in the held-out split or the training split by a hash, so the evaluation set never
appears in training whatever the seed. A verifier scores one completion of one problem in [0, 1].
"""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from crossrail.errors import CrossrailError
from crossrail.workloads.gpt_data import Record

HELDOUT_PERCENT = 10  # of a task's prompts, by hash


@dataclass(frozen=True)
class Task:
    name: str
    problems: tuple[Record, ...]  # every prompt of the task, training and held-out alike
    max_answer_bytes: int

    def split(self, heldout: bool) -> list[Record]:
        return [r for r in self.problems if _is_heldout(r.prompt) == heldout]

    def prompt_bytes(self) -> int:
        return len(self.problems[0].prefix())


def _is_heldout(prompt: str) -> bool:
    return hashlib.blake2b(prompt.encode(), digest_size=2).digest()[0] * 100 // 256 < HELDOUT_PERCENT


def addition() -> Task:
    """Two-digit addition, zero-padded operands: `07+45` -> `52` (10,000 problems)."""
    problems = tuple(Record(f"{a:02d}+{b:02d}", str(a + b)) for a in range(100) for b in range(100))
    return Task("addition", problems, 3)


def reversal() -> Task:
    """Reverse four letters of `abcdef`: `cabd` -> `dbac` (1,296 problems)."""
    words = ("".join(w) for w in itertools.product("abcdef", repeat=4))
    return Task("reversal", tuple(Record(w, w[::-1]) for w in words), 4)


TASKS: dict[str, Callable[[], Task]] = {"addition": addition, "reversal": reversal}

Verifier = Callable[[Record, bytes], float]


def exact(problem: Record, completion: bytes) -> float:
    """1 when the completion, up to its first newline, is the answer; else 0."""
    return float(completion.split(b"\n", 1)[0] == problem.target.encode())


def digits(problem: Record, completion: bytes) -> float:
    """The fraction of the answer's bytes the completion has in place, 1 only for an exact answer (partial credit)."""
    got, want = completion.split(b"\n", 1)[0], problem.target.encode()
    if got == want:
        return 1.0
    same = sum(a == b for a, b in zip(got, want, strict=False))
    return 0.5 * same / max(len(want), len(got))


VERIFIERS: dict[str, Verifier] = {"exact": exact, "digits": digits}


def task_named(name: str) -> Task:
    if name not in TASKS:
        raise CrossrailError(f"unknown RL task {name!r}; choose one of {', '.join(TASKS)}")
    return TASKS[name]()


def verifier_named(name: str) -> Verifier:
    if name not in VERIFIERS:
        raise CrossrailError(f"unknown reward verifier {name!r}; choose one of {', '.join(VERIFIERS)}")
    return VERIFIERS[name]


def draw(problems: list[Record], count: int, seed: int, key: tuple[int, ...]) -> list[Record]:
    """`count` problems drawn with replacement, seeded by (seed, *key): the same key draws the same problems."""
    picks = np.random.default_rng([seed, *key]).integers(0, len(problems), size=count)
    return [problems[int(i)] for i in picks]
