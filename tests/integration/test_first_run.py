"""A new user's first run, through the real `crossrail` command, in a directory that is not a git checkout."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

CLI = [sys.executable, "-m", "crossrail.cli"]
EXAMPLES = ("pretrain-small", "posttrain-042", "eval-smoke")
# Fewer steps than the examples ask for, so the whole path takes seconds (the arguments keep their places).
SHORTER = {
    "pretrain-small": ["--set", "spec.args.1=40", "--set", "spec.args.3=10"],  # 4 checkpoints; keep_last: 3
    "posttrain-042": ["--set", "spec.args.3=20"],
    "eval-smoke": [],
}


def crossrail(cwd: Path, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("CROSSRAIL_HOME", "CROSSRAIL_STORE_URL")}
    # No directory above the temp dir may be taken for a git checkout, whatever the machine has there.
    env["GIT_CEILING_DIRECTORIES"] = str(cwd.parent)
    return subprocess.run([*CLI, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False)


def as_json(proc: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(proc.stdout)  # type: ignore[no-any-return]


@pytest.mark.slow
def test_init_validate_submit_and_run_every_example_outside_a_git_checkout(tmp_path: Path) -> None:
    home = tmp_path / "first-run"
    home.mkdir()
    assert (
        subprocess.run(
            ["git", "rev-parse"],
            cwd=home,
            env={**os.environ, "GIT_CEILING_DIRECTORIES": str(tmp_path)},
            capture_output=True,
            check=False,
        ).returncode
        != 0
    )
    files = [f".crossrail/experiments/{name}.yaml" for name in EXAMPLES]

    as_json(crossrail(home, "init", ".", "--json"))
    validated = crossrail(home, "validate", *files)
    assert validated.returncode == 0, validated.stderr
    assert "not a git checkout: the run records no commit" in validated.stderr

    runs = {}
    for name in EXAMPLES:  # post-training and eval are submitted while their parents are still queued
        submitted = as_json(crossrail(home, "submit", f".crossrail/experiments/{name}.yaml", *SHORTER[name], "--json"))
        assert submitted["run"]["state"] == "queued"
        assert any("records no commit" in w for w in submitted["warnings"])
        runs[name] = submitted["run"]["id"]

    agent = crossrail(home, "agent", "--until-idle", "--poll", "0.1", timeout=80)
    assert agent.returncode == 0, agent.stdout + agent.stderr

    shown = {name: as_json(crossrail(home, "show", run, "--json")) for name, run in runs.items()}
    for name, each in shown.items():
        assert each["run"]["state"] == "succeeded", (name, each["attempts"])
        assert each["lineage"]["code_commit"] is None
    _assert_lineage(home, runs, shown)


def _assert_lineage(home: Path, runs: dict[str, str], shown: dict[str, dict[str, Any]]) -> None:
    """What each run records of the run it started from (`shown`: each run's `crossrail show`, after the agent)."""
    post = shown["posttrain-042"]
    assert post["lineage"]["parent_run"] == runs["pretrain-small"]
    # Submitted while its parent was queued, post-training's `latest` was named when its attempt launched.
    pre = shown["pretrain-small"]
    newest = pre["checkpoints"][-1]
    assert post["lineage"]["parent_checkpoint_requested"] == "latest"
    assert post["lineage"]["parent_checkpoint"] == newest["uri"]
    assert post["attempts"][0]["parent_checkpoint"] == newest["uri"]
    assert post["checkpoints"][0]["parent_id"] == newest["id"]
    # Retention kept the newest three; the store marks the step it deleted, and a child cannot start from it.
    assert [(c["step"], c["state"]) for c in pre["checkpoints"]] == [
        (10, "deleted"),
        (20, "committed"),
        (30, "committed"),
        (40, "committed"),
    ]
    parent = f"spec.parent={{run: {runs['pretrain-small']}, checkpoint: 10}}"
    refused = crossrail(home, "submit", ".crossrail/experiments/posttrain-042.yaml", "--set", parent)
    assert refused.returncode != 0
    assert "was deleted by retention (usable steps: 20, 30, 40)" in refused.stderr
    evaluated = shown["eval-smoke"]
    assert evaluated["lineage"]["parent_run"] == runs["posttrain-042"]
