"""What crossrail says is what happened: a resume continues the run it resumes (step, optimizer, data cursor),
in each framework and across them, and lineage names the checkpoint that was loaded. Real processes, tiny sizes.
"""

from __future__ import annotations

import json
import platform
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from tests.integration.test_agent import BIGRAM, drive
from tests.unit.runtime.ckpt_builders import DAMAGE
from tests.unit.workloads.builders import gpt_launcher, losses, of_type, run_in_process, spec
from typer.testing import CliRunner

from crossrail.cli import app
from crossrail.client import Client
from crossrail.errors import ConflictError

K, TOTAL = 8, 16  # the GPT runs stop at step K and resume to TOTAL
PACED = [BIGRAM, "spec.args=[--steps, '60', --checkpoint-every-steps, '10', --step-sleep, '0.05']"]
PACED += ["spec.resources.chips=1", "spec.checkpoint.keep_last=10"]
runner = CliRunner()


# ---- the GPT workload, in each framework and across them ------------------------------------------------------


def gpt(root: Path, run: str, framework: str, steps: int, resumes: str | None = None) -> list[dict[str, Any]]:
    """One attempt of GPT run `run` as crossrail launches it; with `resumes`, as `resubmit <resumes> --resume`
    launches it: that run is both its parent and the run it resumes, its checkpoint the parent checkpoint.

    The entry point runs in this process (the framework imports once); the agent tests below run processes."""
    launcher = gpt_launcher(root / run, run=run)
    if resumes is not None:
        lineage = {"dataset_version": "sha256:d1", "code_commit": "abc1234", "parent_run": resumes}
        parent = (root / resumes / "checkpoints" / resumes).as_uri()
        launcher.spec = spec(lineage=lineage | {"resumed_from": resumes}, parent_checkpoint=parent)
    args = ["--framework", framework, "--steps", str(steps), "--checkpoint-every-steps", str(K)]
    assert run_in_process(launcher, *args) == 0
    return launcher.records(1)


def window(records: list[dict[str, Any]]) -> list[float]:
    """The losses of steps K+1 ... K+5."""
    found = losses(records)
    return [found[s] for s in range(K + 1, K + 6)]


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    return gpt(tmp_path_factory.mktemp("gpt"), "straight", "torch", TOTAL)


@pytest.mark.slow
@pytest.mark.parametrize("framework", ["torch", "jax"])
def test_a_resumed_gpt_run_continues_to_the_total_steps_with_the_losses_of_an_uninterrupted_one(
    framework: str, tmp_path: Path, uninterrupted: list[dict[str, Any]]
) -> None:
    if framework == "jax":
        pytest.importorskip("jax")
    first = gpt(tmp_path, "first", framework, K)
    assert max(losses(first)) == K
    resumed = gpt(tmp_path, "again", "torch", TOTAL, resumes="first")
    # 1. It counted on from step K, not from 1, and ended at the experiment's total.
    assert sorted(losses(resumed)) == list(range(K + 1, TOTAL + 1))
    event = of_type(resumed, "event", "resumed")[0]["data"]
    assert (event["step"], event["source"], event["reset"]) == (K, "parent", [])
    assert "optimizer" in event["carried"]
    # 2. Same framework: the very losses of an uninterrupted run; from JAX: the same curve within 10%.
    straight = window(uninterrupted)
    if framework == "torch":
        np.testing.assert_allclose(window(resumed), straight, rtol=1e-4)
    else:
        assert np.mean(window(resumed)) == pytest.approx(np.mean(straight), rel=0.10)


@pytest.mark.slow
def test_from_weights_starts_a_new_count_with_a_fresh_optimizer(tmp_path: Path) -> None:
    gpt(tmp_path, "first", "torch", K)
    launcher = gpt_launcher(tmp_path / "child", run="child")
    lineage = {"dataset_version": "sha256:d1", "code_commit": "abc1234", "parent_run": "first"}
    launcher.spec = spec(lineage=lineage, parent_checkpoint=(tmp_path / "first" / "checkpoints" / "first").as_uri())
    assert run_in_process(launcher, "--framework", "torch", "--steps", "3") == 0
    records = launcher.records(1)
    assert sorted(losses(records)) == [1, 2, 3]
    assert of_type(records, "event", "initialised")[0]["data"]["step"] == K
    assert not of_type(records, "event", "resumed")


# ---- through the agent: cancel, resume, lose or damage the checkpoint -----------------------------------------


