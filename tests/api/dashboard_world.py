"""A workspace told by hand for the dashboard's tests (tests/api/test_dashboard.py in process, test_browser.py
in Chromium): runs of two teams, running, ended and queued, progress towards a total, attempts with known prices, an RL
backlog, a checkpoint fallback and a sweep, each at a known time."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from crossrail.client import Client
from crossrail.control.attempts import new_attempt
from crossrail.core import Event, EventType, ManualClock
from crossrail.core.attempts import EndReason

T0 = 1_800_000_000.0
NOW = T0 + 40.0


RUNNING = (("running", "tpu-v5p"), ("rl", "h100"))
"""The told runs with an attempt running, and where."""
SCAN = ["scan-1-low", "scan-1-normal", "scan-2-low", "scan-2-normal"]
"""The told sweep's members."""
FELL_BACK = "fell back after waiting 1m05s for a tpu pool"
"""Why `rl` was placed on h100 (scheduling.placement's words for a fallback)."""


@dataclass
class Told:
    home: Path
    runs: dict[str, str]  # what each run is here -> its id
    viewer: str  # a viewer token of team foundation (which sees no other team's runs)
    admin: str  # an admin token (every team's runs): with tokens made, the server asks for one from anyone
    sweep: str  # a sweep of 2 x 2 points, queued
    losses: dict[str, float]  # the last loss three of its members reported


def _attempt(c: Client, run_id: str, pool_name: str, started: float, reason: str = "told") -> None:
    """Attempt 1 of the run placed (for `reason`), admitted and started on the pool at `started`, at its price."""
    store = c.service.store
    run, pool = store.get_run(run_id), c.service.fleet.pool(pool_name)
    hw = {"pool": pool.name, "chips": run.chips, "cost_per_chip_hour": pool.cost_per_chip_hour}
    att = new_attempt(run, 1, pool, run.chips, report=str(c.workspace.root / f"{run_id}.jsonl"), now=started)
    assert store.admit(att, [Event(EventType.PLACED, started, run_id, 1, hw | {"reason": reason})])
    assert store.mark_started(run_id, 1, started, [Event(EventType.STARTED, started, run_id, 1, hw)])


def _trained(c: Client, run_id: str, steps: dict[float, int], total: int | None, metric: str = "loss") -> None:
    """Heartbeats at each (time: step) of attempt 1, its `started` report naming `total`, and one sample of
    `metric` per step that falls as the step grows."""
    store = c.service.store
    events = [Event(EventType.HEARTBEAT, ts, run_id, 1, {"step": step}) for ts, step in steps.items()]
    if total is not None:
        first = min(steps)
        events.append(Event(EventType.REPORTED, first, run_id, 1, {"name": "started", "data": {"steps": total}}))
    store.append_events(events)
    samples = [
        {"run_id": run_id, "attempt": 1, "ts": ts, "step": step, "name": metric, "value": 10.0 / step}
        for ts, step in steps.items()
    ]
    store.add_metric_samples(samples)


def tell(root: Path) -> Told:
    """A workspace told by hand: `done` (foundation, pretraining) ran one hour on h100 to T0 and succeeded;
    `running` (foundation, post-training, from done's checkpoint) runs on tpu-v5p since T0 at one step a
    second towards step 100, reached step 30 at T0+30, and loaded its parent's step 40 because step 60 failed
    verification; `rl` (foundation) reports an RL backlog as it runs on h100, a fallback pool; `other`
    (alignment) waits in its queue; `scan` is a sweep of 2 x 2 points, queued, three of which reported a loss.
    The pages' clock reads T0+40 (NOW)."""
    Client.init(root)
    home = root / ".crossrail"
    clock = ManualClock(T0 - 3700)
    exps = home / "experiments"
    with Client(home, clock=clock) as c:
        store = c.service.store

        def submit(file: str, team: str, *sets: str) -> str:
            return str(c.submit(exps / file, sets=[f"metadata.team={team}", *sets])["run"]["id"])

        done = submit("pretrain-small.yaml", "foundation")
        running = submit("posttrain-042.yaml", "foundation")  # before its parent ended, it waits for it
        _attempt(c, done, "h100", T0 - 3600)
        _trained(c, done, {T0 - 3600 + 10 * s: s for s in range(1, 6)}, total=5)
        end = {"state": "succeeded", "exit_code": 0, "signal": None, "stopped_by": None}
        ended = Event(EventType.SUCCEEDED, T0, done, 1, {"pool": "h100"})
        assert store.end_attempt(
            done, 1, **end, ended_at=T0, end_reason=EndReason.SUCCEEDED, reason="exit 0", run_state="succeeded",
            events=[ended],
        )  # fmt: skip
        clock.set(T0)
        _attempt(c, running, "tpu-v5p", T0)
        _trained(c, running, {T0 + 10: 10, T0 + 20: 20, T0 + 30: 30}, total=100)
        ckpts = store.get_run(done).run_checkpoint_dir
        loads = [
            ("checkpoint_skipped", {"uri": f"{ckpts}/step-0000000060", "reason": "checksum mismatch"}),
            ("initialised", {"step": 40, "from": f"{ckpts}/step-0000000040"}),
        ]
        store.append_events([Event(EventType.REPORTED, T0, running, 1, {"name": n, "data": d}) for n, d in loads])
        rl = submit("eval-smoke.yaml", "foundation", "metadata.name=pipeline")
        _attempt(c, rl, "h100", T0, reason=FELL_BACK)
        store.add_metric_samples(
            [
                {"run_id": rl, "attempt": 1, "ts": T0 + i, "step": i, "name": name, "value": value}
                for i in range(1, 5)
                for name, value in (("backlog_samples_length", 3.0 * i), ("backlog_samples_age_seconds", 2.0 * i))
            ]
        )
        other = submit("pretrain-small.yaml", "alignment", "metadata.name=theirs")
        grid = ["spec.resources.chips=1,2", "spec.priority=low,normal"]
        scan = c.sweep_submit(exps / "eval-smoke.yaml", grid=grid, sets=["metadata.team=foundation"])
        members = {(m["params"]["spec.resources.chips"], m["params"]["spec.priority"]): m["id"] for m in scan["runs"]}
        losses = {members[1, "low"]: 3.0, members[2, "low"]: 1.0, members[2, "normal"]: 2.0}
        store.add_metric_samples(
            [{"run_id": r, "attempt": None, "ts": T0, "step": 5, "name": "loss", "value": v} for r, v in losses.items()]
        )
        viewer = c.token_create(team="foundation", role="viewer", user="lead")["token"]
        admin = c.token_create(team="foundation", role="admin", user="ops")["token"]
    runs = {"done": done, "running": running, "rl": rl, "other": other} | {
        f"scan-{n}-{p}": v for (n, p), v in members.items()
    }
    return Told(home, runs, viewer, admin, scan["id"], losses)
