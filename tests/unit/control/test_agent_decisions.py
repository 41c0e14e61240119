"""The agent's end-of-attempt rules on a virtual clock (a fake executor, no processes, no sleeps), and the
same failure scenario driven through the agent and through the simulator: the decisions are equal."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from crossrail.client import Client
from crossrail.control.agent.loop import Agent, AgentConfig
from crossrail.core import Event, EventType, ManualClock
from crossrail.scheduling.decisions import RetryPolicy
from crossrail.sim.checkpointing import CheckpointModel
from crossrail.sim.simulation import Simulation
from crossrail.sim.workload import SimJob
from crossrail.spec import load_fleet

from .fake_executor import FakeExecutor

FLEET = """\
apiVersion: crossrail/v1
kind: Fleet
metadata: {name: two-tpu-pools}
spec:
  preemption: {on_drain: preempt}
  pools:
    - {name: tpu-a, accelerator: tpu, chip_type: tpu-v5p, chips: 4, chips_per_host: 4, cost_per_chip_hour: 4.0,
       drained: DRAIN_A}
    - {name: tpu-b, accelerator: tpu, chip_type: tpu-v5p, chips: 4, chips_per_host: 4, cost_per_chip_hour: 4.2,
       drained: DRAIN_B}
    - {name: h100, accelerator: gpu, chip_type: h100, chips: 8, chips_per_host: 8, cost_per_chip_hour: 3.0}
  queues:
    - {name: pretraining, stage: pretraining, quota: {tpu-a: 4, tpu-b: 4, h100: 8}}
    - {name: eval, stage: eval, quota: {tpu-a: 4, tpu-b: 4, h100: 8}}
"""
TPU_ONLY = ["spec.accelerators={prefer: tpu, allow: [tpu]}", "spec.resources.chips=4"]
ENDS = (EventType.FAILED, EventType.PREEMPTED, EventType.UNPLACED, EventType.SUCCEEDED)


def fleet_text(drained: tuple[str, ...] = ()) -> str:
    text = FLEET.replace("DRAIN_A", str("tpu-a" in drained).lower())
    return text.replace("DRAIN_B", str("tpu-b" in drained).lower())


class Live:
    """A workspace on a virtual clock with the agent driving a fake executor."""

    def __init__(self, checkout: Path, clock: ManualClock, fleet: str | None = None, **executor: Any) -> None:
        self.fleet_path = checkout / ".crossrail" / "fleet.yaml"
        self.fleet_path.write_text(fleet or fleet_text())
        self.clock = clock
        self.client = Client(cwd=checkout, clock=clock)
        self.store = self.client.service.store
        self.executor = FakeExecutor(clock, **executor)
        config = AgentConfig(fallback_wait_s=0.0, heartbeat_timeout_s=60.0)
        self.agent = Agent(self.client.service, self.executor, checkout / ".crossrail" / "reports", config)
        self.agent.fleet_path = self.fleet_path
        self.experiments = checkout / ".crossrail" / "experiments"

    def submit(self, *sets: str) -> str:
        run = self.client.submit(self.experiments / "pretrain-small.yaml", sets=[*TPU_ONLY, *sets])
        return str(run["run"]["id"])

    def tick(self, seconds: float = 0.0) -> None:
        self.clock.advance(seconds)
        self.agent.reconcile()

    def drain(self, pool: str) -> None:
        self.fleet_path.write_text(fleet_text((pool,)))

    def attempts(self, run: str) -> list[tuple[int, str, str]]:
        return [(a.number, a.pool, a.state) for a in self.store.attempts(run)]

    def state(self, run: str) -> str:
        return self.store.get_run(run).state

    def ends(self, run: str) -> list[Event]:
        return [e for e in self.store.events(run=run) if e.type in ENDS]


@pytest.fixture
def live(checkout: Path, clock: ManualClock) -> Iterator[Live]:
    world = Live(checkout, clock)
    yield world
    world.client.close()


def decisions(events: list[Event]) -> list[tuple[Any, ...]]:
    """The decision sequence an event log records: each attempt's pool, and each end with what follows."""
    out: list[tuple[Any, ...]] = []
    for e in events:
        if e.type is EventType.STARTED:
            out.append(("started", e.data["pool"]))
        elif e.type is EventType.SUCCEEDED:
            out.append(("succeeded", e.data["pool"]))
        elif e.type in ENDS:
            d = e.data
            out.append((str(e.type), d["pool"], d["cause"], d["final"], d.get("backoff_s"), d.get("avoid_pool")))
    return out


