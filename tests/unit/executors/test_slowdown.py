"""A local pool's `slowdown`: the supervisor lets the attempt's processes run 1/slowdown of the time."""

from __future__ import annotations

import dataclasses
import signal
import time
from pathlib import Path

from crossrail.core.clock import ManualClock
from crossrail.executors.local import LocalExecutor
from crossrail.executors.supervisor import Throttle

from .helpers import RUN, ended, pid_of, request, status


def test_the_throttle_runs_the_group_one_slowdownth_of_each_period_and_releases_it_for_good() -> None:
    timer, sent = ManualClock(0.0), []
    throttle = Throttle(4.0, timer)
    period, run_s = Throttle.PERIOD_S, Throttle.PERIOD_S / 4

    assert throttle.tick(sent.append) == run_s  # it runs first
    timer.advance(run_s)
    assert throttle.tick(sent.append) == period - run_s
    timer.advance(period - run_s)
    throttle.tick(sent.append)
    assert sent == [signal.SIGSTOP, signal.SIGCONT]

    timer.advance(run_s)
    throttle.tick(sent.append)  # stopped again ...
    throttle.release(sent.append)  # ... and let go, as a stop's SIGTERM needs
    timer.advance(10 * period)
    assert throttle.tick(sent.append) == float("inf")
    assert sent == [signal.SIGSTOP, signal.SIGCONT, signal.SIGSTOP, signal.SIGCONT]


def test_no_slowdown_sends_nothing() -> None:
    sent: list[int] = []
    assert Throttle(1.0, ManualClock(0.0)).tick(sent.append) == float("inf")
    assert sent == []


def _state(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return None


def test_a_slowed_attempt_is_seen_stopped_part_of_the_time_and_still_ends_and_stops_cleanly(
    executor: LocalExecutor,
) -> None:
    busy = "import time\nend = time.monotonic() + 600\nwhile time.monotonic() < end: pass"
    executor.launch(dataclasses.replace(request(busy), slowdown=8.0))
    pid = pid_of(executor.state_dir / RUN / "1")

    states = set()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and "T" not in states:  # stopped 7/8 of the time
        states.add(_state(pid))
        time.sleep(0.013)
    assert "T" in states
    assert status(executor).phase == "running"

    executor.stop(RUN, 1, grace_s=10.0, reason="cancelled")  # SIGTERM reaches it although it may be paused
    end = ended(executor, timeout_s=20.0)
    assert (end.signal, end.stopped_by) == (signal.SIGTERM, "cancelled")
