"""Training throughput and MFU of the reference GPT, per framework and dtype.

1. Tokens per second under the crossrail runtime (the `crossrail.workloads.gpt` training loop with its reporter,
   heartbeat thread and step metrics; periodic checkpoints off) against the same model and optimizer in a bare
   loop, in the same process; ratio printed (aim >= 0.97).
2. MFU (docs/runtime.md, "Workload metrics") against the fp32 matmul peak the framework measures in the same
   run (aims: >= 55% PyTorch, >= 40% JAX); bf16 runs are also measured against the bf16 peak.

The model is 4 layers, d_model 256, 4 heads, context 256, batch 16 (`--quick`: 2 layers, d_model 128, context
128, batch 8). Each measurement skips the warm-up steps (compilation, allocator warm-up), is repeated, and
the medians are reported. The last line is the summary.

    python bench/train.py [--steps 20] [--repeats 3] [--quick] [--frameworks torch,jax] [--dtypes fp32,bf16]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from crossrail.runtime import Reporter, RuntimeContext, read_new
from crossrail.workloads import gpt, gpt_data
from crossrail.workloads.gpt_model import GPTConfig, init_tensors, train_flops_per_token

FULL = {"n_layer": 4, "n_head": 4, "d_model": 256, "context": 256, "batch": 16}
QUICK = {"n_layer": 2, "n_head": 4, "d_model": 128, "context": 128, "batch": 8}
WARMUP = 3
WORDS = ["chip", "slice", "pool", "queue", "stage", "tensor", "shard", "step", "token", "batch", "loss", "rate"]


@dataclass
class Row:
    framework: str
    dtype: str
    runtime: list[float]  # tokens per second, one per repeat
    bare: list[float]
    peak: list[float]  # the peak FLOP/s of the run's dtype
    fp32_peak: list[float]


def write_inputs(root: Path, shape: dict[str, int]) -> tuple[Path, Path]:
    rng = np.random.default_rng(0)
    text = " ".join(rng.choice(WORDS, size=200_000)) + "\n"
    (root / "corpus.txt").write_text(text)
    model = {k: shape[k] for k in ("n_layer", "n_head", "d_model", "context")}
    config = {"model": model | {"vocab": 256}, "optim": {"lr": 3e-4, "batch": shape["batch"]}}
    (root / "train.json").write_text(json.dumps(config))
    return root / "corpus.txt", root / "train.json"


def context(root: Path, dataset: Path, config: Path, tag: str) -> RuntimeContext:
    return RuntimeContext(
        backend="cpu",
        experiment="bench",
        run=f"bench-{tag}",
        attempt=1,
        checkpoint_dir=str(root / "checkpoints" / tag),
        dataset=str(dataset),
        report=str(root / f"report-{tag}.jsonl"),
        config=config.as_uri(),
    )


def under_runtime(ctx: RuntimeContext, args: list[str], steps: int) -> float:
    """Tokens/s of the workload's own loop between the ends of step WARMUP and the last step (record times)."""
    cfg = gpt.settings(gpt.parse_args(args), ctx)
    corpus = gpt.read_corpus(ctx)
    with Reporter(ctx) as reporter:
        assert gpt.GptTrainer(ctx, cfg, corpus, reporter).run() == 0
    records = read_new(ctx.report, None)[0]
    ends = {r["step"]: r["ts"] for r in records if r["type"] == "metric" and r["name"] == "loss"}
    return (steps - WARMUP) * cfg.batch * cfg.model.context / (ends[steps] - ends[WARMUP])


def bare(ctx: RuntimeContext, args: list[str], steps: int) -> float:
    """Tokens/s of the same engine and batches in a plain loop: no reporter, heartbeat or metrics."""
    cfg = gpt.settings(gpt.parse_args(args), ctx)
    text = gpt.read_corpus(ctx).text
    engine = gpt.build_engine(cfg, cfg.model)
    engine.load(init_tensors(cfg.model, cfg.seed), None)
    for step in range(1, steps + 1):
        if step == WARMUP + 1:
            began = time.perf_counter()
        engine.train_step(*gpt_data.batch(text, step, cfg.seed, cfg.batch, cfg.model.context))
    return (steps - WARMUP) * cfg.batch * cfg.model.context / (time.perf_counter() - began)


