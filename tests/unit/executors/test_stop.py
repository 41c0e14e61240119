"""Stopping attempts: SIGTERM to the command's group, grace to checkpoint, SIGKILL after it; first reason wins."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from crossrail.executors.local import LocalExecutor

from .helpers import RUN, ended, logged, pid_alive, pid_of, request, status, wait_for

CHECKPOINTS_ON_SIGTERM = """
import signal, sys, time
def checkpoint(signum, frame):
    print('checkpointed')
    sys.exit(75)
signal.signal(signal.SIGTERM, checkpoint)
print('ready')
time.sleep(30)
"""

IGNORES_SIGTERM = """
import signal, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
print('ready')
time.sleep(30)
"""

STARTS_A_WORKER = """
import os, subprocess, sys, time
worker = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(30)'])
open('worker.pid', 'w').write(str(worker.pid))
print('ready')
{after}
"""


def test_a_command_that_checkpoints_within_grace_records_its_own_exit(executor: LocalExecutor) -> None:
    executor.launch(request(CHECKPOINTS_ON_SIGTERM))
    logged(executor, "ready")

    executor.stop(RUN, 1, grace_s=10, reason="preempted")
    end = ended(executor)

    assert (end.exit_code, end.signal, end.stopped_by) == (75, None, "preempted")
    assert "checkpointed" in executor.logs(RUN, 1)


def test_a_command_that_ignores_sigterm_is_killed_after_grace(executor: LocalExecutor) -> None:
    executor.launch(request(IGNORES_SIGTERM))
    logged(executor, "ready")

    asked = time.monotonic()
    executor.stop(RUN, 1, grace_s=0.5, reason="cancelled")
    assert status(executor).phase == "running"
    end = ended(executor)

    assert time.monotonic() - asked >= 0.5
    assert (end.exit_code, end.signal, end.stopped_by) == (None, signal.SIGKILL, "cancelled")


def test_stop_returns_at_once_and_the_first_reason_wins(executor: LocalExecutor) -> None:
    executor.launch(request(IGNORES_SIGTERM))
    logged(executor, "ready")

    asked = time.monotonic()
    executor.stop(RUN, 1, grace_s=1, reason="suspended")
    executor.stop(RUN, 1, grace_s=0, reason="preempted")

    assert time.monotonic() - asked < 0.5
    assert "stopping (suspended, grace 1 s)" in status(executor).detail
    assert ended(executor).stopped_by == "suspended"


def test_stopping_an_ended_attempt_does_nothing(executor: LocalExecutor, attempt_dir: Path) -> None:
    executor.launch(request("pass"))
    before = ended(executor)

    executor.stop(RUN, 1, grace_s=0, reason="cancelled")

    assert status(executor) == before
    assert not (attempt_dir / "stop.json").exists()


def test_stopping_an_unknown_attempt_does_nothing(executor: LocalExecutor) -> None:
    executor.stop(RUN, 7, grace_s=0, reason="cancelled")

    assert executor.observe() == []


def test_a_command_killed_by_someone_else_is_not_counted_as_stopped(executor: LocalExecutor, attempt_dir: Path) -> None:
    executor.launch(request("import time; time.sleep(30)"))

    os.kill(pid_of(attempt_dir), signal.SIGKILL)
    end = ended(executor)

    assert (end.exit_code, end.signal, end.stopped_by) == (None, signal.SIGKILL, None)


def test_stop_ends_the_whole_process_group(executor: LocalExecutor, attempt_dir: Path) -> None:
    executor.launch(request(STARTS_A_WORKER.format(after="time.sleep(30)")))
    logged(executor, "ready")
    worker = int((attempt_dir / "worker.pid").read_text())

    executor.stop(RUN, 1, grace_s=5, reason="preempted")

    assert ended(executor).signal == signal.SIGTERM
    wait_for(lambda: not pid_alive(worker), what="the worker to be killed with its group")


def test_workers_left_behind_by_an_ended_command_are_killed(executor: LocalExecutor, attempt_dir: Path) -> None:
    executor.launch(request(STARTS_A_WORKER.format(after="sys.exit(0)")))

    assert ended(executor).exit_code == 0
    worker = int((attempt_dir / "worker.pid").read_text())
    wait_for(lambda: not pid_alive(worker), what="the leftover worker to be killed")
