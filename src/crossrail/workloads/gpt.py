"""The reference GPT workloads under crossrail: pretrain, finetune, generate or eval, in PyTorch or JAX.

    python -m crossrail.workloads.gpt [--task pretrain|finetune|generate|eval] [--steps N]
        [--checkpoint-every-steps K] [--step-sleep S] [--lr LR] [--batch B] [--seed S] [--dtype fp32|bf16]
        [--compile | --no-compile] [--peak-flops F] [--framework torch|jax] [--max-new-tokens N] [--output PATH]
        [--eval-every N]

TRAINING_BACKEND picks the framework (tpu: JAX; gpu, cpu: PyTorch); checkpoints hold neutral tensors, so either
framework resumes what the other wrote. Everything else comes from the environment crossrail sets
(docs/runtime.md), and the exit codes follow the contract there: 0 done, 75 stopped by SIGTERM after writing a
checkpoint, 2 bad input.
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Any

from crossrail.errors import CrossrailError
from crossrail.runtime import (
    Checkpointer,
    CheckpointError,
    CheckpointInfo,
    CheckpointNotFound,
    HeartbeatThread,
    Reporter,
    RuntimeContext,
    data_position,
    read_bytes,
    restore_from,
)
from crossrail.runtime.neutral import moments
from crossrail.workloads import gpt_data, parallel
from crossrail.workloads.config import pick, read_config, section
from crossrail.workloads.gpt_data import Corpus
from crossrail.workloads.gpt_model import (
    VOCAB,
    AdamW,
    Arrays,
    GPTConfig,
    ModelEngine,
    init_tensors,
    param_count,
    train_flops_per_token,
)
from crossrail.workloads.gpt_tasks import evaluate, generate
from crossrail.workloads.loop import EXIT_BAD_INPUT, EXIT_OK, TrainingLoop

DEFAULT_EVERY_STEPS = 50
PROG = "crossrail.workloads.gpt"
TASKS = ("pretrain", "finetune", "generate", "eval")
FRAMEWORKS = {"tpu": "jax", "gpu": "torch", "cpu": "torch"}
MODEL_KEYS = tuple(f.name for f in fields(GPTConfig))


@dataclass(frozen=True)
class GptSettings:
    """Arguments over the config file over defaults, validated once."""

    task: str
    framework: str
    model: GPTConfig
    adamw: AdamW
    batch: int
    seed: int
    steps: int
    every_steps: int | None
    every_s: float | None
    step_sleep_s: float
    dtype: str
    compile: bool
    micro_batch: int | None
    peak_flops: float | None
    max_new_tokens: int
    output: str
    eval_every: int | None = None
    """Training: report eval_loss and eval_pass_rate on the held-out split every this many steps (None: never)."""
    model_set: dict[str, int] = field(default_factory=dict)  # the model keys the config names


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog=PROG, description="Train, post-train, sample or evaluate a byte-level GPT.")
    p.add_argument("--task", choices=TASKS, default="pretrain", help="what to run (default pretrain)")
    p.add_argument("--steps", type=int, default=200, help="train until this step (default 200)")
    p.add_argument("--checkpoint-every-steps", type=int, help="default: spec.checkpoint.every in time, else 50 steps")
    p.add_argument("--step-sleep", type=float, default=0.0, help="seconds to pause after each step (default 0)")
    p.add_argument("--lr", type=float, help="AdamW learning rate (default: optim.lr of the config, else 3e-3)")
    p.add_argument("--batch", type=int, help="sequences per step (default: optim.batch of the config, else 16)")
    p.add_argument("--seed", type=int, help="initialisation and data seed (default: seed of the config, else 0)")
    p.add_argument(
        "--dtype", choices=("fp32", "bf16"), help="compute dtype; params stay fp32 (default: precision of the config)"
    )
    p.add_argument(
        "--compile",
        action=argparse.BooleanOptionalAction,
        help="torch.compile the model, slow to compile on CPU (default: compile of the config, else off)",
    )
    p.add_argument(
        "--peak-flops", type=float, help="peak FLOP/s for MFU (default: peak_flops of the config, else measured)"
    )
    p.add_argument("--framework", choices=("torch", "jax"), help="override the framework TRAINING_BACKEND picks")
    p.add_argument(
        "--max-new-tokens", type=int, help="generate: bytes per prompt (default generate.max_new_tokens, else 32)"
    )
    p.add_argument(
        "--output", default="generations.jsonl", help="generate: JSON-lines file written in the working directory"
    )
    p.add_argument(
        "--eval-every",
        type=int,
        help="training: report eval_loss on the held-out tenth of the dataset every N steps (default: eval_every "
        "of the config, else never)",
    )
    return p.parse_args(argv)


def settings(args: argparse.Namespace, ctx: RuntimeContext) -> GptSettings:
    config = read_config(ctx.config) if ctx.config else {}
    optim, model, gen = section(config, "optim"), section(config, "model"), section(config, "generate")
    problems = [_unknown(key) for key in model if key not in MODEL_KEYS]
    model_set = {
        k: pick(f"model.{k}", None, v, None, int, problems=problems) for k, v in model.items() if k in MODEL_KEYS
    }
    lr = pick("optim.lr", args.lr, optim.get("lr"), AdamW.lr, float, problems=problems)
    decay = pick("optim.weight_decay", None, optim.get("weight_decay"), AdamW.weight_decay, float, problems=problems)
    chosen = {
        "batch": pick("optim.batch", args.batch, optim.get("batch"), 16, int, problems=problems),
        "seed": pick("seed", args.seed, config.get("seed"), 0, int, problems=problems),
        "max_new_tokens": pick(
            "generate.max_new_tokens", args.max_new_tokens, gen.get("max_new_tokens"), 32, int, problems=problems
        ),
    }
    micro = optim.get("micro_batch")
    micro_batch = None if micro is None else pick("optim.micro_batch", None, micro, None, int, problems=problems)
    if micro_batch is not None and micro_batch <= 0:
        problems.append(f"optim.micro_batch must be > 0 (got {micro_batch})")
    dtype = args.dtype or config.get("precision", "fp32")
    if dtype not in ("fp32", "bf16"):
        problems.append(f"precision: {dtype!r} is not fp32 or bf16")
    compiled = args.compile if args.compile is not None else config.get("compile", False)
    if not isinstance(compiled, bool):
        problems.append(f"compile: {compiled!r} is not true or false")
    asked = args.eval_every if args.eval_every is not None else config.get("eval_every")
    eval_every = None if asked is None else pick("eval_every", asked, None, None, int, problems=problems)
    if eval_every is not None and eval_every < 1:
        problems.append(f"eval_every must be >= 1 step (got {eval_every}); leave it out to evaluate never")
    given = args.peak_flops if args.peak_flops is not None else config.get("peak_flops")
    peak = None if given is None else pick("peak_flops", given, None, None, float, problems=problems)
    positive = {
        "optim.lr": lr,
        "optim.batch": chosen["batch"],
        "generate.max_new_tokens": chosen["max_new_tokens"],
        "peak_flops": peak,
    }
    problems += [f"{k} must be > 0 (got {v})" for k, v in positive.items() if v is not None and v <= 0]
    every_steps = args.checkpoint_every_steps
    every_s = ctx.checkpoint_every_s if every_steps is None else None
    if every_steps is None and every_s is None:
        every_steps = DEFAULT_EVERY_STEPS
    if args.steps < 0 or args.step_sleep < 0:
        problems.append(f"steps and step-sleep must be >= 0 (got {args.steps}, {args.step_sleep})")
    if every_steps is not None and every_steps < 1:
        problems.append(f"checkpoint-every-steps must be >= 1 (got {every_steps})")
    if not problems:
        arch = GPTConfig(**{k: v for k, v in model_set.items() if v is not None})
        problems += arch.problems()
        if arch.vocab != VOCAB:
            problems.append(f"model.vocab must be {VOCAB}: the tokenizer is byte-level (got {arch.vocab})")
    if problems:
        raise CrossrailError(f"{PROG}: " + "; ".join(problems))
    return GptSettings(
        task=args.task,
        framework=args.framework or FRAMEWORKS[ctx.backend],
        model=arch,
        adamw=AdamW(lr=lr, weight_decay=decay),
        steps=args.steps,
        every_steps=every_steps,
        every_s=every_s,
        step_sleep_s=args.step_sleep,
        dtype=dtype,
        compile=compiled,
        micro_batch=micro_batch,
        peak_flops=peak,
        output=args.output,
        eval_every=eval_every,
        model_set=model_set,
        **chosen,
    )


def _unknown(key: str) -> str:
    near = difflib.get_close_matches(key, MODEL_KEYS, n=1)
    hint = f"; did you mean {near[0]}?" if near else f"; the keys are {', '.join(MODEL_KEYS)}"
    return f"model.{key} is not a model setting{hint}"


def read_corpus(ctx: RuntimeContext) -> Corpus:
    try:
        raw = read_bytes(ctx.dataset)
    except CrossrailError as exc:
        raise CrossrailError(f"{PROG}: cannot read the dataset (CROSSRAIL_DATASET): {exc}") from exc
    return gpt_data.parse(raw, ctx.dataset)


def build_engine(cfg: GptSettings, model: GPTConfig) -> ModelEngine:
    """The framework's engine, imported only now so that only the chosen framework is loaded."""
    try:
        if cfg.framework == "jax":
            from crossrail.workloads.gpt_jax import JaxEngine

            if cfg.micro_batch is not None:
                raise CrossrailError(
                    f"{PROG}: optim.micro_batch (gradient accumulation) is a PyTorch setting; the JAX step takes a "
                    "worker's rows in one pass: drop it or run --framework torch"
                )
            return JaxEngine(model, cfg.adamw, dtype=cfg.dtype, compile=cfg.compile)
        from crossrail.workloads.gpt_torch import TorchEngine

        return TorchEngine(model, cfg.adamw, dtype=cfg.dtype, compile=cfg.compile, micro_batch=cfg.micro_batch)
    except ImportError as exc:
        extra = cfg.framework
        raise CrossrailError(f"{PROG}: the {extra} engine needs {exc.name}; install crossrail[{extra}]") from exc


