"""One agent per workspace: the lock it holds while it runs, and whether another holds it."""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from crossrail.errors import AgentRunningError, WorkspaceError


@contextmanager
def agent_lock(root: Path) -> Iterator[None]:
    """One agent per workspace: an exclusive flock on the workspace directory itself, released when the process dies.

    The lock is on the directory, not on `agent.lock`: a lock on a file is lost the moment someone deletes or
    replaces the file (the next agent creates a new one and locks that), while the directory cannot be
    replaced under a running agent without moving the whole workspace, state and all. `agent.lock` only
    tells people which process holds it. (The `agents` table records liveness for the store; it cannot be
    the lock, because a crashed agent leaves its row behind, and a lock must vanish with its process.)
    """
    try:
        fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    except OSError as exc:
        raise WorkspaceError(f"cannot open the workspace {root}: {exc.strerror}; `crossrail init` makes one") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock = root / "agent.lock"
            raise AgentRunningError(f"another crossrail agent is running on {root} (see {lock})") from None
        _write_pid(root / "agent.lock")
        yield
    finally:
        os.close(fd)


def _write_pid(path: Path) -> None:
    try:
        tmp = path.with_name(f".{path.name}.{os.getpid()}")
        tmp.write_text(f"{os.getpid()}\n")
        tmp.replace(path)
    except OSError as exc:
        raise WorkspaceError(
            f"cannot write {path}: {exc.strerror}; the agent keeps its state in the workspace {path.parent}, "
            "so it must run as a user who can write there (read-only commands such as status still work)"
        ) from None


def agent_running(root: Path) -> bool:
    """Whether the workspace's lock cannot be taken now (another agent holds it, or it cannot be written)."""
    try:
        with agent_lock(root):
            return False
    except WorkspaceError:
        return True
