"""The Store's engine: one SQLAlchemy engine, migrated on open, its read and write transactions, and
the store-wide checks (identity, integrity, counts) over it.

Every write is one transaction. On SQLite a write transaction starts with BEGIN IMMEDIATE, so run
numbers and state transitions are decided under the database's write lock; on PostgreSQL the rows
involved are locked with SELECT ... FOR UPDATE.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Self

from sqlalchemy import Connection, Engine, create_engine, event, func, select, text
from sqlalchemy.exc import DBAPIError, IntegrityError, OperationalError, SQLAlchemyError

from crossrail.errors import (
    FencedError,
    MissingExtraError,
    StoreDamagedError,
    StoreError,
)
from crossrail.store import health
from crossrail.store import schema as t
from crossrail.store.joined import joined_row

HEAD_REVISION = "0014"
LEADER_WRITE_IDLE_MS = 1000
"""How long (ms) a leader's write transaction may sit idle between statements on PostgreSQL before the server
ends it: well under the leases agents run with (15 s by default, 2 s in the failover test), so a stopped
leader's lock on the leader row does not hold back a takeover."""
MIGRATIONS = Path(__file__).parent / "migrations"


class StoreBase:
    """What every part of the Store stands on: the engine, the fence and the transactions."""

    def __init__(self, engine: Engine, *, path: Path | None = None, read_only: bool = False) -> None:
        self._engine = engine
        self.url = engine.url.render_as_string(hide_password=True)
        self.path = path
        """The SQLite file, None for a server."""
        self.read_only = read_only
        self.id: str | None = None
        """The store id (store_meta), read once at open: `check_identity` compares it on every call."""
        self._file: health.FileIdentity | None = None
        self.fence: Fence | None = None
        """Set while an agent leads (control/leader.py): every write then checks the leader row still holds this
        agent and term, under a row lock in the write's own transaction, and raises FencedError otherwise."""

    # --- opening -------------------------------------------------------------------------------

    @classmethod
    def open(cls, url: str, *, read_only: bool = False) -> Self:
        """Connect to `url` (any SQLAlchemy URL) and bring its schema to the head revision.

        `read_only` (SQLite only) opens the file without writing to it and without migrating: for a
        workspace the user cannot write (a directory that is not writable is read as immutable).
        """
        path = health.sqlite_path(url)
        where = str(path or url)
        try:
            if read_only and path is not None:
                store = cls(_readonly_engine(path), path=path, read_only=True)
                store._require_head()
            else:
                store = cls(_engine_for(url), path=path)
                store._migrate()
            store.id = store._read_store_id()
            if path is not None:
                store._file = health.FileIdentity.of(path)
        except DBAPIError as exc:
            error = health.classify(exc, where, "opening it")
            if type(error) is not StoreError:  # damaged or unreachable: say so
                raise error from exc
            raise StoreError(f"cannot open the state store at {url}: {reason(exc)}") from exc
        except (SQLAlchemyError, OSError) as exc:
            raise StoreError(f"cannot open the state store at {url}: {reason(exc)}") from exc
        return store

    def _require_head(self) -> None:
        found = self.revision()
        if found != HEAD_REVISION:
            raise StoreError(
                f"the read-only state store {self.path} is at schema revision {found}; this crossrail reads "
                f"{HEAD_REVISION}: run any writing command once with write access to upgrade it"
            )

    def _read_store_id(self) -> str | None:
        with self._engine.connect() as conn:
            value = conn.execute(select(t.store_meta.c.value).where(t.store_meta.c.key == "store_id")).scalar()
            return None if value is None else str(value)

    def check_identity(self, *, integrity: bool = False) -> None:
        """Raise StoreDamagedError unless this is still the store that was opened, and (with `integrity`) sound.

        SQLite: the file must still exist at its path as the same file (device and inode), and its store id,
        read on a connection of its own (a pooled one may serve cached pages of a file since overwritten),
        must be the one read at open; `integrity` adds `PRAGMA quick_check`. PostgreSQL: the store id.
        """
        if self._file is not None and self.path is not None:
            self._file.check()
            broken = health.header_problem(self.path)
            if broken is not None:
                raise StoreDamagedError(f"the state store {self.path} is damaged: {broken}; {health.RESTORE_HINT}")
            found = health.file_store_id(self.path)
            problems = health.file_problems(self.path, quick=True, limit=5) if integrity else []
            if problems:
                raise StoreDamagedError(
                    f"the state store {self.path} is damaged: {'; '.join(problems)}; {health.RESTORE_HINT}"
                )
        else:
            with self._read() as conn:
                found = conn.execute(select(t.store_meta.c.value).where(t.store_meta.c.key == "store_id")).scalar()
        if found != self.id:
            raise StoreDamagedError(
                f"the state store {self.path or self.url} is no longer the store opened (store id {self.id}, "
                f"now {found}); restart against the right store, or {health.RESTORE_HINT}"
            )

    def close(self) -> None:
        self._engine.dispose()

    def _migrate(self) -> None:
        if self.revision() == HEAD_REVISION:
            return
        from alembic import command
        from alembic.config import Config

        with self._write(join_audit=False) as conn:
            if _revision(conn) == HEAD_REVISION:  # another process migrated while we waited
                return
            cfg = Config()
            cfg.set_main_option("script_location", str(MIGRATIONS))
            cfg.attributes["connection"] = conn
            command.upgrade(cfg, "head")

    def revision(self) -> str | None:
        with self._engine.connect() as conn:
            return _revision(conn)

    @contextmanager
    def _write(self, *, fenced: bool = True, join_audit: bool = True) -> Iterator[Connection]:
        """One write transaction; with a fence set (and `fenced`), refused unless this agent still leads. With
        `join_audit`, an audit row joined to this context (store.access.joined_audit) is inserted in it."""
        if self.read_only:
            raise StoreError(
                f"the state store {self.path} is read-only here (opened without write access); "
                "run this command as a user who can write the workspace"
            )
        try:
            conn = self._engine.connect().execution_options(crossrail_write=True)
        except DBAPIError as exc:
            raise health.classify(exc, str(self.path or self.url), "connecting to write") from exc
        try:
            with conn.begin():
                if self.fence is not None and conn.dialect.name == "postgresql":
                    # A leader stopped mid-write (SIGSTOP, a frozen host) would keep the leader row locked and so
                    # block every takeover: the server ends such a transaction once it idles this long.
                    conn.exec_driver_sql(f"SET LOCAL idle_in_transaction_session_timeout = {LEADER_WRITE_IDLE_MS}")
                if fenced and self.fence is not None:
                    _check_fence(conn, self.fence)
                yield conn
                joined = joined_row(conn) if join_audit else None
                if self._file is not None:  # last look before COMMIT: never commit into a deleted or replaced file
                    self._file.check()
            if joined is not None:
                joined.written = True
        except IntegrityError:
            raise
        except OperationalError as exc:
            error = health.classify(exc, str(self.path or self.url), "writing")
            if type(error) is StoreError:
                raise StoreError(f"the state store refused a write: {reason(exc)}") from exc
            raise error from exc
        except DBAPIError as exc:
            raise health.classify(exc, str(self.path or self.url), "writing") from exc
        finally:
            conn.close()

    @contextmanager
    def _read(self) -> Iterator[Connection]:
        try:
            with self._engine.connect() as conn:
                yield conn
        except DBAPIError as exc:
            raise health.classify(exc, str(self.path or self.url), "reading") from exc

    def integrity_problems(self) -> list[str] | None:
        """What the database's own check finds wrong: SQLite `PRAGMA integrity_check`, PostgreSQL amcheck on every
        B-tree index ([] when sound); None when the check is not available (amcheck is not installed)."""
        if self.path is not None:
            return health.file_problems(self.path)
        with self._read() as conn, conn.begin():
            return health.pg_index_problems(conn)

    def counts(self) -> dict[str, int]:
        """How many runs and events the store holds (what a backup or restore reports)."""
        with self._read() as conn:
            runs = conn.execute(select(func.count()).select_from(t.runs)).scalar_one()
            events = conn.execute(select(func.count()).select_from(t.events)).scalar_one()
        return {"runs": int(runs), "events": int(events)}


