"""Data-parallel training throughput of the reference GPT (PyTorch) at degree 1 and 2, against a bare DDP loop.

1. crossrail: `torchrun --standalone --nproc-per-node=D` runs the `crossrail.workloads.gpt` training loop (its
   reporter, heartbeat, step metrics, rank 0 reporting; periodic checkpoints off), one global batch split
   across the D workers. Tokens per second are read from rank 0's loss records: the global batch over the
   median time from one step's loss to the next's after the WARMUP steps.
2. bare: the same torchrun, model, optimizer, global batch and data split in a plain DistributedDataParallel
   loop (this file with `--bare`), timed the same way.

Every worker gets one thread (OMP_NUM_THREADS=1), standing for one chip: degree 2 has twice the compute. Each
measurement is repeated, crossrail and the bare loop going first in turn; medians are reported. Printed:
tokens/s per degree for both, crossrail / bare per degree (aim >= 0.95), and the scaling efficiency
tokens/s(2) / (2 x tokens/s(1)) of each. Without a GPU the runs are on CPU processes with gloo (said in the
output). The last line is the summary.

    python bench/parallel.py [--steps 20] [--repeats 3] [--degrees 1,2]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

MODEL = {"n_layer": 2, "n_head": 4, "d_model": 128, "context": 128}
BATCH = 16  # global
WARMUP = 3
WORDS = ["chip", "slice", "pool", "queue", "stage", "tensor", "shard", "step", "token", "batch", "loss", "rate"]
AIM = 0.95


def tokens_per_second(ends: dict[int, float], steps: int) -> float:
    """The global batch's tokens over the median step after the warm-up, a step lasting from the end of the one
    before to its own end (everything the loop does); the median leaves out the spells another process of a busy
    host held the CPU, which a total over a dozen steps takes in."""
    gaps = [ends[step] - ends[step - 1] for step in range(WARMUP + 1, steps + 1)]
    return float(BATCH * MODEL["context"] / statistics.median(gaps))


def torchrun(degree: int) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={degree}"]


def threads_env(degree: int) -> dict[str, str]:
    """One thread per worker: each worker stands for one chip, so degree 2 has twice the compute of degree 1."""
    del degree
    return {"OMP_NUM_THREADS": "1"}


def write_inputs(root: Path) -> tuple[Path, Path]:
    rng = np.random.default_rng(0)
    (root / "corpus.txt").write_text(" ".join(rng.choice(WORDS, size=200_000)) + "\n")
    config = {"model": MODEL | {"vocab": 256}, "optim": {"lr": 3e-4, "batch": BATCH}, "compile": False}
    (root / "train.json").write_text(json.dumps(config))
    return root / "corpus.txt", root / "train.json"


def crossrail_run(root: Path, degree: int, steps: int, tag: str) -> float:
    """Tokens/s of the workload's own loop under torchrun at `degree`."""
    from crossrail.runtime import read_new

    corpus, config = write_inputs(root)
    report = root / f"report-{tag}.jsonl"
    env = {
        **os.environ,
        **threads_env(degree),
        "TRAINING_BACKEND": "cpu",
        "EXPERIMENT_ID": "bench",
        "CROSSRAIL_RUN_ID": f"bench-{tag}",
        "CROSSRAIL_ATTEMPT": "1",
        "CROSSRAIL_CHECKPOINT_DIR": (root / "checkpoints" / tag).as_uri(),
        "CROSSRAIL_DATASET": corpus.as_uri(),
        "CROSSRAIL_CONFIG": config.as_uri(),
        "CROSSRAIL_REPORT": str(report),
    }
    args = [
        "--steps",
        str(steps),
        "--checkpoint-every-steps",
        str(10**9),
        "--framework",
        "torch",
        "--peak-flops",
        "1e12",
    ]
    command = [*torchrun(degree), "--no-python", sys.executable, "-m", "crossrail.workloads.gpt", *args]
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"crossrail run at degree {degree} failed:\n{done.stderr[-3000:]}")
    records = read_new(str(report), None)[0]
    ends = {r["step"]: r["ts"] for r in records if r["type"] == "metric" and r["name"] == "loss"}
    return tokens_per_second(ends, steps)


