"""What the local and Ray executors share: one directory of records per attempt under a state dir.

`<state_dir>/<run>/<attempt>/` holds the attempt's JSON records and logs; `forgotten.json` marks an attempt
whose end the store has recorded. The newest `keep_logs` forgotten attempts keep their logs.
"""

from __future__ import annotations

import shutil
from abc import ABC, abstractmethod
from contextlib import suppress
from pathlib import Path
from typing import cast, get_args

from crossrail.core.attempts import AttemptStatus, StopReason
from crossrail.core.ids import attempt_id, parse_run_id
from crossrail.errors import ConflictError, UsageError
from crossrail.executors.supervisor import read_json

FORGOTTEN = "forgotten.json"
STOP_REASONS: tuple[str, ...] = get_args(StopReason)


def stop_reason(value: object) -> StopReason | None:
    """`value` as a stop reason, or None when it is not one (a record written by hand, or by an older version)."""
    return cast(StopReason, value) if value in STOP_REASONS else None


class AttemptDirs(ABC):
    """Finding, reading and pruning attempt directories; each executor says what one directory's state is."""

    state_dir: Path
    keep_logs: int

    @abstractmethod
    def _status(self, directory: Path) -> AttemptStatus | None:
        """What the records (and the engine) say of the attempt in `directory`; None once it is forgotten."""

    def observe(self) -> list[AttemptStatus]:
        """Every attempt not yet forgotten, including ones launched before a restart, by run and attempt."""
        found = [status for directory in self._attempt_dirs() if (status := self._status(directory)) is not None]
        return sorted(found, key=lambda s: (s.run, s.attempt))

    @staticmethod
    def _check_stop(grace_s: float, reason: str) -> None:
        if reason not in STOP_REASONS or grace_s < 0:
            raise UsageError(f"stop needs grace_s >= 0 and a reason in {STOP_REASONS} (got {grace_s}, {reason!r})")

    def _known(self, directory: Path) -> AttemptStatus:
        status = self._status(directory)
        if status is None:
            run, attempt = directory.parent.name, int(directory.name)
            raise ConflictError(f"attempt {attempt_id(run, attempt)} was forgotten; launch it under a new number")
        return status

    def _dir(self, run: str, attempt: int) -> Path:
        if parse_run_id(run) is None or isinstance(attempt, bool) or not isinstance(attempt, int) or attempt < 1:
            raise UsageError(f"no attempt {run!r}/{attempt!r}; use a run id '<experiment>-<n>' and an attempt >= 1")
        return self.state_dir / run / str(attempt)

    def _attempt_dirs(self) -> list[Path]:
        return [
            attempt
            for run in self.state_dir.iterdir()
            if run.is_dir() and parse_run_id(run.name) is not None
            for attempt in run.iterdir()
            if attempt.is_dir() and attempt.name.isdigit()
        ]

    def _prune(self) -> None:
        """Delete the oldest forgotten attempts beyond `keep_logs`, logs and all."""
        forgotten = []
        for directory in self._attempt_dirs():
            marker = read_json(directory / FORGOTTEN)
            if marker is not None:
                written_ns = (directory / FORGOTTEN).stat().st_mtime_ns  # orders forgets an unmoving clock ties
                forgotten.append((float(marker.get("forgotten_at", 0.0)), written_ns, str(directory), directory))
        forgotten.sort()
        for *_, directory in forgotten[: max(0, len(forgotten) - self.keep_logs)]:
            shutil.rmtree(directory, ignore_errors=True)
            with suppress(OSError):  # the run still has other attempts
                directory.parent.rmdir()
