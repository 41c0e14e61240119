"""Two workspaces sharing one checkpoint directory (a local path, and a bucket on the GCS emulator) each run a
`tiny-1` at the same time: each resumes only from its own checkpoints, and a cross-resume is refused by name.

Before run uids, both runs wrote to `<checkpoint.dir>/tiny-1`, and the second "resumed" from the first's steps.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import make_checkout
from tests.integration.test_agent import BIGRAM, FAST

from crossrail.client import Client
from crossrail.control.attempts import launch_request, new_attempt
from crossrail.runtime import read_manifest

pytestmark = pytest.mark.slow  # two workspaces run real attempts

# Slow enough to be killed after its first checkpoint; the two workspaces train differently (another lr).
TINY = [BIGRAM, "metadata.name=tiny", "spec.resources.chips=1", "spec.retries={max: 1, backoff: {initial: 0s}}"]
ARGS = "spec.args=[--steps, '30', --checkpoint-every-steps, '10', --step-sleep, '0.05', --lr, '{lr}']"


def workspace(root: Path) -> Client:
    root.mkdir()
    make_checkout(root)
    Client.init(root)
    return Client(cwd=root)  # the real clock: the agent compares it with times the runtime takes


def reported(client: Client, run: str, attempt: int) -> dict[str, Any]:
    events = client.service.store.events(run=run, types=["reported"])
    return {e.data["name"]: e.data["data"] for e in events if e.attempt == attempt}


def drive_both(clients: list[Client], runs: list[str], timeout_s: float = 90.0) -> None:
    """Both agents, pass after pass; each run's first attempt is killed once it has committed a checkpoint."""
    agents = [c.agent(FAST) for c in clients]
    killed: set[int] = set()
    deadline = time.monotonic() + timeout_s
    pairs = list(zip(clients, runs, strict=True))
    while not all(c.service.store.get_run(r).state in ("succeeded", "failed") for c, r in pairs):
        assert time.monotonic() < deadline, "the agents did not get there in time"
        for i, (client, agent, run) in enumerate(zip(clients, agents, runs, strict=True)):
            agent.reconcile()
            store = client.service.store
            if i not in killed and store.checkpoints(run) and store.get_run(run).state == "running":
                child = json.loads((client.workspace.root / "attempts" / run / "1" / "child.json").read_text())
                os.killpg(int(child["pid"]), signal.SIGKILL)
                killed.add(i)
        time.sleep(FAST.poll_s)


def cross_launch(client: Client, ref: str, report: Path, **changes: str) -> subprocess.CompletedProcess[str]:
    """Attempt 9 of run `ref`, launched as the agent would but with `changes` to what it is told.

    `parent_checkpoint` and `parent_uid` change the resolved spec; any other key, the environment.
    """
    run = client.service.get(ref)
    att = new_attempt(run, 9, client.service.fleet.spec.pools[0], 1, report=str(report), now=client.service.clock.now())
    parent, parent_uid = changes.pop("parent_checkpoint", None), changes.pop("parent_uid", None)
    request = launch_request(run, att, parent_checkpoint=parent, heartbeat_s=1.0, parent_uid=parent_uid)
    env = {**os.environ, **request.env, **changes}
    command = [sys.executable, *request.command[1:]]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=60, check=False)


@pytest.mark.parametrize(
    "where",
    [pytest.param("local", id="local-path"), pytest.param("gcs", id="gcs-emulator", marks=pytest.mark.slow)],
)
def test_two_workspaces_run_tiny_1_on_one_checkpoint_dir_each_from_its_own_and_refuse_the_others(
    tmp_path: Path, request: pytest.FixtureRequest, where: str
) -> None:
    if where == "gcs":
        bucket, options = request.getfixturevalue("gcs_bucket")
        shared = f"{bucket}/checkpoints"
    else:
        shared, options = (tmp_path / "shared").as_uri(), {}
    a, b = workspace(tmp_path / "a"), workspace(tmp_path / "b")
    runs = []
    for client, lr in ((a, "0.05"), (b, "0.2")):
        sets = [*TINY, ARGS.format(lr=lr), f"spec.checkpoint.dir={shared}"]
        experiments = client.workspace.root / "experiments"
        runs.append(client.submit(experiments / "pretrain-small.yaml", sets=sets)["run"])
    assert [r["id"] for r in runs] == ["tiny-1", "tiny-1"]  # the readable ids collide, as they may
    uid_a, uid_b = runs[0]["uid"], runs[1]["uid"]
    assert uid_a != uid_b

    drive_both([a, b], ["tiny-1", "tiny-1"])

    for client, uid in ((a, uid_a), (b, uid_b)):
        store = client.service.store
        assert store.get_run("tiny-1").state == "succeeded"
        own = f"{shared}/tiny-1-{uid}"
        assert "resumed" not in reported(client, "tiny-1", 1)  # the first attempt starts from nothing
        resumed = reported(client, "tiny-1", 2)["resumed"]
        assert resumed["from"].startswith(f"{own}/step-")  # the retry resumes from its own checkpoint
        ckpts = store.checkpoints("tiny-1")
        assert ckpts
        assert all(c.uri.startswith(f"{own}/") for c in ckpts)
        lineage = read_manifest(ckpts[-1].uri, storage_options=options)["lineage"]
        assert (lineage["run"], lineage["run_uid"], lineage["experiment"]) == ("tiny-1", uid, "tiny")

    # A deliberate cross-resume: workspace b's run told to take workspace a's checkpoints, as its own directory
    # (what sharing `<dir>/tiny-1` did) or as the parent its spec starts from. Both are refused by name.
    theirs = a.service.store.checkpoints("tiny-1")[-1].uri
    before = [c.uri for c in a.service.store.checkpoints("tiny-1")]
    as_own = cross_launch(b, uid_b, tmp_path / "own.jsonl", CROSSRAIL_CHECKPOINT_DIR=f"{shared}/tiny-1-{uid_a}")
    assert as_own.returncode == 2, as_own.stderr
    assert f"belongs to run tiny-1 (uid {uid_a}, experiment tiny" in as_own.stderr
    assert f"not to this run (tiny-1, uid {uid_b})" in as_own.stderr
    child = b.resubmit("tiny-1", resume=True)["run"]["id"]  # tiny-2: its declared parent is b's tiny-1
    as_parent = cross_launch(b, child, tmp_path / "parent.jsonl", parent_checkpoint=theirs, parent_uid=uid_b)
    assert as_parent.returncode == 2, as_parent.stderr
    assert f"belongs to run tiny-1 (uid {uid_a}" in as_parent.stderr
    assert f"not to this run's declared parent (tiny-1, uid {uid_b})" in as_parent.stderr
    assert [c.uri for c in a.service.store.checkpoints("tiny-1")] == before
    a.close()
    b.close()
