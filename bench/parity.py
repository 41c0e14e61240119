"""The same workload through the live agent and through the simulator, for every policy: do they decide alike?

One generated workload (mixed stages and sizes, TPU-only, GPU-only and any-accelerator runs, two teams and
two priorities, arrivals spread over a few minutes), with a scripted failure (the third job's attempt is
lost at FAIL_AT), a drain (tpu-b at DRAIN_AT, whose policy preempts), a team budget that holds (team b,
crossed early, so b's later runs wait for the next UTC day) and one pipeline (a learner and a sampler part,
admitted together; the sampler is cancelled when the learner ends the pipeline).

Live: a fresh workspace per policy, the agent (crossrail.control.agent) over a virtual executor on a manual
clock. An attempt runs its remaining work at the pool's relative speed and ends with exit 0; a stop ends it
at once, keeping its work (free continuous checkpoints, the simulator's default). The agent reconciles at
each instant something can happen (an arrival, a scripted event, an attempt's end, a back-off's end, a round
boundary while something runs, the next budget day), pass after pass until a pass changes nothing (the
simulator, too, settles an instant before time moves on).
Simulated: `Simulation` with the same fleet, jobs, retry policy, scripted failure and drain, and the live
workspace's placement policy (so it places as the agent does, sim/placing.py), cycling at every event.

The decision traces compared, each entry (seconds from the start, kind, run, ...):
  admit   the run (or part) got chips: pool and chips (the live `admitted`, the simulator's `started`)
  preempt an attempt was stopped for another run, a round or a drain: pool and cause
  end     an attempt ended: pool and cause (succeeded, lost, cancelled; final or retried)
  retry   the run goes again: its cause
  resize  a running attempt's chips changed
  budget  a team crossed its budget this period
Traces are compared as multisets: a mismatch is an entry one driver has and the other has not (so one
decision made at another time or on another pool counts twice). The pipeline's mismatches are also counted
apart (`pipeline=`): the simulator runs it as an Experiment with `spec.parts`, whose learner ends it.

    python bench/parity.py                          # every registered policy, 12 jobs
    python bench/parity.py --jobs 6 --policies fifo,priority
    python bench/parity.py --gpu-speed 0.5          # GPU pools at half speed: rates for the hetero policies

The last line: SUMMARY parity policies=N decisions=D mismatches=M (D: entries of both traces, all policies).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import random
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from crossrail.client import Client
from crossrail.control.agent.loop import Agent, AgentConfig
from crossrail.control.attempts import history
from crossrail.core import EventType, ManualClock
from crossrail.core.attempts import AttemptStatus, Capabilities, LaunchRequest, StopReason
from crossrail.scheduling import decisions
from crossrail.scheduling.decisions import RetryPolicy
from crossrail.scheduling.policies import POLICY_NAMES
from crossrail.scheduling.types import PartRequest
from crossrail.sim.checkpointing import CheckpointModel
from crossrail.sim.simulation import Simulation
from crossrail.sim.workload import SimJob
from crossrail.spec import Fleet, PlacementPolicy, load_fleet
from crossrail.spec.validate import load_policy

TICK_S = 10.0
"""Every arrival and scripted time is a multiple of it, and the live side steps by it when nothing else is
due; otherwise its clock goes to the next instant something can happen, exactly (an attempt's end at a pool's
half speed included), where the simulator's event falls."""
ROUND_S = 120.0
DAY_S = 86_400.0
FAIL_AT, DRAIN_AT = 300.0, 600.0
PIPELINE = "rl"
POOLS = {
    "tpu-a": ("tpu", "tpu-v5p", 8, 4, 4.0),
    "tpu-b": ("tpu", "tpu-v5p", 8, 4, 4.2),
    "h100": ("gpu", "h100", 8, 8, 3.0),
}
RL_POOLS = {"rl-tpu": ("tpu", "tpu-v5p", 4, 4, 4.0), "rl-gpu": ("gpu", "h100", 4, 4, 3.0)}
SPEED = {"tpu-v5p": 1.0, "h100": 1.0}
"""Relative speed by chip type (`--gpu-speed` sets h100's): below 1 the heterogeneity-aware policies have rates
to weigh (live: from the placement estimates; simulated: the pools' speeds)."""
"""The pipeline's own pools (only its queue has quota there), so its parts take no chips the jobs compete for;
its team is its own, so it weighs on no job's fair share either. They are not time-sliced, so no round weighs
them either."""
STAGES = ("pretraining", "post_training", "eval", "experiment")
RETRIES = {"max": 2}
IMAGE = "ghcr.io/crossrail/workloads@sha256:" + "3f1c5e0a9b7d2c4e" * 4

