"""Chaos in one run: agent SIGKILLs, training-process kills, kills mid-save and fuzzed submissions, then an audit.

    python bench/chaos.py [--runs 8] [--steps 600] [--agent-kills 40] [--training-kills 4] [--save-kills 4]
                          [--fuzz 80] [--seconds 300] [--seed 7] [--keep]

In a fresh workspace (a git checkout of its own) the bigram workload is submitted as several runs through
`crossrail submit`, the same idempotency key twice. Agents are started and SIGKILLed at random moments while
the runs train; now and then a training process is SIGKILLed, and some of those kills land while it is
writing a checkpoint (its `.tmp-step-*` directory is there, and still there after the kill). Fuzzed
submissions (random `--set` overrides: wrong types, hostile paths, YAML debris, unknown keys) go in through
the CLI and the client between kills. Then one agent runs until idle and the audit computes, from the store,
the checkpoint directories and every log:

- lost: acknowledged runs missing from the store, events seen during the chaos missing or changed after it,
  and runs of the plan that did not succeed with their last step checkpointed;
- duplicated: a second run for one idempotency key, attempts numbered with gaps, an attempt started twice,
  two attempts of a run at once, a training step recorded twice in an attempt, or an attempt training a
  step at or before the checkpoint it resumed from;
- wrong_resume: an attempt that resumed from a checkpoint outside its run's own directory, from one whose
  manifest names another run, from an older step than an earlier attempt had checkpointed, or from nothing
  although an earlier attempt had checkpointed;
- hangs: a CLI command, a client submit or the final agent that ran past its deadline, or an agent that
  did not die when killed;
- tracebacks: 'Traceback' in any CLI stderr, agent log, supervisor log or training log, or an exception
  other than a crossrail error out of a client submit.

The last line is `SUMMARY kills=N lost=L duplicated=D wrong_resume=W hangs=H tracebacks=T`.
tests/integration/test_chaos.py runs a reduced plan of the same code.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from crossrail.client import Client
from crossrail.errors import CrossrailError
from crossrail.runtime import read_manifest
from crossrail.runtime.storage import local_path

CLI_DEADLINE_S = 60.0
SUBMIT_DEADLINE_S = 30.0
KILL_DEADLINE_S = 10.0
GIT_ENV = {"GIT_AUTHOR_NAME": "c", "GIT_AUTHOR_EMAIL": "c@example.com"}
GIT_ENV |= {"GIT_COMMITTER_NAME": "c", "GIT_COMMITTER_EMAIL": "c@example.com"}
TEMPLATE = "pretrain-small.yaml"
# Fields a fuzzed submission changes, with values both good and bad; none of them can leave a run queued
# for ever (no stage, team or queue change), so an accepted one still ends.
FUZZ_VALUES: dict[str, list[str]] = {
    "metadata.name": ["fuzz", "Fuzz_Bad", "", "a" * 80, "f-\u00e9", "'[x]'"],
    "spec.priority": ["low", "high", "normal", "urgent", "7", "null"],
    "spec.resources.chips": ["1", "2", "0", "-1", "x", "1e9", "[1]", "99999"],
    "spec.retries.max": ["0", "1", "-3", "many", "3"],
    "spec.checkpoint.keep_last": ["1", "2", "0", "true"],
    "spec.config": ["/dev/zero", "/proc/self/status", "file:///", "/nonexistent.yaml", "{a: 1}"],
    "spec.dataset.uri": ["/dev/urandom", "file:///", "/proc/kmsg", "/nonexistent", "s3://"],
    "spec.dataset.version": ["v1", "", "[]"],
    "spec.bogus": ["1"],
    "spec.resources.duration": ["10m", "-5s", "forever", "1s"],
}
TERMINAL = ("succeeded", "failed", "cancelled")
FUZZ_DEBRIS = "[]{}:,-?&*!|>'\"#%@`~ \tabkn01.<=\\"


@dataclass
class Plan:
    """How much chaos: runs of the workload, and kills and fuzzed submissions among them."""

    runs: int = 8
    steps: int = 600
    every: int = 10
    step_sleep_s: float = 0.05
    agent_kills: int = 40
    training_kills: int = 4
    save_kills: int = 4
    fuzz: int = 80
    fuzz_cli: int = 8
    seconds: float = 300.0
    seed: int = 7


@dataclass
class Tally:
    """What happened during the chaos, and what the audit found."""

    agent_kills: int = 0
    training_kills: int = 0
    save_kills: int = 0
    fuzz_accepted: int = 0
    fuzz_refused: int = 0
    retries: int = 0  # attempts after the first, over the plan's runs
    resumes: int = 0  # attempts that resumed from a checkpoint of their run
    lost: list[str] = field(default_factory=list)
    duplicated: list[str] = field(default_factory=list)
    wrong_resume: list[str] = field(default_factory=list)
    hangs: list[str] = field(default_factory=list)
    tracebacks: list[str] = field(default_factory=list)

    @property
    def kills(self) -> int:
        return self.agent_kills + self.training_kills + self.save_kills

    def summary(self) -> str:
        return (
            f"SUMMARY kills={self.kills} lost={len(self.lost)} duplicated={len(self.duplicated)} "
            f"wrong_resume={len(self.wrong_resume)} hangs={len(self.hangs)} tracebacks={len(self.tracebacks)}"
        )

    def findings(self) -> list[str]:
        named = [("lost", self.lost), ("duplicated", self.duplicated), ("wrong_resume", self.wrong_resume)]
        named += [("hang", self.hangs), ("traceback", self.tracebacks)]
        return [f"{what}: {item}" for what, items in named for item in items]


class Chaos:
    """One workspace under `root`, the plan's runs in it, and the chaos driven against them."""

    def __init__(self, root: Path, plan: Plan, log: Callable[[str], None] = lambda _: None) -> None:
        self.root, self.plan, self.log = root, plan, log
        self.home = root / ".crossrail"
        self.rng = random.Random(plan.seed)
        self.tally = Tally()
        self.runs: list[str] = []  # the plan's runs: each must succeed
        self.fuzzed: list[str] = []  # runs a fuzzed submission created: each must end
        self.seen: dict[int, tuple[str, str | None, int | None, str]] = {}  # events read during the chaos
        self.dirs: dict[str, Path] = {}  # each run's checkpoint directory

    # ---- setting up -------------------------------------------------------------------------------------

    def setup(self) -> None:
        env = {**os.environ, **GIT_ENV}
        (self.root / "train.py").write_text("print('train')\n")
        for cmd in (["git", "init", "-q"], ["git", "add", "train.py"], ["git", "commit", "-qm", "c"]):
            subprocess.run(cmd, cwd=self.root, env=env, check=True)
        Client.init(self.root)

    def client(self) -> Client:
        return Client(cwd=self.root)

    def base_sets(self, name: str, steps: int) -> list[str]:
        p = self.plan
        return [
            f"spec.args=[--steps, '{steps}', --checkpoint-every-steps, '{p.every}', --step-sleep, '{p.step_sleep_s}']",
            "spec.command=[python, -m, crossrail.workloads.bigram]",
            "spec.resources.chips=1",
            "spec.retries.max=50",  # every training kill costs a retry; none of them may fail a run
            f"metadata.name={name}",
            *_no_backoff(),
        ]

    # ---- commands with deadlines --------------------------------------------------------------------------

    def cli(self, *args: str, deadline_s: float = CLI_DEADLINE_S) -> subprocess.CompletedProcess[str] | None:
        """`crossrail ARGS` in the workspace; None (and a hang) when it outlives its deadline."""
        cmd = [sys.executable, "-m", "crossrail.cli", *args]
        try:
            proc = subprocess.run(
                cmd, cwd=self.root, env=self._env(), capture_output=True, text=True, timeout=deadline_s, check=False
            )
        except subprocess.TimeoutExpired:
            self.tally.hangs.append(f"crossrail {' '.join(args)} ran past {deadline_s} s")
            return None
        if "Traceback" in proc.stderr:
            self.tally.tracebacks.append(f"crossrail {' '.join(args)}: {_tail(proc.stderr)}")
        return proc

    def _env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k not in ("CROSSRAIL_STORE_URL",)}
        return env | {"CROSSRAIL_HOME": str(self.home), "COLUMNS": "200"}

    def submit_cli(self, sets: list[str], key: str | None = None) -> dict[str, Any] | None:
        args = ["submit", str(self.home / "experiments" / TEMPLATE), "--json"]
        args += [a for s in sets for a in ("--set", s)]
        if key is not None:
            args += ["--idempotency-key", key]
        proc = self.cli(*args)
        if proc is None or proc.returncode != 0:
            return None
        out: dict[str, Any] = json.loads(proc.stdout)
        return out

    def submit_client(self, sets: list[str]) -> tuple[str, str | None]:
        """("accepted", run id), ("refused", None), or ("hang"/"traceback", None); never raises."""
        outcome: list[tuple[str, str | None]] = []

        def go() -> None:
            try:
                with self.client() as c:
                    out = c.submit(self.home / "experiments" / TEMPLATE, sets=sets)
                outcome.append(("accepted", out["run"]["id"]))
            except CrossrailError:
                outcome.append(("refused", None))
            except Exception as exc:
                self.tally.tracebacks.append(f"submit {sets}: {type(exc).__name__}: {exc}")
                outcome.append(("traceback", None))

        thread = threading.Thread(target=go, daemon=True)
        thread.start()
        thread.join(SUBMIT_DEADLINE_S)
        if thread.is_alive():
            self.tally.hangs.append(f"client submit {sets} ran past {SUBMIT_DEADLINE_S} s")
            return "hang", None
        return outcome[0]

    # ---- the chaos ----------------------------------------------------------------------------------------

    def submit_plan(self) -> None:
        for i in range(self.plan.runs):
            out = self.submit_cli(self.base_sets(f"chaos-{i}", self.plan.steps), key=f"chaos-key-{i}")
            if out is None:
                self.tally.lost.append(f"the submit of chaos-{i} failed")
                continue
            self.runs.append(out["run"]["id"])
        again = self.submit_cli(self.base_sets("chaos-0", self.plan.steps), key="chaos-key-0")
        if again is not None and (again["created"] or again["run"]["id"] != self.runs[0]):
            self.tally.duplicated.append(f"a repeated idempotency key created {again['run']['id']}")

    def fuzz_once(self, k: int, via_cli: bool) -> None:
        sets = self.base_sets(f"fuzz-{k}", 10)
        for _ in range(self.rng.randint(1, 3)):
            if self.rng.random() < 0.2:
                debris = "".join(self.rng.choice(FUZZ_DEBRIS) for _ in range(self.rng.randint(1, 20)))
                sets.append(self.rng.choice(["spec.", "metadata.", ""]) + debris)
            else:
                key = self.rng.choice(list(FUZZ_VALUES))
                sets.append(f"{key}={self.rng.choice(FUZZ_VALUES[key])}")
        if via_cli:
            out = self.submit_cli(sets)
            rid = out["run"]["id"] if out is not None else None
        else:
            rid = self.submit_client(sets)[1]
        if rid is None:
            self.tally.fuzz_refused += 1
        else:
            self.tally.fuzz_accepted += 1
            self.fuzzed.append(rid)

    def agent(self, *extra: str) -> subprocess.Popen[bytes]:
        cmd = [sys.executable, "-m", "crossrail.cli", "agent", "--poll", "0.1", "--fallback-wait", "1", *extra]
        with (self.home / "agent-stderr.log").open("ab") as err:
            return subprocess.Popen(cmd, cwd=self.root, env=self._env(), stdout=subprocess.DEVNULL, stderr=err)

    def kill_agent(self, proc: subprocess.Popen[bytes]) -> None:
        proc.send_signal(signal.SIGKILL)
        try:
            proc.wait(timeout=KILL_DEADLINE_S)
        except subprocess.TimeoutExpired:
            self.tally.hangs.append(f"agent {proc.pid} still alive {KILL_DEADLINE_S} s after SIGKILL")
        self.tally.agent_kills += 1

    def churn(self) -> None:
        """Start and SIGKILL agents; between them, fuzz and kill training processes, some mid-save."""
        p, ends = self.plan, time.monotonic() + self.plan.seconds
        fuzz_done = 0
        while self.tally.agent_kills < p.agent_kills and time.monotonic() < ends:
            proc = self.agent()
            lived = self.rng.uniform(0.5, 2.5)
            t0 = time.monotonic()
            self.kill_a_trainer(lived)
            while fuzz_done < p.fuzz and time.monotonic() - t0 < lived:
                self.fuzz_once(fuzz_done, via_cli=fuzz_done < p.fuzz_cli)
                fuzz_done += 1
            time.sleep(max(0.0, lived - (time.monotonic() - t0)))
            self.kill_agent(proc)
            self.snapshot()
        while fuzz_done < p.fuzz:
            self.fuzz_once(fuzz_done, via_cli=fuzz_done < p.fuzz_cli)
            fuzz_done += 1
        self.finish_kills(ends)

    def trainer_kills_left(self) -> bool:
        p, t = self.plan, self.tally
        return t.training_kills < p.training_kills or t.save_kills < p.save_kills

    def kill_a_trainer(self, window_s: float) -> None:
        """Within `window_s`, a kill mid-save or a plain training-process kill, whichever the plan still has."""
        p, t = self.plan, self.tally
        saves, plain = t.save_kills < p.save_kills, t.training_kills < p.training_kills
        if saves and (not plain or self.rng.random() < 0.5):
            self.kill_mid_save(window_s)
        elif plain:
            time.sleep(window_s / 2)
            self.kill_training()

    def finish_kills(self, ends: float) -> None:
        """The training kills the churn did not get to: one agent lives while they are made, if runs still train."""
        if not self.trainer_kills_left():
            return
        proc = self.agent()
        while self.trainer_kills_left() and time.monotonic() < ends and self.plan_runs_active():
            self.kill_a_trainer(1.0)
        self.kill_agent(proc)
        self.snapshot()

    def plan_runs_active(self) -> bool:
        with self.client() as c:
            return any(str(c.service.store.get_run(rid).state) not in TERMINAL for rid in self.runs)

    def running_attempts(self) -> list[tuple[str, Path, Path]]:
        """(run, attempt dir, checkpoint dir) of each plan run whose newest attempt has a training process."""
        found = []
        for rid in self.runs:
            numbers = [int(d.name) for d in (self.home / "attempts" / rid).glob("*") if d.name.isdigit()]
            if not numbers:
                continue
            adir = self.home / "attempts" / rid / str(max(numbers))
            if (adir / "child.json").exists() and not (adir / "status.json").exists():
                found.append((rid, adir, self.checkpoint_dir(rid)))
        return found

    def checkpoint_dir(self, rid: str) -> Path:
        if rid not in self.dirs:
            with self.client() as c:
                uri = c.show(rid)["lineage"]["run_checkpoint_dir"]
            self.dirs[rid] = Path(local_path(uri) or uri)
        return self.dirs[rid]

    def kill_training(self) -> bool:
        running = self.running_attempts()
        if not running:
            return False
        _, adir, _ = self.rng.choice(running)
        if _killpg(adir):
            self.tally.training_kills += 1
            return True
        return False

    def kill_mid_save(self, window_s: float) -> None:
        """Watch the running attempts' checkpoint dirs for a save under way and SIGKILL its writer then.

        It counts when the save's temp dir is still there after the writer is dead: the kill landed mid-save.
        """
        ends = time.monotonic() + window_s
        while time.monotonic() < ends:
            for _, adir, cdir in self.running_attempts():
                drafts = list(cdir.glob(".tmp-step-*")) if cdir.is_dir() else []
                if drafts and _killpg(adir):
                    if any(d.exists() for d in drafts):
                        self.tally.save_kills += 1
                    else:
                        self.tally.training_kills += 1  # the save committed just before the kill
                    return
            time.sleep(0.001)

    def snapshot(self) -> None:
        """Remember every event committed so far, to check after the chaos that none went missing or changed."""
        with self.client() as c:
            for e in c.service.store.events():
                self.seen[int(e.seq or 0)] = (str(e.type), e.run, e.attempt, json.dumps(e.data, sort_keys=True))

    def finish(self) -> None:
        proc = self.agent("--until-idle")
        deadline = max(120.0, self.plan.runs * self.plan.steps * self.plan.step_sleep_s * 3)
        try:
            rc = proc.wait(timeout=deadline)
        except subprocess.TimeoutExpired:
            self.tally.hangs.append(f"the final agent --until-idle ran past {deadline:.0f} s")
            proc.kill()
            proc.wait()
            return
        if rc != 0:
            self.tally.lost.append(f"the final agent exited {rc}")

    def run(self) -> Tally:
        self.setup()
        self.submit_plan()
        try:
            self.churn()
            self.finish()
            self.snapshot_final_check()
            audit(self)
        except CrossrailError as exc:  # a store that cannot be read any more: everything in it counts as lost
            self.tally.lost.append(f"the store failed: {type(exc).__name__}: {exc}")
        return self.tally

    def snapshot_final_check(self) -> None:
        with self.client() as c:
            now = {int(e.seq or 0): e for e in c.service.store.events()}
        for seq, (kind, run, attempt, data) in sorted(self.seen.items()):
            e = now.get(seq)
            if e is None:
                self.tally.lost.append(f"event {seq} ({kind} of {run}/{attempt}) is gone")
            elif (str(e.type), e.run, e.attempt, json.dumps(e.data, sort_keys=True)) != (kind, run, attempt, data):
                self.tally.lost.append(f"event {seq} ({kind} of {run}/{attempt}) changed")