def model_of(manifest: dict[str, Any], uri: str, cfg: GptSettings) -> GPTConfig:
    """The checkpoint's architecture; the model keys the config names must agree with it."""
    model = GPTConfig.from_state(manifest["state"].get("model"), uri)
    clash = {k: (v, getattr(model, k)) for k, v in cfg.model_set.items() if getattr(model, k) != v}
    if clash:
        said = ", ".join(f"model.{k}: config {a}, checkpoint {b}" for k, (a, b) in clash.items())
        raise CrossrailError(
            f"{PROG}: {uri} holds another model ({said}); drop those keys or use a matching checkpoint"
        )
    return model


@dataclass(frozen=True)
class Start:
    """Where an attempt starts: the model, its tensors (None: fresh), the optimizer step restored, the source."""

    model: GPTConfig
    tensors: Arrays | None = None
    step: int | None = None  # None: a fresh optimizer at step 0
    uri: str | None = None
    manifest: dict[str, Any] | None = None  # of the checkpoint it resumes (its own, or the parent it continues)
    own: bool = False  # the checkpoint is in this run's own directory
    optimizer: bool = True  # the checkpoint's optimizer moments are restored (False: "optimizer reset")
    engine: ModelEngine | None = None  # built and loaded already (its own checkpoint, read into it): tensors is None


