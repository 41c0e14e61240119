"""Builders for the workload tests: a small deterministic corpus and a launcher that sets what crossrail would."""

from __future__ import annotations

import itertools
import json
import os
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from crossrail.runtime import read_new
from crossrail.workloads import gpt_data
from crossrail.workloads.gpt_model import AdamW, GPTConfig, ModelEngine

WORDS = ["chip", "slice", "pool", "queue", "stage", "tensor", "shard", "step", "token", "batch", "loss", "rate"]
MODULE = "crossrail.workloads.bigram"


TINY = GPTConfig(n_layer=2, n_head=2, d_model=32, context=16)
"""The GPT every framework test trains: small enough for a few hundred CPU steps."""
ADAMW = AdamW(lr=1e-2)


def train(e: ModelEngine, text: np.ndarray, steps: int) -> list[float]:
    """`steps` training steps of `e` on `text` (batch 4, the batch drawn from the engine's next step)."""
    return [e.train_step(*gpt_data.batch(text, e.step + 1, 0, 4, TINY.context)) for _ in range(steps)]


def write_corpus(path: Path, lines: int = 400, seed: int = 42) -> Path:
    rng = random.Random(seed)
    text = "\n".join(" ".join(rng.choice(WORDS) for _ in range(rng.randint(6, 14))) + "." for _ in range(lines))
    path.write_text(text + "\n")
    return path


class Launcher:
    """Runs the workload as crossrail would: one run, numbered attempts, a report file per attempt."""

    def __init__(self, root: Path, run: str = "bigram-1", module: str = MODULE) -> None:
        self.root, self.run_id, self.module = root, run, module
        root.mkdir(parents=True, exist_ok=True)
        self.checkpoints = root / "checkpoints" / run
        self.dataset = write_corpus(root / "corpus.txt")
        self.spec: str = "{}"
        self.config: str = ""
        self.defaults = ["--step-sleep", "0", "--lr", "0.05"]  # later arguments override these

    def report(self, attempt: int) -> Path:
        return self.root / f"report-{attempt}.jsonl"

    def env(self, attempt: int) -> dict[str, str]:
        base = {k: v for k, v in os.environ.items() if not k.startswith("CROSSRAIL_") and k != "TRAINING_BACKEND"}
        return base | {
            "TRAINING_BACKEND": "cpu",
            "EXPERIMENT_ID": "bigram",
            "CROSSRAIL_RUN_ID": self.run_id,
            "CROSSRAIL_ATTEMPT": str(attempt),
            "CROSSRAIL_CHECKPOINT_DIR": self.checkpoints.as_uri(),
            "CROSSRAIL_DATASET": self.dataset.as_uri(),
            "CROSSRAIL_CONFIG": self.config,
            "CROSSRAIL_REPORT": str(self.report(attempt)),
            "CROSSRAIL_SPEC": self.spec,
            "CROSSRAIL_HEARTBEAT_S": "0.05",
        }

    def command(self, *args: str) -> list[str]:
        return [sys.executable, "-m", self.module, *self.defaults, *args]

    def run(self, *args: str, attempt: int = 1, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
        command, env = self.command(*args), self.env(attempt)
        return subprocess.run(command, env=env, cwd=cwd, capture_output=True, text=True, timeout=120, check=False)

    def start(self, *args: str, attempt: int = 1) -> subprocess.Popen[str]:
        return subprocess.Popen(
            self.command(*args), env=self.env(attempt), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
        )

    @staticmethod
    def finish(process: subprocess.Popen[str]) -> tuple[int, str]:
        """Wait for a started attempt; its exit status and stderr."""
        _, stderr = process.communicate(timeout=60)
        return process.returncode, stderr

    def records(self, attempt: int) -> list[dict[str, Any]]:
        return read_new(str(self.report(attempt)), None)[0]


def losses(records: list[dict[str, Any]]) -> dict[int, float]:
    return {r["step"]: r["value"] for r in records if r["type"] == "metric" and r["name"] == "loss"}


def of_type(records: list[dict[str, Any]], kind: str, name: str | None = None) -> list[dict[str, Any]]:
    return [r for r in records if r["type"] == kind and (name is None or r.get("name") == name)]


# ---- the GPT workloads ---------------------------------------------------------------------------------------

GPT_MODULE = "crossrail.workloads.gpt"
TINY_MODEL = "model: {n_layer: 2, n_head: 2, d_model: 32, context: 16, vocab: 256}\n"
TINY_CONFIG = TINY_MODEL + "optim: {lr: 1.0e-2, batch: 4}\n"


def spec(**top: object) -> str:
    return json.dumps(
        {
            "spec": {"checkpoint": {"every": None, "keep_last": 10}},
            "lineage": {"dataset_version": "sha256:d1", "code_commit": "abc1234"},
            "placement": {"pool": "local", "chip_type": "cpu", "accelerator": "cpu", "chips": 1},
            **top,
        }
    )


def gpt_launcher(root: Path, run: str = "gpt-1", config: str = TINY_CONFIG) -> Launcher:
    """A launcher of the GPT workload with the tiny test model; its dataset is write_corpus()."""
    launcher = Launcher(root, run=run, module=GPT_MODULE)
    (root / "train.yaml").write_text(config)
    launcher.config = (root / "train.yaml").as_uri()
    launcher.spec = spec()
    launcher.defaults = ["--peak-flops", "1e12"]  # MFU's peak given: measuring it is test_gpt_entry's business
    return launcher


def run_in_process(launcher: Launcher, *args: str, attempt: int = 1) -> int:
    """The GPT entry point called in this process with the launcher's environment: no interpreter start-up."""
    from crossrail.workloads import gpt

    with pytest.MonkeyPatch.context() as mp:
        for name in [n for n in os.environ if n.startswith("CROSSRAIL_") or n == "TRAINING_BACKEND"]:
            mp.delenv(name)
        for name, value in launcher.env(attempt).items():
            mp.setenv(name, value)
        return gpt.main([*launcher.defaults, *args])


def pairs_dataset(path: Path, key: str = "completion") -> Path:
    """The workspace's post-training shape: prompt "a b", completion "b a" (or answer "b") for neighbouring words."""
    rows = []
    for a, b in itertools.pairwise(WORDS):
        rows.append({"prompt": f"{a} {b}", key: f"{b} {a}" if key == "completion" else b})
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path
