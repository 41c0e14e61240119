"""A restarted agent re-adopts attempts, and attempts whose supervisor died or never started are settled once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from crossrail.core import ManualClock
from crossrail.executors.local import NEVER_STARTED, START_TIMEOUT_S, VANISHED, LocalExecutor
from crossrail.executors.supervisor import SUPERVISOR, read_json, session_members

from .helpers import RUN, ended, logged, pid_alive, pid_of, request, status, wait_for

WAITS_FOR_GO = """
import os, time
print('ready')
while not os.path.exists(os.environ['GO']):
    time.sleep(0.02)
"""


def test_a_new_executor_on_the_same_state_dir_re_adopts_a_running_attempt(state_dir: Path, tmp_path: Path) -> None:
    go = tmp_path / "go"
    first = LocalExecutor(state_dir)
    first.launch(request(WAITS_FOR_GO, env={"GO": str(go)}))
    logged(first, "ready")
    seen_before = status(first)

    restarted = LocalExecutor(state_dir)
    assert restarted.observe() == [seen_before]
    assert seen_before.phase == "running"

    go.touch()
    end = ended(restarted)
    assert (end.phase, end.exit_code, end.started_at) == ("exited", 0, seen_before.started_at)
    assert LocalExecutor(state_dir).observe() == [end]


def test_a_killed_supervisor_makes_the_attempt_lost_and_its_orphan_is_killed(
    executor: LocalExecutor, state_dir: Path, attempt_dir: Path
) -> None:
    executor.launch(request("import time; time.sleep(30)"))
    child = pid_of(attempt_dir)

    os.kill(pid_of(attempt_dir, SUPERVISOR), signal.SIGKILL)
    lost = ended(executor)

    assert lost.phase == "lost"
    assert lost.detail == f"{VANISHED}; the command still ran and its processes were killed"
    assert (lost.exit_code, lost.signal, lost.stopped_by) == (None, None, None)
    wait_for(lambda: not pid_alive(child), what="the orphaned command to be killed")
    assert LocalExecutor(state_dir).observe() == [lost]


def test_stopping_an_orphan_kills_it_and_records_the_reason(executor: LocalExecutor, attempt_dir: Path) -> None:
    executor.launch(request("import time; time.sleep(30)"))
    child = pid_of(attempt_dir)
    supervisor = pid_of(attempt_dir, SUPERVISOR)

    os.kill(supervisor, signal.SIGKILL)
    wait_for(lambda: not pid_alive(supervisor), what="the supervisor to die")
    executor.stop(RUN, 1, grace_s=10, reason="cancelled")

    end = status(executor)
    assert (end.phase, end.signal, end.stopped_by) == ("exited", signal.SIGKILL, "cancelled")
    assert "the supervisor had vanished" in end.detail
    wait_for(lambda: not pid_alive(child), what="the orphaned command to be killed")


def supervise(attempt_dir: Path) -> str:
    """Run a supervisor for `attempt_dir` by hand; returns its stderr once it is done (it holds the pipe till then)."""
    done = subprocess.run(
        [sys.executable, "-m", "crossrail.executors.supervisor", str(attempt_dir)],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    )
    return done.stderr


@pytest.fixture
def interrupted(monkeypatch: pytest.MonkeyPatch) -> None:
    """Launches that die after writing request.json, before the supervisor is started."""
    monkeypatch.setattr(LocalExecutor, "_start_supervisor", lambda self, directory: None)


def test_an_orphan_is_found_even_when_the_supervisor_died_before_recording_it(
    executor: LocalExecutor, attempt_dir: Path
) -> None:
    executor.launch(request("import time; time.sleep(30)"))
    child = pid_of(attempt_dir)
    (attempt_dir / "child.json").unlink()  # as if the supervisor was killed just after starting the command

    os.kill(pid_of(attempt_dir, SUPERVISOR), signal.SIGKILL)

    assert ended(executor).phase == "lost"
    wait_for(lambda: not pid_alive(child), what="the unrecorded command to be killed")


@pytest.mark.usefixtures("interrupted")
def test_a_launch_interrupted_before_the_supervisor_started_is_lost_once_it_is_late(
    state_dir: Path, attempt_dir: Path, tmp_path: Path
) -> None:
    clock = ManualClock(time.time())
    executor = LocalExecutor(state_dir, clock=clock)
    count = tmp_path / "count"
    executor.launch(request("import os; open(os.environ['COUNT'], 'a').write('ran')", env={"COUNT": str(count)}))

    assert (status(executor).phase, status(executor).detail) == ("running", "starting")
    clock.advance(START_TIMEOUT_S + 1)
    assert (status(executor).phase, status(executor).detail) == ("lost", NEVER_STARTED)

    # A supervisor that turns up after all finds the attempt claimed and runs nothing.
    late = supervise(attempt_dir)
    assert "already claimed; not starting its command" in late
    assert not count.exists()
    assert status(executor).detail == NEVER_STARTED


def test_an_attempt_directory_without_a_request_is_lost_once_old(executor: LocalExecutor, attempt_dir: Path) -> None:
    attempt_dir.mkdir(parents=True)
    assert status(executor).detail == "starting"

    old = time.time() - START_TIMEOUT_S - 5
    os.utime(attempt_dir, (old, old))

    assert (status(executor).phase, status(executor).detail) == ("lost", NEVER_STARTED)
    assert executor.launch(request("pass")).phase == "lost"


@pytest.mark.usefixtures("interrupted")
def test_a_stop_that_reaches_the_supervisor_before_the_command_starts_prevents_it(
    executor: LocalExecutor, attempt_dir: Path, tmp_path: Path
) -> None:
    count = tmp_path / "count"
    executor.launch(request("import os; open(os.environ['COUNT'], 'a').write('ran')", env={"COUNT": str(count)}))
    executor.stop(RUN, 1, grace_s=5, reason="cancelled")

    supervise(attempt_dir)
    end = status(executor)

    assert (end.phase, end.signal, end.stopped_by) == ("exited", signal.SIGTERM, "cancelled")
    assert end.detail == "stopped before the command started"
    assert not count.exists()


@pytest.mark.usefixtures("interrupted")
def test_a_supervisor_started_from_any_session_leads_its_own(executor: LocalExecutor, attempt_dir: Path) -> None:
    """The recorded session is what orphan clean-up kills: it must never be the caller's own session."""
    executor.launch(request("pass"))
    executor.stop(RUN, 1, grace_s=5, reason="cancelled")

    supervise(attempt_dir)  # started by hand, inside this test runner's session
    record = read_json(attempt_dir / SUPERVISOR) or {}

    assert record["session"] == record["pid"]
    assert record["session"] != os.getsid(0)


def test_orphan_clean_up_never_counts_the_callers_session_or_a_reused_pid_as_a_supervisors(
    executor: LocalExecutor, attempt_dir: Path
) -> None:
    assert session_members(os.getsid(0), None) == []

    executor.launch(request("import time; time.sleep(30)"))
    child = pid_of(attempt_dir)
    record = read_json(attempt_dir / SUPERVISOR) or {}
    assert {record["pid"], child} <= set(session_members(record["session"], record["start_ticks"]))
    # The same pid with another start time is a later process that took the number: nothing is ours.
    assert session_members(record["session"], record["start_ticks"] + 1) == []
