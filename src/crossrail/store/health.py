"""Is the store still the one we opened, and is it sound? Classifying database failures, and checking a store file.

Failures are told apart by exception type and the database's own error code (SQLite's extended result
code, PostgreSQL's SQLSTATE), never by the words of a message, which change between versions and locales.
"""

from __future__ import annotations

import os
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

from sqlalchemy.exc import DBAPIError

from crossrail.errors import StoreDamagedError, StoreError, StoreUnavailableError

# SQLite primary result codes (https://sqlite.org/rescode.html); extended codes keep these in their low byte.
SQLITE_IOERR = 10
SQLITE_CORRUPT = 11
SQLITE_NOTADB = 26
SQLITE_READONLY_DBMOVED = 1032
_SQLITE_DAMAGED = {SQLITE_IOERR, SQLITE_CORRUPT, SQLITE_NOTADB}

# PostgreSQL SQLSTATEs: class 08 (connection exception), the shutdown and start-up states of class 57, and
# XX001/XX002 (data or index corrupted).
_PG_GONE = {"57P01", "57P02", "57P03"}
_PG_DAMAGED = {"XX001", "XX002"}

RESTORE_HINT = "restore it from a backup with `crossrail store restore BACKUP` (docs/operations.md)"


def classify(exc: BaseException, where: str, doing: str) -> StoreError:
    """The crossrail error for a database failure `exc` met while `doing` something to the store at `where`."""
    orig = getattr(exc, "orig", None) or exc
    reason = str(orig).splitlines()[0] if str(orig) else type(orig).__name__
    code = getattr(orig, "sqlite_errorcode", None)
    if isinstance(code, int):
        if code == SQLITE_READONLY_DBMOVED:
            moved = f"the state store {where} was moved or deleted while open ({reason})"
            return StoreDamagedError(f"{moved}; {RESTORE_HINT}")
        if code & 0xFF in _SQLITE_DAMAGED:
            return StoreDamagedError(f"the state store {where} is damaged: {reason} (while {doing}); {RESTORE_HINT}")
    state = getattr(orig, "sqlstate", None)
    if state in _PG_DAMAGED:
        corrupt = f"the state store {where} reports corruption: {reason} (while {doing})"
        return StoreDamagedError(f"{corrupt}; {RESTORE_HINT}")
    invalidated = isinstance(exc, DBAPIError) and exc.connection_invalidated
    if invalidated or (state or "").startswith("08") or state in _PG_GONE or _no_connection(orig, state):
        return StoreUnavailableError(f"the state store {where} cannot be reached ({reason}) while {doing}")
    return StoreError(f"the state store {where} failed while {doing}: {reason}")


def _no_connection(orig: Any, state: str | None) -> bool:
    """psycopg raises OperationalError without a SQLSTATE when no connection could be made at all."""
    return state is None and type(orig).__name__ == "OperationalError" and type(orig).__module__.startswith("psycopg")


@dataclass(frozen=True)
class FileIdentity:
    """Which file a SQLite store is: the path it was opened at, and that file's device and inode."""

    path: Path
    dev: int
    ino: int

    @classmethod
    def of(cls, path: Path) -> FileIdentity:
        st = path.stat()
        return cls(path, st.st_dev, st.st_ino)

    def check(self) -> None:
        """Raise StoreDamagedError when the path is gone or now names another file."""
        try:
            st = self.path.stat()
        except FileNotFoundError:
            raise StoreDamagedError(
                f"the state store {self.path} was deleted while in use; nothing more is written to it "
                f"(the deleted file may still be open); {RESTORE_HINT}"
            ) from None
        if (st.st_dev, st.st_ino) != (self.dev, self.ino):
            raise StoreDamagedError(
                f"the state store {self.path} was replaced by another file while in use; nothing is written to "
                f"either; if the new file is a restored backup, restart the agent; otherwise {RESTORE_HINT}"
            )


SQLITE_MAGIC = b"SQLite format 3\x00"


# Descriptors of store files read raw, one per file, kept open for the life of the process. Closing ANY
# descriptor of a SQLite file releases every POSIX lock this process holds on it, its SQLite connections'
# included; another process may then checkpoint and delete the WAL under them and corrupt the store
# (https://sqlite.org/howtocorrupt.html, section 2.2). So a raw read never closes what it opened.
_HELD: dict[tuple[int, int], int] = {}


def _held_descriptor(path: Path) -> int:
    st = path.stat()
    fd = _HELD.get((st.st_dev, st.st_ino))
    if fd is None:
        _forget_deleted()
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        opened = os.fstat(fd)
        # Keyed by what was opened: a file replaced between stat and open gets its own entry, never a close.
        fd = _HELD.setdefault((opened.st_dev, opened.st_ino), fd)
    return fd