def audit(chaos: Chaos) -> None:
    """Every figure but kills and hangs, computed from the store, the checkpoints and the logs."""
    t = chaos.tally
    with chaos.client() as c:
        store = c.service.store
        keys = Counter(r.idempotency_key for r in store.list_runs() if r.idempotency_key)
        t.duplicated += [f"idempotency key {k} has {n} runs" for k, n in keys.items() if n > 1]
        for rid in chaos.runs + chaos.fuzzed:
            run = store.find_run(rid)
            if run is None:
                t.lost.append(f"run {rid} was acknowledged but is not in the store")
                continue
            _audit_attempts(store, rid, t)
            _audit_steps(store, rid, t)
            _audit_resumes(chaos, store, rid, t)
            if rid in chaos.runs:
                t.retries += len(store.attempts(rid)) - 1
                ckpts = [ck.step for ck in store.checkpoints(rid)]
                if str(run.state) != "succeeded" or not ckpts or ckpts[-1] != chaos.plan.steps:
                    t.lost.append(f"run {rid} ended {run.state} at checkpoint {ckpts[-1:] or 'none'}")
            elif str(run.state) not in TERMINAL:
                t.lost.append(f"fuzzed run {rid} never ended ({run.state})")
    for path in _logs(chaos.home):
        text = path.read_text(errors="replace")
        if "Traceback" in text:
            t.tracebacks.append(f"{path.relative_to(chaos.root)}: {_tail(text[text.index('Traceback') :])}")


