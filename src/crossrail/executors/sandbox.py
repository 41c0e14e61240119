"""What a local attempt that runs under an identity of its own (`LaunchRequest.run_as`) is given before it starts.

The executor, as root, makes the attempt a home (`<homes>/<run>/<attempt>`, its working directory, mode 0700),
its report file (mode 0600) and its run's checkpoint directory (mode 0750: its team's group may read it, which
is how sharing works), all the attempt's identity's; the supervisor then starts the command under that
identity with `child_env`'s environment and umask 027. Nothing else of the workspace is the attempt's.
"""

from __future__ import annotations

import os
import re
import stat
import sys
from pathlib import Path

from crossrail.core.attempts import LaunchRequest, RunAs

UMASK = 0o027
"""Files an isolated attempt writes: its own, its group's to read (teams that share with others), no one else's."""

PASSED = frozenset({"PATH", "LANG", "LANGUAGE", "TZ"})
PASSED_PREFIXES = ("LC_",)
"""What of the agent's environment an isolated attempt sees; everything else it needs comes in the request."""

CONTROL = re.compile(r"CROSSRAIL_(TOKEN|SERVER|HOME|STORE_URL|USER)\Z")
"""The agent's own control-plane settings: never an attempt's, whoever it runs as."""


def child_env(extra: dict[str, str], home: Path | None = None) -> dict[str, str]:
    """The environment of an attempt's command, with this interpreter's directory first on PATH.

    With `home` (an isolated attempt): the locale, PATH and time zone of the agent's environment, HOME and
    TMPDIR its home, and the request's variables; nothing else. Without (the owner's own run): the agent's
    environment but its control-plane settings (a token, the server, the store), plus the request's."""
    if home is None:
        env = {k: v for k, v in os.environ.items() if not CONTROL.match(k)}
    else:
        env = {k: v for k, v in os.environ.items() if k in PASSED or k.startswith(PASSED_PREFIXES)}
        env |= {"HOME": str(home), "TMPDIR": str(home)}
    env |= {k: v for k, v in extra.items() if not CONTROL.match(k)}
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", os.defpath)
    env.setdefault("PYTHONUNBUFFERED", "1")  # so the log shows progress while the attempt runs
    return env


def local_path(uri: str) -> Path | None:
    """The local path of a `file://` URI or a plain path; None for object storage (or nothing)."""
    if uri.startswith("file://"):
        return Path(uri.removeprefix("file://"))
    if "://" in uri or not uri:
        return None
    return Path(uri)


def prepare(request: LaunchRequest, homes: Path) -> Path:
    """Make what the attempt writes its identity's; returns its home. Needs root."""
    who = request.run_as
    assert who is not None
    _open_dir(homes)
    _open_dir(homes / request.run)
    home = homes / request.run / str(request.attempt)
    home.mkdir(exist_ok=True)
    own(home, who, mode=0o700)
    report = local_path(request.env.get("CROSSRAIL_REPORT", ""))
    if report is not None:
        report.parent.mkdir(parents=True, exist_ok=True)
        _open_dir(report.parent)
        os.close(os.open(report, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW, 0o600))
        own(report, who, mode=0o600)
    checkpoints = local_path(request.env.get("CROSSRAIL_CHECKPOINT_DIR", ""))
    if checkpoints is not None:
        checkpoints.mkdir(parents=True, exist_ok=True)
        own(checkpoints, who, mode=0o750)
    return home


def _open_dir(path: Path) -> None:
    """A directory of root's that attempts pass through to their own entries, without listing the others."""
    path.mkdir(parents=True, exist_ok=True)
    if path.stat().st_uid == os.geteuid():
        os.chmod(path, 0o711)


def own(path: Path, who: RunAs, *, mode: int) -> None:
    """`path` owned by `who` at `mode`; when it was someone else's (root made it, or it dates from before
    isolation), everything under it too: directories 0750 and files 0640, its group's to read, no one else's."""
    info = path.lstat()
    if stat.S_ISLNK(info.st_mode):
        raise OSError(f"{path} is a symbolic link; an attempt's files must be real ones")
    if info.st_uid != who.uid or info.st_gid != who.gid:
        for directory, dirs, files in os.walk(path):
            for name in [*dirs, *files]:
                child = os.path.join(directory, name)
                os.lchown(child, who.uid, who.gid)
                child_info = os.lstat(child)
                if stat.S_ISDIR(child_info.st_mode):
                    os.chmod(child, 0o750)
                elif stat.S_ISREG(child_info.st_mode):
                    os.chmod(child, 0o640)
        os.lchown(path, who.uid, who.gid)
    os.chmod(path, mode)


def adopt(uri: str, who: RunAs) -> None:
    """A run's checkpoint directory that the agent's user still owns (written before isolation) becomes its
    team's, so the runs that start from it (its team's, or a team it shares with) can read it."""
    path = local_path(uri)
    if path is None:
        return
    try:
        info = path.lstat()
    except FileNotFoundError:
        return
    if stat.S_ISDIR(info.st_mode) and info.st_uid == os.geteuid():
        own(path, who, mode=0o750)