# --- one failure scenario, through the agent and through the simulator -------------------------------


@pytest.mark.slow
def test_the_agent_and_the_simulator_decide_a_tpu_failure_a_retry_a_back_off_and_a_drain_alike(
    checkout: Path, clock: ManualClock
) -> None:
    """Attempt 1 is lost on tpu-a; the retry waits out its 30 s back-off and avoids tpu-a; tpu-b is then
    drained under it (no back-off), and attempt 3 finishes on tpu-a. Both logs hold the same decisions."""
    # The agent, on a virtual clock.
    world = Live(checkout, clock)
    run = world.submit("spec.retries={max: 2}")
    world.tick()
    world.tick(100)
    world.executor.lose(run, 1)
    world.tick()
    assert world.state(run) == "queued"
    world.tick(29)
    assert len(world.attempts(run)) == 1, "the retry waits out its back-off"
    world.tick(1)
    world.tick(100)
    world.drain("tpu-b")
    world.tick()
    world.tick()
    world.tick(100)
    world.executor.exit(run, 3, 0)
    world.tick()
    agent_log = decisions([e for e in world.store.events(run=run) if e.type is EventType.STARTED or e.type in ENDS])
    world.client.close()

    # The simulator, with the same fleet, job, retry policy and the same two events at the same times.
    path = checkout / "scenario-fleet.yaml"
    path.write_text(fleet_text())
    fleet = load_fleet(path)
    job = SimJob("job", "pretraining", 4, work_s=1000.0, accelerators=("tpu",), prefer="tpu")
    no_downtime = CheckpointModel(detect_s=0.0, reschedule_s=0.0)
    retries = RetryPolicy.from_spec({"max": 2})
    sim = Simulation(fleet, [job], checkpoint=no_downtime, retries=retries, record_events=True, quantum_s=0.0)
    sim.engine.schedule(100.0, lambda: sim.executor.interrupt("job"))

    def drain() -> None:
        sim.sched.drain("tpu-b", preempt=True)
        sim.demand_changed()

    sim.engine.schedule(230.0, drain)
    sim.run()
    assert sim.events is not None
    sim_log = decisions(sim.events)

    assert agent_log == sim_log
    assert agent_log == [
        ("started", "tpu-a"),
        ("failed", "tpu-a", "lost", False, 30.0, "tpu-a"),
        ("started", "tpu-b"),
        ("preempted", "tpu-b", "drained", False, 0.0, "tpu-b"),
        ("started", "tpu-a"),
        ("succeeded", "tpu-a"),
    ]


BUDGET = """\
  kubernetes: {team_namespaces: {a: team-a}}
  budgets:
    - {team: a, amount: 20, period: day, hold: true}
"""


