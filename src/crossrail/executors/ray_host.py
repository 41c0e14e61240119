"""One host of an attempt on Ray: the actor that runs the attempt's command as a subprocess of its Ray worker.

The Ray executor (crossrail.executors.ray) makes this class a detached, named Ray actor placed in one bundle
of the attempt's placement group. The actor starts the command in its own process group, copies its output
into a capped buffer the executor fetches in increments, and ends it with SIGTERM, a grace period and
SIGKILL when asked. The command is started through a tiny trampoline that asks the kernel to SIGKILL it when
the thread that started it dies, so killing the Ray worker ends the command too instead of orphaning it.
Standard library only: Ray imports this module on its workers.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import threading
from contextlib import suppress
from typing import Any

from crossrail.core.clock import Clock, SystemClock
from crossrail.executors.sandbox import child_env
from crossrail.executors.supervisor import START_FAILED

READ_BYTES = 65536
START_WAIT_S = 10.0

# Runs as `python -c TRAMPOLINE <parent pid> <command...>`: die with the starting thread, then become the command.
TRAMPOLINE = """
import ctypes, os, signal, sys
ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
if os.getppid() != int(sys.argv[1]):
    os._exit(128 + signal.SIGKILL)  # the starter died before the request took effect
try:
    os.execvp(sys.argv[2], sys.argv[2:])
except OSError as exc:
    print(f"crossrail: cannot start {sys.argv[2]!r}: {exc.strerror}", file=sys.stderr, flush=True)
    os._exit(127)
"""


class AttemptHost:
    """Host `host` of `hosts` of one attempt; every method returns at once except `start`, which waits briefly."""

    def __init__(
        self, request: dict[str, Any], host: int, hosts: int, log_max_bytes: int, clock: Clock | None = None
    ) -> None:
        self.clock: Clock = clock or SystemClock()  # stamps start and end, on the host's wall clock by default
        self.request = request
        self.host = host
        self.hosts = hosts
        self.log_max_bytes = max(1, log_max_bytes)
        self.lock = threading.Lock()
        self.started = threading.Event()
        self.thread: threading.Thread | None = None
        self.proc: subprocess.Popen[bytes] | None = None
        self.started_at: float | None = None
        self.ended_at: float | None = None
        self.returncode: int | None = None
        self.detail = ""
        self.stop_reason: str | None = None
        self.stop_delivered = False
        self.log = bytearray()
        self.log_start = 0  # absolute offset of log[0]: older output was dropped past log_max_bytes

    # --- called by the executor --------------------------------------------------------------------

    def start(self) -> dict[str, Any]:
        """Start the command once; returns where it runs (node id and labels, as this Ray worker sees them)."""
        with self.lock:
            if self.thread is None:
                self.thread = threading.Thread(target=self._run, name="crossrail-attempt", daemon=True)
                self.thread.start()
        self.started.wait(START_WAIT_S)
        proc = self.proc
        return {**self.where(), "command_pid": proc.pid if proc is not None else None}

    def where(self) -> dict[str, Any]:
        import ray  # present: this runs inside a Ray worker

        ctx = ray.get_runtime_context()
        return {
            "host": self.host,
            "node_id": ctx.get_node_id(),
            "labels": dict(ctx.get_node_labels()),
            "pid": os.getpid(),
        }

    def status(self, log_offset: int) -> dict[str, Any]:
        """How the command is, and its output from `log_offset` on (absolute; a gap shows as `log_dropped`)."""
        with self.lock:
            begin = max(log_offset, self.log_start)
            data = bytes(self.log[begin - self.log_start :])
            code, sig = (None, None)
            if self.returncode is not None:
                code, sig = (self.returncode, None) if self.returncode >= 0 else (None, -self.returncode)
            return {
                "phase": "running" if self.ended_at is None else "exited",
                "exit_code": code,
                "signal": sig,
                "started_at": self.started_at,
                "ended_at": self.ended_at,
                "stopped_by": self.stop_reason if self.stop_delivered else None,
                "detail": self.detail,
                "log": data,
                "log_offset": begin + len(data),
                "log_dropped": begin - log_offset,
            }

    def stop(self, grace_s: float, reason: str) -> None:
        """SIGTERM the command's group now and SIGKILL it `grace_s` later; the first reason wins."""
        with self.lock:
            if self.stop_reason is not None or self.ended_at is not None:
                return
            self.stop_reason = reason
            self.stop_delivered = True
            if self.proc is None:  # not started yet: _run sees the stop and starts nothing
                return
            self._signal(signal.SIGTERM)
        timer = threading.Timer(grace_s, self._signal, args=(signal.SIGKILL,))
        timer.daemon = True
        timer.start()

    # --- the command -------------------------------------------------------------------------------

    def _run(self) -> None:
        """Start the command, copy its output, record its end. Runs on one thread for the command's whole life."""
        try:
            returncode = self._start_and_pump()
        except Exception as exc:  # recorded as the attempt's end, never swallowed
            self._signal(signal.SIGKILL)
            returncode, self.detail = START_FAILED, f"the Ray host failed: {exc!r}"
        with self.lock:
            self.returncode = returncode
            self.ended_at = self.clock.now()
        self.started.set()

    def _start_and_pump(self) -> int:
        request = self.request
        command = [str(part) for part in request["command"]]
        env = child_env({str(k): str(v) for k, v in request.get("env", {}).items()})
        where = self.where()
        env.update(
            {
                "CROSSRAIL_HOST_INDEX": str(self.host),
                "CROSSRAIL_HOSTS": str(self.hosts),
                "CROSSRAIL_RAY_NODE_ID": str(where["node_id"]),
            }
        )
        with self.lock:
            if self.stop_reason is not None:
                self.detail = "stopped before the command started"
                return -signal.SIGTERM
            if not command:
                self.detail = "the attempt has no command"
                return START_FAILED
            cwd = tempfile.mkdtemp(prefix=f"crossrail-{request['run']}-{request['attempt']}-")
            argv = [sys.executable, "-c", TRAMPOLINE, str(os.getpid()), *command]
            self.proc = subprocess.Popen(
                argv,
                cwd=cwd,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                process_group=0,  # the training tree is signalled as one
            )
            self.started_at = self.clock.now()
        self.started.set()
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        while data := os.read(fd, READ_BYTES):
            self._append(data)
        os.waitid(os.P_PID, self.proc.pid, os.WEXITED | os.WNOWAIT)
        self._signal(signal.SIGKILL)  # leftovers of its group, while the unreaped leader keeps the group id ours
        returncode = self.proc.wait()
        self.proc.stdout.close()
        return returncode

    def _append(self, data: bytes) -> None:
        with self.lock:
            self.log += data
            excess = len(self.log) - self.log_max_bytes
            if excess > 0:
                del self.log[:excess]
                self.log_start += excess

    def _signal(self, sig: int) -> None:
        proc = self.proc
        if proc is not None and proc.returncode is None:
            with suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, sig)
