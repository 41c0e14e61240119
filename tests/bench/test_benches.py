"""Every benchmark in bench/ runs in a reduced mode and ends with its SUMMARY line, so no change breaks one unnoticed.

The reduced modes measure nothing worth reading (a few experiments, steps or seconds: about 20 s each on a quiet
machine); the figures come from `make bench`. What is asserted is that each script runs to its end: exit status
0 and a last line that starts with `SUMMARY`.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

BENCH = Path(__file__).resolve().parents[2] / "bench"

REDUCED: dict[str, list[str]] = {
    "api": ["--experiments", "20", "--repeats", "1", "--events", "2000", "--pending", "200", "--requests", "20"],
    "chaos": [
        *["--runs", "2", "--steps", "60", "--agent-kills", "2", "--training-kills", "1", "--save-kills", "1"],
        *["--fuzz", "4", "--seconds", "8"],
    ],
    "ckpt": ["--gb", "0.02", "--tensors", "4", "--reps", "1"],
    "load": ["--seconds", "3", "--clients", "2", "--agents", "2"],
    # Degree 2 is the least that runs DDP's all-reduce in both loops: two torchrun launches of two workers.
    "parallel": ["--steps", "4", "--repeats", "1", "--degrees", "2"],
    "parity": ["--jobs", "3", "--policies", "las,min_jct_hetero"],  # four others: test_parity.py
    # bench/rl.py's two comparisons, a case each: each is two pipelines whose learner and sampler import torch,
    # seconds of CPU apiece that no smaller model or fewer steps can save.
    "rl/controller": [
        *["--parts", "controller", "--steps", "4", "--skip", "1", "--warm-steps", "2"],
        *["--window", "1", "--sample-sleep", "0.05", "--sampler-chips", "2", "--reward-chips", "1"],
    ],
    "rl/async": ["--parts", "async", "--steps", "4", "--skip", "1", "--warm-steps", "2"],
    "schedule": ["--sizes", "200", "--repeats", "1"],
    "sim": ["--cases", "gavel", "gavel-trace", "big-jobs", "--repeats", "1", "--big-scale", "64", "--days", "2"],
    "submit": ["--experiments", "200", "--batch", "100", "--events", "2000", "--repeats", "1"],
    "train": ["--steps", "5", "--repeats", "1", "--quick", "--frameworks", "torch", "--dtypes", "fp32"],
}
TIMEOUT_S = 300  # a hard stop for a hung script; the reduced runs take about 20 s quiet


def test_every_benchmark_has_a_reduced_run() -> None:
    assert sorted(p.stem for p in BENCH.glob("*.py")) == sorted({run.partition("/")[0] for run in REDUCED})


@pytest.mark.parametrize("name", sorted(REDUCED))
def test_the_benchmark_runs_to_its_summary(name: str, tmp_path: Path) -> None:
    if name == "load" and not (shutil.which("initdb") or list(Path("/usr/lib/postgresql").glob("*/bin/initdb"))):
        pytest.skip("bench/load.py runs its agents on PostgreSQL: the server binaries are not installed")
    script = BENCH / f"{name.partition('/')[0]}.py"  # "rl/async": bench/rl.py's reduced run of one part
    env = {k: v for k, v in os.environ.items() if not k.startswith("CROSSRAIL_")}
    env |= {"TMPDIR": str(tmp_path), "COLUMNS": "200"}
    proc = subprocess.run(
        [sys.executable, str(script), *REDUCED[name]],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
    )
    said = f"bench/{script.name} {' '.join(REDUCED[name])} exited {proc.returncode}:\n"
    said += f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    assert proc.returncode == 0, said
    last = (proc.stdout.strip().splitlines() or [""])[-1]
    assert last.startswith("SUMMARY"), said
