"""Where a URI a caller names may point: the one rule every path of an experiment goes through.

The workspace owner's own CLI may name any file it can read. A request to the server (any token, or the
anonymous admin of a server without auth) reads and writes with the server's rights, so it may name only
object storage or a local path under a root an admin allows: the workspace's `configs/`, `data/` and
`checkpoints/` by default, plus the fleet's `spec.paths.roots`, never the workspace's own files
(`state.db`, keys, the fleet). The answer is decided from the text alone, before anything is opened, so a
refused path says nothing of whether its file exists.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

OBJECT_STORAGE = frozenset({"gs", "gcs", "s3", "s3a", "az", "abfs", "abfss", "r2"})
"""Schemes a remote caller may always name: buckets, read by the executors with their own credentials."""

WORKSPACE_ROOTS = ("configs", "data", "checkpoints")
"""The workspace's directories a remote caller may name by default (under `.crossrail/`)."""


@dataclass(frozen=True)
class Reach:
    """Where a caller may point: anywhere (`roots` None), or object storage and files under `roots`.

    `pod`: the caller is a pod on a Kubernetes pool, whose `roots` are its pool's volume mounts: paths in
    the pod's file system, read as text (never resolved against this machine's files).
    """

    roots: tuple[Path, ...] | None
    pod: bool = False

    def refusal(self, uri: str) -> str | None:
        """Why `uri` may not be named by this caller (one sentence), or None when it may."""
        if self.roots is None:
            return None
        scheme, sep, rest = uri.partition("://")
        if sep and scheme.lower() in OBJECT_STORAGE:
            return None
        if sep and scheme.lower() != "file":
            return f"{scheme}:// is not object storage; a request may name {_allowed(self.roots)}"
        local = rest if sep else uri
        allowed = _pod_allowed(self.roots) if self.pod else _allowed(self.roots)
        who = "a pod" if self.pod else "a request"
        if "\x00" in local or not os.path.isabs(local):
            return f"is not an absolute path; {who} may name {allowed}"
        # symbolic links followed on this machine (a link cannot lead out of a root); a pod's paths are its own
        where = Path(os.path.normpath(local) if self.pod else os.path.realpath(local))
        if any(where == root or root in where.parents for root in self.roots):
            return None
        if self.pod:
            allowed = f"a path on this machine, which a pod cannot reach; it may name {allowed}"
        return f"is {allowed}" if self.pod else f"is outside the paths a request may name: {allowed}"


ANYWHERE = Reach(None)


def reach_for(remote: bool, workspace: Path | None, allowed: Sequence[str] = ()) -> Reach:
    """The Reach of a caller: the workspace owner's CLI (`remote` False) anywhere; a request to the server
    the workspace's WORKSPACE_ROOTS under `workspace` (the `.crossrail` directory) and the fleet's `allowed`
    roots (directories, `file://` or plain)."""
    if not remote:
        return ANYWHERE
    roots = [workspace / name for name in WORKSPACE_ROOTS] if workspace is not None else []
    roots += [Path(r.removeprefix("file://")) for r in allowed]
    return Reach(tuple(Path(os.path.realpath(r)) for r in roots))


def pod_reach(mounts: Sequence[str]) -> Reach:
    """The Reach of a pod on a Kubernetes pool: object storage, and files under the pool's volume mounts
    (`kubernetes.volumes[].mount_path`); never this machine's files."""
    return Reach(tuple(Path(os.path.normpath(m)) for m in mounts), pod=True)


def _pod_allowed(roots: tuple[Path, ...]) -> str:
    dirs = ", ".join(f"{r}/" for r in roots) or "no volume"
    schemes = ", ".join(f"{s}://" for s in sorted(OBJECT_STORAGE))
    return f"object storage ({schemes}) or files under its pool's volumes ({dirs})"


def _allowed(roots: tuple[Path, ...]) -> str:
    dirs = ", ".join(f"{r}/" for r in roots) or "no local directory"
    schemes = ", ".join(f"{s}://" for s in sorted(OBJECT_STORAGE))
    return f"object storage ({schemes}) or files under {dirs} (an admin adds roots in the fleet's spec.paths.roots)"
