"""Builders for the workload tests: a small deterministic corpus and a launcher that sets what crossrail would."""

from __future__ import annotations

import os
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

from crossrail.runtime import read_new

WORDS = ["chip", "slice", "pool", "queue", "stage", "tensor", "shard", "step", "token", "batch", "loss", "rate"]
MODULE = "crossrail.workloads.bigram"


def write_corpus(path: Path, lines: int = 400, seed: int = 42) -> Path:
    rng = random.Random(seed)
    text = "\n".join(" ".join(rng.choice(WORDS) for _ in range(rng.randint(6, 14))) + "." for _ in range(lines))
    path.write_text(text + "\n")
    return path


class Launcher:
    """Runs the workload as crossrail would: one run, numbered attempts, a report file per attempt."""

    def __init__(self, root: Path, run: str = "bigram-1") -> None:
        self.root, self.run_id = root, run
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
        return [sys.executable, "-m", MODULE, *self.defaults, *args]

    def run(self, *args: str, attempt: int = 1) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            self.command(*args), env=self.env(attempt), capture_output=True, text=True, timeout=120, check=False
        )

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
