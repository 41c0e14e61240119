"""The supervisor of one local attempt: runs its command, keeps its capped log and durably records its end.

Started by the local executor as `python -m crossrail.executors.supervisor <attempt dir>`. It detaches
(fork, and the launcher reaps the parent) so that the agent may die and restart while the attempt runs on.
Standard library only, so it starts fast; the executor imports its file helpers from here.
"""

from __future__ import annotations

import json
import math
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from contextlib import suppress
from pathlib import Path
from types import FrameType
from typing import IO, Any

from crossrail.core.clock import Clock, MonotonicClock, SystemClock
from crossrail.executors.sandbox import UMASK, child_env

REQUEST = "request.json"
SUPERVISOR = "supervisor.json"
CHILD = "child.json"
STATUS = "status.json"
STOP = "stop.json"
LOG = "log.txt"
LOG_ROTATED = "log.txt.1"

DEFAULT_LOG_MAX_BYTES = 50 * 2**20
START_FAILED = 127  # the shell's "command not found": the command never ran
DEFAULT_GRACE_S = 30.0  # for a SIGTERM that did not come through stop(), e.g. a host shutting down
TICK_S = 0.2  # how often the supervisor looks at its child when the child is quiet
DRAIN_S = 2.0  # how long output is still collected after the command ended
READ_BYTES = 65536


# Files. Every record is written whole or not at all: a temporary file, fsync, rename, fsync of the directory.


def read_json(path: Path) -> dict[str, Any] | None:
    """The JSON object in `path`, or None when there is none."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _write_temp(path: Path, data: dict[str, Any]) -> Path:
    temp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(temp, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=1, sort_keys=True)
        f.flush()
        os.fsync(f.fileno())
    return temp


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_json_atomic(path: Path, data: dict[str, Any]) -> None:
    os.replace(_write_temp(path, data), path)
    _fsync_dir(path.parent)


def write_json_once(path: Path, data: dict[str, Any]) -> bool:
    """Create `path` atomically unless it exists; False when it did (the first writer wins)."""
    temp = _write_temp(path, data)
    try:
        os.link(temp, path)
    except FileExistsError:
        return False
    finally:
        temp.unlink()
    _fsync_dir(path.parent)
    return True


# Processes. A pid alone may have been reused; a pid with its start time (field 22 of /proc/<pid>/stat) may not.


def _stat(pid: int) -> list[str] | None:
    """The fields of /proc/<pid>/stat from field 3 (state) on, or None when there is no such process."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text[text.rindex(")") + 2 :].split()  # the command name may hold spaces and parentheses


def start_ticks(pid: int) -> int | None:
    """When process `pid` started, in clock ticks since boot; None when it does not exist or has ended."""
    fields = _stat(pid)
    if fields is None or fields[0] in {"Z", "X"}:  # Z: ended, waiting to be reaped
        return None
    return int(fields[19])


def session_members(session: int, leader_ticks: int | None) -> list[int]:
    """The live processes of a supervisor's session (the supervisor, its command and their children).

    The supervisor leads its session, so `session` is the supervisor's pid and `leader_ticks` its start
    time. Linux reuses no pid while a session still bears it, so a live process with pid `session` is
    either the supervisor itself (same start time) or a later process that took the number after all of
    ours had gone: then none are ours. The caller's own session is never a supervisor's and is refused.
    """
    if session <= 1 or session == os.getsid(0):
        return []
    alive = start_ticks(session)
    if alive is not None and alive != leader_ticks:
        return []
    members = []
    for entry in os.listdir("/proc"):
        fields = _stat(int(entry)) if entry.isdigit() else None
        if fields is not None and fields[0] not in {"Z", "X"} and int(fields[3]) == session:
            members.append(int(entry))
    return members


def kill_session(session: int, leader_ticks: int | None) -> int:
    """SIGKILL every live process of the supervisor's session `session`; returns how many there were."""
    killed = 0
    for _ in range(5):  # a member may fork while the others are being killed
        members = session_members(session, leader_ticks)
        if not members:
            break
        for pid in members:
            with suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        killed += len(members)
    return killed


def process_record(pid: int) -> dict[str, Any]:
    return {"pid": pid, "start_ticks": start_ticks(pid)}


def is_alive(record: dict[str, Any] | None) -> bool:
    """Whether the process a record names still runs (the same process, not a later one with its pid)."""
    if record is None:
        return False
    pid, ticks = record.get("pid"), record.get("start_ticks")
    return isinstance(pid, int) and pid > 0 and ticks is not None and start_ticks(pid) == ticks


