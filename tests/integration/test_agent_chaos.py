"""Killing the agent at random moments while attempts run loses nothing and starts nothing twice."""

from __future__ import annotations

import itertools
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from crossrail.client import Client

pytestmark = pytest.mark.slow

ARGS = "spec.args=[--steps, '60', --checkpoint-every-steps, '10', --step-sleep, '{sleep}']"
RETRIES = "spec.retries={max: 2, backoff: {initial: 1s}}"  # the killed attempt's retry waits 1 s, not the default 30


def agent(home: Path, *extra: str) -> subprocess.Popen[bytes]:
    env = {**os.environ, "CROSSRAIL_HOME": str(home)}
    cmd = [sys.executable, "-m", "crossrail.cli", "agent", "--poll", "0.1", "--fallback-wait", "1", *extra]
    with (home / "agent-stderr.log").open("ab") as err:
        return subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=err)


def test_sigkilling_the_agent_many_times_loses_no_attempt_and_duplicates_none(checkout: Path) -> None:
    home = checkout / ".crossrail"
    exps = home / "experiments"
    with Client(cwd=checkout) as c:
        # The first run is slower, so it is still training when the loop below kills its process once.
        runs = [
            c.submit(
                exps / "pretrain-small.yaml",
                sets=[
                    ARGS.format(sleep=0.25 if i == 0 else 0.03),
                    RETRIES,
                    "spec.resources.chips=2",
                    "spec.command=[python, -m, crossrail.workloads.bigram]",
                    f"metadata.name=chaos-{i}",
                ],
            )["run"]["id"]
            for i in range(6)
        ]
        rng = random.Random(7)
        kills, killed_workload = 0, False
        deadline = time.monotonic() + 180
        while kills < 8 and time.monotonic() < deadline:
            proc = agent(home)
            time.sleep(rng.uniform(0.3, 2.0))
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            kills += 1
            if not killed_workload:  # one real failure too, so the log shows a recovery the agent had to make
                killed_workload = _kill_one_training_process(home, runs[0])
        if not killed_workload:  # the churn was too fast for it: let one agent live until there is one to kill
            proc = agent(home)
            while not killed_workload and time.monotonic() < deadline:
                time.sleep(0.1)
                killed_workload = _kill_one_training_process(home, runs[0])
            proc.send_signal(signal.SIGKILL)
            proc.wait()
        final = agent(home, "--until-idle")
        assert final.wait(timeout=180) == 0, (home / "agent-stderr.log").read_text()
        store = c.service.store
        assert kills == 8
        for rid in runs:
            assert store.get_run(rid).state == "succeeded", rid
            attempts = store.attempts(rid)
            assert [a.number for a in attempts] == list(range(1, len(attempts) + 1))
            events = store.events(run=rid)
            started = Counter(e.attempt for e in events if e.type == "started")
            ends = Counter(e.attempt for e in events if e.type in ("succeeded", "failed", "preempted"))
            assert all(n == 1 for n in started.values()), (rid, started)
            assert set(started) == set(ends) == {a.number for a in attempts}, (rid, started, ends)
            for prev, nxt in itertools.pairwise(attempts):
                assert prev.ended_at is not None
                assert nxt.started_at is not None
                assert nxt.started_at >= prev.ended_at  # never two attempts of a run at once
            assert [c.step for c in store.checkpoints(rid)][-1] == 60
        assert killed_workload, "the first run's training process was killed once while the agent churned"
        recovery = store.events(run=runs[0], types=["failed", "retried"])
        assert [e.type for e in recovery] == ["failed", "retried"]
        assert len(store.attempts(runs[0])) == 2


def _kill_one_training_process(home: Path, run: str) -> bool:
    import json

    child = home / "attempts" / run / "1" / "child.json"
    ckpt = list((home / "checkpoints").glob(f"*/{run}-*/step-*"))  # <run id>-<uid>
    if not child.exists() or not ckpt:
        return False
    try:
        os.killpg(int(json.loads(child.read_text())["pid"]), signal.SIGKILL)
    except (OSError, ValueError, KeyError):
        return False
    return True
