"""The training loop both reference workloads share: steps, checkpoint cadence, heartbeats, SIGTERM.

A workload subclasses `TrainingLoop` and supplies its model's step, tensors and trainer state and one
training step; the loop owns when to checkpoint, how a stop by SIGTERM ends (checkpoint, exit 75) and
what is reported about it. A stop comes with a budget (`RuntimeContext.stop_budget_s`: a spot pool's
preemption notice, 30 s on GKE): the final checkpoint is written when the last write's time fits in what
is left of it, and otherwise not started, the `stopped` event saying so (the newest checkpoint stands).
"""

from __future__ import annotations

import signal
import sys
import time
from abc import ABC, abstractmethod
from typing import Any, Protocol

from crossrail.runtime import Checkpointer, HeartbeatThread, Reporter, RuntimeContext

EXIT_OK, EXIT_BAD_INPUT, EXIT_TEMPFAIL = 0, 2, 75


PROGRESS_LINES = 50  # about this many progress lines per run, whatever its length


def progress_every(steps: int) -> int:
    """Every how many steps a run of `steps` prints a progress line."""
    return max(1, steps // PROGRESS_LINES)


def progress_line(step: int, steps: int, metrics: dict[str, float]) -> str:
    """`step 120/400  loss 2.4312  tokens/s 18,204`: what a person watching `crossrail logs -f` reads."""
    line = f"step {step}/{steps}"
    if "loss" in metrics:
        line += f"  loss {metrics['loss']:.4f}"
    if "tokens_per_second" in metrics:
        line += f"  tokens/s {metrics['tokens_per_second']:,.0f}"
    return line


class LoopSettings(Protocol):
    @property
    def steps(self) -> int: ...
    @property
    def every_steps(self) -> int | None: ...
    @property
    def every_s(self) -> float | None: ...
    @property
    def step_sleep_s(self) -> float: ...


class TrainingLoop(ABC):
    ctx: RuntimeContext
    cfg: Any  # the workload's settings; the loop reads the LoopSettings fields
    reporter: Reporter
    checkpointer: Checkpointer
    stop_signal: int | None = None
    saved_step: int | None = None  # the step of the newest checkpoint this run holds
    stopped_at: float | None = None  # time.monotonic() when the stop signal came
    write_s: float | None = None  # how long this attempt's last checkpoint write took

    # --- what a workload supplies -------------------------------------------------------------

    @property
    @abstractmethod
    def step(self) -> int: ...

    @abstractmethod
    def tensors(self) -> dict[str, Any]: ...

    @abstractmethod
    def state(self) -> dict[str, Any]: ...

    @abstractmethod
    def tokens_per_step(self) -> int: ...

    @abstractmethod
    def _step(self) -> None: ...

    # --- the loop -----------------------------------------------------------------------------

    def run(self) -> int:
        previous = signal.signal(signal.SIGTERM, self._on_signal)
        heartbeat = HeartbeatThread(self.reporter, self.ctx.heartbeat_s, step_fn=lambda: self.step)
        heartbeat.start()
        try:
            return self._loop()
        finally:
            heartbeat.stop()
            signal.signal(signal.SIGTERM, previous)  # a caller in the same process gets its own handler back

    def _loop(self) -> int:
        cfg: LoopSettings = self.cfg
        begun, first = time.monotonic(), self.step
        last_checkpoint = begun
        while self.step < cfg.steps and not self._stop_agreed():
            self._step()
            if self._checkpoint_due(last_checkpoint):
                self.checkpoint()
                last_checkpoint = time.monotonic()
            if cfg.step_sleep_s:
                time.sleep(cfg.step_sleep_s)
        cannot = self._no_time_to_save()
        if self.saved_step != self.step and cannot is None:
            self.checkpoint()
        if self.stop_signal is not None and self.step < cfg.steps:
            stopped: dict[str, Any] = {"signal": signal.Signals(self.stop_signal).name, "step": self.step}
            stopped["saved"] = self.saved_step == self.step
            if cannot is not None:
                print(f"crossrail: no checkpoint at step {self.step}: {cannot}", file=sys.stderr, flush=True)
                stopped["reason"] = cannot
            self.reporter.event("stopped", **stopped)
            return EXIT_TEMPFAIL
        if self.step > first:
            hours = (time.monotonic() - begun) / 3600
            self.reporter.metric("steps_per_hour", (self.step - first) / hours, self.step)
        return EXIT_OK

    def _no_time_to_save(self) -> str | None:
        """Why the final checkpoint of a stop would not finish inside the stop budget; None when it would, or
        when that cannot be told (no budget, or no write timed yet: then it is tried)."""
        if self.stop_signal is None or self.stopped_at is None or self.saved_step == self.step:
            return None
        return budget_problem(self.ctx.stop_budget_s, time.monotonic() - self.stopped_at, self.write_s)

    def _stop_agreed(self) -> bool:
        """Whether to stop now; the workers of a data-parallel run agree, so none waits alone in a collective."""
        return self.stop_signal is not None

    def report_step(self, metrics: dict[str, float]) -> None:
        """Report one step's metrics, and print a progress line to stdout when one is due (`crossrail logs`)."""
        self.reporter.metrics(metrics, self.step)
        steps: int = self.cfg.steps
        due = self.step == 1 or self.step % progress_every(steps) == 0 or self.step == steps
        if due and self.ctx.is_primary:  # one progress line per step, whatever the degree
            print(progress_line(self.step, steps, metrics), flush=True)

    def _checkpoint_due(self, last_checkpoint: float) -> bool:
        cfg: LoopSettings = self.cfg
        if cfg.every_steps is not None:
            return self.step % cfg.every_steps == 0
        return cfg.every_s is not None and time.monotonic() - last_checkpoint >= cfg.every_s

    def checkpoint(self) -> None:
        began, step = time.perf_counter(), self.step
        if not self.ctx.is_primary:  # every worker holds the same tensors; rank 0 writes them
            self.saved_step = step
            return
        uri = self.checkpointer.save(self.tensors(), step, self.state())
        self.write_s = time.perf_counter() - began
        self.reporter.metric("checkpoint_write_seconds", self.write_s, step)
        self.reporter.checkpoint(step, uri, tokens=step * self.tokens_per_step())
        for removed in self.checkpointer.take_removed():  # the store marks them deleted (docs/runtime.md)
            self.reporter.event("checkpoint_deleted", uri=removed, reason="retention (spec.checkpoint.keep_last)")
        self.saved_step = step

    def _on_signal(self, signum: int, _frame: object) -> None:
        self.stop_signal = signum  # acted on after the current step, so the checkpoint holds a whole step
        if self.stopped_at is None:
            self.stopped_at = time.monotonic()


def budget_problem(budget_s: float | None, elapsed_s: float, write_s: float | None) -> str | None:
    """Why a checkpoint taking `write_s` cannot finish in what `elapsed_s` left of a stop budget of `budget_s`
    (None: it can, or either is unknown)."""
    if budget_s is None or write_s is None:
        return None
    left = budget_s - elapsed_s
    if write_s <= left:
        return None
    return (
        f"the stop budget ({budget_s:g} s, CROSSRAIL_STOP_BUDGET_S) leaves {max(left, 0.0):.1f} s and the last "
        f"checkpoint took {write_s:.1f} s; the newest checkpoint stands"
    )
