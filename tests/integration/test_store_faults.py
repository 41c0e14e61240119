"""The store under a running agent: deleted, replaced, corrupted, restored from a backup, and (PostgreSQL) restarted."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import pytest
from tests.conftest import drive as drive_agent
from tests.conftest import wait_for

from crossrail.client import Client
from crossrail.control.agent.lock import agent_lock
from crossrail.control.agent.loop import AgentConfig
from crossrail.errors import WorkspaceError

pytestmark = pytest.mark.slow  # each test runs a real agent over a store it damages

CLI = [sys.executable, "-m", "crossrail.cli"]


def cli(checkout: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if k not in ("CROSSRAIL_HOME", "CROSSRAIL_STORE_URL")}
    return subprocess.run(
        [*CLI, *args],
        cwd=checkout,
        env={**base, **(env or {})},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def submit(checkout: Path, name: str, sleep_s: float, gate: Path | None = None) -> str:
    """Submit (in this process: quicker than the CLI) a run that sleeps, or with `gate` one that runs until that
    file exists (so no load on the machine can end it before the test has seen it running); returns its id."""
    body = f"time.sleep({sleep_s})"
    if gate is not None:
        body = f"[time.sleep(0.05) for _ in iter(lambda: os.path.exists({str(gate)!r}), True)]"
    sets = [
        f"metadata.name={name}",
        f'spec.command=[python, -c, "import os, time; {body}"]',
        "spec.args=[]",
        "spec.resources.chips=2",
    ]
    with Client(cwd=checkout) as c:
        return str(c.submit(checkout / ".crossrail" / "experiments" / "pretrain-small.yaml", sets=sets)["run"]["id"])


def start_agent(checkout: Path, env: dict[str, str] | None = None, *extra: str) -> subprocess.Popen[str]:
    base = {k: v for k, v in os.environ.items() if k not in ("CROSSRAIL_HOME", "CROSSRAIL_STORE_URL")}
    return subprocess.Popen(
        [*CLI, "agent", "--poll", "0.1", "--fallback-wait", "0", *extra],
        cwd=checkout,
        env={**base, **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def run_states(db: Path) -> dict[str, str]:
    import sqlite3

    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return dict(conn.execute("SELECT id, state FROM runs").fetchall())
    finally:
        conn.close()


def events_of(db: Path) -> list[tuple[int, str, str | None]]:
    import sqlite3

    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return conn.execute("SELECT seq, type, run_id FROM events ORDER BY seq").fetchall()
    finally:
        conn.close()


@pytest.fixture
def busy(checkout: Path) -> Iterator[tuple[subprocess.Popen[str], Path, list[str]]]:
    """A running agent that has finished two runs and is running a third (until its gate file exists: the test's
    `release`); and a backup taken while it runs."""
    db = checkout / ".crossrail" / "state.db"
    gate = checkout / "release-long"
    runs = [submit(checkout, "quick-a", 0.1), submit(checkout, "quick-b", 0.1), submit(checkout, "long", 0, gate)]
    agent = start_agent(checkout)
    try:
        wait_for(lambda: run_states(db) == {runs[0]: "succeeded", runs[1]: "succeeded", runs[2]: "running"})
        backup = checkout / "backup.db"
        proc = cli(checkout, "store", "backup", str(backup))
        assert proc.returncode == 0, proc.stderr
        assert "3 runs" in proc.stdout
        yield agent, backup, runs
    finally:
        gate.touch()  # whatever still runs the long run (an attempt outliving a killed agent) ends now
        if agent.poll() is None:
            agent.kill()
        agent.communicate()


def stopped(agent: subprocess.Popen[str]) -> tuple[int, str]:
    _out, err = agent.communicate(timeout=20)
    assert "Traceback" not in err
    return agent.returncode, err


@pytest.mark.slow
def test_deleting_state_db_stops_the_agent_and_a_restore_brings_back_every_run(
    checkout: Path, busy: tuple[subprocess.Popen[str], Path, list[str]]
) -> None:
    agent, backup, runs = busy
    db = checkout / ".crossrail" / "state.db"
    before = events_of(backup)
    db.unlink()
    code, err = stopped(agent)
    assert code == 1
    assert f"the state store {db} was deleted" in err
    assert "crossrail store restore" in err
    assert not db.exists()  # nothing wrote a new store in its place
    status = cli(checkout, "status")
    assert status.returncode == 1
    assert "is gone" in status.stderr
    assert "crossrail store restore BACKUP" in status.stderr
    assert not db.exists()

    restored = cli(checkout, "store", "restore", str(backup))
    assert restored.returncode == 0, restored.stderr
    assert "3 runs" in restored.stdout
    assert run_states(db) == {runs[0]: "succeeded", runs[1]: "succeeded", runs[2]: "running"}
    assert events_of(db) == before  # every event committed before the backup, and nothing else
    assert any(p.name.startswith("state.db.replaced-") for p in db.parent.iterdir())  # the orphaned WAL, kept
    verify = cli(checkout, "events", "--verify")
    assert verify.returncode == 0, verify.stdout
    (checkout / "release-long").touch()
    again = start_agent(checkout, None, "--until-idle")  # the restored store carries on where the backup stood
    _out, err = again.communicate(timeout=60)
    assert again.returncode == 0, err
    assert run_states(db)[runs[2]] == "succeeded"


@pytest.mark.slow
def test_replacing_state_db_stops_the_agent_and_a_restore_under_it_is_refused(
    checkout: Path, busy: tuple[subprocess.Popen[str], Path, list[str]]
) -> None:
    agent, backup, _runs = busy
    db = checkout / ".crossrail" / "state.db"
    inode = db.stat().st_ino
    refused = cli(checkout, "store", "restore", str(backup))
    assert refused.returncode == 1
    assert "an agent is running" in refused.stderr
    assert db.stat().st_ino == inode  # a refused restore changes nothing
    other = checkout / "other"
    other.mkdir()
    assert cli(other, "init", ".").returncode == 0
    assert cli(other, "status").returncode == 0
    shutil.copy(other / ".crossrail" / "state.db", checkout / "incoming.db")
    os.replace(checkout / "incoming.db", db)
    code, err = stopped(agent)
    assert code == 1
    assert f"the state store {db} was replaced by another file" in err
    assert cli(checkout, "status").returncode == 1  # and the CLI will not use a store that is not this workspace's


@pytest.mark.slow
def test_corrupting_state_db_stops_the_agent_and_store_check_names_the_damage(
    checkout: Path, busy: tuple[subprocess.Popen[str], Path, list[str]]
) -> None:
    agent, backup, runs = busy
    db = checkout / ".crossrail" / "state.db"
    with db.open("r+b") as f:  # 8 KiB of garbage over the header and the first pages
        f.write(b"\xa5" * 8192)
    code, err = stopped(agent)
    assert code == 1
    assert f"the state store {db} is damaged" in err
    check = cli(checkout, "store", "check")
    assert check.returncode == 1
    assert "damaged" in check.stderr + check.stdout
    restored = cli(checkout, "store", "restore", str(backup))
    assert restored.returncode == 0, restored.stderr
    # The damaged file is set aside, not deleted. (When the agent closed it, SQLite wrote back the committed pages
    # its WAL held, which may have mended the header; the pages it did not hold stay damaged.)
    (kept,) = [
        p
        for p in db.parent.iterdir()
        if p.name.startswith("state.db.replaced-") and p.name[-4:] not in ("-wal", "-shm")
    ]
    assert kept.read_bytes() != backup.read_bytes()
    assert set(run_states(db)) == set(runs)
    ok = cli(checkout, "store", "check")
    assert ok.returncode == 0, ok.stdout
    assert "integrity: ok" in ok.stdout


def test_events_verify_names_a_rewrite_made_around_the_triggers(checkout: Path) -> None:
    import sqlite3

    run = submit(checkout, "victim", 0.1)
    with Client(cwd=checkout) as c:
        c.cancel(run)
    db = checkout / ".crossrail" / "state.db"
    with sqlite3.connect(db) as conn:
        with pytest.raises(sqlite3.DatabaseError, match="append-only"):
            conn.execute("UPDATE events SET data = '{}' WHERE type = 'cancelled'")
        conn.execute("DROP TRIGGER events_no_update")
        conn.execute("UPDATE events SET data = '{\"by\": \"mallory\"}' WHERE type = 'cancelled'")
        seq = conn.execute("SELECT seq FROM events WHERE type = 'cancelled'").fetchone()[0]
    proc = cli(checkout, "events", "--verify")
    assert proc.returncode == 1
    assert f"run {run} seq {seq}: does not match its hash" in proc.stdout


# --- the executors disagree with the store -------------------------------------------------------------


FAST = AgentConfig(poll_s=0.05, fallback_wait_s=0.0, stop_grace_s=2.0, heartbeat_s=1.0)


drive = partial(drive_agent, config=FAST)


def test_after_a_reset_the_agent_reports_attempts_it_does_not_know_and_runs_the_others(checkout: Path) -> None:
    home = checkout / ".crossrail"
    first = submit(checkout, "tiny", 0.1)
    with Client(cwd=checkout) as c:
        drive(c, lambda: c.service.store.get_run(first).state == "succeeded")  # tiny-1/1 is done and forgotten
    orphan = submit(checkout, "orphan", 3)
    with Client(cwd=checkout) as c:
        drive(c, lambda: c.service.store.get_run(orphan).state == "running")
    for name in ("state.db", "state.db-wal", "state.db-shm", "store.json"):  # start over with an empty store
        (home / name).unlink(missing_ok=True)
    again = submit(checkout, "tiny", 0.1)  # tiny-1 again: its attempt number 1 was used by the old store
    other = submit(checkout, "other", 0.1)
    assert again == first
    with Client(cwd=checkout) as c:
        store = c.service.store
        drive(c, lambda: {store.get_run(r).state for r in (again, other)} == {"succeeded"})
        unknown = {(e.data["run"], e.data["attempt"]) for e in store.events(types=["unknown_attempt"])}
        assert (orphan, 1) in unknown
        attempts = store.attempts(again)
        assert [a.state for a in attempts] == ["unplaced", "succeeded"]
        assert "held by an attempt the executor ran for an earlier store" in (attempts[0].reason or "")
        assert store.get_run(again).state == "succeeded"


# --- the lock and read-only workspaces ---------------------------------------------------------------------


def test_deleting_agent_lock_does_not_let_a_second_agent_run(checkout: Path) -> None:
    root = checkout / ".crossrail"
    with agent_lock(root):
        (root / "agent.lock").unlink()
        with pytest.raises(WorkspaceError, match="another crossrail agent is running"), agent_lock(root):
            pass
        (root / "agent.lock").write_text("0\n")  # nor replacing it
        with pytest.raises(WorkspaceError, match="another crossrail agent is running"), agent_lock(root):
            pass
    with agent_lock(root):  # released when the first one stops
        pass


def _read_only(checkout: Path) -> list[str]:
    """A command prefix that sees the workspace read-only: a read-only bind mount in a private mount namespace
    for root (whom permissions do not stop), a plain chmod for anyone else."""
    ws = checkout / ".crossrail"
    if os.geteuid() != 0:
        for p in [ws, *ws.rglob("*")]:
            p.chmod(p.stat().st_mode & ~0o222)
        return []
    probe = subprocess.run(
        ["unshare", "-m", "sh", "-c", f"mount --bind {ws} {ws} && mount -o remount,bind,ro {ws}"],
        capture_output=True,
        check=False,
    )
    if probe.returncode != 0:
        pytest.skip(f"cannot make a read-only mount here: {probe.stderr.decode().strip()}")
    return ["unshare", "-m", "sh", "-c", f'mount --bind {ws} {ws} && mount -o remount,bind,ro {ws} && exec "$@"', "-"]


@pytest.mark.slow
def test_a_read_only_workspace_is_read_by_read_only_commands_and_the_agent_says_why_it_cannot_run(
    checkout: Path,
) -> None:
    run = submit(checkout, "frozen", 0.1)
    with Client(cwd=checkout) as c:
        c.cancel(run)
    prefix = _read_only(checkout)
    env = {k: v for k, v in os.environ.items() if k not in ("CROSSRAIL_HOME", "CROSSRAIL_STORE_URL")}

    def ro(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*prefix, *CLI, *args], cwd=checkout, env=env, capture_output=True, text=True, timeout=60, check=False
        )

    for args in (["status", "--json"], ["events", "--json"], ["queue", "--json"], ["report"]):
        proc = ro(*args)
        assert proc.returncode == 0, (args, proc.stderr)
    shown = ro("show", run, "--json")
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["run"]["state"] == "cancelled"
    agent = ro("agent", "--until-idle")
    assert agent.returncode == 1
    assert "Traceback" not in agent.stderr
    assert "agent.lock" in agent.stderr
    assert "read-only" in agent.stderr.lower()
    refused = ro("cancel", run)
    assert refused.returncode == 1
    assert "Traceback" not in refused.stderr


# --- PostgreSQL: the server goes away mid-pass and comes back -----------------------------------------------


def _pg_ctl(data: Path, *args: str) -> None:
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"), key=lambda p: int(p.parts[-3]))
    pg_ctl = str(found[-1]) if found else shutil.which("pg_ctl")
    assert pg_ctl is not None
    as_postgres = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
    subprocess.run([*as_postgres, pg_ctl, "-D", str(data), *args], check=True, capture_output=True, timeout=120)


def restart_server(postgres_url: str, down_s: float) -> None:
    """Stop the session's server at once (as a crash would), wait, and start it again with the same options."""
    import shlex

    import sqlalchemy

    engine = sqlalchemy.create_engine(postgres_url)
    with engine.connect() as conn:
        data = Path(str(conn.exec_driver_sql("SHOW data_directory").scalar()))
    engine.dispose()
    argv = shlex.split((data / "postmaster.opts").read_text())[1:]
    opts = [a for i, a in enumerate(argv) if a != "-D" and (i == 0 or argv[i - 1] != "-D")]
    _pg_ctl(data, "-m", "immediate", "-w", "stop")
    time.sleep(down_s)
    _pg_ctl(data, "-l", str(data.parent / "restarted.log"), "-w", "-t", "60", "-o", shlex.join(opts), "start")


