"""The stage workloads on one pretrained GPT: eval, post-training from its checkpoint, and batch generation.

They call the entry point in this process with crossrail's environment (run_in_process), so no test pays for an
interpreter and a framework import of its own; test_gpt_entry.py runs it as crossrail does, as a process.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from crossrail.runtime import Checkpointer, step_dirname

from .builders import Launcher, gpt_launcher, losses, of_type, pairs_dataset, run_in_process, spec, write_corpus

pytestmark = pytest.mark.slow  # each test trains the reference GPT (a module fixture pretrains it first)

pytest.importorskip("torch")

PRETRAIN_STEPS = 100
FINETUNE_STEPS = 40


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory: pytest.TempPathFactory) -> Launcher:
    """A run that committed its initial weights (step 0) and then pretrained on the word corpus to step 100."""
    run = gpt_launcher(tmp_path_factory.mktemp("pretrain"), run="pretrain-1")
    assert run_in_process(run, "--steps", "0") == 0
    assert run_in_process(run, "--steps", str(PRETRAIN_STEPS), "--checkpoint-every-steps", "50", attempt=2) == 0
    return run


def child(root: Path, run: str, parent: str | None, dataset: Path | None = None) -> Launcher:
    launcher = gpt_launcher(root, run=run)
    launcher.spec = spec(parent_checkpoint=parent)
    if dataset is not None:
        launcher.dataset = dataset
    return launcher


def checkpoint_uri(run: Launcher, step: int) -> str:
    return (run.checkpoints / step_dirname(step)).as_uri()


def test_pretraining_resumed_from_its_step_0_checkpoint(pretrained: Launcher) -> None:
    records = pretrained.records(2)
    assert of_type(records, "event", "resumed")[0]["data"] == {"step": 0, "from": checkpoint_uri(pretrained, 0)}
    assert [c.step for c in Checkpointer(str(pretrained.checkpoints)).list()] == [0, 50, PRETRAIN_STEPS]


def test_eval_pass_rate_is_a_fraction_that_training_raises(pretrained: Launcher, tmp_path: Path) -> None:
    heldout = write_corpus(tmp_path / "heldout.txt", lines=60, seed=7)
    scores = {}
    for step in (0, PRETRAIN_STEPS):
        evaluation = child(tmp_path / f"eval-{step}", f"eval-{step}", checkpoint_uri(pretrained, step), heldout)
        assert run_in_process(evaluation, "--task", "eval") == 0
        records = evaluation.records(1)
        (loss,) = of_type(records, "metric", "eval_loss")
        (rate,) = of_type(records, "metric", "eval_pass_rate")
        assert loss["step"] == rate["step"] == step
        (event,) = of_type(records, "event", "evaluated")
        assert event["data"]["mode"] == "next_byte"
        assert of_type(records, "checkpoint") == []
        scores[step] = (loss["value"], rate["value"])
    assert 0.0 <= scores[0][1] < 0.05  # initial weights guess the next byte about as well as chance
    assert scores[0][1] + 0.3 < scores[PRETRAIN_STEPS][1] <= 1.0
    assert scores[PRETRAIN_STEPS][0] < scores[0][0] - 2.0


def test_post_training_from_the_pretrained_checkpoint_beats_the_same_steps_from_scratch(
    pretrained: Launcher, tmp_path: Path
) -> None:
    sft = pairs_dataset(tmp_path / "sft.jsonl")
    post = child(tmp_path / "posttrain", "posttrain-1", pretrained.checkpoints.as_uri(), sft)
    assert run_in_process(post, "--task", "finetune", "--steps", str(FINETUNE_STEPS)) == 0
    scratch = child(tmp_path / "scratch", "scratch-1", None, sft)
    assert run_in_process(scratch, "--task", "pretrain", "--steps", str(FINETUNE_STEPS)) == 0

    records = post.records(1)
    parent = checkpoint_uri(pretrained, PRETRAIN_STEPS)
    assert of_type(records, "event", "initialised")[0]["data"] == {"step": PRETRAIN_STEPS, "from": parent}
    manifest = Checkpointer(str(post.checkpoints)).restore()[1]
    assert manifest["lineage"]["parent"] == parent
    assert manifest["state"]["optimizer"]["step"] == FINETUNE_STEPS  # a fresh optimizer, not the parent's
    assert manifest["state"]["task"] == "finetune"
    tuned, fresh = losses(records), losses(scratch.records(1))
    assert sorted(tuned) == list(range(1, FINETUNE_STEPS + 1))
    last = range(FINETUNE_STEPS - 9, FINETUNE_STEPS + 1)
    tuned_end, fresh_end = np.mean([tuned[s] for s in last]), np.mean([fresh[s] for s in last])
    assert tuned_end < tuned[1] - 0.5
    assert tuned_end < fresh_end - 0.2


def test_post_training_without_a_parent_exits_2_saying_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    post = child(tmp_path / "orphan", "orphan-1", None, pairs_dataset(tmp_path / "sft.jsonl"))
    assert run_in_process(post, "--task", "finetune", "--steps", "5") == 2
    assert "finetune starts from spec.parent_checkpoint" in capsys.readouterr().err
    assert not post.checkpoints.exists()


def test_a_checkpoint_of_another_model_is_refused_with_exit_2(
    pretrained: Launcher, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    wider = child(tmp_path / "wider", "wider-1", pretrained.checkpoints.as_uri())
    (tmp_path / "wider.yaml").write_text("model: {d_model: 64}\n")
    wider.config = (tmp_path / "wider.yaml").as_uri()
    assert run_in_process(wider, "--task", "finetune", "--steps", "2") == 2
    assert "model.d_model: config 64, checkpoint 32" in capsys.readouterr().err
    assert of_type(wider.records(1), "event", "initialised") == []
    assert not wider.checkpoints.exists()


def test_generate_writes_one_completion_per_prompt_in_the_working_directory(
    pretrained: Launcher, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    prompts = pairs_dataset(tmp_path / "prompts.jsonl")
    sampler = child(tmp_path / "generate", "generate-1", pretrained.checkpoints.as_uri(), prompts)
    workdir = tmp_path / "attempt"
    workdir.mkdir()
    monkeypatch.chdir(workdir)
    assert run_in_process(sampler, "--task", "generate", "--max-new-tokens", "12") == 0
    lines = [json.loads(line) for line in (workdir / "generations.jsonl").read_text().splitlines()]
    assert [line["prompt"] for line in lines][:2] == ["chip slice => ", "slice pool => "]
    assert len(lines) == 11
    assert all(len(line["completion"].encode()) <= 12 and "\n" not in line["completion"] for line in lines)
    records = sampler.records(1)
    (event,) = of_type(records, "event", "generated")
    assert event["data"]["prompts"] == 11
    assert event["data"]["output"] == str(workdir / "generations.jsonl")
    assert event["data"]["step"] == PRETRAIN_STEPS
    assert 0 < event["data"]["tokens"] <= 11 * 12
    (speed,) = of_type(records, "metric", "tokens_per_second")
    assert speed["value"] > 0
    assert of_type(records, "event", "started")[0]["data"]["task"] == "generate"