@pytest.fixture
def client(checkout: Path) -> Iterator[Client]:
    with Client(cwd=checkout) as c:
        yield c


def ended(client: Client, *runs: str) -> Callable[[], bool]:
    store = client.service.store
    return lambda: all(store.get_run(r).state in ("succeeded", "failed", "cancelled") for r in runs)


def loss_by_step(client: Client, run: str) -> dict[int, float]:
    return {int(s["step"]): float(s["value"]) for s in client.service.store.metric_samples(run, "loss")}


def reported(client: Client, run: str, name: str) -> list[dict[str, Any]]:
    events = client.service.store.events(run=run, types=["reported"])
    return [e.data.get("data", {}) for e in events if e.data.get("name") == name]


def cancelled_midway(client: Client, experiments: Path) -> str:
    """A bigram run of 60 steps cancelled once it has checkpointed step 20."""
    run = str(client.submit(experiments / "pretrain-small.yaml", sets=PACED)["run"]["id"])
    store = client.service.store
    drive(client, lambda: any(c.step >= 20 for c in store.checkpoints(run)))
    client.cancel(run)
    drive(client, lambda: not any(a.state in ("starting", "running") for a in store.attempts(run)))
    return run


@pytest.mark.slow
def test_cancel_then_resume_ends_at_the_total_steps_with_an_uninterrupted_runs_losses(
    client: Client, experiments: Path
) -> None:
    straight = str(client.submit(experiments / "pretrain-small.yaml", sets=PACED)["run"]["id"])
    first = cancelled_midway(client, experiments)
    resumed = str(client.resubmit(first, resume=True)["run"]["id"])
    drive(client, ended(client, straight, resumed))
    assert client.service.store.get_run(resumed).state == "succeeded"
    k = reported(client, resumed, "resumed")[0]["step"]
    after, before = loss_by_step(client, resumed), loss_by_step(client, straight)
    assert min(after) == k + 1
    assert max(after) == 60
    steps = range(k + 1, k + 6)
    np.testing.assert_allclose([after[s] for s in steps], [before[s] for s in steps], rtol=1e-4)
    lineage = client.show(resumed)["lineage"]
    assert lineage["resumed_from"] == first
    # The local executor never ran spec.image: lineage says so, and what ran instead.
    assert lineage["image_used"] is False
    assert lineage["image_note"].startswith("not used: the local executor ran the command")
    assert lineage["environment"]["python"] == platform.python_version()
    assert lineage["environment"]["distributions_digest"].startswith("sha256:")
    # An eval of the finished run prints its score in its log and records an `evaluated` event.
    scoring = [BIGRAM, "spec.args=[--eval]", f"spec.parent={{run: {straight}}}", "metadata.team=foundation"]
    evaluation = str(client.submit(experiments / "eval-smoke.yaml", sets=scoring)["run"]["id"])
    drive(client, ended(client, evaluation))
    (score,) = [e["data"] for e in client.show(evaluation)["events"] if e["type"] == "evaluated"]
    newest = client.service.store.checkpoints(straight)[-1]
    assert {k: score[k] for k in ("evaluated_run", "checkpoint", "step", "metric")} == {
        "evaluated_run": straight,
        "checkpoint": newest.uri,
        "step": 60,
        "metric": "eval_loss",
    }
    assert client.service.store.metric_samples(evaluation, "eval_loss")[-1]["value"] == pytest.approx(score["value"])
    assert f"eval_loss {score['value']:.4f}" in json.dumps(client.logs(evaluation))
    # The runs that finished are measurements of this work: the queue's estimate for another cites them.
    queued = str(client.submit(experiments / "pretrain-small.yaml", sets=PACED)["run"]["id"])
    pending = next(p for q in client.queue()["queues"] for p in q["pending"] if p["id"] == queued)
    assert pending["run_time_source"] == "measured from 2 runs"
    assert "(measured from 2 runs)" in runner.invoke(app, ["queue", "--home", str(client.workspace.root)]).output
    client.cancel(queued)
    # --from-weights is the other thing: a new training whose parent is the run, resuming nothing.
    child = client.show(client.resubmit(first, from_weights=True)["run"]["id"])["lineage"]
    assert (child["parent_run"], child["resumed_from"]) == (first, None)


