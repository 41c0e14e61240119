"""The bigram workload as crossrail runs it: a real process that learns, reports, checkpoints, stops and resumes."""

from __future__ import annotations

import json
import math
import signal
from pathlib import Path

import numpy as np
import pytest
from tests.conftest import wait_for

from crossrail.runtime import Checkpointer, step_dirname

from .builders import Launcher, losses, of_type

LOG_256 = math.log(256)


def spec(**top: object) -> str:
    return json.dumps(
        {
            "apiVersion": "crossrail/v1",
            "kind": "Experiment",
            "spec": {"checkpoint": {"every": None, "keep_last": 10}},
            "lineage": {"dataset_version": "sha256:d1", "code_commit": "abc1234"},
            "placement": {"pool": "cpu-local", "chip_type": "cpu", "accelerator": "cpu", "chips": 1},
            **top,
        }
    )


@pytest.mark.slow
def test_a_run_learns_reports_and_checkpoints(launcher: Launcher, tmp_path: Path) -> None:
    (tmp_path / "train.yaml").write_text("model: {n_layer: 2, context: 32}\noptim: {lr: 5.0e-2, batch: 8}\n")
    launcher.config = (tmp_path / "train.yaml").as_uri()
    launcher.defaults = ["--step-sleep", "0"]  # lr and batch from the config
    launcher.spec = spec()
    done = launcher.run("--steps", "40", "--checkpoint-every-steps", "10")
    assert done.returncode == 0, done.stderr
    records = launcher.records(1)
    loss = losses(records)
    assert sorted(loss) == list(range(1, 41))
    assert loss[1] == pytest.approx(LOG_256, rel=1e-6)  # a zero table predicts every byte equally
    assert np.mean([loss[s] for s in range(36, 41)]) < np.mean([loss[s] for s in range(1, 6)]) - 0.5
    checkpoints = of_type(records, "checkpoint")
    assert [c["step"] for c in checkpoints] == [10, 20, 30, 40]
    assert checkpoints[-1]["uri"] == (launcher.checkpoints / step_dirname(40)).as_uri()
    assert checkpoints[-1]["tokens"] == 40 * 8 * 32
    assert [c.step for c in Checkpointer(str(launcher.checkpoints)).list()] == [10, 20, 30, 40]
    assert of_type(records, "heartbeat")
    for name in ("tokens_per_second", "step_time_s", "checkpoint_write_seconds", "steps_per_hour"):
        assert of_type(records, "metric", name), name
    assert of_type(records, "invalid") == []
    assert {r["run"] for r in records} == {"bigram-1"}
    printed = done.stdout.splitlines()  # progress for `crossrail logs`: every step of 40, as reported
    assert len(printed) == 40
    assert printed[0].startswith(f"step 1/40  loss {loss[1]:.4f}  tokens/s ")
    assert printed[-1].startswith(f"step 40/40  loss {loss[40]:.4f}  tokens/s ")
    manifest = Checkpointer(str(launcher.checkpoints)).restore()[1]
    assert manifest["state"]["data"] == {"position": 40, "batch": 8, "block": 32}
    assert manifest["state"]["optimizer"]["lr"] == 0.05
    assert manifest["lineage"] | {"hardware": None} == {
        "run": "bigram-1",
        "run_uid": None,  # launched by hand, without CROSSRAIL_RUN_UID
        "experiment": "bigram",
        "spec_digest": None,
        "attempt": 1,
        "parent": None,
        "dataset_version": "sha256:d1",
        "code_commit": "abc1234",
        "hardware": None,
        "framework": "numpy",
    }
    assert manifest["lineage"]["hardware"] == {"pool": "cpu-local", "chip_type": "cpu", "accelerator": "cpu"}


@pytest.mark.slow
def test_sigterm_checkpoints_the_step_reached_exits_75_and_the_retry_matches_an_uninterrupted_run(
    launcher: Launcher, tmp_path: Path
) -> None:
    # 1. Stop the first attempt the way crossrail does, somewhere after step 5.
    first = launcher.start("--steps", "100000", "--step-sleep", "0.01", "--checkpoint-every-steps", "1000")
    wait_for(lambda: max(losses(launcher.records(1)), default=0) >= 5)
    first.send_signal(signal.SIGTERM)
    code, stderr = launcher.finish(first)
    assert code == 75, stderr
    records = launcher.records(1)
    reached = max(losses(records))
    assert [c["step"] for c in of_type(records, "checkpoint")] == [reached]
    assert of_type(records, "event", "stopped")[0]["data"] == {"signal": "SIGTERM", "step": reached, "saved": True}
    assert [c.step for c in Checkpointer(str(launcher.checkpoints)).list()] == [reached]
    # 2. The retry resumes from that checkpoint, not from zero.
    retry = launcher.run("--steps", str(reached + 3), attempt=2)
    assert retry.returncode == 0, retry.stderr
    resumed = launcher.records(2)
    assert of_type(resumed, "event", "resumed")[0]["data"] == {
        "step": reached,
        "from": (launcher.checkpoints / step_dirname(reached)).as_uri(),
    }
    assert sorted(losses(resumed)) == [reached + 1, reached + 2, reached + 3]
    # 3. Its losses are exactly those of a run that was never stopped.
    reference = Launcher(tmp_path / "reference")
    reference.dataset.write_bytes(launcher.dataset.read_bytes())
    assert reference.run("--steps", str(reached + 3)).returncode == 0
    expected = losses(reference.records(1))
    assert losses(resumed) == {s: expected[s] for s in (reached + 1, reached + 2, reached + 3)}
    assert losses(records) == {s: expected[s] for s in range(1, reached + 1)}


