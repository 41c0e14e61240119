"""Builders and polling helpers for the local executor tests."""

from __future__ import annotations

from pathlib import Path
from typing import TypeVar

from tests.conftest import wait_for

from crossrail.core.attempts import AttemptStatus, LaunchRequest
from crossrail.executors.local import LocalExecutor
from crossrail.executors.supervisor import CHILD, SUPERVISOR, kill_session, read_json

T = TypeVar("T")

RUN = "train-1"


def request(code: str, *, run: str = RUN, attempt: int = 1, env: dict[str, str] | None = None) -> LaunchRequest:
    """A one-chip local attempt whose command is `python -c code`."""
    return LaunchRequest(
        run=run,
        attempt=attempt,
        pool="local",
        accelerator="gpu",
        chip_type="virtual",
        chips=1,
        command=["python", "-c", code],
        env=env or {},
    )


def status(executor: LocalExecutor, attempt: int = 1, run: str = RUN) -> AttemptStatus:
    (found,) = [s for s in executor.observe() if (s.run, s.attempt) == (run, attempt)]
    return found


def ended(executor: LocalExecutor, attempt: int = 1, run: str = RUN, timeout_s: float = 10.0) -> AttemptStatus:
    def check() -> AttemptStatus | None:
        s = status(executor, attempt, run)
        return None if s.phase == "running" else s

    return wait_for(check, what=f"attempt {run}/{attempt} to end", timeout_s=timeout_s)


def logged(executor: LocalExecutor, text: str, attempt: int = 1, run: str = RUN) -> str:
    """Wait until the attempt's log holds `text`; return the log."""

    def check() -> str | None:
        log = executor.logs(run, attempt)
        return log if text in log else None

    return wait_for(check, what=f"{text!r} in the log of {run}/{attempt}")


def pid_of(attempt_dir: Path, name: str = CHILD) -> int:
    record = wait_for(lambda: read_json(attempt_dir / name), what=f"{name} in {attempt_dir}")
    return int(record["pid"])


def pid_alive(pid: int) -> bool:
    """Whether `pid` is a process that has not ended (a zombie awaiting its reaper counts as ended)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return text[text.rindex(")") + 2] not in "ZX"


def kill_everything(state_dir: Path) -> None:
    """SIGKILL every supervisor and command still running under `state_dir`, so no test leaks processes."""
    for attempt_dir in state_dir.glob("*/*"):
        record = read_json(attempt_dir / SUPERVISOR) or {}
        session, ticks = record.get("session"), record.get("start_ticks")
        if isinstance(session, int):
            kill_session(session, ticks if isinstance(ticks, int) else None)