@pytest.mark.postgres
@pytest.mark.slow
def test_a_postgresql_restart_mid_pass_is_waited_out_and_loses_no_event(
    checkout: Path, postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sqlalchemy

    from crossrail.store import Store

    # The session's server trades durability for speed (synchronous_commit=off); a commit here must survive a crash.
    admin = sqlalchemy.create_engine(postgres_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        name = conn.exec_driver_sql("SELECT current_database()").scalar()
        conn.exec_driver_sql(f"ALTER DATABASE {name} SET synchronous_commit = on")
    admin.dispose()
    env = {"CROSSRAIL_STORE_URL": postgres_url}
    monkeypatch.setenv("CROSSRAIL_STORE_URL", postgres_url)
    runs = [submit(checkout, f"pg-{i}", 1.5 if i == 0 else 0.1) for i in range(3)]
    agent = start_agent(checkout, env, "--until-idle")
    try:
        store = Store.open(postgres_url)
        wait_for(lambda: any(e.type == "started" for e in store.events(run=runs[0])))
        before = [(e.seq, e.type, e.run) for e in store.events()]
        store.close()
        restart_server(postgres_url, down_s=1.5)
        _out, err = agent.communicate(timeout=90)
    finally:
        if agent.poll() is None:
            agent.kill()
            agent.communicate()
    assert agent.returncode == 0, err
    assert "cannot be reached" in err
    assert "retrying" in err
    assert "reachable again" in err
    assert "Traceback" not in err
    store = Store.open(postgres_url)
    try:
        after = [(e.seq, e.type, e.run) for e in store.events()]
        assert after[: len(before)] == before  # every event committed before the crash is still there
        assert store.verify_events().problems == []
        for rid in runs:
            assert store.get_run(rid).state == "succeeded"
            started = [e.attempt for e in store.events(run=rid, types=["started"])]
            assert started == sorted(set(started))  # no attempt started twice
    finally:
        store.close()
