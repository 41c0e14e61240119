"""Looking after a workspace's store: check it, back it up, restore it (SQLite; PostgreSQL has pg_dump/pg_restore).

A backup is taken with SQLite's online backup API, so it is consistent while an agent writes. A restore
refuses while an agent runs, never deletes the file it replaces (it is set aside, with its WAL, under a
name that says when), and brings back every run and event committed before the backup was taken.
"""

from __future__ import annotations

import os
import sqlite3
import stat
import time
from pathlib import Path
from typing import Any

from crossrail.control.ops.workspace import Workspace, open_store, read_marker, write_marker
from crossrail.core import Clock
from crossrail.errors import StoreError, WorkspaceError
from crossrail.store import Store, health

PG_DUMP = "pg_dump --format=custom --file=BACKUP.dump 'postgresql://USER@HOST:PORT/DB'"
PG_RESTORE = "pg_restore --clean --if-exists --dbname='postgresql://USER@HOST:PORT/DB' BACKUP.dump"


def check(ws: Workspace) -> dict[str, Any]:
    """The database's own integrity check and the event log's hash chains; `ok` only when both are clean."""
    path = health.sqlite_path(ws.store_url)
    if path is not None:
        problems = health.file_problems(_existing(ws, path))
        if problems:  # the file is damaged: opening it to read the chains would only fail less clearly
            return _checked(ws, None, problems, None)
    store = open_store(ws)
    try:
        return _checked(ws, store.id, store.integrity_problems(), store)
    finally:
        store.close()


def _checked(ws: Workspace, store_id: str | None, problems: list[str] | None, store: Store | None) -> dict[str, Any]:
    chain = store.verify_events() if store is not None else None
    engine = "sqlite" if health.sqlite_path(ws.store_url) is not None else "postgresql"
    return {
        "store": _shown(ws.store_url),
        "engine": engine,
        "store_id": store_id,
        "integrity": {
            "checked": problems is not None,
            "problems": problems or [],
            "note": health.AMCHECK_MISSING if problems is None else None,
        },
        "events": None
        if chain is None
        else {"events": chain.events, "chains": chain.chains, "problems": [p.as_dict() for p in chain.problems]},
        "ok": problems is not None and not problems and chain is not None and not chain.problems,
    }


def backup(ws: Workspace, dest: Path, *, force: bool = False) -> dict[str, Any]:
    """Copy the SQLite store to `dest` with the online backup API (consistent while an agent writes)."""
    path = _sqlite_only(ws, "backup")
    source = _existing(ws, path)
    dest = dest.expanduser().absolute()
    _check_dest(dest, force=force)
    if dest.resolve() == source.resolve():
        raise WorkspaceError(f"{dest} is the store itself; back it up to another file")
    _copy(source, dest)
    return {"store": str(source), "backup": str(dest), "bytes": dest.stat().st_size, **_facts(dest)}


def _check_dest(dest: Path, *, force: bool) -> None:
    """A backup goes to a new path or, with --force, over a regular file: never a device, FIFO, link or dir."""
    try:
        mode = dest.lstat().st_mode
    except FileNotFoundError:
        if not dest.parent.is_dir():
            raise WorkspaceError(f"{dest.parent} is not a directory; create it or back up elsewhere") from None
        return
    except OSError as exc:
        raise WorkspaceError(f"cannot write the backup {dest}: {exc.strerror or exc}") from None
    if not stat.S_ISREG(mode):
        kind = _KINDS.get(stat.S_IFMT(mode), "not a regular file")
        raise WorkspaceError(f"{dest} is {kind}; a backup goes to a new path or over a regular file")
    if not force:
        raise WorkspaceError(f"{dest} exists; choose another file or pass --force to overwrite it")


_KINDS = {
    stat.S_IFDIR: "a directory",
    stat.S_IFLNK: "a symbolic link",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFIFO: "a FIFO",
    stat.S_IFSOCK: "a socket",
}


