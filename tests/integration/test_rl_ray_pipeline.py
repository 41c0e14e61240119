"""The same pipeline with its stages as actors on a real local Ray cluster, a killed sampler actor replaced."""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import wait_for
from tests.unit.workloads.builders import Launcher, of_type
from tests.unit.workloads.rl.builders import final_state, live_pid, metric, rendezvous, rl_launcher

pytestmark = [pytest.mark.ray, pytest.mark.slow]


@pytest.fixture(scope="module")
def ray_head() -> Iterator[Any]:
    """A one-node Ray cluster of 2 CPUs in a temporary directory, connected to this process."""
    ray = pytest.importorskip("ray")
    temp = tempfile.mkdtemp(prefix="crx", dir="/tmp")  # short: Ray's socket paths must fit in 107 bytes
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RAY_TMPDIR", temp)
        mp.setenv("RAY_USAGE_STATS_ENABLED", "0")
        # Ray starts its workers at nice 15: beside other CPU-bound work the stages would crawl (minutes, not
        # seconds); at the test's own priority they run as its processes do
        mp.setenv("RAY_worker_niceness", "0")
        ray.init(num_cpus=2, include_dashboard=False, _temp_dir=temp, log_to_driver=False)
        try:
            yield ray
        finally:
            ray.shutdown()
            shutil.rmtree(temp, ignore_errors=True)


def test_the_pipeline_runs_as_ray_actors_and_a_killed_sampler_actor_is_replaced(
    ray_head: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from crossrail.workloads.rl.__main__ import main

    launcher = rl_launcher(tmp_path, "--steps", "8", "--eval-every", "100")
    for name in [n for n in os.environ if n.startswith("CROSSRAIL_")]:
        monkeypatch.delenv(name)
    for name, value in launcher.env(1).items():
        monkeypatch.setenv(name, value)
    failed: list[BaseException] = []
    ended = threading.Event()

    def kill_a_sampler_while_the_learner_is_held() -> None:
        try:
            kill_a_sampler_mid_run(launcher, ended)
        except BaseException as exc:  # raised again in the test's thread
            failed.append(exc)

    killer = threading.Thread(target=kill_a_sampler_while_the_learner_is_held)
    killer.start()
    try:
        assert main([*launcher.defaults, "--stages", "ray"]) == 0
    finally:
        ended.set()
        killer.join()
    if failed:
        raise failed[0]

    replaced = [e["data"] for e in of_type(launcher.records(1), "event", "stage_replaced")]
    assert [(e["part"], e["replica"]) for e in replaced] == [("sampler", 0)]
    used = final_state(launcher)["used"]
    assert len(used) == len(set(used)) == 8 * 4


UNDER_LOAD_S = 600
"""How long a wait here may take: the pipeline has no deadline of its own, only this test's patience (Ray starts
an actor's process and torch loads in it, slowly on a loaded machine)."""


def kill_a_sampler_mid_run(launcher: Launcher, ended: threading.Event) -> None:
    """Once the learner has made a step, hold it (SIGSTOP) so the pipeline cannot end, SIGKILL the live sampler
    and let the learner go on once the sampler's replacement has started: the kill always lands on a running
    sampler in the middle of the run, however slowly the machine runs each part. Nothing when the pipeline
    `ended` first (it failed: the test says how)."""
    finished = rendezvous(launcher) / "finished"  # the learner's last act
    wait_for(
        lambda: any(s >= 1 for s, _ in metric(launcher.records(1), "loss")) or finished.exists() or ended.is_set(),
        what="the learner's first step",
        timeout_s=UNDER_LOAD_S,
    )
    if ended.is_set():
        return
    learner = live_pid(launcher, "learner")
    os.kill(learner, signal.SIGSTOP)
    try:
        assert not finished.exists(), "the pipeline ended before the test could hold its learner"
        sampler = live_pid(launcher, "sampler")
        os.kill(sampler, signal.SIGKILL)
        wait_for(
            lambda: live_pid(launcher, "sampler") != sampler or ended.is_set(),
            what="the killed sampler's replacement",
            timeout_s=UNDER_LOAD_S,
        )
    finally:
        os.kill(learner, signal.SIGCONT)
