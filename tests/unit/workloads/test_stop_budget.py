"""A stop within its budget: the training loop writes its final checkpoint when the last write fits in what is
left of CROSSRAIL_STOP_BUDGET_S (a spot pool's preemption notice), and otherwise says it cannot, keeping the
newest checkpoint."""

from __future__ import annotations

import signal
import time
from types import SimpleNamespace
from typing import Any

import pytest

from crossrail.runtime import RuntimeContext
from crossrail.runtime.context import ContextError
from crossrail.workloads.loop import EXIT_TEMPFAIL, TrainingLoop, budget_problem

ENV = {
    "TRAINING_BACKEND": "cpu",
    "EXPERIMENT_ID": "exp",
    "CROSSRAIL_RUN_ID": "exp-1",
    "CROSSRAIL_ATTEMPT": "1",
    "CROSSRAIL_CHECKPOINT_DIR": "file:///tmp/ckpt",
    "CROSSRAIL_DATASET": "file:///tmp/data",
    "CROSSRAIL_REPORT": "/tmp/report.jsonl",
}


class Reports:
    def __init__(self) -> None:
        self.events: list[tuple[str, dict[str, Any]]] = []

    def event(self, name: str, **data: Any) -> None:
        self.events.append((name, data))

    def metric(self, *_: Any) -> None: ...

    def metrics(self, *_: Any) -> None: ...

    def checkpoint(self, *_: Any, **__: Any) -> None: ...


class Saves:
    """A checkpointer whose every write takes at least `write_s` seconds."""

    def __init__(self, write_s: float) -> None:
        self.write_s, self.steps = write_s, list[int]()

    def save(self, _tensors: Any, step: int, _state: Any) -> str:
        time.sleep(self.write_s)
        self.steps.append(step)
        return f"file:///tmp/ckpt/step-{step}"

    def take_removed(self) -> list[str]:
        return []


class Loop(TrainingLoop):
    """Ten steps, a checkpoint every four; SIGTERM arrives during step `stop_at`."""

    def __init__(self, budget: str | None, write_s: float, stop_at: int = 6) -> None:
        env = ENV | ({"CROSSRAIL_STOP_BUDGET_S": budget} if budget is not None else {})
        self.ctx = RuntimeContext.from_env(env)
        self.cfg = SimpleNamespace(steps=10, every_steps=4, every_s=None, step_sleep_s=0.0)
        self.reporter = Reports()  # type: ignore[assignment]
        self.checkpointer = Saves(write_s)  # type: ignore[assignment]
        self.n, self.stop_at = 0, stop_at

    @property
    def step(self) -> int:
        return self.n

    def tensors(self) -> dict[str, Any]:
        return {}

    def state(self) -> dict[str, Any]:
        return {}

    def tokens_per_step(self) -> int:
        return 1

    def _step(self) -> None:
        self.n += 1
        if self.n == self.stop_at:
            self._on_signal(signal.SIGTERM, None)


def stopped(loop: Loop) -> dict[str, Any]:
    (data,) = [d for name, d in loop.reporter.events if name == "stopped"]  # type: ignore[attr-defined]
    return data


def test_a_stop_saves_its_step_when_the_last_write_fits_the_budget() -> None:
    loop = Loop(budget="30", write_s=0.0)

    assert loop._loop() == EXIT_TEMPFAIL
    assert loop.checkpointer.steps == [4, 6]  # type: ignore[attr-defined]
    assert stopped(loop) == {"signal": "SIGTERM", "step": 6, "saved": True}


def test_a_stop_whose_checkpoint_cannot_finish_in_the_budget_says_so_and_keeps_the_newest() -> None:
    loop = Loop(budget="0.001", write_s=0.01)  # every write takes ten times the budget

    assert loop._loop() == EXIT_TEMPFAIL
    assert loop.checkpointer.steps == [4]  # type: ignore[attr-defined]
    data = stopped(loop)
    assert (data["step"], data["saved"]) == (6, False)
    assert "CROSSRAIL_STOP_BUDGET_S" in data["reason"]


def test_without_a_budget_or_a_timed_write_the_final_checkpoint_is_tried() -> None:
    untold = Loop(budget=None, write_s=0.01)
    assert untold._loop() == EXIT_TEMPFAIL
    assert untold.checkpointer.steps == [4, 6]  # type: ignore[attr-defined]
    first = Loop(budget="0.001", write_s=0.01, stop_at=2)  # nothing written yet: how long a write takes is unknown
    assert first._loop() == EXIT_TEMPFAIL
    assert first.checkpointer.steps == [2]  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("budget", "elapsed", "write", "fits"),
    [(30.0, 5.0, 20.0, True), (30.0, 12.0, 20.0, False), (None, 0.0, 99.0, True), (30.0, 40.0, None, True)],
    ids=["inside the notice", "past it", "no budget told", "no write timed"],
)
def test_budget_problem(budget: float | None, elapsed: float, write: float | None, fits: bool) -> None:
    assert (budget_problem(budget, elapsed, write) is None) is fits


def test_a_budget_that_is_not_a_positive_number_is_refused() -> None:
    with pytest.raises(ContextError, match="CROSSRAIL_STOP_BUDGET_S"):
        RuntimeContext.from_env(ENV | {"CROSSRAIL_STOP_BUDGET_S": "soon"})
