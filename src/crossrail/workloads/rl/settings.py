"""What an RL pipeline is told: the task, the model, the step sizes, and where its stages meet."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from pathlib import Path

from crossrail.errors import CrossrailError
from crossrail.workloads.gpt_model import AdamW, GPTConfig
from crossrail.workloads.rl.task import TASKS, VERIFIERS

PARTS = ("sampler", "reward", "learner")
MODEL = GPTConfig(n_layer=2, n_head=2, d_model=64, context=16)


@dataclass(frozen=True)
class Settings:
    task: str = "reversal"
    verifier: str = "digits"
    seed: int = 0
    steps: int = 80  # learner updates after the warm start
    warm_steps: int = 32  # supervised steps before RL, so there is a reward to learn from
    warm_lr: float = 3e-3
    lr: float = 1e-3
    prompts_per_step: int = 16  # groups the learner takes per update
    group: int = 8  # completions per prompt (GRPO's group)
    prompts_per_batch: int = 4  # groups a sampler generates in one batch
    temperature: float = 1.0
    clip: float = 0.2
    eval_every: int = 20
    threads: int = 1  # torch threads per stage process
    pin: bool = False  # pin each stage process to one CPU
    sample_sleep_s: float = 0.0  # a sampler's pause after each batch: its own accelerator's time, where CPUs are shared
    samplers: int = 1  # the first control.json's sizes
    reward_workers: int = 1
    max_policy_lag_steps: int = 2
    model: GPTConfig = field(default=MODEL)

    def adamw(self) -> AdamW:
        return AdamW(lr=self.warm_lr, weight_decay=0.0)

    def problems(self) -> list[str]:
        found = []
        if self.task not in TASKS:
            found.append(f"--task {self.task!r}: choose one of {', '.join(TASKS)}")
        if self.verifier not in VERIFIERS:
            found.append(f"--verifier {self.verifier!r}: choose one of {', '.join(VERIFIERS)}")
        positive = {
            "--steps": self.steps + 1,
            "--prompts-per-step": self.prompts_per_step,
            "--group": self.group - 1,
            "--prompts-per-batch": self.prompts_per_batch,
            "--lr": self.lr,
            "--warm-lr": self.warm_lr,
            "--temperature": self.temperature,
            "--eval-every": self.eval_every,
            "--threads": self.threads,
            "--samplers": self.samplers,
            "--reward-workers": self.reward_workers,
            "--warm-steps": self.warm_steps + 1,
            "--max-policy-lag-steps": self.max_policy_lag_steps + 1,
        }
        found += [f"{k}: out of range (got {v})" for k, v in positive.items() if v <= 0]
        if self.sample_sleep_s < 0 or self.clip <= 0:
            found.append(f"--sample-sleep-s and --clip: out of range (got {self.sample_sleep_s}, {self.clip})")
        if self.group < 2:
            found.append(f"--group must be >= 2: GRPO compares completions of one prompt (got {self.group})")
        return found


def add_arguments(p: argparse.ArgumentParser) -> None:
    d = Settings()
    p.add_argument("--task", default=d.task, help=f"the verifiable task (default {d.task})")
    p.add_argument("--verifier", default=d.verifier, help=f"the reward verifier (default {d.verifier})")
    for name, kind in (
        ("seed", int),
        ("steps", int),
        ("warm-steps", int),
        ("warm-lr", float),
        ("lr", float),
        ("prompts-per-step", int),
        ("group", int),
        ("prompts-per-batch", int),
        ("temperature", float),
        ("clip", float),
        ("eval-every", int),
        ("threads", int),
        ("samplers", int),
        ("reward-workers", int),
        ("max-policy-lag-steps", int),
        ("sample-sleep-s", float),
    ):
        default = getattr(d, name.replace("-", "_"))
        p.add_argument(f"--{name}", type=kind, default=default, help=f"default {default}")
    p.add_argument("--pin", action="store_true", help="pin each stage process to one CPU")


def from_args(args: argparse.Namespace) -> Settings:
    names = Settings.__dataclass_fields__.keys() - {"model"}
    chosen = Settings(**{n: getattr(args, n) for n in names})
    if found := chosen.problems():
        raise CrossrailError("crossrail.workloads.rl: " + "; ".join(found))
    return chosen


def to_argv(s: Settings) -> list[str]:
    """The arguments that give a stage process these settings."""
    out: list[str] = []
    for name in Settings.__dataclass_fields__.keys() - {"model", "pin"}:
        out += [f"--{name.replace('_', '-')}", str(getattr(s, name))]
    return out + (["--pin"] if s.pin else [])


@dataclass(frozen=True)
class Rendezvous:
    """Where the stages meet: control.json, the two queues, the stage pid files and the finished marker."""

    root: Path

    @property
    def samples(self) -> Path:
        return self.root / "queues" / "samples"

    @property
    def scored(self) -> Path:
        return self.root / "queues" / "scored"

    @property
    def finished(self) -> Path:
        return self.root / "finished"

    @property
    def stats(self) -> Path:
        return self.root / "stats"

    def pid_file(self, part: str, replica: int) -> Path:
        return self.root / "pids" / f"{part}-{replica}.pid"