def _forget_deleted() -> None:
    """Close the descriptors of files since deleted (no path can open them again), so they do not pile up."""
    for key, fd in list(_HELD.items()):
        if os.fstat(fd).st_nlink == 0:
            del _HELD[key]
            os.close(fd)


def header_problem(path: Path) -> str | None:
    """What is wrong with the first 100 bytes of a SQLite file, read raw: in WAL mode a connection may serve page 1
    from the WAL and never look at a header that was overwritten on disk."""
    try:
        head = os.pread(_held_descriptor(path), 100, 0)
    except OSError as exc:
        return f"it cannot be read ({exc.strerror})"
    if len(head) < 100 or not head.startswith(SQLITE_MAGIC):
        return "its first bytes are no longer a SQLite header (the file was overwritten)"
    page_size = int.from_bytes(head[16:18], "big")
    if page_size != 1 and (page_size < 512 or page_size & (page_size - 1)):
        return f"its header gives an impossible page size ({page_size})"
    return None


def sqlite_path(url: str) -> Path | None:
    """The file of a `sqlite:///PATH` URL; None for in-memory databases and other dialects."""
    if not url.startswith("sqlite:///"):
        return None
    rest = url[len("sqlite:///") :].split("?", 1)[0]
    if not rest or rest == ":memory:" or rest.startswith("file:"):
        return None
    return Path(rest)


def readonly_uri(path: Path, *, immutable: bool) -> str:
    """A sqlite3 URI that opens `path` without writing: `immutable` also skips the WAL's shared memory file,
    which a reader must otherwise be able to create (a read-only directory)."""
    mode = "immutable=1" if immutable else "mode=ro"
    return f"file:{quote(str(path))}?{mode}"


def file_problems(path: Path, *, quick: bool = False, limit: int = 20) -> list[str]:
    """What SQLite's `PRAGMA integrity_check` (or the cheaper `quick_check`) finds wrong in `path`; [] if sound."""
    pragma = "quick_check" if quick else "integrity_check"
    immutable = not os.access(path.parent, os.W_OK)
    try:
        conn = sqlite3.connect(readonly_uri(path, immutable=immutable), uri=True)
        try:
            found = [line for r in conn.execute(f"PRAGMA {pragma}({limit})") for line in str(r[0]).splitlines()]
        finally:
            conn.close()
    except sqlite3.DatabaseError as exc:
        raise classify(exc, str(path), f"checking it ({pragma})") from exc
    return [] if found == ["ok"] else [line for line in found if not line.startswith("***")][:limit]


def file_store_id(path: Path) -> str | None:
    """The store id recorded in the SQLite store `path`, read on a connection of its own (no cached pages)."""
    immutable = not os.access(path.parent, os.W_OK)
    try:
        conn = sqlite3.connect(readonly_uri(path, immutable=immutable), uri=True)
        try:
            row = conn.execute("SELECT value FROM store_meta WHERE key = 'store_id'").fetchone()
        finally:
            conn.close()
    except sqlite3.OperationalError as exc:
        if exc.sqlite_errorcode & 0xFF in _SQLITE_DAMAGED:
            raise classify(exc, str(path), "reading its store id") from exc
        return None  # no store_meta table: a store from before store ids, or not a crossrail store
    except sqlite3.DatabaseError as exc:
        raise classify(exc, str(path), "reading its store id") from exc
    return None if row is None else str(row[0])


AMCHECK_MISSING = (
    "the amcheck extension is not installed in this database, so its indexes were not checked; "
    "a superuser can run `CREATE EXTENSION amcheck` to enable the check"
)


def pg_index_problems(conn: Any) -> list[str] | None:
    """PostgreSQL: `bt_index_check` on every B-tree index of the store's schema; None when amcheck is not installed."""
    from sqlalchemy import text

    if conn.execute(text("SELECT 1 FROM pg_extension WHERE extname = 'amcheck'")).first() is None:
        return None
    indexes = conn.execute(
        text(
            "SELECT c.oid, c.relname FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
            "JOIN pg_am am ON am.oid = c.relam JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE am.amname = 'btree' AND n.nspname = current_schema() ORDER BY c.relname"
        )
    ).all()
    problems = []
    for oid, name in indexes:
        savepoint = conn.begin_nested()
        try:
            conn.execute(text("SELECT bt_index_check(:oid)"), {"oid": oid})
            savepoint.commit()
        except DBAPIError as exc:
            savepoint.rollback()
            problems.append(f"index {name}: {str(getattr(exc, 'orig', exc)).splitlines()[0]}")
    return problems
