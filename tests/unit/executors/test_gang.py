"""Data-parallel local attempts: the command the local executor runs, and the gang of elastic torchrun workers."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from crossrail.core.attempts import LaunchRequest
from crossrail.executors.local import gang_command

COMMAND = ["python", "-m", "crossrail.workloads.gpt"]


def request(spec: dict[str, object] | None, chips: int = 4) -> LaunchRequest:
    env = {} if spec is None else {"CROSSRAIL_SPEC": json.dumps({"spec": spec})}
    return LaunchRequest("gpt-1", 1, "cpu", "cpu", "cpu", chips, COMMAND, env)


@pytest.mark.parametrize(
    ("spec", "flags"),
    [
        pytest.param(None, None, id="no-spec-one-worker"),
        pytest.param({"parallelism": {"data": 1}}, None, id="degree-1"),
        pytest.param({"parallelism": {"data": 4}}, ["--workers=4", "--min-workers=4", "--max-workers=4"], id="fixed"),
        pytest.param(
            {"parallelism": {"data": 4}, "resources": {"chips": 4, "min_chips": 2, "max_chips": 6}},
            ["--workers=4", "--min-workers=2", "--max-workers=6"],
            id="elastic-range-from-min-and-max-chips",
        ),
        pytest.param(
            {"parallelism": {"data": 2}, "resources": {"chips": 8, "min_chips": 4}},
            ["--workers=1", "--min-workers=1", "--max-workers=2"],
            id="four-chips-per-worker-given-the-minimum",
        ),
        pytest.param(
            {"parallelism": {"data": 2}, "resources": {"chips": 8, "min_chips": 2}},
            ["--workers=1", "--min-workers=1", "--max-workers=2"],
            id="a-minimum-below-one-worker-is-one",
        ),
        pytest.param(
            {"parallelism": {"data": 4}, "resources": {"chips": 4, "max_chips": 8}, "given": 6},
            ["--workers=6", "--min-workers=4", "--max-workers=8"],
            id="admitted-above-its-chips-starts-that-many",
        ),
        pytest.param(
            {"parallelism": {"data": 2}, "resources": {"chips": 4, "max_chips": 8}, "given": 6},
            ["--workers=3", "--min-workers=2", "--max-workers=4"],
            id="two-chips-per-worker",
        ),
        pytest.param(
            {"parallelism": {"data": 2}, "resources": {"chips": 4, "max_chips": 8}, "given": 5},
            ["--workers=2", "--min-workers=2", "--max-workers=4"],
            id="chips-that-make-no-whole-worker-keep-the-degree",
        ),
    ],
)
def test_a_degree_above_one_runs_the_command_under_the_gang(
    spec: dict[str, object] | None, flags: list[str] | None
) -> None:
    given = int(str(spec.pop("given", 4))) if spec is not None else 4
    got = gang_command(request(spec, given), "/py")
    if flags is None:
        assert got == COMMAND
    else:
        assert got == ["/py", "-m", "crossrail.executors.gang", *flags, "--", *COMMAND]


WORKER = """
import os, signal, sys, time
rank = os.environ["RANK"]
def stop(*_):
    open(f"stopped-{rank}-of-{os.environ['WORLD_SIZE']}", "w").close()
    sys.exit(75)
signal.signal(signal.SIGTERM, stop)
open(f"ready-{rank}", "w").close()
time.sleep(120)
"""


@pytest.mark.slow
def test_a_stop_reaches_every_worker_and_the_gang_ends_75(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    gang = [sys.executable, "-m", "crossrail.executors.gang", "--workers=2", "--"]
    log = tmp_path / "gang.log"
    with log.open("wb") as out:
        proc = subprocess.Popen([*gang, sys.executable, "-c", WORKER], cwd=tmp_path, stdout=out, stderr=out)
        try:
            deadline = time.monotonic() + 120
            while len(list(tmp_path.glob("ready-*"))) < 2:
                assert proc.poll() is None, log.read_text()[-2000:]
                assert time.monotonic() < deadline
                time.sleep(0.2)
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=60) == 75
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert sorted(p.name for p in tmp_path.glob("stopped-*")) == ["stopped-0-of-2", "stopped-1-of-2"]
    assert len(json.loads((tmp_path / "workers.json").read_text())["agents"]) == 2


# Says each group it joins: a regrouped worker marks itself ready again, at the new size.
WORKER_OF = WORKER.replace('f"ready-{rank}"', "f\"ready-{rank}-of-{os.environ['WORLD_SIZE']}\"")


def _wait_files(tmp_path: Path, pattern: str, count: int, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 120
    while len(list(tmp_path.glob(pattern))) < count:
        assert proc.poll() is None, log.read_text()[-2000:]
        assert time.monotonic() < deadline, f"{pattern}: {sorted(p.name for p in tmp_path.iterdir())}"
        time.sleep(0.2)


@pytest.mark.slow
def test_a_grown_gang_regroups_its_workers_larger_and_a_stop_reaches_the_new_one(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    gang = [sys.executable, "-m", "crossrail.executors.gang", "--workers=2", "--max-workers=3", "--"]
    log = tmp_path / "gang.log"
    with log.open("wb") as out:
        proc = subprocess.Popen([*gang, sys.executable, "-c", WORKER_OF], cwd=tmp_path, stdout=out, stderr=out)
        try:
            _wait_files(tmp_path, "ready-*-of-2", 2, proc, log)
            (tmp_path / "grow.json").write_text(json.dumps({"workers": 5}))  # past --max-workers: three
            proc.send_signal(signal.SIGUSR1)
            _wait_files(tmp_path, "stopped-*-of-2", 2, proc, log)  # the two regroup: each agent stops its worker
            _wait_files(tmp_path, "ready-*-of-3", 3, proc, log)
            assert len(json.loads((tmp_path / "workers.json").read_text())["agents"]) == 3
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=60) == 75
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert sorted(p.name for p in tmp_path.glob("stopped-*-of-3")) == [f"stopped-{r}-of-3" for r in range(3)]