def restore(ws: Workspace, src: Path, clock: Clock, *, other_store: bool = False) -> dict[str, Any]:
    """Put the backup `src` in place of the SQLite store; the file it replaces is set aside, never deleted."""
    from crossrail.control.agent.lock import agent_running

    path = _sqlite_only(ws, "restore")
    src = src.expanduser().absolute()
    if not src.is_file():
        raise WorkspaceError(f"no backup at {src}; `crossrail store backup DEST` makes one")
    if agent_running(ws.root):
        raise WorkspaceError(f"an agent is running on {ws.root}; stop it first, then restore (nothing was changed)")
    problems = health.file_problems(src)
    if problems:
        raise StoreError(f"the backup {src} is damaged ({'; '.join(problems[:3])}); restore from another one")
    facts = _facts(src)
    known = _marker_id(ws)
    if known is not None and facts["store_id"] != known and not other_store:
        raise WorkspaceError(
            f"the backup {src} is of store {facts['store_id']}, not this workspace's store {known}; pass "
            "--other-store to make it this workspace's store (nothing was changed)"
        )
    aside = _set_aside(path, clock)
    _copy(src, path)
    store = Store.open(ws.store_url)  # upgrades a backup taken by an older crossrail
    try:
        if store.id is not None:
            write_marker(ws, store.id)
        counts = store.counts()
    finally:
        store.close()
    return {"store": str(path), "restored_from": str(src), "set_aside": [str(p) for p in aside], **facts, **counts}


def _copy(source: Path, dest: Path) -> None:
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}.tmp")
    tmp.unlink(missing_ok=True)
    try:
        src = sqlite3.connect(health.readonly_uri(source, immutable=not os.access(source.parent, os.W_OK)), uri=True)
        try:
            dst = sqlite3.connect(tmp)
            try:
                src.backup(dst)
            finally:
                dst.close()
        finally:
            src.close()
        with tmp.open("rb+") as f:
            os.fsync(f.fileno())
        tmp.replace(dest)
    except sqlite3.DatabaseError as exc:
        tmp.unlink(missing_ok=True)
        raise health.classify(exc, str(source), f"copying it to {dest}") from exc
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise WorkspaceError(f"cannot write {dest}: {exc.strerror or exc}") from exc


def _set_aside(path: Path, clock: Clock) -> list[Path]:
    """Rename the store file and its WAL files to `<name>.replaced-<UTC time>[-wal|-shm]`; returns the new names."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(clock.now()))
    moved = []
    for suffix in ("", "-wal", "-shm"):
        current = path.with_name(path.name + suffix)
        if current.exists():
            target = path.with_name(f"{path.name}.replaced-{stamp}{suffix}")
            current.rename(target)
            moved.append(target)
    return moved


def _facts(db: Path) -> dict[str, Any]:
    """Store id, runs and events of a SQLite store file, read without changing it."""
    store_id = health.file_store_id(db)
    conn = sqlite3.connect(health.readonly_uri(db, immutable=True), uri=True)
    try:
        runs = conn.execute("SELECT count(*) FROM runs").fetchone()[0]
        events = conn.execute("SELECT count(*) FROM events").fetchone()[0]
    except sqlite3.DatabaseError as exc:
        raise StoreError(f"{db} is not a crossrail store ({exc}); use a file `crossrail store backup` wrote") from exc
    finally:
        conn.close()
    return {"store_id": store_id, "runs": int(runs), "events": int(events)}


def _existing(ws: Workspace, path: Path) -> Path:
    if not path.exists():
        hint = "restore it with `crossrail store restore BACKUP`"
        known = _marker_id(ws)
        raise StoreError(
            f"no state store at {path}" + (f" (this workspace's store {known} is gone); {hint}" if known else "")
        )
    return path


def _marker_id(ws: Workspace) -> str | None:
    return read_marker(ws.store_marker, ws.store_url)


def _sqlite_only(ws: Workspace, what: str) -> Path:
    path = health.sqlite_path(ws.store_url)
    if path is None:
        tool = PG_DUMP if what == "backup" else PG_RESTORE
        raise StoreError(
            f"`crossrail store {what}` works on SQLite stores; for PostgreSQL use its own tools: {tool} "
            "(docs/operations.md)"
        )
    return path


def _shown(url: str) -> str:
    from sqlalchemy.engine import make_url

    return make_url(url).render_as_string(hide_password=True)
