"""Growing a running data-parallel attempt in place: LocalExecutor.resize asks the gang for more workers.

The gang here is a stand-in (a shell script in the interpreter's place runs for `-m crossrail.executors.gang`
and execs the real interpreter for anything else, the supervisor included): it records its pid in workers.json
as the gang does and copies grow.json on SIGUSR1, so what resize delivered, and when it refused, is seen
without starting torch.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from crossrail.core.attempts import LaunchRequest
from crossrail.executors.local import LocalExecutor

from .helpers import RUN, ended, request, status, wait_for

STAND_IN = """#!/bin/bash
if [ "$2" = crossrail.executors.gang ]; then
  trap 'cp grow.json asked.json' USR1
  echo "{{\\"agents\\": [], \\"gang\\": $$}}" > .workers.json && mv .workers.json workers.json
  while true; do sleep 0.05; done
fi
exec {python} "$@"
"""


@pytest.fixture
def gangs(state_dir: Path, tmp_path: Path) -> LocalExecutor:
    """An executor whose gangs are the stand-in."""
    python = tmp_path / "python"
    python.write_text(STAND_IN.format(python=sys.executable))
    python.chmod(0o755)
    return LocalExecutor(state_dir, python=str(python))


def gang_request(chips: int = 2, data: int = 2, max_chips: int = 3, attempt: int = 1) -> LaunchRequest:
    spec = {"parallelism": {"data": data}, "resources": {"chips": chips, "max_chips": max_chips}}
    return LaunchRequest(
        RUN, attempt, "local", "gpu", "virtual", chips, ["train"], {"CROSSRAIL_SPEC": json.dumps({"spec": spec})}
    )


def running_gang(executor: LocalExecutor, attempt_dir: Path, req: LaunchRequest) -> None:
    executor.launch(req)
    wait_for((attempt_dir / "workers.json").exists, what="the gang's workers.json")


def asked(attempt_dir: Path) -> dict[str, object]:
    found: dict[str, object] = wait_for(
        lambda: json.loads((attempt_dir / "asked.json").read_text()) if (attempt_dir / "asked.json").exists() else None,
        what="the gang to take the request",
    )
    return found


def test_a_live_gang_is_asked_for_the_workers_the_chips_make(gangs: LocalExecutor, attempt_dir: Path) -> None:
    running_gang(gangs, attempt_dir, gang_request(chips=4, data=2, max_chips=8))
    assert gangs.resize(RUN, 1, 6) is True  # two chips a worker: three workers
    assert asked(attempt_dir)["workers"] == 3
    assert status(gangs).phase == "running"


@pytest.mark.parametrize(
    ("chips", "why"),
    [
        pytest.param(4, "four workers is past --max-workers=3", id="past-max"),
        pytest.param(1, "fewer workers than it launched with", id="shrink"),
    ],
)
def test_chips_outside_the_gangs_range_are_refused(
    gangs: LocalExecutor, attempt_dir: Path, chips: int, why: str
) -> None:
    running_gang(gangs, attempt_dir, gang_request(chips=2, data=2, max_chips=3))
    assert gangs.resize(RUN, 1, chips) is False, why
    assert not (attempt_dir / "grow.json").exists()
    assert gangs.resize(RUN, 1, 3) is True  # the same gang takes what fits
    assert asked(attempt_dir)["workers"] == 3


def test_chips_that_are_not_whole_workers_are_refused(gangs: LocalExecutor, attempt_dir: Path) -> None:
    running_gang(gangs, attempt_dir, gang_request(chips=4, data=2, max_chips=8))
    assert gangs.resize(RUN, 1, 5) is False  # two chips a worker
    assert not (attempt_dir / "grow.json").exists()


def test_an_attempt_that_is_not_a_gang_is_refused(executor: LocalExecutor, attempt_dir: Path) -> None:
    executor.launch(request("import time; print('ready', flush=True); time.sleep(30)"))
    wait_for((attempt_dir / "child.json").exists, what="the command to start")
    assert executor.resize(RUN, 1, 2) is False
    assert not (attempt_dir / "grow.json").exists()


def test_an_ended_stopping_or_unknown_attempt_is_refused(gangs: LocalExecutor, attempt_dir: Path) -> None:
    assert gangs.resize(RUN, 1, 3) is False  # never launched
    running_gang(gangs, attempt_dir, gang_request())
    gangs.stop(RUN, 1, grace_s=5.0, reason="cancelled")
    assert gangs.resize(RUN, 1, 3) is False  # stopping
    assert ended(gangs).phase == "exited"
    assert gangs.resize(RUN, 1, 3) is False  # ended
    assert not (attempt_dir / "grow.json").exists()
