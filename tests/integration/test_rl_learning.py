"""RL raises held-out accuracy after the warm start: the pipeline's reason to exist, measured."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from tests.unit.workloads.rl.builders import final_state, metric, rl_launcher

WARM_STEPS, RL_STEPS = 24, 60
BEFORE_AT_MOST, AFTER_AT_LEAST = 0.4, 0.8
"""With seed 0 the 24-step warm start reverses about 29% of the held-out strings exactly; 60 GRPO steps
(16 prompts x 8 completions each, partial-credit reward, lag <= 2) take it to 100% (bench/rl.py prints the
curves). The thresholds leave room for the order in which asynchronous stages interleave."""


@pytest.mark.slow
def test_held_out_accuracy_rises_clearly_under_rl(tmp_path: Path) -> None:
    launcher = rl_launcher(tmp_path)
    launcher.defaults = ["--warm-steps", str(WARM_STEPS), "--steps", str(RL_STEPS), "--eval-every", "20"]
    done = subprocess.run(
        launcher.command(), env=launcher.env(1), capture_output=True, text=True, timeout=600, check=False
    )
    assert done.returncode == 0, done.stderr

    records = launcher.records(1)
    accuracy = dict(metric(records, "eval_pass_rate"))
    assert accuracy[0] <= BEFORE_AT_MOST, accuracy
    assert accuracy[RL_STEPS] >= AFTER_AT_LEAST, accuracy
    rewards = [r for _, r in metric(records, "reward_mean")]
    assert sum(rewards[-5:]) / 5 > sum(rewards[:5]) / 5 + 0.2
    assert max(lag for _, lag in metric(records, "policy_lag_steps")) <= 2
    used = final_state(launcher)["used"]
    assert len(used) == len(set(used)) == RL_STEPS * 16
