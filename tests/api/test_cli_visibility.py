"""The command on the demo's workspace, as a user runs it: real GPT training shows its progress in `logs`,
`logs -f` of an ended run returns, and `status`/`show` say where each run got and that no agent is alive."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from .conftest import CROSSRAIL, PENDING


def crossrail(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CROSSRAIL_")} | {"COLUMNS": "200"}
    return subprocess.run(
        [CROSSRAIL, *args], cwd=root, env=env, capture_output=True, text=True, timeout=60, check=False
    )


def test_the_killed_and_retried_pretraining_shows_its_progress_in_logs(demo_workspace: Path) -> None:
    done = crossrail(demo_workspace, "logs", "pretrain-small-1")
    assert done.returncode == 0, done.stderr
    attempts = done.stdout.split("pretrain-small-1 attempt ")[1:]
    assert len(attempts) == 2  # killed on the TPU-like pool, resumed on the GPU-like one
    for text in attempts:
        assert "  loss " in text
        assert "  tokens/s " in text
    assert "step 60/60  loss " in attempts[-1]
    followed = crossrail(demo_workspace, "logs", "pretrain-small-1", "-f")  # ended already: prints and returns
    assert followed.returncode == 0, followed.stderr
    assert followed.stdout.rstrip().endswith("pretrain-small-1 attempt 2 ended: succeeded, exit 0")


def test_show_and_status_say_step_loss_checkpoint_and_that_no_agent_runs(demo_workspace: Path) -> None:
    shown = json.loads(crossrail(demo_workspace, "show", "pretrain-small-1", "--json").stdout)["run"]
    assert shown["step"] == 60
    assert shown["loss"] > 0
    assert shown["last_checkpoint"]["step"] == 60
    assert (
        shown["pool"]
        == json.loads(crossrail(demo_workspace, "logs", "pretrain-small-1", "--json").stdout)["attempts"][-1]["pool"]
    )
    status = crossrail(demo_workspace, "status")
    assert status.returncode == 0, status.stderr
    assert "no agent running; the last one stopped " in status.stdout
    assert PENDING in status.stdout  # the run queued after the demo is active, with no pool or step yet