class CappedLog:
    """Appends to log.txt; when it reaches `max_bytes` it becomes log.txt.1 (replacing the older one)."""

    def __init__(self, directory: Path, max_bytes: int) -> None:
        self.path = directory / LOG
        self.rotated = directory / LOG_ROTATED
        self.max_bytes = max(1, max_bytes)
        self.failure = ""
        self.file: IO[bytes] = open(self.path, "ab")  # noqa: SIM115 (held open for the attempt's life)
        self.size = os.fstat(self.file.fileno()).st_size

    def write(self, data: bytes) -> None:
        if self.failure:
            return
        try:
            while data:
                if self.size >= self.max_bytes:
                    self._rotate()
                part, data = data[: self.max_bytes - self.size], data[self.max_bytes - self.size :]
                self.file.write(part)
                self.size += len(part)
            self.file.flush()
        except OSError as exc:  # a full disk must not stop the attempt, only its log
            self.failure = f"the log stopped being written: {exc}"

    def _rotate(self) -> None:
        self.file.close()
        os.replace(self.path, self.rotated)
        self.file = open(self.path, "ab")  # noqa: SIM115
        self.size = 0

    def close(self) -> None:
        with suppress(OSError):
            self.file.close()


class Throttle:
    """Lets a process group run 1/`slowdown` of the time, a pool's `slowdown` on a local machine: in each
    period of PERIOD_S it runs for PERIOD_S/slowdown and is stopped (SIGSTOP) for the rest. `release` lets it
    run for good (a stop's SIGTERM must reach a running command)."""

    PERIOD_S = 0.1

    def __init__(self, slowdown: float, timer: Clock) -> None:
        self.run_s = self.PERIOD_S / max(slowdown, 1.0)
        self.timer = timer
        self.active = slowdown > 1.0
        self.paused = False
        self.switch_at = timer.now() + self.run_s

    def tick(self, signal_group: Callable[[int], None]) -> float:
        """Pause or resume the group when its time has come; the seconds until the next switch (inf: none)."""
        if not self.active:
            return math.inf
        now = self.timer.now()
        if now >= self.switch_at:
            self.paused = not self.paused
            signal_group(signal.SIGSTOP if self.paused else signal.SIGCONT)
            self.switch_at = now + (self.PERIOD_S - self.run_s if self.paused else self.run_s)
        return max(self.switch_at - now, 0.0)

    def release(self, signal_group: Callable[[int], None]) -> None:
        if self.active and self.paused:
            signal_group(signal.SIGCONT)
        self.active = self.paused = False