EngineFor = Callable[[GPTConfig], ModelEngine]
Skipped = Callable[[str, str], None]


def starting_point(ctx: RuntimeContext, cfg: GptSettings, reporter: Reporter, engine_for: EngineFor) -> Start:
    """1. this run's newest valid checkpoint (a retry resumes), loaded into `engine_for(its model)`; 2. the
    parent's checkpoint: continued from its step when this run resumes its parent (`resubmit --resume`), else
    its weights only; 3. a fresh model.

    A parent that was asked for and cannot be loaded fails the run, unless `spec.parent.optional` is true."""

    def skipped(uri: str, reason: str) -> None:
        _skipped(reporter, uri, reason)

    own = resume_own(ctx, cfg, engine_for, skipped)
    if own is not None:
        reporter.event("resumed", step=own.step, **{"from": own.uri})
        return own
    parent = ctx.parent_checkpoint
    if parent is None or parent == "latest":
        if cfg.task == "finetune":
            raise CheckpointNotFound(f"{PROG}: finetune starts from spec.parent_checkpoint, and this run has none")
        return Start(cfg.model)
    try:  # a damaged parent step falls back to the newest older one that verifies
        info, tensors, manifest = restore_from(parent, on_skip=skipped, mapped=True)
    except CheckpointNotFound as exc:
        reporter.event("parent_not_found", uri=parent, reason=str(exc))
        if cfg.task == "finetune" or not ctx.parent_optional:
            raise CheckpointNotFound(
                f"{PROG}: the parent checkpoint {parent} could not be loaded: {exc}; resubmit without --resume to "
                "start over, or set spec.parent.optional: true to start fresh when it is missing"
            ) from exc
        print(f"{PROG}: no parent checkpoint (spec.parent.optional): {exc}", file=sys.stderr)
        return Start(cfg.model)
    ctx.claim(manifest, info.uri, as_parent=True)
    model = model_of(manifest, info.uri, cfg)
    step = int(manifest["step"])
    if ctx.continues_parent:
        reset = [] if moments(tensors)[0] else ["optimizer reset"]
        carried = ["weights", "step", "data cursor", "rng"] + ([] if reset else ["optimizer"])
        reporter.event("resumed", step=step, source="parent", carried=carried, reset=reset, **{"from": info.uri})
        return Start(model, tensors, step, info.uri, manifest, optimizer=not reset)
    reporter.event("initialised", step=step, **{"from": info.uri})
    return Start(model, tensors, None, info.uri)


