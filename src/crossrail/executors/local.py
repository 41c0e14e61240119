"""The local executor: each attempt a detached, supervised process tree on this machine, re-adopted after restarts.

Everything it knows lives under `state_dir/<run>/<attempt>/`, so a restarted agent sees exactly what the
previous one saw. The supervisor (crossrail.executors.supervisor) writes `supervisor.json`, `child.json`,
`log.txt` and `status.json`; the executor writes `request.json`, `stop.json`, `lost.json`, `forgotten.json`,
and `status.json` when no supervisor could. A data-parallel attempt's gang keeps `workers.json` in its working
directory (the attempt's, or its home), where `resize` writes `grow.json`. An attempt's `started_at` and
`ended_at` are wall-clock times the supervisor measured (None where none did); the injected clock stamps the
executor's own records.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from contextlib import suppress
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from crossrail.core.attempts import AttemptPhase, AttemptStatus, Capabilities, LaunchRequest, StopReason
from crossrail.core.clock import Clock, MonotonicClock, SystemClock
from crossrail.core.ids import attempt_id
from crossrail.errors import ConflictError, UsageError
from crossrail.executors import sandbox
from crossrail.executors.attempt_dirs import FORGOTTEN, AttemptDirs, stop_reason
from crossrail.executors.gang import GROW_FILE as GANG_GROW
from crossrail.executors.gang import WORKERS_FILE as GANG_WORKERS
from crossrail.executors.supervisor import (
    CHILD,
    DEFAULT_LOG_MAX_BYTES,
    LOG,
    LOG_ROTATED,
    REQUEST,
    STATUS,
    STOP,
    SUPERVISOR,
    is_alive,
    kill_session,
    read_json,
    write_json_atomic,
    write_json_once,
)

LOST = "lost.json"
SUPERVISOR_LOG = "supervisor.log"
RECORDS = (REQUEST, SUPERVISOR, CHILD, STATUS, STOP, LOST, SUPERVISOR_LOG)

LAUNCH_WAIT_S = 5.0  # how long launch() waits for the supervisor to claim the attempt
START_TIMEOUT_S = 10.0  # an attempt no supervisor has claimed after this long never will be
NEVER_STARTED = "never started: no supervisor claimed the attempt (the launch was interrupted)"
VANISHED = "the supervisor vanished without recording an exit"


def gang_command(request: LaunchRequest, python: str) -> list[str]:
    """The command as given for one worker; for `spec.parallelism.data` N > 1, elastic torchrun workers under
    crossrail.executors.gang: as many as the attempt's chips make at the declared chips per worker
    (`resources.chips` / N), resized within `resources.min_chips`..`max_chips` in workers (clamped around N);
    for a part of a pipeline with `replicas` R > 1, R copies of that under crossrail.executors.replicas."""
    command = _workers_command(request, python)
    replicas = request.env.get("CROSSRAIL_PART_REPLICAS", "")
    if replicas.isdigit() and int(replicas) > 1:
        return [python, "-m", "crossrail.executors.replicas", "--replicas", replicas, "--", *command]
    return command


def _workers_command(request: LaunchRequest, python: str) -> list[str]:
    try:
        doc = json.loads(request.env.get("CROSSRAIL_SPEC") or "{}")
    except json.JSONDecodeError:
        return request.command
    spec = doc.get("spec") if isinstance(doc, dict) else None
    spec = spec if isinstance(spec, dict) else {}
    degree = _whole((spec.get("parallelism") or {}).get("data")) or 1
    if degree == 1:
        return request.command
    resources = spec.get("resources") or {}
    declared = _whole(resources.get("chips"))
    per = declared // degree if declared is not None and declared % degree == 0 else 1  # chips per worker
    low, high = _whole(resources.get("min_chips")), _whole(resources.get("max_chips"))
    least = min(max(low // per, 1) if low is not None else degree, degree)
    most = max(high // per if high is not None else degree, degree)
    # As many workers as the chips the attempt was given make (an elastic run may be admitted below or above
    # its declared chips), within the range; the declared degree when they make no whole number of workers.
    given = request.chips // per if request.chips % per == 0 else degree
    workers = min(max(given, least), most)
    gang = [python, "-m", "crossrail.executors.gang", f"--workers={workers}"]
    return [*gang, f"--min-workers={least}", f"--max-workers={most}", "--", *request.command]


def _gang_flags(command: list[Any]) -> dict[str, int] | None:
    """`--workers` and `--max-workers` of a gang command (as gang_command writes it); None for any other."""
    if command[1:3] != ["-m", "crossrail.executors.gang"] or "--" not in command:
        return None
    flags = {}
    for part in command[3 : command.index("--")]:
        name, _, value = str(part).partition("=")
        if name in ("--workers", "--max-workers") and value.isdigit():
            flags[name[2:].replace("-", "_")] = int(value)
    return flags if {"workers", "max_workers"} <= flags.keys() else None


def _whole(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


class LocalExecutor(AttemptDirs):
    """Runs attempts as processes on this machine; satisfies crossrail.control.executor.Executor.

    Not thread-safe, and one agent per `state_dir`: the agent calls it from one thread.
    """

    capabilities = Capabilities(backends=("local",), sees_processes=True, can_withdraw=False)  # its own children

    def __init__(
        self,
        state_dir: Path,
        *,
        python: str = sys.executable,
        log_max_bytes: int = DEFAULT_LOG_MAX_BYTES,
        keep_logs: int = 200,
        clock: Clock | None = None,
        homes: Path | None = None,
    ) -> None:
        """`homes`: where attempts that run under an identity of their own get their home (by default `homes`
        beside `state_dir`)."""
        if log_max_bytes < 1 or keep_logs < 0:
            raise UsageError(f"log_max_bytes must be > 0 and keep_logs >= 0 (got {log_max_bytes}, {keep_logs})")
        self.state_dir = Path(state_dir).absolute()  # the supervisor runs in the attempt directory
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.homes = Path(homes).absolute() if homes is not None else self.state_dir.with_name("homes")
        self.python = python
        self.log_max_bytes = log_max_bytes
        self.keep_logs = keep_logs
        self._clock = clock or SystemClock()
        self._timer = MonotonicClock()  # how long a real supervisor takes to start: a real wait, not a decision
        self._unreaped: list[subprocess.Popen[bytes]] = []

    def launch(self, request: LaunchRequest) -> AttemptStatus:
        """1. claim the attempt's directory, 2. write the request, 3. start its supervisor, 4. say how it is."""
        directory = self._dir(request.run, request.attempt)
        directory.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.mkdir(directory)
        except FileExistsError:
            return self._known(directory)
        request = replace(request, command=gang_command(request, self.python))
        record = {"request": asdict(request), "launched_at": self._clock.now(), "log_max_bytes": self.log_max_bytes}
        if request.run_as is not None:
            record["home"] = str(self._sandbox(request))
        write_json_atomic(directory / REQUEST, record)
        self._start_supervisor(directory)
        return self._known(directory)

    def _sandbox(self, request: LaunchRequest) -> Path:
        """An isolated attempt's home, made with its report file and checkpoint directory its identity's. The
        attempts' records (each request holds its secrets) are the agent's alone. Not root: the attempt runs
        as the agent's user, with an environment and a home of its own all the same."""
        os.chmod(self.state_dir, 0o700)
        if os.geteuid() == 0:
            return sandbox.prepare(request, self.homes)
        home = self.homes / request.run / str(request.attempt)
        home.mkdir(parents=True, exist_ok=True, mode=0o700)
        return home

    def observe(self) -> list[AttemptStatus]:
        self._unreaped = [p for p in self._unreaped if p.poll() is None]
        return super().observe()

    def stop(self, run: str, attempt: int, grace_s: float, reason: StopReason) -> None:
        """Record the stop (the first reason wins) and SIGTERM the supervisor, which ends the command's group."""
        self._check_stop(grace_s, reason)
        directory = self._dir(run, attempt)
        status = self._status(directory, stop_reason=reason) if directory.is_dir() else None
        if status is None or status.phase != "running":
            return
        write_json_once(directory / STOP, {"reason": reason, "grace_s": grace_s, "requested_at": self._clock.now()})
        supervisor = read_json(directory / SUPERVISOR)
        if supervisor is None:  # not claimed yet: the supervisor reads stop.json before it starts the command
            return
        if is_alive(supervisor):
            with suppress(ProcessLookupError):
                os.kill(supervisor["pid"], signal.SIGTERM)
                return
        self._status(directory, stop_reason=reason)  # it ended between the two looks; settle it now

    def resize(self, run: str, attempt: int, chips: int) -> bool:
        """Grow a running data-parallel attempt (crossrail.executors.gang) to `chips` in place: write how many
        workers it is to have (`grow.json`, whole) and SIGUSR1 the gang, which starts the extra torchrun agents;
        the workers regroup and resume from the last checkpoint. True once the request reached the live gang;
        False for an attempt that is not a gang (one process, or a pipeline part's replicas), has ended or is
        stopping, for chips that are not a whole number of its workers, fewer than it launched with, or past its
        `--max-workers`."""
        directory = self._dir(run, attempt)
        record = read_json(directory / REQUEST)
        status = self._status(directory) if directory.is_dir() else None
        if record is None or status is None or status.phase != "running" or (directory / STOP).exists():
            return False
        launched = record.get("request") or {}
        flags = _gang_flags(launched.get("command") or [])
        size = launched.get("chips")
        if flags is None or not isinstance(size, int) or size < 1 or size % flags["workers"]:
            return False
        per_worker = size // flags["workers"]
        workers = chips // per_worker if chips % per_worker == 0 else 0
        if not flags["workers"] <= workers <= flags["max_workers"]:
            return False
        where = Path(record["home"]) if isinstance(record.get("home"), str) else directory  # the gang's cwd
        gang = read_json(where / GANG_WORKERS)  # written once the gang takes the signal
        child = read_json(directory / CHILD)
        if gang is None or child is None or gang.get("gang") != child.get("pid") or not is_alive(child):
            return False
        write_json_atomic(where / GANG_GROW, {"workers": workers, "chips": chips, "requested_at": self._clock.now()})
        try:
            os.kill(child["pid"], signal.SIGUSR1)
        except (ProcessLookupError, PermissionError):
            return False
        return True

    def withdraw(self, run: str, attempt: int) -> bool:
        """Nothing waits in a queue here: an attempt's process starts as it is launched."""
        return False

    def logs(self, run: str, attempt: int) -> str:
        """The rotated part of the log, then the current part."""
        directory = self._dir(run, attempt)
        for _ in range(5):  # a rotation while reading shows as changed inodes; read again
            before = _inodes(directory)
            text = b"".join(_read_bytes(directory / name) for name in (LOG_ROTATED, LOG))
            if _inodes(directory) == before:
                break
        return text.decode("utf-8", errors="replace")

    def forget(self, run: str, attempt: int) -> None:
        """Drop every record of an ended attempt but its log; keep the logs of the newest `keep_logs` forgotten."""
        directory = self._dir(run, attempt)
        if not directory.is_dir():
            return
        if not (directory / FORGOTTEN).exists():
            status = self._status(directory)
            if status is not None and status.phase == "running":
                raise ConflictError(
                    f"attempt {attempt_id(run, attempt)} is still running; stop it and wait for its end in observe()"
                )
            write_json_atomic(directory / FORGOTTEN, {"forgotten_at": self._clock.now()})
        for name in RECORDS:
            (directory / name).unlink(missing_ok=True)
        home = self.homes / run / str(attempt)  # scratch: what the attempt kept is in its checkpoints and report
        shutil.rmtree(home, ignore_errors=True)
        with suppress(OSError):
            home.parent.rmdir()
        self._prune()

    # Reading one attempt's state.

    def _status(self, directory: Path, *, stop_reason: StopReason | None = None) -> AttemptStatus | None:
        """What the files and the processes say of one attempt; None once it is forgotten.

        Settles what can be settled: a supervisor that vanished is declared lost once (killing what still
        runs of its session), and so is an attempt no supervisor claimed in START_TIMEOUT_S.
        """
        if (directory / FORGOTTEN).exists():
            return None
        ended = self._recorded_end(directory)
        if ended is not None:
            return ended
        supervisor = read_json(directory / SUPERVISOR)
        if supervisor is None:
            if self._age_s(directory) < START_TIMEOUT_S:
                return self._attempt_status(directory, "running", detail="starting")
            write_json_once(directory / SUPERVISOR, {"pid": None, "start_ticks": None})  # races a late supervisor
            supervisor = read_json(directory / SUPERVISOR)
        if supervisor is None or supervisor.get("pid") is None:
            return self._declare_lost(directory, NEVER_STARTED)
        if is_alive(supervisor):
            return self._running(directory)
        return self._recorded_end(directory) or self._settle_orphan(directory, stop_reason)

    def _recorded_end(self, directory: Path) -> AttemptStatus | None:
        status = read_json(directory / STATUS)
        if status is not None:
            return self._attempt_status(
                directory,
                "exited",
                exit_code=status.get("exit_code"),
                signal=status.get("signal"),
                stopped_by=stop_reason(status.get("stopped_by")),
                started_at=status.get("started_at"),
                ended_at=status.get("ended_at"),
                detail=status.get("detail") or "",
            )
        lost = read_json(directory / LOST)
        if lost is not None:
            return self._attempt_status(directory, "lost", detail=lost.get("detail") or VANISHED)
        return None

    def _running(self, directory: Path) -> AttemptStatus:
        stop = read_json(directory / STOP)
        detail = f"stopping ({stop.get('reason')}, grace {stop.get('grace_s')} s)" if stop else ""
        return self._attempt_status(directory, "running", detail=detail)

    def _settle_orphan(self, directory: Path, stop_reason: StopReason | None) -> AttemptStatus | None:
        """The supervisor is gone with no record: end what still runs of its session, then record what happened."""
        supervisor = read_json(directory / SUPERVISOR) or {}
        session = supervisor.get("session")
        # Unwatched processes must not keep burning chips; nobody is left to wait out a grace period.
        ticks = supervisor.get("start_ticks")
        if not isinstance(session, int) or kill_session(session, ticks if isinstance(ticks, int) else None) == 0:
            return self._declare_lost(directory, VANISHED)
        if stop_reason is not None:
            write_json_once(
                directory / STATUS,
                {
                    "exit_code": None,
                    "signal": int(signal.SIGKILL),
                    "started_at": (read_json(directory / CHILD) or {}).get("started_at"),
                    "ended_at": None,  # started_at and ended_at are the supervisor's measurements only
                    "stopped_by": stop_reason,
                    "detail": "the supervisor had vanished; stop() killed the command's processes",
                },
            )
            return self._recorded_end(directory)
        return self._declare_lost(directory, f"{VANISHED}; the command still ran and its processes were killed")

    def _declare_lost(self, directory: Path, detail: str) -> AttemptStatus | None:
        write_json_once(directory / LOST, {"detail": detail, "declared_at": self._clock.now()})
        return self._recorded_end(directory)

    def _attempt_status(self, directory: Path, phase: AttemptPhase, **fields: Any) -> AttemptStatus:
        fields.setdefault("started_at", (read_json(directory / CHILD) or {}).get("started_at"))
        fields.setdefault("stopped_by", stop_reason((read_json(directory / STOP) or {}).get("reason")))
        return AttemptStatus(run=directory.parent.name, attempt=int(directory.name), phase=phase, **fields)

    def _age_s(self, directory: Path) -> float:
        """How long ago the attempt was launched."""
        request = read_json(directory / REQUEST)
        if request is not None and isinstance(request.get("launched_at"), int | float):
            return self._clock.now() - float(request["launched_at"])
        # Interrupted before request.json was written: the directory's age, on the file system's (wall) clock.
        return SystemClock().now() - directory.stat().st_mtime

    # Starting supervisors.

    def _start_supervisor(self, directory: Path) -> None:
        """Start the supervisor in its own session and wait briefly until it has claimed the attempt."""
        deadline = self._timer.now() + LAUNCH_WAIT_S
        command = [self.python, "-m", "crossrail.executors.supervisor", str(directory)]
        try:
            with open(directory / SUPERVISOR_LOG, "ab") as err:
                parent = subprocess.Popen(
                    command,
                    cwd=directory,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=err,
                    start_new_session=True,
                )
        except OSError as exc:
            self._record_start_failure(directory, f"cannot run {self.python!r}: {exc.strerror}")
            return
        try:
            returncode = parent.wait(timeout=LAUNCH_WAIT_S)  # it forks the supervisor off and exits
        except subprocess.TimeoutExpired:
            self._unreaped.append(parent)
            return
        if returncode != 0:
            self._record_start_failure(directory, f"the supervisor exited {returncode} before starting the command")
            return
        while not (directory / SUPERVISOR).exists() and self._timer.now() < deadline:
            time.sleep(0.005)

    def _record_start_failure(self, directory: Path, detail: str) -> None:
        lines = (directory / SUPERVISOR_LOG).read_text(errors="replace").strip().splitlines()
        if lines:
            detail += f": {lines[-1]}"
        record = {"exit_code": 127, "signal": None, "started_at": None, "ended_at": None}
        write_json_once(directory / STATUS, {**record, "stopped_by": None, "detail": detail})


def _read_bytes(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return b""


def _inodes(directory: Path) -> tuple[int | None, ...]:
    found: list[int | None] = []
    for name in (LOG_ROTATED, LOG):
        try:
            found.append((directory / name).stat().st_ino)
        except FileNotFoundError:
            found.append(None)
    return tuple(found)
