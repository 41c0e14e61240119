"""The reference workload: trains (or with --eval, evaluates) the byte bigram model under crossrail.

    python -m crossrail.workloads.bigram [--steps N] [--checkpoint-every-steps K] [--step-sleep S]
                                         [--lr LR] [--batch B] [--block T] [--seed S] [--eval]

It reads everything else from the environment crossrail sets (docs/runtime.md) and follows the exit-code
contract there: 0 done, 75 stopped by SIGTERM after writing a checkpoint, 2 bad input (no dataset, bad config).
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from crossrail.errors import CrossrailError
from crossrail.runtime import (
    Checkpointer,
    CheckpointInfo,
    CheckpointNotFound,
    Reporter,
    RuntimeContext,
    read_bytes,
    restore_from,
)
from crossrail.workloads.bigram_model import MODEL_KIND, Adam, Bigram, Bytes, batch, evaluate, train_step
from crossrail.workloads.config import pick, read_config, section
from crossrail.workloads.loop import EXIT_BAD_INPUT, EXIT_OK, TrainingLoop

DEFAULT_EVERY_STEPS = 20
PROG = "crossrail.workloads.bigram"


@dataclass(frozen=True)
class BigramSettings:
    """Arguments over the config file over defaults, validated once."""

    steps: int
    lr: float
    batch: int
    block: int
    seed: int
    every_steps: int | None
    every_s: float | None
    step_sleep_s: float
    eval: bool


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog=PROG, description="Train a byte bigram model under crossrail.")
    p.add_argument("--steps", type=int, default=200, help="train until this step (default 200)")
    p.add_argument("--checkpoint-every-steps", type=int, help="default: spec.checkpoint.every in time, else 20 steps")
    p.add_argument("--step-sleep", type=float, default=0.02, help="seconds to pause after each step (default 0.02)")
    p.add_argument("--lr", type=float, help="Adam learning rate (default: optim.lr of the config, else 0.01)")
    p.add_argument("--batch", type=int, help="windows per step (default: optim.batch of the config, else 16)")
    p.add_argument("--block", type=int, help="bytes per window (default: model.context of the config, else 64)")
    p.add_argument("--seed", type=int, help="data sampling seed (default: seed of the config, else 0)")
    p.add_argument("--eval", action="store_true", help="evaluate the latest checkpoint instead of training")
    return p.parse_args(argv)


def settings(args: argparse.Namespace, ctx: RuntimeContext) -> BigramSettings:
    config = read_config(ctx.config) if ctx.config else {}
    optim, model = section(config, "optim"), section(config, "model")
    problems: list[str] = []
    chosen = {
        "lr": pick("optim.lr", args.lr, optim.get("lr"), 0.01, float, problems=problems),
        "batch": pick("optim.batch", args.batch, optim.get("batch"), 16, int, problems=problems),
        "block": pick("model.context", args.block, model.get("context"), 64, int, problems=problems),
        "seed": pick("seed", args.seed, config.get("seed"), 0, int, problems=problems),
    }
    every_steps = args.checkpoint_every_steps
    every_s = ctx.checkpoint_every_s if every_steps is None else None
    if every_steps is None and every_s is None:
        every_steps = DEFAULT_EVERY_STEPS
    problems += [f"{k} must be > 0 (got {v})" for k, v in chosen.items() if k != "seed" and v is not None and not v > 0]
    if args.steps < 0 or args.step_sleep < 0:
        problems.append(f"steps and step-sleep must be >= 0 (got {args.steps}, {args.step_sleep})")
    if every_steps is not None and every_steps < 1:
        problems.append(f"checkpoint-every-steps must be >= 1 (got {every_steps})")
    if problems:
        raise CrossrailError(f"{PROG}: " + "; ".join(problems))
    return BigramSettings(
        steps=args.steps,
        every_steps=every_steps,
        every_s=every_s,
        step_sleep_s=args.step_sleep,
        eval=args.eval,
        **chosen,
    )


def read_dataset(ctx: RuntimeContext) -> Bytes:
    try:
        data = np.frombuffer(read_bytes(ctx.dataset), np.uint8)
    except CrossrailError as exc:
        raise CrossrailError(f"{PROG}: cannot read the dataset (CROSSRAIL_DATASET): {exc}") from exc
    if len(data) < 2:
        raise CrossrailError(f"{PROG}: the dataset {ctx.dataset} has {len(data)} bytes; it needs at least 2")
    return data


class BigramTrainer(TrainingLoop):
    """One attempt: pick the starting point, train with reports and checkpoints, stop cleanly on SIGTERM."""

    def __init__(self, ctx: RuntimeContext, cfg: BigramSettings, data: Bytes, reporter: Reporter) -> None:
        self.ctx, self.cfg, self.data, self.reporter = ctx, cfg, data, reporter
        self.block = min(cfg.block, len(data) - 1)
        self.adam = Adam(cfg.lr)
        self.stop_signal: int | None = None
        self.saved_step: int | None = None  # the step of the newest checkpoint this run holds
        self.model, parent = self.start()
        lineage = ctx.checkpoint_lineage("numpy", parent=parent)
        self.checkpointer = Checkpointer(ctx.checkpoint_dir, lineage=lineage, keep_last=ctx.keep_last)

    def start(self) -> tuple[Bigram, str | None]:
        """The model to train and the checkpoint it comes from.

        1. this run's newest valid checkpoint (a retry resumes); 2. the parent's checkpoint; 3. zeros.
        """
        built: list[Bigram] = []

        def prepare(info: CheckpointInfo, manifest: dict[str, Any]) -> dict[str, Any]:
            self.ctx.claim(manifest, info.uri)
            _check_kind(manifest, info.uri)
            built.append(Bigram(step=info.step))  # a model of its own for each checkpoint tried
            return built[-1].tensors()

        # Read once, straight into the model's arrays and verified there; a damaged one gives way to the next older.
        own = Checkpointer(self.ctx.checkpoint_dir).restore_newest(prepare, on_skip=self._skipped)
        if own is not None:
            info = own[0]
            self.reporter.event("resumed", step=info.step, **{"from": info.uri})
            self.saved_step = info.step
            return built[-1], info.uri
        parent = self.ctx.parent_checkpoint
        if parent is None or parent == "latest":
            return Bigram(), None
        try:  # a damaged parent step falls back to the newest older one that verifies
            info, tensors, manifest = restore_from(parent, on_skip=self._skipped, mapped=True)
        except CheckpointNotFound as exc:
            self.reporter.event("parent_not_found", uri=parent, reason=str(exc))
            if not self.ctx.parent_optional:
                raise CheckpointNotFound(
                    f"{PROG}: the parent checkpoint {parent} could not be loaded: {exc}; resubmit without --resume "
                    "to start over, or set spec.parent.optional: true to start fresh when it is missing"
                ) from exc
            print(f"{PROG}: starting from scratch (spec.parent.optional): {exc}", file=sys.stderr)
            return Bigram(), None
        self.ctx.claim(manifest, info.uri, as_parent=True)
        _check_kind(manifest, info.uri)
        step = int(manifest["step"])
        if self.ctx.continues_parent:  # `resubmit --resume`: continue the parent's training, moments and all
            data = {"step": step, "source": "parent", "carried": ["weights", "step", "data cursor", "optimizer"]}
            self.reporter.event("resumed", **data, reset=[], **{"from": info.uri})
            return Bigram.from_tensors(tensors, step), info.uri
        self.reporter.event("initialised", step=step, **{"from": info.uri})
        return Bigram.from_tensors(tensors, 0, weights_only=True), info.uri

    def _skipped(self, uri: str, reason: str) -> None:
        _skipped(self.reporter, uri, reason)

    @property
    def step(self) -> int:
        return self.model.step

    def tensors(self) -> dict[str, Any]:
        return self.model.tensors()

    def tokens_per_step(self) -> int:
        return int(self.cfg.batch * self.block)

    def _step(self) -> None:
        began = time.perf_counter()
        x, y = batch(self.data, self.model.step + 1, self.cfg.seed, self.cfg.batch, self.block)
        loss = train_step(self.model, x, y, self.adam)
        took = time.perf_counter() - began
        metrics = {"loss": loss, "tokens_per_second": len(x) / took, "step_time_s": took}
        self.report_step(metrics)

    def state(self) -> dict[str, Any]:
        """What rebuilds this trainer besides the tensors: model kind, optimizer scalars, data position."""
        a = self.adam
        optimizer = {"name": "adam", "lr": a.lr, "beta1": a.beta1, "beta2": a.beta2, "eps": a.eps}
        return {
            "model": MODEL_KIND,
            "optimizer": {**optimizer, "t": self.model.step},
            "rng": {"seed": self.cfg.seed, "batches": "numpy default_rng([seed, step])"},
            "data": {"position": self.model.step, "batch": self.cfg.batch, "block": self.block},
        }


def _skipped(reporter: Reporter, uri: str, reason: str) -> None:
    print(f"{PROG}: skipping damaged checkpoint {uri}: {reason}", file=sys.stderr)
    reporter.event("checkpoint_skipped", uri=uri, reason=reason)


def _check_kind(manifest: dict[str, Any], uri: str) -> None:
    kind = manifest["state"].get("model")
    if kind != MODEL_KIND:
        raise CrossrailError(f"{PROG}: {uri} holds model {kind!r}, not {MODEL_KIND}; point at a bigram checkpoint")


def run_eval(ctx: RuntimeContext, data: Bytes, reporter: Reporter) -> int:
    """Report eval_loss and eval_pass_rate of the newest valid checkpoint of this run, else of the parent."""
    own = Checkpointer(ctx.checkpoint_dir).latest()
    source = own.uri if own else ctx.parent_checkpoint
    if source is None or source == "latest":
        raise CheckpointNotFound(f"{PROG}: nothing to evaluate: no checkpoint in {ctx.checkpoint_dir} and no parent")
    info, tensors, manifest = restore_from(source, on_skip=lambda uri, why: _skipped(reporter, uri, why), mapped=True)
    source = info.uri  # a damaged parent step falls back to the newest older one that verifies
    ctx.claim(manifest, source, as_parent=own is None)
    _check_kind(manifest, source)
    loss, pass_rate = evaluate(Bigram.from_tensors(tensors, 0, weights_only=True).weight, data)
    reporter.metrics({"eval_loss": loss, "eval_pass_rate": pass_rate}, manifest["step"])
    print(f"eval_loss {loss:.4f}  eval_pass_rate {pass_rate:.4f}  ({source}, step {manifest['step']})", flush=True)
    score = {"metric": "eval_loss", "value": loss, "evaluated_run": ctx.run if own is not None else ctx.parent_run}
    reporter.event("evaluated", uri=source, step=manifest["step"], pairs=len(data) - 1, **score)
    return EXIT_OK


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        ctx = RuntimeContext.from_env()
        cfg = settings(args, ctx)
        data = read_dataset(ctx)
        with Reporter(ctx) as reporter:
            reporter.runtime("numpy", "fp32")
            reporter.environment()
            if cfg.eval:
                return run_eval(ctx, data, reporter)
            return BigramTrainer(ctx, cfg, data, reporter).run()
    except CrossrailError as exc:
        print(exc, file=sys.stderr)
        return EXIT_BAD_INPUT


if __name__ == "__main__":
    sys.exit(main())