def resume_own(ctx: RuntimeContext, cfg: GptSettings, engine_for: EngineFor, skipped: Skipped) -> Start | None:
    """This run's newest checkpoint that verifies, read once into the engine built for the model its manifest
    names; None when there is none (each damaged one passed to `skipped`).

    In place where the engine keeps its state in host memory (PyTorch on the CPU): the checkpoint is read
    straight into the parameters and AdamW moments, nothing allocated for it or copied after; one whose
    checksum fails gives way to the next older, read into them afresh. Elsewhere its tensors are copy-on-write
    views of the files that load() copies onto the device and lets go.
    """
    tried: list[tuple[ModelEngine, bool]] = []

    def prepare(info: CheckpointInfo, manifest: dict[str, Any]) -> Arrays | None:
        ctx.claim(manifest, info.uri)
        engine = engine_for(model_of(manifest, info.uri, cfg))
        views = engine.host_state(info.step)
        if views is not None:
            unexpected = [e["name"] for e in manifest["tensors"] if e["name"] not in views]
            if unexpected:
                raise CheckpointError(
                    f"{PROG}: {info.uri} holds tensors this model does not have: {', '.join(unexpected[:8])}; "
                    "point at a checkpoint of this model"
                )
        tried.append((engine, views is not None))
        return views

    found = Checkpointer(ctx.checkpoint_dir).restore_newest(prepare, on_skip=skipped)
    if found is None:
        return None
    info, tensors, manifest = found
    engine, in_place = tried[-1]
    if not in_place:
        engine.load(tensors, info.step)
    model = model_of(manifest, info.uri, cfg)
    return Start(model, None, info.step, info.uri, manifest, own=True, engine=engine)


def _skipped(reporter: Reporter, uri: str, reason: str) -> None:
    print(f"{PROG}: skipping damaged checkpoint {uri}: {reason}", file=sys.stderr)
    reporter.event("checkpoint_skipped", uri=uri, reason=reason)


def describe(
    engine: ModelEngine, cfg: GptSettings, model: GPTConfig, peak: float | None, source: str | None
) -> dict[str, Any]:
    """The `started` event: which framework runs what, and the peak MFU is measured against."""
    return {
        "framework": engine.framework,
        "device": engine.device,
        "task": cfg.task,
        "dtype": cfg.dtype,
        "compile": cfg.compile,
        "params": param_count(model),
        "flops_per_token": train_flops_per_token(model),
        "peak_flops": peak,
        "peak_source": source,
        "degree": getattr(engine, "world", 1),
    }