@pytest.mark.slow
def test_a_resume_skips_a_damaged_newest_checkpoint_and_fails_with_the_cause_when_none_is_left(
    client: Client, experiments: Path
) -> None:
    first = cancelled_midway(client, experiments)
    store, home = client.service.store, str(client.workspace.root)
    ckpts = store.checkpoints(first, usable=True)
    newest, previous = ckpts[-1], ckpts[-2]
    directory = Path(client.service.get(first).run_checkpoint_dir.removeprefix("file://"))
    # 1. Newest damaged after the resume was queued: it resumes from the previous one, and says so in
    #    show --json and an event.
    resumed = str(client.resubmit(first, resume=True)["run"]["id"])
    DAMAGE["flipped-byte"](directory, newest.step)
    drive(client, ended(client, resumed))
    assert store.get_run(resumed).state == "succeeded"
    assert min(loss_by_step(client, resumed)) == previous.step + 1
    shown = json.loads(runner.invoke(app, ["show", resumed, "--json", "--home", home]).output)
    lineage = shown["lineage"]
    assert (lineage["parent_checkpoint"], lineage["parent_step"]) == (previous.uri, previous.step)
    assert lineage["parent_checkpoint_requested"] == newest.uri
    assert lineage["parent_fallback"].startswith(f"resumed from step {previous.step}: step {newest.step} failed")
    assert [s["uri"] for s in reported(client, resumed, "checkpoint_skipped")] == [newest.uri]
    assert {c["step"]: c["state"] for c in client.show(first)["checkpoints"]}[newest.step] == "damaged"
    # 2. Its checkpoints deleted: the resume fails with that cause, and lineage names no checkpoint.
    #    (deleted before the resume was asked for, it is refused at once, naming what is gone)
    lost = str(client.resubmit(first, resume=True)["run"]["id"])
    shutil.rmtree(directory)
    with pytest.raises(ConflictError, match="no longer exists"):
        client.resubmit(first, resume=True)
    drive(client, ended(client, lost))
    assert store.get_run(lost).state == "failed"
    lineage = client.show(lost)["lineage"]
    assert lineage["parent_checkpoint"] is None
    assert lineage["resumed_from"] is None
    assert "could not be loaded" in json.dumps(client.logs(lost))
    # The cause is where users look: the run's reason in show and status, not only in its log.
    reason = client.show(lost)["run"]["reason"]
    assert reason.startswith("exit 2: ")
    assert "cause: crossrail.workloads.bigram: the parent checkpoint" in reason
    assert "could not be loaded" in runner.invoke(app, ["status", "--home", home]).output


# ---- one feasibility rule: validate, place, submit and queue agree on a pipeline ------------------------------


def pipeline(experiments: Path, name: str, parts: dict[str, dict[str, int]]) -> Path:
    """eval-smoke made a pipeline of `parts` (bigram training in each), written as its own experiment file."""
    doc = yaml.safe_load((experiments / "eval-smoke.yaml").read_text())
    doc["metadata"]["name"] = name
    chips = sum(p["chips"] for p in parts.values())
    doc["spec"] |= {"stage": "reinforcement_learning", "command": ["python", "-m", "crossrail.workloads.bigram"]}
    doc["spec"] |= {"resources": {"chips": chips, "duration": "10m"}, "parts": parts}
    path = experiments / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


@pytest.mark.slow
def test_a_pipeline_larger_than_any_pool_but_whose_parts_fit_gets_one_verdict_everywhere(
    client: Client, experiments: Path
) -> None:
    home = str(client.workspace.root)
    path = pipeline(experiments, "pipe", {"sampler": {"chips": 4}, "reward": {"chips": 1}, "learner": {"chips": 4}})
    checked = runner.invoke(app, ["validate", str(path), "--home", home])
    assert checked.exit_code == 0, checked.output
    placed = runner.invoke(app, ["place", str(path), "--explain", "--home", home])
    assert placed.exit_code == 0, placed.output
    assert "would start now" in placed.output
    assert "needs 9 chips" not in placed.output
    run = client.submit(path)["run"]["id"]
    pending = next(p for q in client.queue()["queues"] for p in q["pending"] if p["id"] == run)
    assert pending["estimated_start_in_s"] == 0
    assert pending["planned_pool"] in ("tpu-v5p", "h100")
    # A part no pool can hold is refused by each of them, naming the part.
    big = pipeline(experiments, "big", {"sampler": {"chips": 16}, "reward": {"chips": 1}})
    refused = [runner.invoke(app, [verb, str(big), "--home", home]) for verb in ("validate", "place", "submit")]
    assert [r.exit_code for r in refused] == [1, 1, 1]
    assert all("part sampler" in r.output for r in refused), [r.output for r in refused]