@dataclass(frozen=True)
class Fence:
    """What an agent's writes carry while it leads: its id and its fencing term."""

    agent_id: str
    term: int


def _check_fence(conn: Connection, fence: Fence) -> None:
    """Lock the leader row for this transaction (a takeover waits for it to end) and compare it with `fence`."""
    row = conn.execute(select(t.leader.c.term, t.leader.c.agent_id).where(t.leader.c.id == 1).with_for_update()).one()
    if (row.term, row.agent_id) != (fence.term, fence.agent_id):
        holder = f"agent {row.agent_id}" if row.agent_id else "nobody (its leader stepped down)"
        raise FencedError(
            f"write refused: agent {fence.agent_id} leads under term {fence.term}, but the store's lease is at term "
            f"{row.term}, held by {holder}; this agent steps down and nothing was written"
        )


def _engine_for(url: str) -> Engine:
    if url.startswith("sqlite"):
        engine = create_engine(url, connect_args={"timeout": 30})
        event.listen(engine, "connect", _sqlite_connect)
        event.listen(engine, "begin", _sqlite_begin)
        return engine
    try:
        return create_engine(url, pool_pre_ping=True)
    except ImportError as exc:  # SQLAlchemy imports the URL's driver here: psycopg for postgresql+psycopg://
        scheme = url.split("://", 1)[0]
        raise MissingExtraError(
            f"a {scheme}:// store needs its driver {exc.name or 'psycopg'}, from crossrail's postgres extra: "
            "pip install 'crossrail[postgres]' (and name it in the URL: postgresql+psycopg://...)",
            name=exc.name,
        ) from exc


