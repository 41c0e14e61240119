"""Three agents on one PostgreSQL store while runs train: the leader SIGKILLed five times and once SIGSTOPped past its
lease; a standby leads within the lease each time, the continued one stands by and can write nothing under its old
term, every run succeeds and no attempt starts twice. What is asserted is what the store holds (who leads, what was
written and launched under which term), never a log sentence: a deposed leader may learn it in more than one way."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
import sqlalchemy
from tests.conftest import wait_for

from crossrail.client import Client
from crossrail.errors import FencedError
from crossrail.store import Fence, Store

pytestmark = [pytest.mark.slow, pytest.mark.postgres]

LEASE_S = 2.0
# Ten runs of 2 chips, about 15 s each: they train in waves (the fleet runs a few at once), so attempts are still
# being launched while the leaders are killed and after the pause.
STEPS = 40
ARGS = f"spec.args=[--steps, '{STEPS}', --checkpoint-every-steps, '10', --step-sleep, '0.3']"


class Agents:
    """`crossrail agent` processes sharing one workspace (one host: one local executor's attempt directories)."""

    def __init__(self, home: Path, url: str) -> None:
        self.home, self.url = home, url
        self.procs: dict[int, subprocess.Popen[bytes]] = {}
        self.log: dict[int, Path] = {}
        self.engine = sqlalchemy.create_engine(url)

    def start(self) -> subprocess.Popen[bytes]:
        env = {**os.environ, "CROSSRAIL_HOME": str(self.home), "CROSSRAIL_STORE_URL": self.url}
        cmd = [sys.executable, "-m", "crossrail.cli", "agent", "--poll", "0.1", "--fallback-wait", "1"]
        log = self.home / f"agent-{len(self.procs)}.log"
        with log.open("ab") as err:
            proc = subprocess.Popen([*cmd, "--lease-seconds", str(LEASE_S)], env=env, stdout=err, stderr=err)
        self.procs[proc.pid], self.log[proc.pid] = proc, log
        return proc

    def lease(self) -> tuple[int, int | None]:
        """The leader row's term and its holder's pid (None: nobody leads)."""
        with self.engine.connect() as conn:
            row = conn.exec_driver_sql(
                "SELECT l.term, a.pid FROM leader l LEFT JOIN agents a ON a.id = l.agent_id WHERE l.id = 1"
            ).one()
        return int(row[0]), row[1]

    def heartbeat(self, pid: int) -> float | None:
        """When the running agent of process `pid` last beat (None: it has no running row)."""
        with self.engine.connect() as conn:
            row = conn.exec_driver_sql(
                f"SELECT heartbeat_at FROM agents WHERE pid = {int(pid)} AND stopped_at IS NULL"
            ).one_or_none()
        return None if row is None else float(row[0])

    def registered(self) -> set[int]:
        with self.engine.connect() as conn:
            return {r[0] for r in conn.exec_driver_sql("SELECT pid FROM agents WHERE stopped_at IS NULL")}

    def wait_ready(self, timeout_s: float = 60.0) -> tuple[int, int]:
        """Until a live agent leads and another live one stands by; the term and the leader's pid. A standby looks
        at the lease from the moment it registers, so it takes over within the lease of a kill after that; the
        agent started last may still be starting (waiting for it would only add its start-up to every round)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            live = {pid for pid, p in self.procs.items() if p.poll() is None}
            term, pid = self.lease()
            if pid in live and (live & self.registered()) - {pid}:
                return term, pid
            time.sleep(0.05)
        raise AssertionError(f"no leader among {sorted(self.procs)} within {timeout_s}s: {self.logs()}")

    def next_leader(self, after_term: int, old: int, timeout_s: float = 30.0) -> tuple[int, int, float]:
        """Wait for a newer term held by another agent; its term, pid and how long after the call it was taken.

        The time taken is the new leader's own record of when it took the lease (the row's `renewed_at` before its
        first renewal: the agents and this test share the host's clock), so how late this loop looks at the row
        on a loaded host does not count; once the leader has renewed, it is when this loop saw the new term."""
        start, start_wall = time.monotonic(), time.time()
        while time.monotonic() - start < timeout_s:
            term, pid = self.lease()
            if term > after_term and pid is not None and pid != old:
                seen = time.monotonic() - start
                with self.engine.connect() as conn:
                    row = conn.exec_driver_sql("SELECT term, renewals, renewed_at FROM leader WHERE id = 1").one()
                taken = row[2] - start_wall if row[0] == term and row[1] == 0 else seen
                return term, pid, min(taken, seen)
            time.sleep(0.02)
        raise AssertionError(f"no agent took over from term {after_term} within {timeout_s}s: {self.logs()}")

    def logs(self) -> str:
        return "\n".join(p.read_text(errors="replace")[-3000:] for p in sorted(self.home.glob("agent-*.log")))

    def stop_all(self) -> None:
        for p in self.procs.values():
            if p.poll() is None:
                p.send_signal(signal.SIGCONT)
                p.terminate()
        for p in self.procs.values():
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        self.engine.dispose()  # its connections closed here, whatever the test's outcome (a later one reads them)


def test_the_leader_killed_five_times_and_paused_once_loses_no_run_and_starts_no_attempt_twice(
    checkout: Path, postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CROSSRAIL_STORE_URL", postgres_url)
    home = checkout / ".crossrail"
    with Client(cwd=checkout) as c:
        runs = [
            c.submit(
                home / "experiments" / "pretrain-small.yaml",
                sets=[
                    ARGS,
                    "spec.resources.chips=2",
                    "spec.command=[python, -m, crossrail.workloads.bigram]",
                    f"metadata.name=failover-{i}",
                ],
            )["run"]["id"]
            for i in range(10)
        ]
        agents = Agents(home, postgres_url)
        rng = random.Random(17)
        takeovers: list[float] = []
        try:
            for _ in range(3):
                agents.start()
            for _ in range(5):  # 1. SIGKILL the leader at a random moment; a standby leads within the lease
                term, leader = agents.wait_ready()
                time.sleep(rng.uniform(0.2, 1.5))
                agents.procs[leader].kill()
                agents.procs[leader].wait()
                term, _pid, took = agents.next_leader(term, leader)
                takeovers.append(took)
                agents.start()  # three agents again
            # 2. SIGSTOP the leader past its lease, then let it carry on: a standby leads a newer term meanwhile, and
            # the continued one stands by (alive, beating, never leading again) whatever step told it so: a refused
            # renewal, a refused write of its pass, or a renewal it could not make in time
            term, paused = agents.wait_ready()
            agents.procs[paused].send_signal(signal.SIGSTOP)
            new_term, _pid, took = agents.next_leader(term, paused)
            takeovers.append(took)
            resumed_at = time.time()
            agents.procs[paused].send_signal(signal.SIGCONT)
            wait_for(
                lambda: (agents.heartbeat(paused) or 0) > resumed_at,
                what="the continued leader's next heartbeat",
                timeout_s=30,
                alive=agents.procs[paused],
            )
            lease_term, holder = agents.lease()
            assert lease_term >= new_term, (lease_term, new_term)
            assert holder != paused, agents.logs()  # it carries on, standing by
            assert agents.procs[paused].poll() is None
            # What the continued process still holds (its id and term) can neither write nor record a launch.
            deposed = Store.open(postgres_url)
            with agents.engine.connect() as conn:
                old_id = conn.exec_driver_sql(f"SELECT id FROM agents WHERE pid = {paused}").scalar_one()
            deposed.fence = Fence(old_id, term)
            with pytest.raises(FencedError, match=f"term {term}, but the store's lease is at term"):
                deposed.record_launch(runs[0], 1)
            deposed.close()
            # 3. every run ends, while the three agents (the continued one among them) carry on
            deadline = time.monotonic() + 150
            store = c.service.store
            while time.monotonic() < deadline and any(store.get_run(r).state != "succeeded" for r in runs):
                assert all(store.get_run(r).state not in ("failed", "cancelled") for r in runs), agents.logs()
                time.sleep(0.2)
        finally:
            agents.stop_all()

        print(f"takeovers after SIGKILL and SIGSTOP: {[round(t, 2) for t in takeovers]}")
        assert max(takeovers) <= LEASE_S, (takeovers, agents.logs())
        for rid in runs:
            assert store.get_run(rid).state == "succeeded", (rid, agents.logs())
            attempts = store.attempts(rid)
            started = Counter(e.attempt for e in store.events(run=rid) if e.type == "started")
            assert set(started) == {a.number for a in attempts}, (rid, started)
            assert all(n == 1 for n in started.values()), (rid, started)
            assert [ck.step for ck in store.checkpoints(rid)][-1] == STEPS
        with agents.engine.connect() as conn:
            launches = list(conn.exec_driver_sql("SELECT run_id, number, launch_term, created_at FROM attempts"))
        agents.engine.dispose()  # opened again by the read above
        elections = store.events(types=["leader_elected"])
        ended = {e.data["term"] - 1: e.ts for e in elections}  # when each term was replaced
        for rid, number, term, created_at in launches:
            assert term is not None, (rid, number)  # launched only after a fenced write of its leader's term
            # ... while that term led: the continued old leader's term too, so it launched nothing once deposed
            assert created_at <= ended.get(term, float("inf")), (rid, number, term)
        elected = [(e.data["term"], e.data["agent"]) for e in elections]
        terms = [t for t, _ in elected]
        assert terms == list(range(1, len(terms) + 1)), elected  # one leader per term, none skipped
        assert len(terms) >= 7  # the first, five after kills, one after the pause (clean stops hand on too)