Entry = tuple[Any, ...]


# --- the workload ----------------------------------------------------------------------------------------


def fleet_text(policy: str, *, drained: bool = False) -> str:
    pools = "\n".join(
        f"    - {{name: {name}, accelerator: {acc}, chip_type: {chip}, chips: {chips}, chips_per_host: {per},"
        f" cost_per_chip_hour: {cost}, relative_speed: {SPEED[chip]}, time_sliced: {str(name in POOLS).lower()},"
        f" drained: {str(drained and name == 'tpu-b').lower()}}}"
        for name, (acc, chip, chips, per, cost) in (POOLS | RL_POOLS).items()
    )
    quota = "{" + ", ".join(f"{name}: {chips}" for name, (_, _, chips, _, _) in POOLS.items()) + "}"
    queues = "\n".join(f"    - {{name: {s.replace('_', '-')}, stage: {s}, quota: {quota}}}" for s in STAGES)
    rl_quota = "{" + ", ".join(f"{name}: {chips}" for name, (_, _, chips, _, _) in RL_POOLS.items()) + "}"
    rl = f"    - {{name: rl, stage: reinforcement_learning, quota: {rl_quota}}}"
    return f"""\
apiVersion: crossrail/v1
kind: Fleet
metadata: {{name: parity}}
spec:
  preemption: {{on_drain: preempt}}
  scheduling: {{policy: {policy}, round: {int(ROUND_S)}}}
  pools:
{pools}
  queues:
{queues}
{rl}
  kubernetes: {{team_namespaces: {{a: team-a, b: team-b, rl: team-rl}}}}
  budgets:
    - {{team: b, amount: 1.0, period: day, hold: true}}
"""