def _audit_attempts(store: Any, rid: str, t: Tally) -> None:
    attempts = store.attempts(rid)
    numbers = [a.number for a in attempts]
    if numbers != list(range(1, len(numbers) + 1)):
        t.duplicated.append(f"{rid}: attempts numbered {numbers}")
    started = Counter(e.attempt for e in store.events(run=rid, types=["started"]))
    t.duplicated += [f"{rid}/{n}: started {k} times" for n, k in started.items() if k > 1]
    for prev, nxt in itertools.pairwise(attempts):
        if prev.ended_at is None or (nxt.started_at is not None and nxt.started_at < prev.ended_at):
            t.duplicated.append(f"{rid}: attempt {nxt.number} started before attempt {prev.number} ended")


def _audit_steps(store: Any, rid: str, t: Tally) -> None:
    """No step recorded twice in an attempt; no attempt trains a step its starting checkpoint already holds."""
    by_attempt: dict[int, list[int]] = {}
    for s in store.metric_samples(rid, "loss"):
        by_attempt.setdefault(int(s["attempt"]), []).append(int(s["step"]))
    for number, steps in by_attempt.items():
        twice = sorted(step for step, n in Counter(steps).items() if n > 1)
        if twice:
            t.duplicated.append(f"{rid}/{number}: steps {twice[:5]} recorded twice")
        start = _resumed(store, rid).get(number)
        if start is not None and min(steps) <= start[0]:
            t.duplicated.append(f"{rid}/{number}: resumed at step {start[0]} but trained step {min(steps)} again")


