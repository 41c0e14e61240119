"""Launching attempts and observing how they end: exit codes, signals, environment, idempotency, speed."""

from __future__ import annotations

import os
import shutil
import sys
import time
from pathlib import Path

import pytest

from crossrail.errors import UsageError
from crossrail.executors.local import LocalExecutor

from .helpers import RUN, ended, logged, request, status


@pytest.mark.parametrize(
    ("code", "exit_code", "sig"),
    [
        ("pass", 0, None),
        ("import sys; sys.exit(3)", 3, None),
        ("import os, signal; os.kill(os.getpid(), signal.SIGKILL)", None, 9),
    ],
    ids=["a clean exit records code 0", "a failure records its exit code", "a kill records the signal"],
)
def test_an_attempt_that_ends_on_its_own_is_recorded_as_exited(
    executor: LocalExecutor, code: str, exit_code: int | None, sig: int | None
) -> None:
    launched = executor.launch(request(code))
    assert launched.phase in {"running", "exited"}

    end = ended(executor)

    assert (end.phase, end.exit_code, end.signal, end.stopped_by) == ("exited", exit_code, sig, None)
    assert end.started_at is not None
    assert end.ended_at is not None
    assert end.started_at <= end.ended_at


def test_the_command_gets_the_request_env_and_the_executors_python_first_on_path(executor: LocalExecutor) -> None:
    code = "import os, sys; print(os.environ['CROSSRAIL_REPORT'], os.environ['PATH'].split(':')[0], sys.executable)"
    executor.launch(request(code, env={"CROSSRAIL_REPORT": "/reports/train-1.jsonl", "PATH": "/usr/bin:/bin"}))

    assert ended(executor).exit_code == 0
    report, first_on_path, python = executor.logs(RUN, 1).split()
    assert report == "/reports/train-1.jsonl"
    assert first_on_path == os.path.dirname(sys.executable)
    assert os.path.dirname(python) == os.path.dirname(sys.executable)


def test_launching_an_attempt_twice_starts_one_process(executor: LocalExecutor, tmp_path: Path) -> None:
    count = tmp_path / "count"
    req = request("import os; open(os.environ['COUNT'], 'a').write('ran\\n')", env={"COUNT": str(count)})

    first = executor.launch(req)
    second = executor.launch(req)
    ended(executor)
    third = executor.launch(req)

    assert (first.run, first.attempt) == (second.run, second.attempt) == (RUN, 1)
    assert third.phase == "exited"
    assert count.read_text() == "ran\n"
    assert len(executor.observe()) == 1


def test_launch_returns_while_the_command_still_runs(executor: LocalExecutor) -> None:
    started = time.monotonic()
    launched = executor.launch(request("import time; time.sleep(30)"))

    assert time.monotonic() - started < 3.0
    assert launched.phase == "running"
    assert status(executor).phase == "running"


def test_a_command_that_cannot_be_started_exits_127_and_says_why(executor: LocalExecutor) -> None:
    req = request("")
    req.command[:] = ["no-such-program-anywhere"]
    executor.launch(req)

    end = ended(executor)

    assert end.exit_code == 127
    assert "cannot start 'no-such-program-anywhere'" in end.detail
    assert "No such file" in executor.logs(RUN, 1)


def test_an_interpreter_that_cannot_run_the_supervisor_fails_the_attempt_at_launch(state_dir: Path) -> None:
    false = shutil.which("false")
    assert false is not None
    executor = LocalExecutor(state_dir, python=false)

    launched = executor.launch(request("pass"))

    assert (launched.phase, launched.exit_code) == ("exited", 127)
    assert "the supervisor exited 1 before starting the command" in launched.detail
    assert status(executor) == launched


def test_a_relative_state_dir_works_from_any_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    executor = LocalExecutor(Path("relative-state"))

    executor.launch(request("print('here')"))

    assert ended(executor).exit_code == 0
    assert logged(executor, "here") == "here\n"


def test_a_local_attempt_cannot_be_resized(executor: LocalExecutor) -> None:
    executor.launch(request("import time; time.sleep(30)"))

    assert executor.resize(RUN, 1, 8) is False


@pytest.mark.parametrize(
    ("run", "attempt"),
    [("../escape-1", 1), ("train", 1), ("train-1", 0), ("train-1", True)],
    ids=["a path is not a run id", "a run id needs its number", "attempts count from 1", "a bool is no attempt"],
)
def test_malformed_attempt_ids_are_usage_errors(executor: LocalExecutor, run: str, attempt: int) -> None:
    with pytest.raises(UsageError, match="run id"):
        executor.launch(request("pass", run=run, attempt=attempt))
    assert executor.observe() == []