class GptTrainer(TrainingLoop):
    """One training attempt (pretrain or finetune): start, train with reports and checkpoints, stop on SIGTERM."""

    def __init__(self, ctx: RuntimeContext, cfg: GptSettings, corpus: Corpus, reporter: Reporter) -> None:
        self.ctx, self.cfg, self.reporter = ctx, cfg, reporter
        self.stop_signal: int | None = None
        built: list[tuple[GPTConfig, ModelEngine]] = []

        def engine_for(model: GPTConfig) -> ModelEngine:  # one engine, unless an older checkpoint names another model
            if not built or built[-1][0] != model:
                built.append((model, build_engine(cfg, model)))
            return built[-1][1]

        start = starting_point(ctx, cfg, reporter, engine_for)
        self.model = start.model
        self.heldout: Corpus | None = None
        if cfg.eval_every is not None:  # the last tenth is never trained on: eval_loss measures generalisation
            corpus, self.heldout = gpt_data.split_heldout(corpus, self.model.context, PROG)
        if len(corpus.text) <= self.model.context:
            raise CrossrailError(f"{PROG}: the dataset has {len(corpus.text)} bytes; it needs more than model.context")
        self.text = corpus.text
        if start.engine is not None:
            self.engine = start.engine
        else:
            self.engine = build_engine(cfg, self.model)
            tensors = start.tensors if start.tensors is not None else init_tensors(self.model, cfg.seed)
            self.engine.load(tensors, start.step if start.optimizer else None)
        self.engine.step = start.step or 0  # a continued run counts on from its checkpoint's step
        self.saved_step = start.step if start.own else None  # the step of the newest checkpoint this run holds
        self.peak, source = (cfg.peak_flops, "given") if cfg.peak_flops else (self.engine.peak_flops(), "measured")
        # The batch is global: every worker's share of it together; MFU is against the peak of every device.
        self.flops_per_step = train_flops_per_token(self.model) * cfg.batch * self.model.context
        self.devices = getattr(self.engine, "world", 1)
        lineage = ctx.checkpoint_lineage(self.engine.framework, parent=start.uri)
        self.checkpointer = Checkpointer(ctx.checkpoint_dir, lineage=lineage, keep_last=ctx.keep_last)
        # `steps`: the step training ends at, which progress and the ETA count towards (control.progress)
        reporter.event("started", **describe(self.engine, cfg, self.model, self.peak, source), steps=cfg.steps)
        if start.manifest is not None:
            self._resumed_at(start.manifest, start.uri or "")
        else:
            self._started_at_degree()

    def _started_at_degree(self) -> None:
        """A run that starts with no checkpoint of its own at another degree than it asked for (an elastic
        launch that lost a worker before the first checkpoint) reports the resize too."""
        spec = self.ctx.spec.get("spec")
        parallelism = spec.get("parallelism") if isinstance(spec, dict) else None
        asked = parallelism.get("data") if isinstance(parallelism, dict) else None
        if isinstance(asked, int) and asked != self.ctx.world_size:
            why = "the elastic launch restarted its workers" if self.ctx.restart_count else "started at another degree"
            data = {"degree_before": asked, "degree_after": self.ctx.world_size, "reason": why, "part": None}
            self.reporter.event("resized", **data, step=self.engine.step)

    def _resumed_at(self, manifest: dict[str, Any], uri: str) -> None:
        """The global batch stays what it was; a checkpoint of another degree is a resize, reported as one."""
        samples, degree = data_position(manifest)
        step = int(manifest["step"])
        if samples is not None and samples != step * self.cfg.batch:
            raise CrossrailError(
                f"{PROG}: {uri} was trained with a global batch of {samples // max(step, 1)} (optim.batch) and this "
                f"run asks for {self.cfg.batch}; a run keeps its global batch whatever its degree: set optim.batch "
                f"back to {samples // max(step, 1)}"
            )
        if degree != self.ctx.world_size:
            why = "the elastic launch restarted its workers" if self.ctx.restart_count else "resumed at another degree"
            self.reporter.event(
                "resized", degree_before=degree, degree_after=self.ctx.world_size, reason=why, part=None, step=step
            )

    @property
    def step(self) -> int:
        return self.engine.step

    def tensors(self) -> dict[str, Any]:
        return self.engine.tensors()

    def tokens_per_step(self) -> int:
        return int(self.cfg.batch * self.model.context)

    def _step(self) -> None:
        began = time.perf_counter()
        x, y = gpt_data.batch(self.text, self.engine.step + 1, self.cfg.seed, self.cfg.batch, self.model.context)
        loss = self.engine.train_step(x, y)
        took = time.perf_counter() - began
        metrics = {
            "loss": loss,
            "tokens_per_second": x.size / took,
            "step_time_s": took,
            "mfu": self.flops_per_step / took / (self.peak * self.devices),
            "model_flops_per_second": self.flops_per_step / took,  # MFU's numerator; metrics divides by the chip's peak
        }
        busy = self.engine.utilization()
        if busy is not None:
            metrics["device_busy"] = busy
        self.report_step(metrics)
        if self.heldout is not None and self.cfg.eval_every and self.engine.step % self.cfg.eval_every == 0:
            self._evaluate()

    def _evaluate(self) -> None:
        """eval_loss and eval_pass_rate on the held-out split, as `--task eval` scores them; rank 0 reports.

        Every worker evaluates (its tensors equal rank 0's after the step), so none reaches the next step's
        collective while another is still evaluating a forward pass of its own.
        """
        assert self.heldout is not None
        scores = evaluate(self.engine, self.heldout, context=self.model.context, batch=self.cfg.batch)
        if self.ctx.is_primary:
            step = self.engine.step
            self.reporter.metrics({"eval_loss": scores.loss, "eval_pass_rate": scores.pass_rate}, step)

    def _stop_agreed(self) -> bool:
        if self.ctx.world_size == 1:
            return self.stop_signal is not None
        if parallel.any_worker(self.cfg.framework, self.stop_signal is not None) and self.stop_signal is None:
            self.stop_signal = signal.SIGTERM  # another worker was asked to stop: stop at the same step
        return self.stop_signal is not None

    def state(self) -> dict[str, Any]:
        """What rebuilds this trainer besides the tensors: the model, optimizer scalars, data position."""
        step = self.engine.step
        return {
            "model": self.model.state(),
            "optimizer": self.cfg.adamw.state(step),
            "rng": {"seed": self.cfg.seed, "batches": "numpy default_rng([seed, step])"},
            "data": {
                "position": step,
                "samples": step * self.cfg.batch,  # the global sample cursor: degree-free
                "batch": self.cfg.batch,
                "context": self.model.context,
                "degree": self.ctx.world_size,
            },
            "task": self.cfg.task,
            "dtype": self.cfg.dtype,
        }


