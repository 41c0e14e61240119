"""A trainer given a run uid restores only its own checkpoints, or its declared parent's, and says whose it refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from crossrail.runtime import Checkpointer

from .builders import Launcher, of_type, spec

pytestmark = pytest.mark.slow  # each test runs the trainers as processes

OURS, THEIRS = "01kdvdna3v000g40r40m30e209", "01kdvdna3v7zzzzzzzzzzzzzzz"


class UidLauncher(Launcher):
    """The launcher with the run uid and the declared parent the agent passes."""

    def __init__(self, root: Path, uid: str, run: str = "bigram-1") -> None:
        super().__init__(root, run=run)
        self.uid = uid

    def env(self, attempt: int) -> dict[str, str]:
        return super().env(attempt) | {"CROSSRAIL_RUN_UID": self.uid}


def test_a_trainer_refuses_another_runs_checkpoints_in_its_directory_and_writes_nothing(tmp_path: Path) -> None:
    theirs = UidLauncher(tmp_path / "a", THEIRS)
    theirs.spec = spec()
    assert theirs.run("--steps", "20", "--checkpoint-every-steps", "10").returncode == 0
    ours = UidLauncher(tmp_path / "b", OURS)
    ours.spec = spec()
    ours.checkpoints = theirs.checkpoints  # the same `<dir>/bigram-1` two stores shared before uids
    before = sorted(p.name for p in theirs.checkpoints.iterdir())
    done = ours.run("--steps", "40")
    assert done.returncode == 2, done.stderr
    assert f"belongs to run bigram-1 (uid {THEIRS}, experiment bigram" in done.stderr
    assert f"not to this run (bigram-1, uid {OURS})" in done.stderr
    assert sorted(p.name for p in theirs.checkpoints.iterdir()) == before
    assert of_type(ours.records(1), "event", "resumed") == []


def test_a_trainer_starts_from_its_declared_parent_and_records_its_own_uid(tmp_path: Path) -> None:
    parent = UidLauncher(tmp_path / "a", THEIRS, run="pre-1")
    parent.spec = spec()
    assert parent.run("--steps", "10", "--checkpoint-every-steps", "10").returncode == 0
    child = UidLauncher(tmp_path / "b", OURS)
    lineage = {"dataset_version": "sha256:d1", "parent_run": "pre-1", "parent_run_uid": THEIRS}
    child.spec = spec(parent_checkpoint=parent.checkpoints.as_uri(), lineage=lineage)
    done = child.run("--steps", "12", "--checkpoint-every-steps", "12")
    assert done.returncode == 0, done.stderr
    assert of_type(child.records(1), "event", "initialised")
    assert Checkpointer(str(child.checkpoints)).restore()[1]["lineage"]["run_uid"] == OURS
    stranger = json.loads(child.spec)
    stranger["lineage"]["parent_run_uid"] = OURS  # the parent it declares is not the run that wrote the checkpoint
    child.spec, child.checkpoints = json.dumps(stranger), tmp_path / "c"
    refused = child.run("--steps", "12", attempt=2)
    assert refused.returncode == 2
    assert "not to this run's declared parent (pre-1" in refused.stderr
