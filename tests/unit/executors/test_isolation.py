"""Local attempts under an identity of their own (LaunchRequest.run_as): their uid, their environment, what they
may read and write; and the owner's own runs, which keep the agent's environment but its control settings."""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from tests.security.sandboxing import open_directory, python_for_others

from crossrail.core.attempts import LaunchRequest, RunAs
from crossrail.executors import sandbox
from crossrail.executors.local import LocalExecutor
from crossrail.executors.sandbox import child_env
from crossrail.runtime import Checkpointer

from .helpers import ended, kill_everything, request

TEAM_A = RunAs(name="team:a", uid=210_000_001, gid=210_000_001)
TEAM_B = RunAs(name="team:b", uid=210_000_002, gid=210_000_002)

# What the command sees and can do, as one JSON line on its output.
PROBE = """
import json, os, sys
def tries(fn):
    try:
        fn()
        return "done"
    except OSError as exc:
        return type(exc).__name__
ckpt, report, theirs, records = sys.argv[1:5]
def write_checkpoint():
    with open(os.path.join(ckpt, "step-1"), "w") as f:
        f.write("w")
def write_report():
    with open(report, "a") as f:
        f.write("{}\\n")
print(json.dumps({
    "uid": os.getuid(), "gid": os.getgid(), "cwd": os.getcwd(), "home": os.environ.get("HOME"),
    "env": sorted(os.environ),
    "checkpoint": tries(write_checkpoint), "report": tries(write_report),
    "theirs": tries(lambda: open(theirs).read()), "records": tries(lambda: os.listdir(records)),
}))
"""

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="starting a command under another uid takes root")


@pytest.fixture
def workspace() -> Iterator[Path]:
    with open_directory("crossrail-executor-") as root:
        yield root
        kill_everything(root / "attempts")


def launch(workspace: Path, who: RunAs, theirs: Path, attempt: int = 1) -> dict[str, Any]:
    python, env = python_for_others()
    ckpt, report = workspace / "checkpoints" / f"run-{attempt}", workspace / "reports" / "train-1" / f"{attempt}.jsonl"
    records = workspace / "attempts"
    base = request("", attempt=attempt)
    req: LaunchRequest = replace(
        base,
        command=[python, "-c", PROBE, str(ckpt), str(report), str(theirs), str(records)],
        env={**env, "CROSSRAIL_CHECKPOINT_DIR": f"file://{ckpt}", "CROSSRAIL_REPORT": str(report), "MINE": "1"},
        run_as=who,
    )
    executor = LocalExecutor(records)
    executor.launch(req)
    done = ended(executor, attempt, timeout_s=30)
    log = executor.logs("train-1", attempt)
    assert done.exit_code == 0, log
    out: dict[str, Any] = json.loads(log.strip().splitlines()[-1])
    assert stat.S_IMODE(records.stat().st_mode) == 0o700  # every attempt's request, secrets and all
    assert (ckpt / "step-1").stat().st_uid == who.uid
    assert stat.S_IMODE((ckpt / "step-1").stat().st_mode) == 0o640  # its team may read it, no one else
    return out