@pytest.mark.slow
def test_the_agent_and_the_simulator_hold_a_team_over_its_budget_alike(checkout: Path, clock: ManualClock) -> None:
    """Team a's first run spends 4 chips x 2 h x 4.0 = 32.0 of a 20.0 daily budget that holds: both announce
    the crossing once, hold the second run (queued behind it) for the rest of the day, and start it when the
    next day begins, also after the agent restarts mid-day. Both virtual clocks start at midnight UTC, so
    their days line up."""
    text = fleet_text(("tpu-b",)) + BUDGET  # one 4-chip TPU pool: the second run queues behind the first
    # The agent, on a virtual clock.
    world = Live(checkout, clock, fleet=text)
    start = clock.now()
    first = world.submit("metadata.team=a")
    second = world.submit("metadata.team=a")
    world.tick()
    world.tick(7200)
    world.executor.exit(first, 1, 0)
    world.tick()
    held = {p["id"]: p.get("held") for q in world.client.queue()["queues"] for p in q["pending"]}
    world.agent.scheduler = None  # a restarted agent rebuilds its core: the store says what was spent and announced
    world.tick(3600)
    world.tick(86400 - 7200 - 3600 - 1)
    assert world.attempts(second) == [], "held until the day ends"
    world.tick(1)
    agent_log = decisions([e for e in world.store.events() if e.type is EventType.STARTED or e.type in ENDS])
    agent_budget = [e for e in world.store.events() if e.type is EventType.BUDGET_EXCEEDED]
    agent_second = next(e.ts for e in world.store.events(run=second) if e.type is EventType.STARTED) - start
    world.client.close()

    # The simulator, with the same fleet and jobs.
    path = checkout / "scenario-fleet.yaml"
    path.write_text(text)
    jobs = [
        SimJob(name, "pretraining", 4, work_s=7200.0, accelerators=("tpu",), prefer="tpu", team="a")
        for name in ("first", "second")
    ]
    # Cycles only when something happens (no 60 s rechecks), as the agent's ticks above: the crossing is
    # then seen at the same instant by both.
    sim = Simulation(load_fleet(path), jobs, record_events=True, quantum_s=0.0, recheck_s=0.0)
    sim.run()
    assert sim.events is not None
    sim_budget = [e for e in sim.events if e.type is EventType.BUDGET_EXCEEDED]
    sim_second = next(e.ts for e in sim.events if e.run == "second" and e.type is EventType.STARTED)

    assert agent_log == decisions([e for e in sim.events if e.ts <= 86400])
    assert agent_log == [("started", "tpu-a"), ("succeeded", "tpu-a"), ("started", "tpu-a")]
    assert agent_second == sim_second == 86400
    assert [(e.ts - start, e.data["spent"], e.data["period_end"] - start) for e in agent_budget] == [
        (7200, 32.0, 86400)
    ]
    assert [(e.ts, e.data["spent"], e.data["period_end"]) for e in sim_budget] == [(7200, 32.0, 86400)]
    assert held[second] == (
        "held: team a spent 32.00 of its 20.00 day budget (2026-01-01); "
        "admitted again when the period ends or the fleet's budget is raised"
    )


# --- every end rule, on the agent ---------------------------------------------------------------------


def running(live: Live, *sets: str) -> str:
    """A run submitted and admitted: attempt 1 runs on tpu-a."""
    run = live.submit(*sets)
    live.tick()
    assert live.attempts(run) == [(1, "tpu-a", "running")]
    return run


def end_data(live: Live, run: str) -> dict[str, Any]:
    return live.ends(run)[-1].data