def _resumed(store: Any, rid: str) -> dict[int, tuple[int, str]]:
    """(step, uri) each attempt of `rid` resumed from, as its training process reported it."""
    found = {}
    for e in store.events(run=rid, types=["reported"]):
        if e.data.get("name") == "resumed":
            data = e.data.get("data") or {}
            found[int(e.attempt)] = (int(data["step"]), str(data["from"]))
    return found


def _audit_resumes(chaos: Chaos, store: Any, rid: str, t: Tally) -> None:
    own = str(chaos.checkpoint_dir(rid))
    resumed = _resumed(store, rid)
    t.resumes += len(resumed)
    ckpts = store.checkpoints(rid)
    for a in store.attempts(rid):
        earlier = [ck.step for ck in ckpts if ck.attempt is not None and ck.attempt < a.number]
        got = resumed.get(a.number)
        if got is None:
            if earlier and a.started_at is not None and _trained(store, rid, a.number):
                t.wrong_resume.append(f"{rid}/{a.number} started from scratch although step {max(earlier)} existed")
            continue
        step, uri = got
        path = local_path(uri) or uri
        if not path.startswith(own + "/"):
            t.wrong_resume.append(f"{rid}/{a.number} resumed from {uri}, outside its run's {own}")
        elif earlier and step < max(earlier):
            t.wrong_resume.append(f"{rid}/{a.number} resumed from step {step}; step {max(earlier)} was newer")
        elif not earlier and a.number == 1:
            t.wrong_resume.append(f"{rid}/1 resumed from {uri} before any attempt of it checkpointed")
        with contextlib.suppress(CrossrailError, OSError):  # pruned since: the path check above stands
            lineage = read_manifest(uri).get("lineage") or {}
            if lineage.get("run") not in (None, rid):
                t.wrong_resume.append(f"{rid}/{a.number} resumed from a checkpoint of run {lineage.get('run')}")