class Supervisor:
    """Runs one attempt's command. `clock` stamps its start and end (wall time the agent compares); `timer`
    measures the grace before a SIGKILL (monotonic, so a wall-clock step neither shortens nor stretches it)."""

    def __init__(self, directory: Path, *, clock: Clock | None = None, timer: Clock | None = None) -> None:
        self.dir = directory
        self.clock: Clock = clock or SystemClock()
        self.timer: Clock = timer or MonotonicClock()
        self.child: subprocess.Popen[bytes] | None = None
        self.reaped = False
        self.stopping = False  # a stop was asked for
        self.stop_delivered = False  # ... and reached the command (or kept it from starting)
        self.kill_at: float | None = None
        self.started_at: float | None = None
        self.throttle = Throttle(1.0, self.timer)

    def run(self) -> int:
        """1. take SIGTERM as a stop, 2. claim the attempt, 3. run the command, 4. record how it ended."""
        signal.signal(signal.SIGTERM, self._on_stop)
        signal.signal(signal.SIGINT, self._on_stop)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        claim = {**process_record(os.getpid()), "session": os.getsid(0)}
        if not write_json_once(self.dir / SUPERVISOR, claim):
            # The executor declared this attempt never started (or another supervisor holds it): run nothing.
            print(f"crossrail: {self.dir} is already claimed; not starting its command", file=sys.stderr)
            return 0
        try:
            status = self._supervise()
        except Exception as exc:
            status = self._end_after_failure(exc)
        write_json_atomic(self.dir / STATUS, status)
        return 0

    def _supervise(self) -> dict[str, Any]:
        request = read_json(self.dir / REQUEST)
        if request is None or not isinstance(request.get("request"), dict):
            return self._status(exit_code=START_FAILED, detail=f"{REQUEST} is missing or unreadable")
        if self.stopping or (self.dir / STOP).exists():
            self.stopping = self.stop_delivered = True
            return self._status(sig=signal.SIGTERM, detail="stopped before the command started")
        log = CappedLog(self.dir, int(request.get("log_max_bytes", DEFAULT_LOG_MAX_BYTES)))
        try:
            return self._run_command({**request["request"], "home": request.get("home")}, log)
        finally:
            log.close()

    def _run_command(self, request: dict[str, Any], log: CappedLog) -> dict[str, Any]:
        command = [str(part) for part in request["command"]]
        env = {str(k): str(v) for k, v in request.get("env", {}).items()}
        home, who = request.get("home"), request.get("run_as")
        identity: dict[str, Any] = {}
        if isinstance(who, dict) and os.geteuid() == 0:  # the command runs as its team, never as root
            identity = {"user": who["uid"], "group": who["gid"], "extra_groups": list(who.get("groups") or [])}
        try:
            child = subprocess.Popen(
                command,
                cwd=home or self.dir,
                env=child_env(env, Path(home) if home else None),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                # Its own process group, so the training tree is signalled as one; in the supervisor's
                # session, so it can be found and ended even if the supervisor dies before recording its pid.
                process_group=0,
                umask=UMASK if home else -1,
                **identity,
            )
        except OSError as exc:
            why = f"cannot start {command[0]!r}: {exc.strerror}"
            if identity:  # most often the interpreter lies in a directory only the agent's user may enter
                why += f" (as uid {identity['user']}: the program and the directories above it must be open to it)"
            log.write(f"crossrail: {why}\n".encode())
            return self._status(exit_code=START_FAILED, detail=why)
        self.started_at = self.clock.now()
        self.child = child
        self.throttle = Throttle(float(request.get("slowdown") or 1.0), self.timer)
        write_json_atomic(self.dir / CHILD, {**process_record(child.pid), "started_at": self.started_at})
        if self.stopping:  # the stop arrived while the command was being started
            self._forward_stop()
        returncode = self._pump(child, log)
        detail = log.failure
        if returncode < 0:
            return self._status(sig=-returncode, detail=detail)
        return self._status(exit_code=returncode, detail=detail)

    def _pump(self, child: subprocess.Popen[bytes], log: CappedLog) -> int:
        """Copy the child's output into the log until it exits, then end what is left of its group."""
        assert child.stdout is not None
        fd = child.stdout.fileno()
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        readable = True
        while not self._has_exited(child.pid):
            self._kill_if_due()
            wait_s = TICK_S if self.kill_at is None else min(TICK_S, max(0.0, self.kill_at - self.timer.now()))
            wait_s = min(wait_s, self.throttle.tick(self._signal_group))
            if readable:
                if poller.poll(wait_s * 1000):
                    readable = self._copy(fd, log)
                    if not readable:
                        poller.unregister(fd)
            else:
                time.sleep(wait_s)
        # Kill leftovers while the leader is unreaped, so its group id cannot belong to anyone else yet.
        self._signal_group(signal.SIGKILL)
        returncode = child.wait()
        self.reaped = True
        deadline = self.timer.now() + DRAIN_S
        while readable and self.timer.now() < deadline:
            if poller.poll(TICK_S * 1000):
                readable = self._copy(fd, log)
        child.stdout.close()
        return returncode

    @staticmethod
    def _copy(fd: int, log: CappedLog) -> bool:
        """Move what the pipe holds into the log; False at end of output."""
        data = os.read(fd, READ_BYTES)
        if data:
            log.write(data)
        return bool(data)

    @staticmethod
    def _has_exited(pid: int) -> bool:
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None

    def _on_stop(self, signum: int, frame: FrameType | None) -> None:
        if self.stopping:
            return
        self.stopping = True
        if self.child is not None:
            self._forward_stop()

    def _forward_stop(self) -> None:
        """SIGTERM the command's group now and SIGKILL it after the grace the stop asked for."""
        if self.kill_at is not None or self.reaped:  # already forwarded, or the command ended on its own
            return
        self.stop_delivered = True
        self.throttle.release(self._signal_group)  # a stopped group would not see the SIGTERM until continued
        grace_s = (read_json(self.dir / STOP) or {}).get("grace_s", DEFAULT_GRACE_S)
        if not isinstance(grace_s, int | float) or grace_s < 0:
            grace_s = DEFAULT_GRACE_S
        self.kill_at = self.timer.now() + grace_s
        self._signal_group(signal.SIGTERM)

    def _kill_if_due(self) -> None:
        if self.kill_at is not None and self.timer.now() >= self.kill_at:
            self._signal_group(signal.SIGKILL)
            self.kill_at = float("inf")

    def _signal_group(self, sig: int) -> None:
        if self.child is not None and not self.reaped:
            with suppress(ProcessLookupError, PermissionError):
                os.killpg(self.child.pid, sig)

    def _end_after_failure(self, exc: Exception) -> dict[str, Any]:
        """The supervisor itself failed: end the command (it would run unwatched) and record what is known."""
        detail = f"the supervisor failed: {exc!r}"
        if self.child is None:
            return self._status(exit_code=START_FAILED, detail=detail)
        if not self.reaped:
            self._signal_group(signal.SIGKILL)
            self.child.wait()
            self.reaped = True
        returncode = self.child.returncode
        if returncode < 0:
            return self._status(sig=-returncode, detail=detail)
        return self._status(exit_code=returncode, detail=detail)

    def _status(self, *, exit_code: int | None = None, sig: int | None = None, detail: str = "") -> dict[str, Any]:
        stop = read_json(self.dir / STOP) if self.stop_delivered else None
        return {
            "exit_code": exit_code,
            "signal": sig,
            "started_at": self.started_at,
            "ended_at": self.clock.now(),
            "stopped_by": stop.get("reason") if stop else None,
            "detail": detail,
        }


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1 or not (Path(args[0]) / REQUEST).is_file():
        print("usage: python -m crossrail.executors.supervisor <attempt dir holding request.json>", file=sys.stderr)
        return 2
    if os.fork() > 0:
        os._exit(0)  # the launcher reaps this parent at once; init adopts the supervisor
    # Lead a session of our own, whoever started us: the session is how an orphaned command is found and
    # ended, so it must never be the caller's (a shell's or a test runner's) session.
    os.setsid()
    return Supervisor(Path(args[0]).resolve()).run()


if __name__ == "__main__":
    sys.exit(main())
