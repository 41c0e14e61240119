"""`python -m crossrail.workloads.gpt` as crossrail runs it: a process that reports, checkpoints, stops and moves.

TRAINING_BACKEND picks the framework (tpu: JAX; gpu, cpu: PyTorch); the `started` event and each checkpoint's
lineage say which one ran, and an attempt SIGTERMed on a GPU resumes on a TPU.
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
from tests.conftest import wait_for

from crossrail.runtime import Checkpointer, step_dirname

from .builders import Launcher, gpt_launcher, losses, of_type

pytest.importorskip("torch")
pytest.importorskip("jax")

PER_STEP = ("loss", "tokens_per_second", "step_time_s", "mfu")


@pytest.fixture
def gpt(tmp_path: Path) -> Launcher:
    return gpt_launcher(tmp_path / "run")


def started(records: list[dict[str, object]]) -> dict[str, object]:
    (event,) = of_type(records, "event", "started")
    data = event["data"]
    assert isinstance(data, dict)
    return data


@pytest.mark.slow
def test_pretraining_on_a_cpu_learns_reports_and_commits_checkpoints(gpt: Launcher) -> None:
    gpt.defaults = []  # the peak is measured at start-up
    done = gpt.run("--steps", "30", "--checkpoint-every-steps", "10")
    assert done.returncode == 0, done.stderr
    records = gpt.records(1)
    loss = losses(records)
    assert sorted(loss) == list(range(1, 31))
    assert sum(loss[s] for s in range(26, 31)) < sum(loss[s] for s in range(1, 6)) - 2.5
    progress = [line for line in done.stdout.splitlines() if line.startswith("step ")]  # what `crossrail logs` shows
    assert [line.split()[1] for line in progress] == [f"{s}/30" for s in range(1, 31)]
    assert f"loss {loss[30]:.4f}  tokens/s " in progress[-1]
    for name in (*PER_STEP, "checkpoint_write_seconds", "steps_per_hour"):
        assert of_type(records, "metric", name), name
    assert of_type(records, "metric", "device_busy") == []  # a CPU has no accelerator to report on
    assert all(0 < m["value"] < 1 for m in of_type(records, "metric", "mfu"))
    info = started(records)
    assert (info["framework"], info["device"], info["task"], info["dtype"]) == ("torch", "cpu", "pretrain", "fp32")
    assert info["peak_source"] == "measured"
    assert isinstance(info["peak_flops"], float)
    assert info["peak_flops"] > 1e8
    assert [c["step"] for c in of_type(records, "checkpoint")] == [10, 20, 30]
    assert of_type(records, "checkpoint")[-1]["tokens"] == 30 * 4 * 16
    assert of_type(records, "invalid") == []
    manifest = Checkpointer(str(gpt.checkpoints)).restore()[1]
    assert manifest["state"]["model"] == {
        "kind": "gpt",
        "n_layer": 2,
        "n_head": 2,
        "d_model": 32,
        "context": 16,
        "vocab": 256,
    }
    assert manifest["state"]["optimizer"]["step"] == 30
    assert manifest["state"]["optimizer"]["lr"] == 0.01
    assert manifest["lineage"]["framework"] == "torch"
    assert manifest["lineage"]["code_commit"] == "abc1234"


@pytest.mark.slow
def test_a_run_stopped_on_a_gpu_resumes_on_a_tpu_from_the_checkpoint_it_wrote(
    gpt: Launcher, monkeypatch: pytest.MonkeyPatch
) -> None:
    environment = gpt.env
    backends = {1: "gpu", 2: "tpu"}
    monkeypatch.setattr(gpt, "env", lambda attempt: environment(attempt) | {"TRAINING_BACKEND": backends[attempt]})
    # 1. PyTorch trains until crossrail stops it.
    first = gpt.start("--steps", "100000", "--step-sleep", "0.01")
    wait_for(lambda: max(losses(gpt.records(1)), default=0) >= 5)
    first.send_signal(signal.SIGTERM)
    code, stderr = gpt.finish(first)
    assert code == 75, stderr
    records = gpt.records(1)
    reached = max(losses(records))
    assert started(records)["framework"] == "torch"
    assert of_type(records, "event", "stopped")[0]["data"] == {"signal": "SIGTERM", "step": reached, "saved": True}
    assert [c["step"] for c in of_type(records, "checkpoint")] == [reached]
    assert Checkpointer(str(gpt.checkpoints)).restore()[1]["lineage"]["framework"] == "torch"
    # 2. The retry lands on a TPU pool: JAX picks up the PyTorch checkpoint, optimizer and all.
    retry = gpt.run("--steps", str(reached + 20), attempt=2)
    assert retry.returncode == 0, retry.stderr
    resumed = gpt.records(2)
    uri = (gpt.checkpoints / step_dirname(reached)).as_uri()
    assert of_type(resumed, "event", "resumed")[0]["data"] == {"step": reached, "from": uri}
    assert started(resumed)["framework"] == "jax"
    after = losses(resumed)
    assert sorted(after) == list(range(reached + 1, reached + 21))
    before = losses(records)
    assert after[reached + 1] < before[1] - 0.3  # it continues from trained weights, not from scratch
    manifest = Checkpointer(str(gpt.checkpoints)).restore()[1]
    lineage = manifest["lineage"]
    assert (manifest["step"], lineage["framework"], lineage["parent"]) == (reached + 20, "jax", uri)


def test_a_bad_config_exits_2_naming_every_problem(gpt: Launcher, tmp_path: Path) -> None:
    (tmp_path / "bad.yaml").write_text("model: {n_layr: 2, d_model: 30, n_head: 4}\noptim: {lr: -1, batch: 0}\n")
    gpt.config = (tmp_path / "bad.yaml").as_uri()
    done = gpt.run("--steps", "3")
    assert done.returncode == 2
    assert "model.n_layr is not a model setting; did you mean n_layer?" in done.stderr
    assert "optim.batch must be > 0 (got 0)" in done.stderr
    assert "optim.lr must be > 0 (got -1.0)" in done.stderr
    assert not gpt.checkpoints.exists()
