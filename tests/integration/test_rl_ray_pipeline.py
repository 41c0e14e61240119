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
from tests.unit.workloads.builders import of_type
from tests.unit.workloads.rl.builders import final_state, live_pid, rl_launcher, wait_for_step

pytestmark = [pytest.mark.ray, pytest.mark.slow]


@pytest.fixture(scope="module")
def ray_head() -> Iterator[Any]:
    """A one-node Ray cluster of 2 CPUs in a temporary directory, connected to this process."""
    ray = pytest.importorskip("ray")
    temp = tempfile.mkdtemp(prefix="crx", dir="/tmp")  # short: Ray's socket paths must fit in 107 bytes
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RAY_TMPDIR", temp)
        mp.setenv("RAY_USAGE_STATS_ENABLED", "0")
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

    def kill_a_sampler() -> None:
        wait_for_step(launcher, 1, 2)
        os.kill(live_pid(launcher, "sampler"), signal.SIGKILL)

    killer = threading.Thread(target=kill_a_sampler)
    killer.start()
    assert main([*launcher.defaults, "--stages", "ray"]) == 0
    killer.join()

    replaced = [e["data"] for e in of_type(launcher.records(1), "event", "stage_replaced")]
    assert [(e["part"], e["replica"]) for e in replaced] == [("sampler", 0)]
    used = final_state(launcher)["used"]
    assert len(used) == len(set(used)) == 8 * 4