@pytest.mark.parametrize(
    ("end", "retries", "cause", "attempt_state", "run_state", "backoff_s"),
    [
        pytest.param(lambda x, r: x.exit(r, 1, 0), "{max: 1}", "succeeded", "succeeded", "succeeded", None,
                     id="exit-0-succeeds"),
        pytest.param(lambda x, r: x.exit(r, 1, 75), "{max: 1}", "exit_tempfail", "failed", "queued", 30.0,
                     id="exit-75-retries-after-the-back-off"),
        pytest.param(lambda x, r: x.exit(r, 1, 3), "{max: 1, exit_codes: [3]}", "exit_listed", "failed", "queued",
                     30.0, id="a-listed-exit-code-retries"),
        pytest.param(lambda x, r: x.exit(r, 1, 3), "{max: 1}", "exit", "failed", "failed", None,
                     id="another-exit-code-fails-the-run"),
        pytest.param(lambda x, r: x.kill(r, 1), "{max: 1}", "signal", "failed", "queued", 30.0,
                     id="a-signal-crossrail-did-not-send-retries"),
        pytest.param(lambda x, r: x.lose(r, 1), "{max: 1}", "lost", "lost", "queued", 30.0,
                     id="a-lost-attempt-retries"),
        pytest.param(lambda x, r: x.vanish(r, 1), "{max: 1}", "lost", "lost", "queued", 30.0,
                     id="an-attempt-the-executor-forgot-is-lost"),
        pytest.param(lambda x, r: x.exit(r, 1, 75), "{max: 0}", "exit_tempfail", "failed", "failed", None,
                     id="no-retries-left-fails-the-run"),
        pytest.param(lambda x, r: x.stop(r, 1, 0.0, "preempted"), "{max: 0}", "preempted", "preempted", "queued",
                     0.0, id="a-preemption-requeues-at-once-without-spending-a-retry"),
        pytest.param(lambda x, r: x.stop(r, 1, 0.0, "drained"), "{max: 0}", "drained", "preempted", "queued",
                     0.0, id="a-drain-requeues-at-once-without-spending-a-retry"),
        pytest.param(lambda x, r: x.exit(r, 1, 75), "{max: 1, backoff: {initial: 2m}}", "exit_tempfail", "failed",
                     "queued", 120.0, id="the-spec-sets-the-back-off"),
    ],
)  # fmt: skip
@pytest.mark.slow
def test_each_end_rule_decides_the_runs_next_state_its_retry_and_its_back_off(
    live: Live,
    end: Any,
    retries: str,
    cause: str,
    attempt_state: str,
    run_state: str,
    backoff_s: float | None,
) -> None:
    run = running(live, f"spec.retries={retries}")
    live.tick(60)
    end(live.executor, run)
    live.tick()
    assert live.attempts(run)[0] == (1, "tpu-a", attempt_state)
    assert live.store.attempts(run)[0].end_reason == cause  # the typed reason, kept on the attempt
    data = end_data(live, run)
    assert data["cause"] == cause
    assert data.get("backoff_s") == backoff_s
    if run_state != "queued":
        assert live.state(run) == run_state
        return
    if backoff_s:  # nothing is offered before the back-off ends; then the retry avoids tpu-a
        assert live.state(run) == "queued"
        live.tick(backoff_s - 1)
        assert len(live.attempts(run)) == 1
        live.tick(1)
    assert live.attempts(run)[1] == (2, "tpu-b", "running")  # with no back-off, in the pass that ended it


@pytest.mark.slow
def test_back_off_doubles_with_each_failure_up_to_its_max(live: Live) -> None:
    run = running(live, "spec.retries={max: 5, backoff: {initial: 10s, factor: 3, max: 60s}}")
    waits = []
    for number in (1, 2, 3, 4):
        live.tick(5)
        live.executor.exit(run, number, 75)
        live.tick()
        waits.append(end_data(live, run)["backoff_s"])
        live.tick(waits[-1])
        assert len(live.attempts(run)) == number + 1
    assert waits == [10.0, 30.0, 60.0, 60.0]


@pytest.mark.slow
def test_cancel_and_suspend_stop_the_attempt_and_end_it_as_asked(live: Live) -> None:
    cancelled, suspended = running(live), live.submit()
    live.client.cancel(cancelled)
    live.tick()  # the agent stops the attempt
    live.tick()  # and records its end
    assert live.attempts(cancelled) == [(1, "tpu-a", "cancelled")]
    assert live.executor.stops == [(cancelled, 1, "cancelled")]
    assert live.state(cancelled) == "cancelled"
    assert live.attempts(suspended) == [(1, "tpu-b", "running")]
    live.client.suspend(suspended)
    live.tick()
    live.tick()
    assert live.attempts(suspended) == [(1, "tpu-b", "suspended")]
    assert live.state(suspended) == "suspended"