def jobs(n: int, seed: int) -> list[SimJob]:
    """`n` jobs: every time and run time a multiple of TICK_S at speed 1 (and at 1/2: see `--gpu-speed`)."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        accelerators = [("tpu",), ("gpu",), None][i % 3]
        chips = rng.choice((4, 8)) if accelerators != ("gpu",) else rng.choice((2, 4, 8))
        prefer = accelerators[0] if accelerators else "any"
        out.append(
            SimJob(
                name=f"j{i:02d}",
                stage=STAGES[i % len(STAGES)],
                chips=chips,
                work_s=60.0 * rng.randint(2, 15),
                submit_s=TICK_S * rng.randint(0, 60),
                team="ab"[i % 2],
                priority=rng.choice(("normal", "normal", "high")),
                accelerators=accelerators,
                prefer=prefer,
            )
        )
    return out


# --- the live side ----------------------------------------------------------------------------------------


@dataclass
class Running:
    work_s: float
    rate: float
    started_at: float
    status: AttemptStatus


@dataclass
class VirtualExecutor:
    """The Executor protocol on a manual clock: an attempt runs its job's remaining work at its pool's speed."""

    clock: ManualClock
    work_s: dict[str, float]
    """Run -> work at speed 1 (a pipeline's parts: `run/part`)."""
    speed: dict[str, float]
    capabilities: Capabilities = field(default_factory=lambda: Capabilities(("local",), sees_processes=True))
    attempts: dict[tuple[str, int], AttemptStatus] = field(default_factory=dict)
    live: dict[tuple[str, int], Running] = field(default_factory=dict)
    done: dict[str, float] = field(default_factory=dict)
    """Work each run (or part) has kept so far: continuous free checkpoints, as the simulator's default."""
    parts: dict[tuple[str, int], str] = field(default_factory=dict)

    def key(self, run: str, attempt: int) -> str:
        part = self.parts.get((run, attempt))
        return run if part is None else f"{run}/{part}"

    def launch(self, request: LaunchRequest) -> AttemptStatus:
        key = (request.run, request.attempt)
        if key not in self.attempts:
            now = self.clock.now()
            part = request.env.get("CROSSRAIL_PART")
            if part:
                self.parts[key] = part
            status = AttemptStatus(request.run, request.attempt, "running", started_at=now)
            self.attempts[key] = status
            self.live[key] = Running(self.work_s[self.key(*key)], self.speed[request.pool], now, status)
        return self.attempts[key]

    def observe(self) -> list[AttemptStatus]:
        return list(self.attempts.values())

    def stop(self, run: str, attempt: int, grace_s: float, reason: StopReason) -> None:
        if (run, attempt) in self.live:
            self._end(run, attempt, signal=15, stopped_by=reason)

    def resize(self, run: str, attempt: int, chips: int) -> bool:
        return False

    def logs(self, run: str, attempt: int) -> str:
        return ""

    def withdraw(self, run: str, attempt: int) -> bool:
        return False

    def forget(self, run: str, attempt: int) -> None:
        self.attempts.pop((run, attempt), None)

    # --- what happens on the clock ---------------------------------------------------------------

    def ends_at(self, run: str, attempt: int) -> float:
        att = self.live[(run, attempt)]
        left = att.work_s - self.done.get(self.key(run, attempt), 0.0)
        return att.started_at + max(left, 0.0) / att.rate

    def next_end(self) -> float | None:
        return min((self.ends_at(*key) for key in self.live), default=None)

    def finish_due(self) -> None:
        now = self.clock.now()
        for key in [k for k in self.live if self.ends_at(*k) <= now]:
            self._end(*key, exit_code=0)

    def lose(self, run: str) -> bool:
        key = next((k for k in self.live if k[0] == run and k not in self.parts), None)
        if key is None:
            return False
        self._keep(key)
        del self.live[key]
        status = self.attempts[key]
        self.attempts[key] = replace(status, phase="lost", ended_at=self.clock.now(), detail="host gone")
        return True

    def _keep(self, key: tuple[str, int]) -> None:
        att, name = self.live[key], self.key(*key)
        self.done[name] = min(self.done.get(name, 0.0) + (self.clock.now() - att.started_at) * att.rate, att.work_s)

    def _end(self, run: str, attempt: int, **how: Any) -> None:
        key = (run, attempt)
        self._keep(key)
        del self.live[key]
        self.attempts[key] = replace(self.attempts[key], phase="exited", ended_at=self.clock.now(), **how)


def _git(root: Path) -> None:
    env = {**os.environ, "GIT_AUTHOR_NAME": "parity", "GIT_AUTHOR_EMAIL": "parity@example.com"}
    env |= {"GIT_COMMITTER_NAME": "parity", "GIT_COMMITTER_EMAIL": "parity@example.com"}
    (root / "train.py").write_text("print('train')\n")
    for cmd in (["git", "init", "-q"], ["git", "add", "train.py"], ["git", "commit", "-qm", "c"]):
        subprocess.run(cmd, cwd=root, env=env, check=True)


def _experiment(job: SimJob, root: Path) -> str:
    acc = ""
    if job.accelerators is not None:
        acc = f"  accelerators: {{prefer: {job.prefer}, allow: [{', '.join(job.accelerators)}]}}\n"
    return f"""\
apiVersion: crossrail/v1
kind: Experiment
metadata: {{name: {job.name}, team: {job.team}, owner: ada@example.com}}
spec:
  stage: {job.stage}
  image: {IMAGE}
  command: [python, train.py]
  args: [--job, {job.name}]
  code: {{repo: https://github.com/acme/trainer, commit: auto}}
  dataset: {{uri: "file://{root}/.crossrail/data/corpus.txt"}}
  checkpoint: {{dir: "file://{root}/checkpoints/{job.name}", format: crossrail-ckpt/v1, every: 2m}}
  resources: {{chips: {job.chips}, duration: {int(job.declared_s)}s}}
{acc}  retries: {{max: {RETRIES["max"]}}}
  priority: {job.priority}
"""


PIPELINE_PARTS = {"learner": (4, "gpu", 600.0), "sampler": (4, "tpu", 6000.0)}
PIPELINE_AT = 120.0


def _pipeline(root: Path) -> str:
    parts = "\n".join(f"    {n}: {{chips: {c}, prefer: {acc}}}" for n, (c, acc, _) in PIPELINE_PARTS.items())
    chips = sum(c for c, _, _ in PIPELINE_PARTS.values())
    return f"""\
apiVersion: crossrail/v1
kind: Experiment
metadata: {{name: {PIPELINE}, team: rl, owner: ada@example.com}}
spec:
  stage: reinforcement_learning
  image: {IMAGE}
  command: [python, train.py]
  code: {{repo: https://github.com/acme/trainer, commit: auto}}
  dataset: {{uri: "file://{root}/.crossrail/data/corpus.txt"}}
  checkpoint: {{dir: "file://{root}/checkpoints/{PIPELINE}", format: crossrail-ckpt/v1, every: 2m}}
  resources: {{chips: {chips}, duration: 10m}}
  parts:
{parts}
  retries: {{max: {RETRIES["max"]}}}
"""


@contextlib.contextmanager
def workspace(policy: str) -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix=f"parity-{policy}-") as tmp:
        root = Path(tmp)
        _git(root)
        with contextlib.redirect_stdout(io.StringIO()):
            Client.init(root)
        (root / ".crossrail" / "fleet.yaml").write_text(fleet_text(policy))
        yield root


