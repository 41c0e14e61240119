"""Readiness says exactly what is missing: a commit or a config version, an eval's checkpoint, a completed attempt."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.unit.metrics.stories import Story, tell

from crossrail.control.reports.readiness import configs_check, metrics_check
from crossrail.metrics import fold_runs
from crossrail.spec import load_fleet
from crossrail.store import RunRecord

FLEET = load_fleet(Path(__file__).parents[3] / "src/crossrail/control/ops/templates/fleet.yaml")
SPEC = {"spec": {"checkpoint": {"format": "crossrail-ckpt/v1"}}}


def record(rid: str, stage: str = "pretraining", **fields: Any) -> RunRecord:
    """A run as the store records it at submit: a config with its digest and a commit, unless told otherwise."""
    base: dict[str, Any] = {
        "id": rid, "experiment": rid.rsplit("-", 1)[0], "n": 1, "stage": stage, "team": "core", "owner": "ada",
        "priority": "normal", "chips": 4, "queue": stage, "state": "succeeded", "spec": SPEC, "spec_digest": "sha256:x",
        "idempotency_key": None, "resumed_from": None, "parent_run": None, "parent_checkpoint": None,
        "dataset_uri": "gs://b/corpus", "dataset_version": "v3", "code_repo": "https://github.com/acme/trainer",
        "code_commit": "3f9a0c2", "config_uri": "gs://b/configs/pretrain.yaml", "config_digest": "sha256:c",
        "image": "trainer@sha256:0", "image_digest": "sha256:0", "checkpoint_dir": "gs://b/ck", "created_at": 0.0,
        "updated_at": 0.0,
    }  # fmt: skip
    return RunRecord(**{**base, **fields})


def ran(*ids: str) -> list[Any]:
    stories = [Story(rid, stage="eval" if rid.startswith("eval") else "pretraining") for rid in ids]
    return fold_runs(tell(*(s.start("h100").wait(60).succeed() for s in stories)), now=1e10)


def test_a_run_with_its_config_digest_but_no_commit_is_missing_its_commit_not_its_config() -> None:
    runs = [record("pre-1", code_commit=None), record("pre-2")]

    check = configs_check(runs, ran("pre-1", "pre-2"), {"pre-1": True, "pre-2": True})

    assert check.evidence[:2] == [
        "2 of 2 runs record a versioned config (its digest, or a version in its URI)",
        "1 of 2 runs record their code commit",
    ]
    assert check.fixes == [
        "record pre-1's code commit: spec.code with commit: auto, submitted from a git checkout (or the commit itself)"
    ]
    assert check.score == (0.75 + 1 + 1) / 3


def test_a_run_without_a_config_version_is_told_to_pin_its_config() -> None:
    runs = [record("pre-1", config_digest=None)]

    check = configs_check(runs, ran("pre-1"), {"pre-1": True})

    assert check.evidence[0] == "0 of 1 runs record a versioned config (its digest, or a version in its URI)"
    assert check.fixes[0].startswith("give pre-1 a spec.config readable at submit")


def test_an_eval_is_judged_by_the_checkpoint_it_read_not_asked_to_write_one() -> None:
    runs = [
        record("pre-1"),
        record("eval-1", stage="eval", parent_run="pre-1", parent_checkpoint="gs://b/ck/pre-1/step-40"),
        record("eval-2", stage="eval"),
    ]

    check = configs_check(runs, ran("pre-1", "eval-1", "eval-2"), {"pre-1": True})

    assert check.evidence[3:] == [
        "1 of 1 training runs that ran committed a checkpoint a retry can resume from",
        "1 of 2 eval runs read a recorded checkpoint",
    ]
    assert check.fixes == ["name the checkpoint eval-2 evaluate (spec.parent: {run: ..., checkpoint: ...})"]


def test_a_killed_attempt_does_not_count_the_stage_as_measured_on_its_accelerator() -> None:
    killed = (
        Story("pre-1", stage="pretraining")
        .start("tpu-v5p")
        .wait(60)
        .fail(final=False)
        .wait(5)
        .retry()
        .start("h100")
        .wait(60)
        .succeed()
    )
    clean = Story("pre-2", stage="pretraining").start("h100").wait(60).succeed()

    check = metrics_check(fold_runs(tell(killed, clean), now=1e10), FLEET)

    assert check.evidence[0] == "pretraining: 2 research cycles measured, on gpu"
    assert check.evidence[2] == "stages measured on more than one accelerator: none"