def peak(ctx: RuntimeContext, framework: str, dtype: str) -> float:
    cfg = gpt.settings(gpt.parse_args(["--framework", framework, "--dtype", dtype]), ctx)
    return gpt.build_engine(cfg, GPTConfig(n_layer=1, n_head=1, d_model=8, context=8)).peak_flops()


def measure(root: Path, shape: dict[str, int], framework: str, dtype: str, *, steps: int, repeats: int) -> Row:
    dataset, config = write_inputs(root, shape)
    row = Row(framework, dtype, [], [], [], [])
    for rep in range(repeats):
        ctx = context(root, dataset, config, f"{framework}-{dtype}-{rep}")
        fp32_before = peak(ctx, framework, "fp32")
        own_before = fp32_before if dtype == "fp32" else peak(ctx, framework, dtype)
        args = ["--framework", framework, "--dtype", dtype, "--steps", str(steps), "--peak-flops", str(own_before)]
        args += ["--checkpoint-every-steps", str(steps + 1)]  # periodic checkpoints off; the final one is untimed
        if rep % 2:  # alternate which goes first, so a machine that speeds up or slows down favours neither
            row.bare.append(bare(ctx, args, steps))
            row.runtime.append(under_runtime(ctx, args, steps))
        else:
            row.runtime.append(under_runtime(ctx, args, steps))
            row.bare.append(bare(ctx, args, steps))
        # The peak is the best of a measurement before and one after, so a busy moment cannot inflate MFU.
        row.fp32_peak.append(max(fp32_before, peak(ctx, framework, "fp32")))
        row.peak.append(row.fp32_peak[-1] if dtype == "fp32" else max(own_before, peak(ctx, framework, dtype)))
        print(
            f"  {framework} {dtype} repeat {rep + 1}: runtime {row.runtime[-1]:,.0f} tok/s, "
            f"bare {row.bare[-1]:,.0f} tok/s, peak {row.peak[-1] / 1e9:,.1f} GFLOP/s",
            flush=True,
        )
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=20, help="steps per measurement, the first 3 untimed (default 20)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="a smaller model and batch")
    ap.add_argument("--frameworks", default="torch,jax")
    ap.add_argument("--dtypes", default="fp32,bf16")
    a = ap.parse_args()
    if a.steps <= WARMUP + 1:
        ap.error(f"--steps must be more than {WARMUP + 1}: the first {WARMUP} are warm-up")
    shape = QUICK if a.quick else FULL
    model = GPTConfig(**{k: shape[k] for k in ("n_layer", "n_head", "d_model", "context")})
    per_token = train_flops_per_token(model)
    print(f"model {shape}, {per_token / 1e6:.1f} MFLOP/token, {a.steps} steps ({WARMUP} warm-up), {a.repeats} repeats")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for framework in a.frameworks.split(","):
            for dtype in a.dtypes.split(","):
                rows.append(measure(Path(tmp), shape, framework, dtype, steps=a.steps, repeats=a.repeats))
    summary = []
    head = ("framework", "dtype", "runtime tok/s", "bare tok/s", "ratio", "MFU/fp32 peak", "MFU/own peak")
    print("{:9} {:5} {:>14} {:>11} {:>6} {:>14} {:>13}".format(*head))
    for row in rows:
        runtime, base = statistics.median(row.runtime), statistics.median(row.bare)
        fp32_mfu = per_token * runtime / statistics.median(row.fp32_peak)
        own_mfu = per_token * runtime / statistics.median(row.peak)
        ratio = runtime / base
        cells = f"{runtime:14,.0f} {base:11,.0f} {ratio:6.3f} {fp32_mfu:14.1%} {own_mfu:13.1%}"
        print(f"{row.framework:9} {row.dtype:5} {cells}")
        summary.append(f"{row.framework}_{row.dtype} ratio {ratio:.3f} mfu {fp32_mfu:.1%} tok/s {runtime:,.0f}")
    print("SUMMARY " + " | ".join(summary))


if __name__ == "__main__":
    main()
