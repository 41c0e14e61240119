"""Whose checkpoint: manifests name the run uid, experiment and spec digest; a restore takes its own or its parent's."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from crossrail.runtime import Checkpointer, ContextError, ForeignCheckpoint, RuntimeContext

from .ckpt_builders import tensors_of

OURS, THEIRS, PARENT = "01kdvdna3v000g40r40m30e209", "01kdvdna3v7zzzzzzzzzzzzzzz", "01kdv0000000000000000000p0"


def context(
    tmp_path: Path,
    *,
    run: str = "tiny-1",
    uid: str | None = OURS,
    parent: str | None = None,
    parent_uid: str | None = None,
) -> RuntimeContext:
    lineage = {"spec_digest": "sha256:5eed", "parent_run": parent, "parent_run_uid": parent_uid}
    env = {
        "TRAINING_BACKEND": "cpu",
        "EXPERIMENT_ID": "tiny",
        "CROSSRAIL_RUN_ID": run,
        "CROSSRAIL_RUN_UID": uid or "",
        "CROSSRAIL_ATTEMPT": "1",
        "CROSSRAIL_CHECKPOINT_DIR": str(tmp_path / f"{run}-{uid}"),
        "CROSSRAIL_DATASET": "file:///data",
        "CROSSRAIL_REPORT": str(tmp_path / "report.jsonl"),
        "CROSSRAIL_SPEC": json.dumps({"lineage": lineage}),
    }
    return RuntimeContext.from_env(env)


def written_by(ctx: RuntimeContext, directory: Path, step: int = 10) -> tuple[dict[str, Any], str]:
    """A real checkpoint written by `ctx`'s run into `directory`; its manifest and URI."""
    ckpt = Checkpointer(str(directory), lineage=ctx.checkpoint_lineage("numpy"))
    uri = ckpt.save(tensors_of(step), step)
    return ckpt.restore(step)[1], uri


def legacy(manifest: dict[str, Any], run: str) -> dict[str, Any]:
    """The manifest as a crossrail from before uids wrote it: no run_uid, experiment or spec_digest."""
    old = {k: v for k, v in manifest["lineage"].items() if k not in ("run_uid", "experiment", "spec_digest")}
    return {**manifest, "lineage": {**old, "run": run}}


def test_a_manifest_records_the_run_uid_experiment_and_spec_digest(tmp_path: Path) -> None:
    manifest, _ = written_by(context(tmp_path), tmp_path / "own")
    lineage = manifest["lineage"]
    assert (lineage["run"], lineage["run_uid"]) == ("tiny-1", OURS)
    assert (lineage["experiment"], lineage["spec_digest"]) == ("tiny", "sha256:5eed")


def test_a_run_restores_its_own_checkpoint(tmp_path: Path) -> None:
    ctx = context(tmp_path)
    manifest, uri = written_by(ctx, tmp_path / "own")
    ctx.claim(manifest, uri)


def test_another_stores_same_named_run_is_refused_by_name_with_the_fix(tmp_path: Path) -> None:
    theirs, uri = written_by(context(tmp_path, uid=THEIRS), tmp_path / "shared")
    with pytest.raises(ForeignCheckpoint) as caught:
        context(tmp_path).claim(theirs, uri)
    message = str(caught.value)
    assert uri in message
    assert f"run tiny-1 (uid {THEIRS}, experiment tiny, spec sha256:5eed)" in message
    assert f"not to this run (tiny-1, uid {OURS})" in message
    assert "spec.parent.run" in message  # the fix


def test_a_legacy_checkpoint_is_not_resumed_but_serves_as_a_declared_legacy_parent(tmp_path: Path) -> None:
    manifest, uri = written_by(context(tmp_path, uid=None), tmp_path / "old")
    old = legacy(manifest, "tiny-1")
    with pytest.raises(ForeignCheckpoint, match=r"written before runs had uids .* usable only as a declared parent"):
        context(tmp_path).claim(old, uri)
    context(tmp_path, run="tiny-2", parent="tiny-1").claim(old, uri, as_parent=True)
    with pytest.raises(ForeignCheckpoint, match=f"declared parent \\(tiny-1, uid {PARENT}\\)"):
        context(tmp_path, run="tiny-2", parent="tiny-1", parent_uid=PARENT).claim(old, uri, as_parent=True)


def test_a_parent_checkpoint_must_be_the_declared_parents(tmp_path: Path) -> None:
    parents, uri = written_by(context(tmp_path, run="pre-1", uid=PARENT), tmp_path / "parent")
    context(tmp_path, parent="pre-1", parent_uid=PARENT).claim(parents, uri, as_parent=True)
    with pytest.raises(ForeignCheckpoint, match=f"run pre-1 \\(uid {PARENT}.*not to this run's declared parent"):
        context(tmp_path, parent="pre-1", parent_uid=THEIRS).claim(parents, uri, as_parent=True)
    with pytest.raises(ForeignCheckpoint, match="declares no parent"):
        context(tmp_path).claim(parents, uri, as_parent=True)


def test_a_process_without_a_run_uid_checks_nothing_as_before(tmp_path: Path) -> None:
    theirs, uri = written_by(context(tmp_path, uid=THEIRS), tmp_path / "shared")
    context(tmp_path, uid=None).claim(theirs, uri)
    context(tmp_path, uid=None).claim(theirs, uri, as_parent=True)


def test_a_garbled_run_uid_is_a_context_problem(tmp_path: Path) -> None:
    with pytest.raises(ContextError, match="CROSSRAIL_RUN_UID: 'tiny-1' is not a run uid"):
        context(tmp_path, uid="tiny-1")
