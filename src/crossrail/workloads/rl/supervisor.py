"""The in-attempt form of the pipeline: one parent keeps a learner, samplers and reward workers running.

The parent starts each stage as its own process (or Ray actor), matches the sampler and reward counts to
control.json as it changes, replaces a stage that crashed (a `stage_replaced` event; a learner resumes from
its newest checkpoint) and ends when the learner is done, stopping the rest.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Protocol

from crossrail.errors import CrossrailError
from crossrail.runtime import Reporter
from crossrail.workloads.rl.control import first_control, read_control
from crossrail.workloads.rl.settings import Rendezvous, Settings, to_argv

MODULE = "crossrail.workloads.rl"
POLL_S = 0.05
LEARNER_RESTARTS = 3
EXIT_TEMPFAIL = 75


class Handle(Protocol):
    def poll(self) -> int | None:
        """The exit code once the stage has ended, else None."""

    def stop(self) -> None:
        """Ask the stage to end (SIGTERM, or kill after a grace period)."""


Start = Callable[[str, int], Handle]


class Process:
    def __init__(self, argv: list[str]) -> None:
        self.popen = subprocess.Popen(argv)

    def poll(self) -> int | None:
        return self.popen.poll()

    def stop(self) -> None:
        if self.popen.poll() is None:
            self.popen.terminate()
        try:
            self.popen.wait(10)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait()


def stage_argv(settings: Settings, rdv: Rendezvous, part: str, replica: int) -> list[str]:
    where = ["--rendezvous", str(rdv.root), "--part", part, "--replica", str(replica)]
    return [sys.executable, "-m", MODULE, *to_argv(settings), *where]


class StageSupervisor:
    def __init__(self, settings: Settings, rdv: Rendezvous, reporter: Reporter, start: Start) -> None:
        self.settings, self.rdv, self.reporter, self.start = settings, rdv, reporter, start
        self.stages: dict[tuple[str, int], Handle] = {}
        self.learner_restarts = 0
        self.stop_signal: int | None = None

    def run(self) -> int:
        first_control(self.settings, self.rdv)
        self.rdv.finished.unlink(missing_ok=True)
        previous = signal.signal(signal.SIGTERM, self._on_signal)
        try:
            self.stages[("learner", 0)] = self.start("learner", 0)
            while (code := self._tend()) is None:
                time.sleep(POLL_S)
            return code
        finally:
            for handle in self.stages.values():
                handle.stop()
            signal.signal(signal.SIGTERM, previous)

    def _on_signal(self, signum: int, _frame: object) -> None:
        self.stop_signal = signum
        self.stages[("learner", 0)].stop()

    def _tend(self) -> int | None:
        """One look at every stage; the pipeline's exit code once the learner has ended for good."""
        code = self.stages[("learner", 0)].poll()
        if code is not None:
            if code == 0 or self.stop_signal is not None or self.learner_restarts == LEARNER_RESTARTS:
                return code if code == 0 or self.stop_signal is not None else _failed(code)
            self.learner_restarts += 1
            self._replace("learner", 0, code)
        control = read_control(self.rdv.root)
        wanted = {("sampler", i) for i in range(control.samplers)} | {
            ("reward", i) for i in range(control.reward_workers)
        }
        for key in sorted(wanted):
            handle = self.stages.get(key)
            if handle is None:
                self.stages[key] = self.start(*key)
            elif (code := handle.poll()) is not None and not self.rdv.finished.exists():
                self._replace(*key, code)
        for key in [k for k in self.stages if k[0] != "learner" and k not in wanted]:
            if self.stages[key].poll() is not None:  # scaled down: it ends itself after its current item
                del self.stages[key]
        return None

    def _replace(self, part: str, replica: int, code: int) -> None:
        self.reporter.event("stage_replaced", part=part, replica=replica, exit_code=code)
        self.stages[(part, replica)] = self.start(part, replica)


def _failed(code: int) -> int:
    raise CrossrailError(f"the learner failed {LEARNER_RESTARTS + 1} times (last exit code {code}); see its log")


def processes(settings: Settings, rdv: Rendezvous) -> Start:
    return lambda part, replica: Process(stage_argv(settings, rdv, part, replica))


__all__ = ["EXIT_TEMPFAIL", "Handle", "StageSupervisor", "processes", "stage_argv"]