def _trained(store: Any, rid: str, number: int) -> bool:
    return any(int(s["attempt"]) == number for s in store.metric_samples(rid, "loss"))


def _logs(home: Path) -> Iterator[Path]:
    yield from home.glob("agent-stderr.log")
    for name in ("log.txt", "log.txt.1", "supervisor.log"):
        yield from (home / "attempts").glob(f"*/*/{name}")


def _no_backoff() -> list[str]:
    """Retries at once, where the format has a back-off: the kills are what is tested, not the waiting."""
    from crossrail.spec.experiment import Retries

    return ["spec.retries.backoff.initial=0"] if "backoff" in Retries.model_fields else []


def _killpg(adir: Path) -> bool:
    try:
        os.killpg(int(json.loads((adir / "child.json").read_text())["pid"]), signal.SIGKILL)
    except (OSError, ValueError, KeyError):
        return False
    return True


def _tail(text: str) -> str:
    return " | ".join(text.strip().splitlines()[-3:])[:400]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    defaults = Plan()
    for name in ("runs", "steps", "agent_kills", "training_kills", "save_kills", "fuzz", "seed"):
        ap.add_argument(f"--{name.replace('_', '-')}", type=int, default=getattr(defaults, name))
    ap.add_argument("--seconds", type=float, default=defaults.seconds, help="how long the kills go on at most")
    ap.add_argument("--keep", action="store_true", help="keep the workspace for a look afterwards")
    args = ap.parse_args()
    plan = Plan(**{k: v for k, v in vars(args).items() if k != "keep"})
    root = Path(tempfile.mkdtemp(prefix="crossrail-chaos-"))
    began = time.monotonic()
    try:
        tally = Chaos(root, plan, log=print).run()
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    print(f"workspace {root}{' (kept)' if args.keep else ''}; {time.monotonic() - began:.0f} s")
    print(
        f"kills: {tally.agent_kills} agent, {tally.training_kills} training process, {tally.save_kills} mid-save; "
        f"fuzzed submissions: {tally.fuzz_accepted} accepted, {tally.fuzz_refused} refused"
    )
    print(f"plan runs: {tally.retries} retried attempts, {tally.resumes} resumed from a checkpoint")
    for finding in tally.findings():
        print(f"  {finding}")
    print(tally.summary())


if __name__ == "__main__":
    main()
