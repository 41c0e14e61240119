"""A part of several replicas as one local attempt: the command the local executor runs, and the replicas
under crossrail.executors.replicas (each told its replica; a failure stops the rest and is the part's)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from crossrail.core.attempts import LaunchRequest
from crossrail.executors.local import gang_command

COMMAND = ["python", "-m", "crossrail.workloads.rl", "--part", "sampler"]


def request(replicas: str | None, data: int = 1) -> LaunchRequest:
    env = {"CROSSRAIL_SPEC": json.dumps({"spec": {"parallelism": {"data": data}}})}
    if replicas is not None:
        env["CROSSRAIL_PART_REPLICAS"] = replicas
    return LaunchRequest("rl-1", 1, "cpu", "cpu", "cpu", 4, COMMAND, env)


def test_a_part_of_several_replicas_runs_them_under_the_replicas_launcher() -> None:
    assert gang_command(request(None), "/py") == COMMAND
    assert gang_command(request("1"), "/py") == COMMAND
    replicas = ["/py", "-m", "crossrail.executors.replicas", "--replicas", "3", "--"]
    assert gang_command(request("3"), "/py") == [*replicas, *COMMAND]
    gang = ["/py", "-m", "crossrail.executors.gang", "--workers=2", "--min-workers=2", "--max-workers=2", "--"]
    assert gang_command(request("3", data=2), "/py") == [*replicas, *gang, *COMMAND]  # each replica its own gang


def launch(tmp_path: Path, replicas: str, code: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "crossrail.executors.replicas", "--replicas", replicas, "--"]
    return subprocess.run(
        [*command, sys.executable, "-c", code], check=False, cwd=tmp_path, capture_output=True, text=True, timeout=60
    )


def test_every_replica_runs_with_its_index_and_all_exiting_0_is_0(tmp_path: Path) -> None:
    code = "import os; open('replica-' + os.environ['CROSSRAIL_PART_REPLICA'], 'w').close()"
    assert launch(tmp_path, "3", code).returncode == 0
    assert sorted(p.name for p in tmp_path.glob("replica-*")) == ["replica-0", "replica-1", "replica-2"]


@pytest.mark.parametrize(
    ("code", "returncode"),
    [
        pytest.param("sys.exit(3)", 3, id="an-exit-code-is-the-parts"),
        pytest.param("os.kill(os.getpid(), signal.SIGKILL)", -9, id="a-killed-replica-kills-the-part"),
    ],
)
def test_a_failed_replica_stops_the_others_and_ends_the_part_as_it_ended(
    tmp_path: Path, code: str, returncode: int
) -> None:
    body = (
        "import os, signal, sys, time\n"
        "i = os.environ['CROSSRAIL_PART_REPLICA']\n"
        "signal.signal(signal.SIGTERM, lambda *_: (open('stopped-' + i, 'w').close(), sys.exit(75)))\n"
        f"if i == '1':\n    time.sleep(0.3)\n    {code}\n"
        "time.sleep(30)\n"
    )
    got = launch(tmp_path, "3", body)
    assert got.returncode == returncode, got.stderr
    assert sorted(p.name for p in tmp_path.glob("stopped-*")) == ["stopped-0", "stopped-2"]


def test_a_bad_invocation_says_how_to_call_it(tmp_path: Path) -> None:
    got = subprocess.run(
        [sys.executable, "-m", "crossrail.executors.replicas", "--replicas", "0", "--", "true"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert got.returncode == 2
    assert "usage: python -m crossrail.executors.replicas --replicas N -- COMMAND" in got.stderr