def bare_run(root: Path, degree: int, steps: int) -> float:
    """Tokens/s of the plain DDP loop (this file, --bare) under the same torchrun."""
    corpus, _ = write_inputs(root)
    out = root / f"bare-{degree}.json"
    command = [*torchrun(degree), __file__, "--bare", "--steps", str(steps), "--corpus", str(corpus), "--out", str(out)]
    done = subprocess.run(
        command, env={**os.environ, **threads_env(degree)}, capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise SystemExit(f"bare loop at degree {degree} failed:\n{done.stderr[-3000:]}")
    tps: float = json.loads(out.read_text())["tokens_per_second"]
    return tps


def bare_loop(steps: int, corpus: Path, out: Path) -> None:
    """One torchrun worker of the bare loop: the GPT in DDP, AdamW, each rank its rows of the global batch."""
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel

    from crossrail.runtime.torch_adapter import state_from_neutral
    from crossrail.workloads import gpt_data
    from crossrail.workloads.gpt_model import GPTConfig, init_tensors
    from crossrail.workloads.gpt_torch import GPT

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    cfg = GPTConfig(**MODEL)
    model = GPT(cfg)
    state_from_neutral(model, init_tensors(cfg, 0))
    ddp = DistributedDataParallel(model) if world > 1 else model
    params = list(model.parameters())
    groups = [
        {"params": [p for p in params if p.dim() >= 2], "weight_decay": 0.1},
        {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
    ]
    opt = torch.optim.AdamW(groups, lr=3e-4, betas=(0.9, 0.95), eps=1e-8)
    text = np.frombuffer(corpus.read_bytes(), np.uint8)
    rows = np.array_split(np.arange(BATCH), world)[rank]
    ends = {}
    for step in range(1, steps + 1):
        x, y = gpt_data.batch(text, step, 0, BATCH, cfg.context)
        xs, ys = (torch.from_numpy(a[rows].astype(np.int64)) for a in (x, y))
        loss = F.cross_entropy(ddp(xs).reshape(-1, cfg.vocab), ys.reshape(-1))
        opt.zero_grad(set_to_none=True)
        torch.autograd.backward(loss)
        opt.step()
        total = loss.detach().reshape(1) * (len(rows) / BATCH)
        if world > 1:
            dist.all_reduce(total)
        total.item()  # the step's loss is known, as the workload knows it before it reports
        ends[step] = time.time()
    if rank == 0:
        out.write_text(json.dumps({"tokens_per_second": tokens_per_second(ends, steps)}))
    dist.destroy_process_group()


def has_gpu() -> bool:
    import torch

    return torch.cuda.is_available()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--degrees", default="1,2")
    p.add_argument("--bare", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--corpus", type=Path, help=argparse.SUPPRESS)
    p.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.bare:
        bare_loop(args.steps, args.corpus, args.out)
        return
    degrees = [int(d) for d in args.degrees.split(",")]
    where = (
        "GPU (nccl)" if has_gpu() else "CPU processes with gloo: no GPU on this machine, so no GPU, bf16 or MFU figures"
    )
    print(f"PyTorch GPT {MODEL}, global batch {BATCH}, {args.steps} steps ({WARMUP} warm-up), {args.repeats} repeats")
    print(f"on {where}; {os.cpu_count()} cores, one thread per worker")
    ours: dict[int, list[float]] = {d: [] for d in degrees}
    bare: dict[int, list[float]] = {d: [] for d in degrees}
    with tempfile.TemporaryDirectory() as tmp:
        for repeat in range(args.repeats):
            for d in degrees:  # interleaved, so a slow spell of the machine hits both alike
                for which in ("ours", "bare") if repeat % 2 == 0 else ("bare", "ours"):  # each first in turn
                    if which == "ours":
                        ours[d].append(crossrail_run(Path(tmp), d, args.steps, f"{d}-{repeat}"))
                    else:
                        bare[d].append(bare_run(Path(tmp), d, args.steps))
    med = {d: (statistics.median(ours[d]), statistics.median(bare[d])) for d in degrees}
    print(f"{'degree':>6} {'crossrail tok/s':>16} {'bare DDP tok/s':>15} {'ratio':>6}")
    for d in degrees:
        print(f"{d:>6} {med[d][0]:>16,.0f} {med[d][1]:>15,.0f} {med[d][0] / med[d][1]:>6.3f}")
    summary = [f"ratio@{d}={med[d][0] / med[d][1]:.3f}" for d in degrees]
    if 1 in med and 2 in med:
        eff = med[2][0] / (2 * med[1][0])
        eff_bare = med[2][1] / (2 * med[1][1])
        print(f"scaling efficiency 1->2: crossrail {eff:.3f}, bare {eff_bare:.3f}")
        summary += [f"scaling_eff={eff:.3f}", f"bare_scaling_eff={eff_bare:.3f}"]
    worst = min(med[d][0] / med[d][1] for d in degrees)
    verdict = "meets" if worst >= AIM else "misses"
    print(
        f"SUMMARY parallel: {' '.join(summary)} ({verdict} the {AIM:.2f}x aim; {'gpu' if has_gpu() else 'cpu, no gpu'})"
    )


if __name__ == "__main__":
    main()