def test_an_isolated_attempt_runs_as_its_team_with_its_own_files_and_nothing_of_the_agents(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CROSSRAIL_TOKEN", "crt_agent_only")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "the agent's")
    theirs = workspace / "checkpoints" / "theirs"
    theirs.mkdir(parents=True)
    os.chown(theirs, TEAM_A.uid, TEAM_A.gid)
    theirs.chmod(0o750)
    (theirs / "weights").write_text("team a")
    os.chown(theirs / "weights", TEAM_A.uid, TEAM_A.gid)
    (theirs / "weights").chmod(0o640)

    out = launch(workspace, TEAM_B, theirs / "weights")
    home = workspace / "homes" / "train-1" / "1"
    assert (out["uid"], out["gid"]) == (TEAM_B.uid, TEAM_B.gid)
    assert out["cwd"] == out["home"] == str(home)
    assert {"CROSSRAIL_TOKEN", "AWS_SECRET_ACCESS_KEY"}.isdisjoint(out["env"])
    assert {"MINE", "CROSSRAIL_REPORT", "PATH", "HOME"} <= set(out["env"])
    assert out["checkpoint"] == out["report"] == "done"
    assert out["theirs"] == "PermissionError"  # another team's checkpoint
    assert out["records"] == "PermissionError"  # the agent's records of every attempt

    # Shared with: team a's group opens the same file to team b's next attempt, still read-only.
    out = launch(workspace, replace(TEAM_B, groups=(TEAM_A.gid,)), theirs / "weights", attempt=2)
    assert out["theirs"] == "done"


SAVE = """
import sys, numpy as np
from crossrail.runtime import Checkpointer
Checkpointer(sys.argv[1]).save({"w": np.arange(4.0)}, 7)
"""

RESTORE = """
import sys
from crossrail.runtime import Checkpointer
try:
    print("restored", Checkpointer(sys.argv[1]).restore()[1]["step"])
except OSError as exc:
    print("refused", type(exc).__name__)
"""


def run_code(workspace: Path, who: RunAs, code: str, uri: str, attempt: int) -> str:
    python, env = python_for_others()
    req = replace(request("", attempt=attempt), command=[python, "-c", code, uri], env=env, run_as=who)
    if code is SAVE:
        req = replace(req, env={**env, "CROSSRAIL_CHECKPOINT_DIR": uri})
    executor = LocalExecutor(workspace / "attempts")
    executor.launch(req)
    done = ended(executor, attempt, timeout_s=30)
    log = executor.logs("train-1", attempt)
    assert done.exit_code == 0, log
    return log.strip().rpartition("\n")[2]


def test_a_checkpoint_one_team_saved_opens_to_a_team_it_shares_with_and_to_no_other(workspace: Path) -> None:
    uri = f"file://{workspace}/checkpoints/a-run"
    run_code(workspace, TEAM_A, SAVE, uri, attempt=1)
    assert run_code(workspace, replace(TEAM_B, groups=(TEAM_A.gid,)), RESTORE, uri, attempt=2) == "restored 7"
    assert run_code(workspace, TEAM_B, RESTORE, uri, attempt=3) == "refused PermissionError"


def test_a_checkpoint_written_before_isolation_becomes_its_teams_when_a_run_starts_from_it(workspace: Path) -> None:
    uri = f"file://{workspace}/checkpoints/legacy-run"
    Checkpointer(uri).save({"w": np.arange(4.0)}, 7)  # by the agent's user, as every run was before isolation
    for step in Path(uri.removeprefix("file://")).iterdir():
        step.chmod(0o700)  # as mkdtemp left them then
    sandbox.adopt(uri, TEAM_A)
    assert run_code(workspace, TEAM_B, RESTORE, uri, attempt=1) == "refused PermissionError"
    assert run_code(workspace, replace(TEAM_B, groups=(TEAM_A.gid,)), RESTORE, uri, attempt=2) == "restored 7"


def test_the_owners_own_run_keeps_the_agents_environment_but_its_control_settings(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in ("CROSSRAIL_TOKEN", "CROSSRAIL_SERVER", "CROSSRAIL_HOME", "CROSSRAIL_STORE_URL"):
        monkeypatch.setenv(name, "the agent's")
    monkeypatch.setenv("AWS_PROFILE", "owner")
    env = child_env({"CROSSRAIL_RUN_ID": "train-1", "CROSSRAIL_TOKEN": "from the spec"})
    assert env["AWS_PROFILE"] == "owner"
    assert env["CROSSRAIL_RUN_ID"] == "train-1"
    assert not {"CROSSRAIL_TOKEN", "CROSSRAIL_SERVER", "CROSSRAIL_HOME", "CROSSRAIL_STORE_URL"} & set(env)
