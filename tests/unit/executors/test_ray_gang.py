"""How the Ray executor turns its hosts' states into one attempt's end, and a run's workers into bundles
(no cluster needed)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from crossrail.core.attempts import LaunchRequest
from crossrail.executors.ray import FORGOTTEN, RayExecutor, RayPool, _gang_end, data_parallel

RUNNING: dict[str, Any] = {"phase": "running"}


def exited(code: int | None, sig: int | None = None, stopped_by: str | None = None) -> dict[str, Any]:
    return {"phase": "exited", "exit_code": code, "signal": sig, "stopped_by": stopped_by, "ended_at": 5.0}


@pytest.mark.parametrize(
    ("hosts", "end"),
    [
        pytest.param([RUNNING, RUNNING], None, id="all-hosts-running-is-running"),
        pytest.param([exited(0), RUNNING], None, id="one-host-done-waits-for-the-others"),
        pytest.param([exited(0), exited(0)], {"phase": "exited", "exit_code": 0}, id="all-hosts-exit-0-succeed"),
        pytest.param([RUNNING, exited(3)], {"phase": "exited", "exit_code": 3}, id="one-failed-host-ends-the-gang"),
        pytest.param([exited(None, 9), exited(3)], {"phase": "exited", "signal": 9}, id="the-first-failed-host-counts"),
        pytest.param(
            [exited(75, stopped_by="preempted"), RUNNING],
            {"phase": "exited", "exit_code": 75, "stopped_by": "preempted"},
            id="a-stopped-host-carries-the-reason",
        ),
        pytest.param([exited(0), "its Ray actor is gone"], {"phase": "lost"}, id="a-vanished-host-makes-it-lost"),
    ],
)
def test_the_gang_ends_as_its_first_failing_host_or_when_all_succeed(
    hosts: list[dict[str, Any] | str], end: dict[str, Any] | None
) -> None:
    got = _gang_end(hosts)
    if end is None:
        assert got is None
    else:
        assert got is not None
        assert {k: got.get(k) for k in end} == end


def test_forgetting_keeps_the_logs_of_the_newest_attempts_only(tmp_path: Path) -> None:
    executor = RayExecutor(tmp_path, dict, keep_logs=2)
    for n in range(1, 5):
        directory = tmp_path / "pretrain-small-1" / str(n)
        directory.mkdir(parents=True)
        (directory / "log.txt").write_text(f"attempt {n}\n")
        (directory / "status.json").write_text('{"phase": "exited", "exit_code": 0}')
        executor.forget("pretrain-small-1", n)  # an ended attempt: no Ray call is needed to forget it
        assert (directory / FORGOTTEN).is_file()
    assert sorted(p.name for p in (tmp_path / "pretrain-small-1").iterdir()) == ["3", "4"]
    assert executor.logs("pretrain-small-1", 4) == "attempt 4\n"
    assert executor.observe() == []


@pytest.mark.parametrize(
    ("chips", "workers", "bundles"),
    [
        pytest.param(2, 2, [{"h100": 1.0, "CPU": 1.0}] * 2, id="a-bundle-per-worker"),
        pytest.param(16, 4, [{"h100": 4.0, "CPU": 1.0}] * 4, id="workers-of-several-chips"),
        pytest.param(16, 1, [{"h100": 8.0, "CPU": 1.0}] * 2, id="one-worker-a-bundle-per-host"),
        pytest.param(16, 2, [{"h100": 8.0, "CPU": 1.0}] * 2, id="workers-of-a-whole-host"),
        pytest.param(6, 4, [{"h100": 6.0, "CPU": 1.0}], id="chips-that-do-not-split-stay-one-host"),
    ],
)
def test_a_data_parallel_run_asks_ray_for_a_bundle_per_worker(
    chips: int, workers: int, bundles: list[dict[str, float]]
) -> None:
    pool = RayPool("h100", "127.0.0.1:6379", "h100", chips_per_host=8, resources={"CPU": 1.0})
    assert pool.bundles(chips, workers) == bundles


@pytest.mark.parametrize(
    ("spec", "chips", "workers"),
    [
        ({"spec": {"parallelism": {"data": 4}}}, 4, 4),
        ({"spec": {"parallelism": {"data": 4}}}, 2, 2),  # an elastic attempt that got fewer chips
        ({"spec": {}}, 4, 1),
        (None, 4, 1),
    ],
    ids=["as-recorded", "at-most-its-chips", "no-parallelism", "no-recorded-spec"],
)
def test_the_workers_come_from_the_recorded_spec(spec: dict[str, Any] | None, chips: int, workers: int) -> None:
    env = {"CROSSRAIL_SPEC": json.dumps(spec)} if spec is not None else {}
    request = LaunchRequest("r-1", 1, "h100", "gpu", "h100", chips, ["true"], env)
    assert data_parallel(request) == workers