@pytest.mark.slow
def test_a_killed_run_resumes_from_its_last_periodic_checkpoint(launcher: Launcher) -> None:
    first = launcher.start("--steps", "100000", "--step-sleep", "0.005", "--checkpoint-every-steps", "4")
    wait_for(lambda: len(of_type(launcher.records(1), "checkpoint")) >= 3)
    first.send_signal(signal.SIGKILL)
    assert launcher.finish(first)[0] == -signal.SIGKILL
    last = max(c["step"] for c in of_type(launcher.records(1), "checkpoint"))
    retry = launcher.run("--steps", str(last + 2), attempt=2)
    assert retry.returncode == 0, retry.stderr
    records = launcher.records(2)
    resumed = of_type(records, "event", "resumed")[0]["data"]["step"]
    assert resumed >= last >= 12
    assert min(losses(records)) == resumed + 1


@pytest.mark.slow
def test_a_torn_newest_checkpoint_is_skipped_and_reported_on_resume(launcher: Launcher) -> None:
    assert launcher.run("--steps", "10", "--checkpoint-every-steps", "5").returncode == 0
    (launcher.checkpoints / step_dirname(10) / "manifest.json").unlink()
    retry = launcher.run("--steps", "12", attempt=2)
    assert retry.returncode == 0, retry.stderr
    records = launcher.records(2)
    skipped = of_type(records, "event", "checkpoint_skipped")
    assert [s["data"]["uri"] for s in skipped] == [(launcher.checkpoints / step_dirname(10)).as_uri()]
    assert of_type(records, "event", "resumed")[0]["data"]["step"] == 5
    assert min(losses(records)) == 6


@pytest.mark.slow
def test_a_child_run_starts_from_its_parents_checkpoint(launcher: Launcher, tmp_path: Path) -> None:
    assert launcher.run("--steps", "30").returncode == 0
    child = Launcher(tmp_path / "child", run="child-1")
    child.spec = spec(parent_checkpoint=launcher.checkpoints.as_uri())
    done = child.run("--steps", "5")
    assert done.returncode == 0, done.stderr
    records = child.records(1)
    parent_uri = (launcher.checkpoints / step_dirname(30)).as_uri()
    assert of_type(records, "event", "initialised")[0]["data"] == {"from": parent_uri, "step": 30}
    assert min(losses(records)) == 1
    assert losses(records)[1] < LOG_256 - 0.3  # it starts from trained weights
    assert Checkpointer(str(child.checkpoints)).restore()[1]["lineage"]["parent"] == parent_uri


def test_a_parent_of_latest_with_nothing_to_resolve_starts_from_zeros(launcher: Launcher) -> None:
    launcher.spec = spec(parent_checkpoint="latest")
    assert launcher.run("--steps", "2").returncode == 0
    assert losses(launcher.records(1))[1] == pytest.approx(LOG_256, rel=1e-6)


@pytest.mark.slow
def test_eval_reports_loss_and_pass_rate_of_the_newest_checkpoint(launcher: Launcher) -> None:
    assert launcher.run("--steps", "30").returncode == 0
    done = launcher.run("--eval", attempt=2)
    assert done.returncode == 0, done.stderr
    records = launcher.records(2)
    (loss,) = of_type(records, "metric", "eval_loss")
    (rate,) = of_type(records, "metric", "eval_pass_rate")
    assert loss["step"] == rate["step"] == 30
    assert loss["value"] < LOG_256 - 0.5
    assert 0.1 < rate["value"] <= 1.0
    assert of_type(records, "checkpoint") == []


@pytest.mark.slow
def test_time_based_checkpoints_follow_spec_checkpoint_every(launcher: Launcher) -> None:
    launcher.spec = json.dumps({"spec": {"checkpoint": {"every": 0.05}}})
    assert launcher.run("--steps", "30", "--step-sleep", "0.01").returncode == 0
    steps = [c["step"] for c in of_type(launcher.records(1), "checkpoint")]
    assert len(steps) >= 3
    assert steps[-1] == 30
    assert steps != [20, 30]  # not the step-count default


def test_a_missing_dataset_exits_2_and_says_which(launcher: Launcher) -> None:
    launcher.dataset.unlink()
    done = launcher.run("--steps", "3")
    assert done.returncode == 2
    assert "cannot read the dataset (CROSSRAIL_DATASET)" in done.stderr
    assert str(launcher.dataset) in done.stderr


def test_eval_with_nothing_to_evaluate_exits_2(launcher: Launcher) -> None:
    done = launcher.run("--eval")
    assert done.returncode == 2
    assert "nothing to evaluate" in done.stderr


def test_a_process_not_launched_by_crossrail_exits_2_naming_what_is_missing(launcher: Launcher) -> None:
    launcher.run_id = ""
    done = launcher.run("--steps", "1")
    assert done.returncode == 2
    assert "CROSSRAIL_RUN_ID: not set" in done.stderr
    assert "launched by crossrail" in done.stderr


def test_every_bad_value_in_the_config_is_named_and_exits_2(launcher: Launcher, tmp_path: Path) -> None:
    (tmp_path / "bad.yaml").write_text("optim: {lr: fast, batch: 2.5}\n")
    launcher.config = str(tmp_path / "bad.yaml")
    launcher.defaults = []
    done = launcher.run("--steps", "1")
    assert done.returncode == 2
    assert "optim.lr: 'fast' is not a float" in done.stderr
    assert "optim.batch: 2.5 is not a whole number" in done.stderr