def test_a_launch_the_executor_refuses_is_lost_and_retried(live: Live, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(_request: Any) -> Any:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(live.executor, "launch", broken)
    run = live.submit("spec.retries={max: 1}")
    live.tick()
    assert live.attempts(run) == [(1, "tpu-a", "lost")]
    data = end_data(live, run)
    assert (data["cause"], data["backoff_s"], data["avoid_pool"]) == ("launch_failed", 30.0, "tpu-a")
    assert "could not be launched" in data["reason"]


def test_a_number_the_executor_already_used_is_offered_again_at_once(
    live: Live, monkeypatch: pytest.MonkeyPatch
) -> None:
    from crossrail.errors import ConflictError

    launch = live.executor.launch

    def stale(request: Any) -> Any:
        if request.attempt == 1:
            raise ConflictError("attempt 1 was forgotten; launch it under a new number")
        return launch(request)

    monkeypatch.setattr(live.executor, "launch", stale)
    run = live.submit("spec.retries={max: 0}")
    live.tick()
    live.tick()
    assert live.attempts(run) == [(1, "tpu-a", "unplaced"), (2, "tpu-a", "running")]  # no retry spent, no wait
    assert live.store.attempts(run)[0].end_reason == "stale_number"


@pytest.mark.slow
def test_an_attempt_its_engine_could_not_place_backs_off_and_doubles_while_it_keeps_failing(live: Live) -> None:
    run = running(live, "spec.retries={max: 0}")
    for number, wait in ((1, 30.0), (2, 60.0)):
        status = live.executor.attempts[(run, number)]
        live.executor.attempts[(run, number)] = status.__class__(run, number, "unplaced", detail="no room")
        live.tick()
        assert (end_data(live, run)["cause"], end_data(live, run)["backoff_s"]) == ("unplaced", wait)
        live.tick(wait)
    assert [a[2] for a in live.attempts(run)] == ["unplaced", "unplaced", "running"]


@pytest.mark.slow
def test_the_heartbeat_timeout_ends_a_silent_attempt_where_the_executor_cannot_see_processes(
    checkout: Path, clock: ManualClock
) -> None:
    blind = Live(checkout, clock, sees_processes=False)
    try:
        run = running(blind, "spec.retries={max: 1}")
        blind.tick(59)
        assert blind.attempts(run) == [(1, "tpu-a", "running")]
        blind.tick(2)
        assert blind.attempts(run)[0] == (1, "tpu-a", "lost")
        assert blind.executor.stops == [(run, 1, "preempted")]  # what is left of it is stopped
        data = end_data(blind, run)
        assert (data["cause"], data["reason"]) == ("heartbeat_lost", "lost: no heartbeat for 1m01s")
    finally:
        blind.client.close()


@pytest.mark.slow
def test_an_executor_that_sees_processes_applies_no_heartbeat_timeout(live: Live) -> None:
    run = running(live)
    live.tick(3600)
    assert live.attempts(run) == [(1, "tpu-a", "running")]


@pytest.mark.slow
def test_work_waiting_in_its_engines_queue_moves_off_a_drained_pool_without_a_back_off(
    checkout: Path, clock: ManualClock
) -> None:
    kueue = Live(checkout, clock, can_withdraw=True, queued=True)
    try:
        run = kueue.submit("spec.retries={max: 0}")
        kueue.tick()
        assert kueue.attempts(run) == [(1, "tpu-a", "starting")]  # launched; the engine holds it in its queue
        kueue.drain("tpu-a")
        kueue.tick(10)
        assert kueue.attempts(run) == [(1, "tpu-a", "unplaced"), (2, "tpu-b", "starting")]
        assert kueue.store.attempts(run)[0].end_reason == "replaced"
        moved = kueue.store.events(run=run, types=["replaced"])
        assert [e.data["from"] for e in moved] == ["tpu-a"]
    finally:
        kueue.client.close()


@pytest.mark.slow
def test_an_executor_that_cannot_withdraw_keeps_its_queued_work_where_it_is(checkout: Path, clock: ManualClock) -> None:
    ray = Live(checkout, clock, can_withdraw=False, queued=True)
    try:
        run = ray.submit()
        ray.tick()
        ray.drain("tpu-a")
        ray.tick(10)
        assert ray.attempts(run) == [(1, "tpu-a", "starting")]
    finally:
        ray.client.close()


def test_a_simulated_job_out_of_retries_fails_and_the_simulation_ends(tmp_path: Path) -> None:
    path = tmp_path / "fleet.yaml"
    path.write_text(fleet_text())
    job = SimJob("job", "pretraining", 4, work_s=1000.0, accelerators=("tpu",), prefer="tpu")
    sim = Simulation(load_fleet(path), [job], retries=RetryPolicy(max=1), record_events=True, quantum_s=0.0)
    sim.engine.schedule(10.0, lambda: sim.executor.interrupt("job"))
    sim.engine.schedule(300.0, lambda: sim.executor.interrupt("job"))
    result = sim.run()
    assert result.runs["job"].outcome == "failed"
    assert sim.events is not None
    failed = [e.data for e in sim.events if e.type is EventType.FAILED]
    assert [(d["pool"], d["final"]) for d in failed] == [("tpu-a", False), ("tpu-b", True)]


# --- a crash at each step of an end and its retry ------------------------------------------------------


class Crash(BaseException):
    """The agent dies here (SIGKILL): nothing after this line of the pass runs."""


@pytest.mark.parametrize("dies_at", ["forget", "launch"])
@pytest.mark.slow
def test_an_agent_killed_between_an_end_and_its_retry_records_the_real_cause_once_and_no_overlap(
    live: Live, monkeypatch: pytest.MonkeyPatch, dies_at: str
) -> None:
    run = running(live, "spec.retries={max: 2, backoff: {initial: 0s}}")
    live.tick(60)
    live.executor.kill(run, 1, signal=9)
    forget, launch = live.executor.forget, live.executor.launch
    seen: list[tuple[str, str, str]] = []

    def forget_then_die(r: str, n: int) -> None:
        # The store holds the end, with its cause, before the executor's record of it goes.
        seen.append(("forget", live.store.attempts(r)[0].state, str(live.store.attempts(r)[0].end_reason)))
        if dies_at == "forget":
            raise Crash
        forget(r, n)

    def launch_then_die(request: Any) -> Any:
        first = live.store.attempts(request.run)[0]
        seen.append(("launch", first.state, "forgotten" if (run, 1) not in live.executor.attempts else "kept"))
        if dies_at == "launch":
            raise Crash
        return launch(request)

    monkeypatch.setattr(live.executor, "forget", forget_then_die)
    monkeypatch.setattr(live.executor, "launch", launch_then_die)
    with pytest.raises(Crash):
        live.tick()
    monkeypatch.setattr(live.executor, "forget", forget)
    monkeypatch.setattr(live.executor, "launch", launch)
    assert seen[0] == ("forget", "failed", "signal")
    if dies_at == "launch":
        assert seen[-1] == ("launch", "failed", "forgotten")

    restarted = Agent(live.client.service, live.executor, live.agent.reports_dir, live.agent.config)
    restarted.fleet_path = live.fleet_path
    live.clock.advance(1)
    restarted.reconcile()
    restarted.reconcile()

    first, second = live.store.attempts(run)
    # killed by signal 9, not "lost: the executor has no record of it"
    assert (first.state, first.end_reason, first.stopped_by, first.signal) == ("failed", "signal", None, 9)
    assert (second.number, second.state) == (2, "running")
    assert first.ended_at is not None
    assert second.started_at is not None
    assert first.ended_at <= second.started_at  # the two attempts never overlap in the record
    assert [e.data["cause"] for e in live.ends(run)] == ["signal"]
    assert [a["end_reason"] for a in live.client.show(run)["attempts"]] == ["signal", None]
    assert [(r.run, r.attempt) for r in live.executor.launched] == [(run, 1), (run, 2)]  # each launched once
    assert (run, 1) not in live.executor.attempts