def live_trace(policy: str, work: list[SimJob], *, pipeline: bool) -> tuple[list[Entry], PlacementPolicy]:
    """The live agent's trace, and the placement policy of its workspace (the simulator places by it too)."""
    with workspace(policy) as root:
        return Live(root, policy, work, pipeline=pipeline).run(), load_policy(root / ".crossrail" / "policy.yaml")


class Live:
    def __init__(self, root: Path, policy: str, work: list[SimJob], *, pipeline: bool) -> None:
        self.root, self.policy, self.work = root, policy, sorted(work, key=lambda j: (j.submit_s, j.name))
        self.clock = ManualClock()
        self.start = self.clock.now()
        self.client = Client(cwd=root, clock=self.clock)
        self.store = self.client.service.store
        speeds = {name: SPEED[chip] for name, (_, chip, *_) in (POOLS | RL_POOLS).items()}
        self.names: dict[str, str] = {}
        """Live run id -> job name."""
        self.executor = VirtualExecutor(self.clock, {}, speeds)
        config = AgentConfig(fallback_wait_s=0.0, heartbeat_timeout_s=3600.0)
        self.agent = Agent(self.client.service, self.executor, root / ".crossrail" / "reports", config)
        self.fleet_path = self.agent.fleet_path = root / ".crossrail" / "fleet.yaml"
        self.pipeline = pipeline
        self.script: list[tuple[float, str]] = [(FAIL_AT, "fail"), (DRAIN_AT, "drain")]
        if pipeline:
            self.script.append((PIPELINE_AT, "pipeline"))
        self.script.sort()

    def at(self) -> float:
        return self.clock.now() - self.start

    def submit(self, job: SimJob) -> None:
        path = self.root / f"{job.name}.yaml"
        path.write_text(_experiment(job, self.root))
        run = str(self.client.submit(path)["run"]["id"])
        self.names[run] = job.name
        self.executor.work_s[run] = job.work_s

    def scripted(self, what: str) -> None:
        if what == "fail":
            victim = self.work[2].name
            run = next((r for r, n in self.names.items() if n == victim), None)
            if run is not None:
                self.executor.lose(run)
        elif what == "drain":
            self.fleet_path.write_text(fleet_text(self.policy, drained=True))
        else:
            path = self.root / f"{PIPELINE}.yaml"
            path.write_text(_pipeline(self.root))
            run = str(self.client.submit(path)["run"]["id"])
            self.names[run] = PIPELINE
            for part, (_, _, work_s) in PIPELINE_PARTS.items():
                self.executor.work_s[f"{run}/{part}"] = work_s

    def run(self, horizon_s: float = 3 * DAY_S) -> list[Entry]:
        arrivals = list(self.work)
        try:
            while self.at() <= horizon_s:
                now = self.at()
                while arrivals and arrivals[0].submit_s <= now:
                    self.submit(arrivals.pop(0))
                while self.script and self.script[0][0] <= now:
                    self.scripted(self.script.pop(0)[1])
                self.executor.finish_due()
                self.settle()
                if not arrivals and not self.script and not self._open():
                    break
                self.clock.set(self.start + self._next(arrivals))
            return self.trace()
        finally:
            self.client.close()

    def settle(self) -> None:
        """Passes at this instant until one changes nothing (at most a few)."""
        for _ in range(6):
            before = (len(self.executor.live), len(self.executor.attempts))
            tick = self.agent.reconcile()
            if not (tick.admitted or tick.ended) and before == (len(self.executor.live), len(self.executor.attempts)):
                return

    def _open(self) -> bool:
        return any(r.state not in ("succeeded", "failed", "cancelled") for r in self.store.list_runs())

    def _next(self, arrivals: list[SimJob]) -> float:
        """The next time something can happen (the simulator, too, cycles only when something happens): an
        arrival, a scripted event, an attempt's end, a queued run's back-off ending, a round boundary, the next
        budget day."""
        now = self.at()
        known = [j.submit_s for j in arrivals[:1]] + [t for t, _ in self.script[:1]]
        end = self.executor.next_end()
        if end is not None:
            known.append(end - self.start)
        queued = self.store.list_runs(states=["queued"])
        for run in queued:
            retries = RetryPolicy.from_spec(run.spec.get("spec", {}).get("retries"))
            offer = decisions.next_offer(history(self.store.attempts(run.id)), retries)
            if offer.not_before is not None and offer.not_before - self.start > now:
                known.append(offer.not_before - self.start)
        if queued:
            known.append((now // DAY_S + 1) * DAY_S)
        rounds = self.agent.scheduler.rounds if self.agent.scheduler is not None else None
        if rounds is not None and rounds.next_at is not None and (queued or self.executor.live):
            known.append(rounds.next_at - self.start)  # a round boundary, while anything waits or runs
        at = min(known, default=now + TICK_S)
        return at if at > now else now + TICK_S  # the instant itself, as the simulator's event falls on it

    def trace(self) -> list[Entry]:
        out: list[Entry] = []
        names = self.names
        for e in self.store.events():
            t, run, d = round(e.ts - self.start, 3), names.get(e.run or "", e.run), e.data
            who = run if d.get("part") is None else f"{run}/{d['part']}"
            if e.type is EventType.ADMITTED:
                out.append((t, "admit", who, d["pool"], d["chips"]))
            elif e.type is EventType.PREEMPTED:
                out.append((t, "preempt", who, d["pool"], d["cause"]))
            elif e.type in (EventType.FAILED, EventType.SUCCEEDED):
                out.append((t, "end", who, d["pool"], d.get("cause", "succeeded")))
            elif e.type is EventType.RETRIED:
                out.append((t, "retry", who, d["cause"]))
            elif e.type is EventType.RESIZED:
                out.append((t, "resize", who, d.get("chips_after", d.get("new"))))
            elif e.type is EventType.BUDGET_EXCEEDED:
                out.append((t, "budget", d.get("team")))
        for run_id, name in names.items():  # a cancelled attempt records no end event: its run's state says it
            for a in self.store.attempts(run_id):
                if a.state == "cancelled" and a.ended_at is not None:
                    who = name if a.part is None else f"{name}/{a.part}"
                    out.append((round(a.ended_at - self.start, 3), "end", who, a.pool, "cancelled"))
        return sorted(out, key=str)


# --- the simulated side -----------------------------------------------------------------------------------


def pipeline_job() -> SimJob:
    """The pipeline as the simulator takes it: the live one's parts, each with its work; the learner ends it."""
    parts = tuple(PartRequest(name, chips, prefer=acc) for name, (chips, acc, _) in PIPELINE_PARTS.items())
    return SimJob(
        name=PIPELINE,
        stage="reinforcement_learning",
        chips=sum(p.chips for p in parts),
        work_s=PIPELINE_PARTS["learner"][2],
        submit_s=PIPELINE_AT,
        team="rl",
        estimate_s=600.0,
        retries=RetryPolicy.from_spec(RETRIES),
        parts=parts,
        part_work_s={name: work_s for name, (_, _, work_s) in PIPELINE_PARTS.items()},
    )


def sim_trace(
    policy: str, fleet: Fleet, work: list[SimJob], placement: PlacementPolicy | None = None, *, pipeline: bool = True
) -> list[Entry]:
    sim = Simulation(
        fleet,
        [*work, pipeline_job()] if pipeline else work,
        policy=policy,
        checkpoint=CheckpointModel(),
        retries=RetryPolicy.from_spec(RETRIES),
        record_events=True,
        quantum_s=0.0,
        recheck_s=0.0,
        fallback_wait_s=0.0,
        placement=placement,
    )
    victim = sorted(work, key=lambda j: (j.submit_s, j.name))[2].name
    sim.engine.schedule(FAIL_AT, lambda: sim.executor.interrupt(victim))

    def drain() -> None:
        sim.sched.drain("tpu-b", preempt=True)
        sim.demand_changed()

    sim.engine.schedule(DRAIN_AT, drain)
    sim.run(until_s=3 * DAY_S)
    while sim.engine.peek() <= sim.engine.now():  # the last instant settled, as the agent's last pass is
        sim.engine.step()
    assert sim.events is not None
    out: list[Entry] = []
    for e in sim.events:
        t, d = round(e.ts, 3), e.data
        who = e.run if d.get("part") is None else f"{e.run}/{d['part']}"
        if e.type is EventType.STARTED:
            out.append((t, "admit", who, d["pool"], d["chips"]))
        elif e.type is EventType.PREEMPTED:
            out.append((t, "preempt", who, d["pool"], d["cause"]))
        elif e.type in (EventType.FAILED, EventType.SUCCEEDED):
            out.append((t, "end", who, d["pool"], d.get("cause", "succeeded")))
        elif e.type is EventType.RETRIED:
            out.append((t, "retry", who, d["cause"]))
        elif e.type is EventType.RESIZED:
            out.append((t, "resize", who, d.get("chips_after", d.get("new"))))
        elif e.type is EventType.BUDGET_EXCEEDED:
            out.append((t, "budget", d.get("team")))
    for at, run, _, part, pool in sim.cancelled:  # parts stopped when their pipeline ended, as live records them
        out.append((round(at, 3), "end", f"{run}/{part}", pool, "cancelled"))
    return sorted(out, key=str)


# --- comparing --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Compared:
    policy: str
    decisions: int
    mismatches: int
    pipeline: int
    """Mismatches among the pipeline's decisions."""
    only_live: list[Entry]
    only_sim: list[Entry]

    @property
    def outside_pipeline(self) -> int:
        return self.mismatches - self.pipeline


def compare(policy: str, live: list[Entry], sim: list[Entry]) -> Compared:
    a, b = Counter(live), Counter(sim)
    only_live, only_sim = sorted((a - b).elements(), key=str), sorted((b - a).elements(), key=str)
    pipeline = sum(1 for e in [*only_live, *only_sim] if _is_pipeline(e))
    return Compared(policy, len(live) + len(sim), len(only_live) + len(only_sim), pipeline, only_live, only_sim)


def _is_pipeline(entry: Entry) -> bool:
    return len(entry) > 2 and str(entry[2]).split("/")[0] == PIPELINE


def run_policy(policy: str, work: list[SimJob], fleet_dir: Path, *, pipeline: bool = True) -> Compared:
    path = fleet_dir / f"fleet-{policy}.yaml"
    path.write_text(fleet_text(policy))
    live, placement = live_trace(policy, work, pipeline=pipeline)
    sim = sim_trace(policy, load_fleet(path), work, placement, pipeline=pipeline)
    return compare(policy, live, sim)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=12)
    parser.add_argument("--seed", type=int, default=34)
    parser.add_argument("--policies", default="all", help="comma-separated, or all (every registered policy)")
    parser.add_argument("--show", type=int, default=4, help="mismatching entries shown per policy and side")
    parser.add_argument("--gpu-speed", type=float, default=1.0, help="the h100 pools' relative speed (e.g. 0.5)")
    args = parser.parse_args(argv)
    if not 0 < args.gpu_speed <= 1:
        parser.error(f"--gpu-speed must be in (0, 1] (got {args.gpu_speed})")
    SPEED["h100"] = args.gpu_speed
    names = list(POLICY_NAMES) if args.policies == "all" else args.policies.split(",")
    work = jobs(args.jobs, args.seed)
    total_d = total_m = 0
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="parity-fleets-") as tmp:
        for name in names:
            got = run_policy(name, work, Path(tmp))
            total_d += got.decisions
            total_m += got.mismatches
            print(
                f"{name:<24} decisions={got.decisions:<4} mismatches={got.mismatches:<4} "
                f"outside_pipeline={got.outside_pipeline:<4} pipeline={got.pipeline}"
            )
            for side, entries in (("live only", got.only_live), ("sim only ", got.only_sim)):
                for entry in [e for e in entries if not _is_pipeline(e)][: args.show]:
                    print(f"    {side}: {entry}")
    print(f"# {len(work)} jobs + 1 pipeline, {time.perf_counter() - started:.1f} s", file=sys.stderr)
    print(f"SUMMARY parity policies={len(names)} decisions={total_d} mismatches={total_m}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
