"""The RL pipeline end to end, as real processes: in one attempt, one process per part, crashes and learning."""

from __future__ import annotations

import os
import signal
import subprocess
from collections import Counter
from pathlib import Path

import pytest
from tests.unit.workloads.builders import of_type
from tests.unit.workloads.rl.builders import final_state, live_pid, metric, rendezvous, rl_launcher, wait_for_step

from crossrail.workloads.rl.control import read_control, write_control


@pytest.mark.slow
def test_crashed_stages_are_replaced_and_a_crashed_learner_resumes_counting_nothing_twice(tmp_path: Path) -> None:
    launcher = rl_launcher(tmp_path, "--steps", "8", "--max-policy-lag-steps", "1", "--eval-every", "100")
    pipeline = launcher.start()
    wait_for_step(launcher, 1, 2)
    os.kill(live_pid(launcher, "sampler"), signal.SIGKILL)
    os.kill(live_pid(launcher, "reward"), signal.SIGKILL)
    wait_for_step(launcher, 1, 4)
    os.kill(live_pid(launcher, "learner"), signal.SIGKILL)
    code, stderr = launcher.finish(pipeline)
    assert code == 0, stderr

    records = launcher.records(1)
    replaced = Counter(e["data"]["part"] for e in of_type(records, "event", "stage_replaced"))
    assert replaced == {"sampler": 1, "reward": 1, "learner": 1}
    assert next(e["data"]["step"] for e in of_type(records, "event", "resumed")) >= 4
    state = final_state(launcher)
    assert state["version"] == 8
    assert len(state["used"]) == len(set(state["used"])) == 8 * 4  # every update took 4 fresh groups
    lags = [lag for _, lag in metric(records, "policy_lag_steps")]
    assert lags
    assert max(lags) <= 1


@pytest.mark.slow
def test_each_part_runs_as_its_own_process_and_a_controller_scales_samplers_down(tmp_path: Path) -> None:
    launcher = rl_launcher(tmp_path, "--steps", "20", "--samplers", "2", "--eval-every", "100")
    parts = [("learner", 0), ("sampler", 0), ("sampler", 1), ("reward", 0)]
    started = {
        part: launcher.start("--part", part[0], "--replica", str(part[1]), attempt=n) for n, part in enumerate(parts, 1)
    }
    wait_for_step(launcher, 1, 3)
    control = read_control(rendezvous(launcher))
    write_control(rendezvous(launcher), control.resized(reason="test", written_by="test", samplers=1))
    assert started[("sampler", 1)].wait(30) == 0  # scaled down: it ends on its own while the learner goes on
    assert started[("learner", 0)].poll() is None
    for part, process in started.items():
        code, stderr = launcher.finish(process)
        assert code == 0, (part, stderr)
    used = final_state(launcher)["used"]
    assert len(used) == len(set(used)) == 20 * 4
    assert {u.split(".")[0] for u in used} == {"sampler0", "sampler1"}


def test_a_bad_argument_is_refused_before_anything_starts(tmp_path: Path) -> None:
    launcher = rl_launcher(tmp_path, "--group", "1", "--task", "sorting")
    done = subprocess.run(
        launcher.command(), env=launcher.env(1), capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 2
    assert "--task 'sorting': choose one of addition, reversal" in done.stderr
    assert "--group must be >= 2" in done.stderr
    assert not rendezvous(launcher).exists()
