"""Training runs of the GPT report eval loss on a held-out split every `eval_every` steps, so a `spec.target` on
eval_loss is met on the training run itself (crossrail.metrics folds its reported samples)."""

from __future__ import annotations

from pathlib import Path

import pytest

from crossrail.core import Event, EventType
from crossrail.metrics import Sample, fold_runs
from crossrail.workloads import gpt_data

from .builders import TINY_CONFIG, gpt_launcher, of_type, run_in_process, write_corpus

pytestmark = pytest.mark.slow  # each test trains the reference GPT

pytest.importorskip("torch")

STEPS, EVERY = 30, 10
UNTRAINED = 5.545  # ln 256: a model that knows nothing of the bytes


def test_a_training_run_reports_eval_loss_every_eval_every_steps_and_meets_its_target(tmp_path: Path) -> None:
    run = gpt_launcher(tmp_path, run="gpt-eval-1", config=TINY_CONFIG + f"eval_every: {EVERY}\n")

    assert run_in_process(run, "--steps", str(STEPS), "--checkpoint-every-steps", "15") == 0

    records = run.records(1)
    evals = of_type(records, "metric", "eval_loss")
    assert [r["step"] for r in evals] == [10, 20, 30]
    assert [r["step"] for r in of_type(records, "metric", "eval_pass_rate")] == [10, 20, 30]
    losses = [r["value"] for r in evals]
    assert losses[-1] < losses[0] < UNTRAINED
    samples = [Sample("gpt-eval-1", 1, r["ts"], r["name"], r["value"], r["step"]) for r in records
               if r["type"] == "metric"]  # fmt: skip
    begun = min(s.ts for s in samples) - 1
    target = {"metric": "eval_loss", "op": "<=", "value": (losses[0] + losses[-1]) / 2}  # met after the first
    submitted = Event(EventType.SUBMITTED, begun, "gpt-eval-1", None, {"stage": "pretraining", "target": target})

    (facts,) = fold_runs([submitted], samples, now=max(s.ts for s in samples))

    first = next(r for r in evals if r["value"] <= target["value"])
    assert first["step"] > EVERY
    assert facts.target_met_ts == first["ts"]
    assert facts.time_to_target_s == pytest.approx(first["ts"] - begun)


def test_the_held_out_split_is_the_last_tenth_and_never_trained_on(tmp_path: Path) -> None:
    corpus = gpt_data.parse(write_corpus(tmp_path / "c.txt").read_bytes(), "c.txt")

    train, heldout = gpt_data.split_heldout(corpus, 16, "gpt")

    assert len(heldout.text) == round(len(corpus.text) * gpt_data.HELDOUT_FRACTION)
    assert train.text.tobytes() + heldout.text.tobytes() == corpus.text.tobytes()


@pytest.mark.parametrize(
    ("config", "message"),
    [
        pytest.param("eval_every: 0\n", "eval_every must be >= 1 step", id="zero"),
        pytest.param("eval_every: often\n", "eval_every: 'often' is not a int", id="word"),
    ],
)
def test_a_bad_eval_every_is_refused_before_training(tmp_path: Path, config: str, message: str,
                                                      capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    run = gpt_launcher(tmp_path, config=TINY_CONFIG + config)

    assert run_in_process(run, "--steps", "5") == 2

    assert message in capsys.readouterr().err
    assert not run.checkpoints.exists()


def test_a_dataset_too_small_to_hold_out_a_window_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = gpt_launcher(tmp_path, config=TINY_CONFIG + "eval_every: 5\n")
    run.dataset.write_text("chip slice pool queue stage.\n")

    assert run_in_process(run, "--steps", "5") == 2

    assert "with eval_every it needs more than" in capsys.readouterr().err


@pytest.mark.slow
def test_every_data_parallel_worker_evaluates_and_rank_0_alone_reports(tmp_path: Path) -> None:
    from .test_gpt_parallel import BATCH, TOLERANCE, finish, start_workers

    runs = {degree: gpt_launcher(tmp_path / f"degree{degree}") for degree in (1, 2)}
    args = ("--steps", "4", "--framework", "torch", "--eval-every", "2")
    started = start_workers(runs[2], 2, *args)
    assert run_in_process(runs[1], *args, "--batch", str(BATCH)) == 0
    finish(started)  # no worker waited alone in a collective while another evaluated

    reported = {d: of_type(runs[d].records(1), "metric", "eval_loss") for d in runs}
    assert [r["step"] for r in reported[2]] == [r["step"] for r in reported[1]] == [2, 4]  # once a step: rank 0's
    assert [r["value"] for r in reported[2]] == pytest.approx([r["value"] for r in reported[1]], rel=TOLERANCE)