def run_inference(ctx: RuntimeContext, cfg: GptSettings, corpus: Corpus, reporter: Reporter) -> int:
    """generate or eval on the newest valid checkpoint of this run, else on the parent's."""
    own = Checkpointer(ctx.checkpoint_dir).latest()
    source = own.uri if own else ctx.parent_checkpoint
    if source is None or source == "latest":
        raise CheckpointNotFound(f"{PROG}: nothing to {cfg.task}: no checkpoint in {ctx.checkpoint_dir} and no parent")
    info, tensors, manifest = restore_from(source, on_skip=lambda uri, why: _skipped(reporter, uri, why), mapped=True)
    source = info.uri  # a damaged parent step falls back to the newest older one that verifies
    ctx.claim(manifest, source, as_parent=own is None)
    model, step = model_of(manifest, source, cfg), manifest["step"]
    engine = build_engine(cfg, model)
    engine.load(tensors, None)
    reporter.event("started", **describe(engine, cfg, model, None, None))
    heartbeat = HeartbeatThread(reporter, ctx.heartbeat_s, step_fn=lambda: step)
    heartbeat.start()
    try:
        if cfg.task == "eval":
            scores = evaluate(engine, corpus, context=model.context, batch=cfg.batch)
            reporter.metrics({"eval_loss": scores.loss, "eval_pass_rate": scores.pass_rate}, step)
            print(f"eval_loss {scores.loss:.4f}  eval_pass_rate {scores.pass_rate:.4f}  ({source}, step {step})")
            owner = ctx.run if own is not None else ctx.parent_run
            score = {"metric": "eval_loss", "value": scores.loss, "evaluated_run": owner}
            reporter.event("evaluated", uri=source, step=step, items=scores.items, mode=scores.mode, **score)
            return EXIT_OK
        prompts = gpt_data.prompts(corpus)
        began = time.perf_counter()
        outputs, tokens = generate(
            engine, prompts, context=model.context, batch=cfg.batch, max_new_tokens=cfg.max_new_tokens
        )
        took = time.perf_counter() - began
        path = os.path.abspath(cfg.output)
        with open(path, "w", encoding="utf-8") as f:
            for prompt, out in zip(prompts, outputs, strict=True):
                line = {"prompt": prompt.decode(errors="replace"), "completion": out.decode(errors="replace")}
                f.write(json.dumps(line) + "\n")
        reporter.metrics({"tokens_per_second": tokens / took, "generate_seconds": took}, step)
        reporter.event("generated", uri=source, step=step, prompts=len(prompts), tokens=tokens, output=path)
        return EXIT_OK
    finally:
        heartbeat.stop()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        ctx = RuntimeContext.from_env()
        cfg = settings(args, ctx)
        corpus = read_corpus(ctx)
        with Reporter(ctx) as reporter:
            reporter.environment()
            if cfg.task in ("generate", "eval"):
                return run_inference(ctx, cfg, corpus, reporter)
            parallel.join(cfg.framework, ctx)
            try:
                return GptTrainer(ctx, cfg, corpus, reporter).run()
            finally:
                parallel.leave(cfg.framework)
    except CrossrailError as exc:
        print(exc, file=sys.stderr)
        return EXIT_BAD_INPUT


if __name__ == "__main__":
    sys.exit(main())
