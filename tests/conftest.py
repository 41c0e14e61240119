"""Shared fixtures: a manual clock, a git checkout with a fresh workspace, and a client over it."""

from __future__ import annotations

import functools
import os
import shutil
import socket
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from crossrail.client import Client
from crossrail.core import ManualClock

GIT_ENV = {
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@example.com",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@example.com",
}


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


def make_checkout(path: Path) -> str:
    """A git checkout at `path` with one commit; returns the commit id."""
    env = {**os.environ, **GIT_ENV}
    (path / "train.py").write_text("print('train')\n")
    for cmd in (["git", "init", "-q"], ["git", "add", "train.py"], ["git", "commit", "-qm", "c"]):
        subprocess.run(cmd, cwd=path, env=env, check=True)
    return subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=path, capture_output=True, text=True, check=True
    ).stdout.strip()


@pytest.fixture
def checkout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.delenv("CROSSRAIL_HOME", raising=False)
    monkeypatch.delenv("CROSSRAIL_STORE_URL", raising=False)
    make_checkout(tmp_path)
    Client.init(tmp_path)
    return tmp_path


@pytest.fixture
def client(checkout: Path, clock: ManualClock) -> Iterator[Client]:
    with Client(cwd=checkout, clock=clock) as c:
        yield c


@pytest.fixture
def experiments(checkout: Path) -> Path:
    return checkout / ".crossrail" / "experiments"


def _pg_bin() -> Path | None:
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"), key=lambda p: int(p.parts[-3]))
    if found:
        return found[-1].parent
    which = shutil.which("initdb")
    return Path(which).parent if which else None


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[str]:
    """A throwaway PostgreSQL cluster on 127.0.0.1 for this test session; yields its base URL."""
    pg = _pg_bin()
    if pg is None:
        pytest.skip("PostgreSQL server binaries are not installed (.ci/run installs the Debian package)")
    pytest.importorskip("psycopg", reason="the postgres extra is not installed")
    root = Path(tempfile.mkdtemp(prefix="crossrail-pg-"))  # pytest's tmp dirs are closed to other users
    as_postgres = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
    if as_postgres:
        shutil.chown(root, "postgres")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    data, log = root / "data", root / "server.log"
    run = functools.partial(subprocess.run, check=True, capture_output=True, timeout=120)
    run([*as_postgres, str(pg / "initdb"), "-D", str(data), "-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-sync"])
    opts = f"-p {port} -k {root} -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off"
    run([*as_postgres, str(pg / "pg_ctl"), "-D", str(data), "-l", str(log), "-w", "-t", "60", "-o", opts, "start"])
    try:
        yield f"postgresql+psycopg://postgres@127.0.0.1:{port}"
    finally:
        subprocess.run(
            [*as_postgres, str(pg / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop"],
            capture_output=True,
            check=False,
            timeout=60,
        )
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def postgres_url(postgres_server: str) -> str:
    """A fresh, empty database on the session's server."""
    import sqlalchemy

    name = f"t_{uuid.uuid4().hex[:12]}"
    engine = sqlalchemy.create_engine(f"{postgres_server}/postgres", isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        conn.exec_driver_sql(f"CREATE DATABASE {name}")
    engine.dispose()
    return f"{postgres_server}/{name}"