def _readonly_engine(path: Path) -> Engine:
    """An engine that reads `path` and never writes it, not even WAL's shared-memory file when the directory is
    read-only (then the file is opened immutable: nobody can be writing it through this directory)."""
    import sqlite3

    if not path.is_file():
        raise StoreError(f"no state store at {path}")
    uri = health.readonly_uri(path, immutable=not os.access(path.parent, os.W_OK))
    engine = create_engine("sqlite://", creator=lambda: sqlite3.connect(uri, uri=True, check_same_thread=False))
    event.listen(engine, "connect", _sqlite_connect_readonly)
    event.listen(engine, "begin", _sqlite_begin)
    return engine


def _sqlite_connect_readonly(dbapi_conn: Any, _record: Any) -> None:
    dbapi_conn.isolation_level = None
    dbapi_conn.execute("PRAGMA busy_timeout=30000")


def _sqlite_connect(dbapi_conn: Any, _record: Any) -> None:
    # Hand transaction control to SQLAlchemy's "begin" event (the documented pysqlite recipe).
    dbapi_conn.isolation_level = None
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA synchronous=NORMAL")
    cur.execute("PRAGMA foreign_keys=ON")
    cur.execute("PRAGMA busy_timeout=30000")
    cur.close()


def _sqlite_begin(conn: Connection) -> None:
    write = conn.get_execution_options().get("crossrail_write", False)
    conn.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")


def _revision(conn: Connection) -> str | None:
    from sqlalchemy import inspect

    if not inspect(conn).has_table("alembic_version"):
        return None
    return conn.execute(text("SELECT version_num FROM alembic_version")).scalar()


def chunks(items: list[Any], size: int = 500) -> Iterator[list[Any]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


def pk(result: Any) -> int:
    key = result.inserted_primary_key
    assert key is not None, "an insert into a table with an integer primary key returns it"
    return int(key[0])


def reason(exc: Exception) -> str:
    orig = getattr(exc, "orig", None)
    return str(orig if orig is not None else exc).splitlines()[0]
