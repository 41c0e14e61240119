"""Logs: combined output, capped by rotating into log.txt.1; forgetting attempts keeps the newest logs."""

from __future__ import annotations

from pathlib import Path

import pytest

from crossrail.errors import ConflictError
from crossrail.executors.local import LocalExecutor

from .helpers import RUN, ended, request

WRITES_2500_BYTES = "import sys; sys.stdout.write(''.join(f'{i:04d}\\n' for i in range(500)))"


def test_stdout_and_stderr_share_one_log(executor: LocalExecutor) -> None:
    executor.launch(request("import sys; print('out', flush=True); print('err', file=sys.stderr)"))

    ended(executor)

    assert executor.logs(RUN, 1) == "out\nerr\n"


def test_an_attempt_without_output_has_an_empty_log(executor: LocalExecutor) -> None:
    assert executor.logs(RUN, 1) == ""
    executor.launch(request("pass"))
    ended(executor)

    assert executor.logs(RUN, 1) == ""


def test_the_log_rotates_at_its_cap_keeping_one_older_part(state_dir: Path, attempt_dir: Path) -> None:
    executor = LocalExecutor(state_dir, log_max_bytes=1000)
    executor.launch(request(WRITES_2500_BYTES))
    ended(executor)

    everything = "".join(f"{i:04d}\n" for i in range(500))
    assert executor.logs(RUN, 1) == everything[1000:]
    assert (attempt_dir / "log.txt.1").stat().st_size == 1000
    assert (attempt_dir / "log.txt").stat().st_size == 500


def test_forgetting_keeps_the_log_but_drops_the_attempt(executor: LocalExecutor, attempt_dir: Path) -> None:
    executor.launch(request("print('kept')"))
    ended(executor)

    executor.forget(RUN, 1)
    executor.forget(RUN, 1)

    assert executor.observe() == []
    assert executor.logs(RUN, 1) == "kept\n"
    assert sorted(p.name for p in attempt_dir.iterdir()) == ["forgotten.json", "log.txt"]
    with pytest.raises(ConflictError, match="forgotten"):
        executor.launch(request("print('again')"))


def test_a_running_attempt_cannot_be_forgotten(executor: LocalExecutor) -> None:
    executor.launch(request("import time; time.sleep(30)"))

    with pytest.raises(ConflictError, match="still running"):
        executor.forget(RUN, 1)
    assert [s.phase for s in executor.observe()] == ["running"]


def test_only_the_newest_forgotten_logs_are_kept(state_dir: Path) -> None:
    executor = LocalExecutor(state_dir, keep_logs=2)
    for attempt in range(1, 5):
        executor.launch(request(f"print('attempt {attempt}')", attempt=attempt))
    for attempt in range(1, 5):
        ended(executor, attempt)
        executor.forget(RUN, attempt)

    assert [executor.logs(RUN, attempt) for attempt in range(1, 5)] == ["", "", "attempt 3\n", "attempt 4\n"]
    assert sorted(p.name for p in (state_dir / RUN).iterdir()) == ["3", "4"]
