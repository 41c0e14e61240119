"""The three stages of the pipeline, each a loop one process runs: sampler, reward, learner.

Samplers load the newest policy the learner published (a crossrail-ckpt/v1 checkpoint in the run's checkpoint
directory), generate groups of completions and queue them in `samples`; reward workers score them with the
task's verifier into `scored`; the learner takes `prompts_per_step` scored groups, makes one GRPO update and
publishes the new policy. A group made by policy version v is used at learner step s only if s - v is at most
`max_policy_lag_steps` (control.json); older ones are dropped, and an id already counted is refused.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from crossrail.core.clock import SystemClock
from crossrail.errors import CrossrailError
from crossrail.runtime import Checkpointer, CheckpointError, Reporter, RuntimeContext
from crossrail.runtime.torch_adapter import state_from_neutral
from crossrail.workloads.gpt_data import Corpus, Record
from crossrail.workloads.gpt_model import init_tensors
from crossrail.workloads.gpt_tasks import evaluate
from crossrail.workloads.loop import progress_every, progress_line
from crossrail.workloads.rl.control import Control, first_control, read_control
from crossrail.workloads.rl.queues import FileQueue
from crossrail.workloads.rl.settings import PARTS, Rendezvous, Settings
from crossrail.workloads.rl.stats import StageStats
from crossrail.workloads.rl.task import Task, draw, task_named, verifier_named

if TYPE_CHECKING:
    from crossrail.workloads.gpt_torch import TorchEngine

POLL_S = 0.01
PROGRESS_EVERY = 10  # a sampler or reward part prints a progress line every this many groups
EVAL_ITEMS = 256


class Stopped(Exception):
    """SIGTERM arrived, or the learner finished: a stage loop ends."""


@dataclass
class StageProcess:
    """What every stage process holds: its settings, context, queues and reporter."""

    settings: Settings
    ctx: RuntimeContext
    rdv: Rendezvous
    reporter: Reporter
    part: str
    replica: int
    clock: SystemClock = field(default_factory=SystemClock)
    stop_signal: int | None = None

    def __post_init__(self) -> None:
        if self.part not in PARTS:
            raise CrossrailError(f"--part {self.part!r}: choose one of {', '.join(PARTS)}")
        self.task: Task = task_named(self.settings.task)
        self.samples = FileQueue(self.rdv.samples, self.clock)
        self.scored = FileQueue(self.rdv.scored, self.clock)
        if self.part != "reward":  # a reward worker runs the verifier alone: it never imports torch
            import torch

            torch.set_num_threads(self.settings.threads)
        if self.settings.pin and hasattr(os, "sched_setaffinity"):
            cpus = sorted(os.sched_getaffinity(0))
            index = {"learner": 0, "sampler": 1 + self.replica, "reward": 1}[self.part]
            os.sched_setaffinity(0, {cpus[index % len(cpus)]})
        pid = self.rdv.pid_file(self.part, self.replica)
        pid.parent.mkdir(parents=True, exist_ok=True)
        self.incarnation = len(pid.read_text().split()) if pid.exists() else 0  # replicas before this one
        with pid.open("a") as out:  # the last line is the live process
            out.write(f"{os.getpid()}\n")
        with contextlib.suppress(ValueError):  # not the main thread (a Ray actor's): its supervisor kills it
            signal.signal(signal.SIGTERM, self._on_signal)
        self.stats = StageStats(self.rdv.stats, self.part, self.replica, self.incarnation, self.clock)
        with contextlib.suppress(CrossrailError):  # another stage wrote generation 0 first
            first_control(self.settings, self.rdv)

    @property
    def owner(self) -> str:
        return f"{self.part}{self.replica}"

    def _on_signal(self, signum: int, _frame: object) -> None:
        self.stop_signal = signum

    def control(self) -> Control:
        return read_control(self.rdv.root)

    def check_running(self) -> Control:
        """The current control; Stopped when this replica should end (signal, finished, or scaled down)."""
        if self.stop_signal is not None or self.rdv.finished.exists():
            raise Stopped
        control = self.control()
        wanted = {"sampler": control.samplers, "reward": control.reward_workers, "learner": 1}[self.part]
        if self.replica >= wanted:
            raise Stopped
        return control

    def engine(self) -> TorchEngine:
        from crossrail.workloads.gpt_torch import TorchEngine

        return TorchEngine(self.settings.model, self.settings.adamw())

    def checkpointer(self, keep_last: int | None = None) -> Checkpointer:
        return Checkpointer(self.ctx.checkpoint_dir, lineage=self.ctx.checkpoint_lineage("torch"), keep_last=keep_last)


# --- sampler ------------------------------------------------------------------------------------------------


class SamplerPolicy:
    """The policy a sampler generates from: the GPT alone, on CUDA when there is one.

    A sampler never steps an optimizer, so it builds none: a TorchEngine's AdamW costs a sampler process
    about 1.5 s of CPU at its start (torch's optimizer imports), which a controller adding samplers pays
    once per added process.
    """

    def __init__(self, stage: StageProcess) -> None:
        import torch

        from crossrail.workloads.gpt_torch import GPT

        device = torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else None
        self.model = GPT(stage.settings.model).to(device or torch.device("cpu"))

    def load(self, tensors: Mapping[str, npt.NDArray[Any]]) -> None:
        state_from_neutral(self.model, tensors)


def run_sampler(stage: StageProcess) -> None:
    """Generate groups from the newest policy while the learner can still use them (lag within the bound)."""
    import torch

    from crossrail.workloads.rl import policy

    s, ckpt, snapshot = stage.settings, stage.checkpointer(), SamplerPolicy(stage)
    version, made = -1, 0
    train = stage.task.split(heldout=False)
    incarnation = f"{stage.owner}.{stage.incarnation}"
    stage.samples.release(stage.owner)  # a crashed predecessor's reservations
    while True:
        control = stage.check_running()
        version = _newest_policy(ckpt, snapshot, version)
        ids = [f"{incarnation}.{made + g}" for g in range(s.prompts_per_batch)]
        if version < 0 or not _reserve(stage, version, control.max_policy_lag_steps, ids):
            time.sleep(POLL_S)
            stage.stats.add(held_s=POLL_S if version >= 0 else 0)
            continue
        began = time.perf_counter()
        key = (1, stage.replica, stage.incarnation, made)
        records = draw(train, s.prompts_per_batch, s.seed, key)
        rows = [r for r in records for _ in range(s.group)]
        generator = torch.Generator().manual_seed(int(np.random.SeedSequence([s.seed, *key]).generate_state(1)[0]))
        done = policy.sample(
            snapshot.model, policy.encode(rows), stage.task.max_answer_bytes + 1, s.temperature, generator
        )
        for g, record in enumerate(records):
            part = slice(g * s.group, (g + 1) * s.group)
            item = {
                "prompt": record.prompt,
                "target": record.target,
                "tokens": done.tokens[part].tolist(),
                "logp": done.logp[part].tolist(),
                "mask": done.mask[part].tolist(),
            }
            stage.samples.put(version, f"{incarnation}.{made}", item)
            made += 1
        stage.samples.release(stage.owner)
        if made % (PROGRESS_EVERY * s.prompts_per_batch) < s.prompts_per_batch:
            print(f"part sampler: {made} groups made, policy v{version}", flush=True)
        time.sleep(s.sample_sleep_s)
        stage.stats.add(samples=len(rows), busy_s=time.perf_counter() - began)


def _newest_policy(ckpt: Checkpointer, snapshot: SamplerPolicy, have: int) -> int:
    """Load the newest published policy when it is newer than `have`; the version now loaded (-1: none yet)."""
    infos = ckpt.list()
    if not infos or infos[-1].step <= have:
        return have
    try:
        tensors, manifest = ckpt.restore(infos[-1].step)
    except CheckpointError:
        return have  # pruned under us: the next look finds a newer one
    snapshot.load(tensors)
    return int(manifest["step"])


def _enough_ahead(stage: StageProcess, version: int, bound: int) -> bool:
    """Whether the queues already hold all the groups the learner can use before `version` goes stale."""
    return len(_usable(stage.samples.versions() + stage.scored.versions(), version, bound)) >= _room(stage, bound)


def _reserve(stage: StageProcess, version: int, bound: int, ids: list[str]) -> bool:
    """Reserve the batch `ids` unless the queues, with the batches other samplers reserved first, already hold
    all the groups the learner can use before `version` goes stale; whether this sampler may make it."""
    if _enough_ahead(stage, version, bound):
        return False
    return reserve_batch(stage.samples, stage.scored, stage.owner, version, ids, bound=bound, room=_room(stage, bound))


def reserve_batch(
    samples: FileQueue, scored: FileQueue, owner: str, version: int, ids: list[str], *, bound: int, room: int
) -> bool:
    """Samplers held back by the bound all wake on the same new policy; without reservations each would make a
    batch on the same count, and with many samplers most of those groups would go stale before the learner
    reached them. Reservations sort by version and id, so of the samplers that reserve at once the first in
    that order make their batches and the rest wait (releasing theirs): none waits on another."""
    mine = samples.reserve(owner, version, ids)
    reserved = [n for n in samples.claimed_names() if n.rpartition("@")[2].startswith("sampler")]

    def usable(names: list[str]) -> int:
        return len(_usable([int(n.split("-", 1)[0]) for n in names], version, bound))

    others = len(_usable(samples.versions() + scored.versions(), version, bound)) - usable(reserved)
    if others + usable([n for n in reserved if n < mine[0]]) < room:
        return True
    samples.release(owner)
    return False


def _usable(versions: list[int], version: int, bound: int) -> list[int]:
    return [v for v in versions if v >= version - bound]


def _room(stage: StageProcess, bound: int) -> int:
    """The groups the learner takes before a group of the newest policy goes stale."""
    return stage.settings.prompts_per_step * (bound + 1)


# --- reward -------------------------------------------------------------------------------------------------


def run_reward(stage: StageProcess) -> None:
    """Score queued groups with the verifier; what a crashed predecessor had claimed is scored again."""
    verify = verifier_named(stage.settings.verifier)
    stage.samples.requeue(stage.owner)
    stage.stats.add()  # its totals on disk from the start, before any item: a controller sees it run
    scored = 0
    while True:
        stage.check_running()
        claimed = stage.samples.claim(stage.owner, 1)
        if not claimed:
            time.sleep(POLL_S)
            continue
        began = time.perf_counter()
        for name, item in claimed:
            problem = Record(item["prompt"], item["target"])
            texts = [
                bytes(t for t, m in zip(row, mask, strict=True) if m)
                for row, mask in zip(item["tokens"], item["mask"], strict=True)
            ]
            item["rewards"] = [verify(problem, text) for text in texts]
            version, item_id = int(item.pop("version")), str(item.pop("id"))
            stage.scored.put(version, item_id, item)
            stage.samples.done(name)
            stage.stats.add(samples=len(texts), busy_s=time.perf_counter() - began)
            scored += 1
            if scored == 1 or scored % PROGRESS_EVERY == 0:
                print(f"part reward: {scored} groups scored, mean reward {np.mean(item['rewards']):.3f}", flush=True)


# --- learner ------------------------------------------------------------------------------------------------

EXIT_OK, EXIT_TEMPFAIL = 0, 75
KEEP_POLICIES = 3  # published versions kept: a sampler loading one while the next is written still finds it


@dataclass
class LearnerBatch:
    claimed: list[str] = field(default_factory=list)
    items: list[dict[str, Any]] = field(default_factory=list)
    lags: list[int] = field(default_factory=list)
    stale: int = 0  # dropped: older than the bound allows
    repeated: int = 0  # refused: an id already counted
    idle_s: float = 0.0


class Learner:
    def __init__(self, stage: StageProcess) -> None:
        self.stage, self.s = stage, stage.settings
        self.ckpt = stage.checkpointer(keep_last=KEEP_POLICIES)
        self.engine = stage.engine()
        self.heldout = stage.task.split(heldout=True)[:EVAL_ITEMS]
        self.used: set[str] = set()
        self.version = 0

    def run(self) -> int:
        """Warm-start or resume, then update until `steps`; 75 when stopped by SIGTERM (all committed)."""
        if not self._resume():
            self._warm_start()
        for group in self.engine.optimizer.param_groups:
            group["lr"] = self.s.lr
        self.stage.scored.requeue(self.stage.owner)
        last = time.perf_counter()
        try:
            while self.version < self.s.steps:
                bound = self.stage.check_running().max_policy_lag_steps
                batch = self._collect(bound)
                loss, rewards = self._update(batch)
                self._publish(batch)
                now = time.perf_counter()
                busy = now - last - batch.idle_s
                self.stage.stats.add(samples=len(rewards), busy_s=busy, idle_s=batch.idle_s, lag=max(batch.lags))
                self._report(batch, loss, rewards, now - last)
                last = now
        except Stopped:
            self.stage.reporter.event("stopped", signal="SIGTERM", step=self.version)
            return EXIT_TEMPFAIL
        self.stage.rdv.finished.write_text(str(self.version))
        return EXIT_OK

    def _resume(self) -> bool:
        try:
            tensors, manifest = self.ckpt.restore()
        except CheckpointError:
            return False
        uri = f"{self.ckpt.uri}/step-{int(manifest['step']):010d}"
        self.stage.ctx.claim(manifest, uri)
        state = manifest["state"]
        self.engine.load(tensors, int(state["optimizer"]["step"]))
        self.version, self.used = int(manifest["step"]), set(state["rl"]["used"])
        self.stage.reporter.event("resumed", step=self.version, **{"from": uri})
        return True

    def _warm_start(self) -> None:
        """Supervised steps on the training split, then policy version 0 published and evaluated."""
        from crossrail.workloads.rl import policy

        self.engine.load(init_tensors(self.s.model, self.s.seed), None)
        train = self.stage.task.split(heldout=False)
        new = self.stage.task.max_answer_bytes + 1
        for step in range(self.s.warm_steps):
            records = draw(train, self.s.prompts_per_step * self.s.group // 2, self.s.seed, (0, step))
            loss = policy.warm_step(self.engine.model, self.engine.optimizer, records, new)
        if self.s.warm_steps:
            self.stage.reporter.metric("warm_loss", loss, 0)
        self._save()
        self.stage.reporter.metric("eval_pass_rate", self._evaluate(), 0)

    def _collect(self, bound: int) -> LearnerBatch:
        """Claim scored groups until a step's worth is usable; time spent waiting is the learner's idle time."""
        batch, began, seen = LearnerBatch(), time.perf_counter(), set[str]()
        while len(batch.items) < self.s.prompts_per_step:
            if self.stage.stop_signal is not None:
                raise Stopped
            claimed = self.stage.scored.claim(self.stage.owner, self.s.prompts_per_step - len(batch.items))
            if not claimed:
                time.sleep(POLL_S)
            for name, item in claimed:
                lag = self.version - int(item["version"])
                if item["id"] in self.used or item["id"] in seen:
                    batch.repeated += 1
                    self.stage.scored.done(name)
                elif lag > bound:
                    batch.stale += 1
                    self.stage.scored.done(name)
                else:
                    seen.add(item["id"])
                    batch.claimed.append(name)
                    batch.items.append(item)
                    batch.lags.append(lag)
        batch.idle_s = time.perf_counter() - began
        _check(batch, self.used, bound)
        return batch

    def _update(self, batch: LearnerBatch) -> tuple[float, np.ndarray]:
        from crossrail.workloads.rl import policy

        rows = [
            policy.Completions(np.array(i["tokens"]), np.array(i["logp"], np.float32), np.array(i["mask"]))
            for i in batch.items
        ]
        done = policy.Completions(
            np.concatenate([r.tokens for r in rows]),
            np.concatenate([r.logp for r in rows]),
            np.concatenate([r.mask for r in rows]).astype(bool),
        )
        prompts = policy.encode([Record(i["prompt"], i["target"]) for i in batch.items for _ in range(self.s.group)])
        rewards = np.concatenate([np.asarray(i["rewards"], np.float32) for i in batch.items])
        adv = policy.advantages(rewards, self.s.group)
        loss = policy.grpo_step(self.engine.model, self.engine.optimizer, prompts, done, adv, clip=self.s.clip)
        return loss, rewards

    def _publish(self, batch: LearnerBatch) -> None:
        """Count the batch's ids, commit the new version (the samplers' policy and the resume point), then let go."""
        self.version += 1
        self.used.update(i["id"] for i in batch.items)
        self._save()
        for name in batch.claimed:
            self.stage.scored.done(name)

    def _save(self) -> None:
        state = {
            "model": self.s.model.state(),
            "optimizer": self.s.adamw().state(self.engine.step),
            "rl": {"version": self.version, "used": sorted(self.used), "task": self.s.task},
        }
        uri = self.ckpt.save(self.engine.tensors(), self.version, state)
        self.stage.reporter.checkpoint(self.version, uri)
        for removed in self.ckpt.take_removed():
            self.stage.reporter.event("checkpoint_deleted", uri=removed, reason="older than the policies samplers use")

    def _evaluate(self) -> float:
        corpus = Corpus(np.zeros(0, np.uint8), self.heldout)
        return evaluate(self.engine, corpus, context=self.s.model.context, batch=EVAL_ITEMS).pass_rate

    def _report(self, batch: LearnerBatch, loss: float, rewards: np.ndarray, step_s: float) -> None:
        r, step = self.stage.reporter, self.version
        if step == 1 or step % progress_every(self.s.steps) == 0 or step == self.s.steps:
            line = progress_line(step, self.s.steps, {"loss": loss})
            print(f"part learner: {line}  reward {rewards.mean():.3f}", flush=True)
        samples, scored = self.stage.samples.backlog(), self.stage.scored.backlog()
        r.metrics(
            {
                "loss": loss,
                "reward_mean": float(rewards.mean()),
                "samples_per_second": len(rewards) / step_s,
                "learner_idle_seconds": batch.idle_s,
                "step_time_s": step_s,
                "samples_dropped_stale": batch.stale,
                "samples_refused_repeated": batch.repeated,
                "backlog_samples_length": samples.length,
                "backlog_samples_age_seconds": samples.age_s,
                "backlog_scored_length": scored.length,
                "backlog_scored_age_seconds": scored.age_s,
            },
            step,
        )
        for lag in batch.lags:
            r.metric("policy_lag_steps", lag, step)
        if step % self.s.eval_every == 0 or step == self.s.steps:
            r.metric("eval_pass_rate", self._evaluate(), step)


def _check(batch: LearnerBatch, used: set[str], bound: int) -> None:
    """The learner's invariants, checked on every batch: lag within [0, bound], no id counted before."""
    ids = [i["id"] for i in batch.items]
    bad_lag = [lag for lag in batch.lags if not 0 <= lag <= bound]
    if bad_lag or len(set(ids)) != len(ids) or used.intersection(ids):
        raise CrossrailError(f"internal: a batch broke the pipeline's invariants (lags {batch.lags}, bound {bound})")


def run_stage(stage: StageProcess) -> int:
    """Run this process's stage until it is done, stopped or scaled down; the exit code."""
    print(f"part {stage.part} (replica {stage.replica}): started", flush=True)  # which part this log is
    if stage.part == "learner":
        return Learner(stage).run()
    with contextlib.suppress(Stopped):
        run_sampler(stage) if stage.part == "sampler" else run_reward(stage)
    return EXIT_OK
