"""The pieces of data parallelism that need no framework: splitting a global batch, a worker ending with its agent."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from crossrail.errors import CrossrailError
from crossrail.workloads.parallel import rows


@pytest.mark.parametrize(
    ("batch", "world", "parts"),
    [
        pytest.param(8, 1, [(0, 8)], id="one-worker-takes-all"),
        pytest.param(8, 4, [(0, 2), (2, 4), (4, 6), (6, 8)], id="equal-shares"),
        pytest.param(8, 3, [(0, 3), (3, 5), (5, 8)], id="three-workers-near-equal"),
    ],
)
def test_the_workers_split_the_global_batch_into_contiguous_parts(
    batch: int, world: int, parts: list[tuple[int, int]]
) -> None:
    got = [rows(batch, rank, world) for rank in range(world)]
    assert [(s.start, s.stop) for s in got] == parts


def test_a_batch_smaller_than_the_degree_is_refused_with_the_fix() -> None:
    with pytest.raises(CrossrailError, match=r"raise optim\.batch to at least 4 or lower spec\.parallelism\.data"):
        rows(3, 0, 4)


AGENT = """
import subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", sys.argv[1], sys.argv[2]])
print(child.pid, flush=True)
time.sleep(60)
"""
WORKER = """
import sys, time
from crossrail.workloads import parallel
parallel._die_with_parent()
open(sys.argv[1], "w").close()
time.sleep(60)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_worker_ends_when_its_agent_is_killed(tmp_path: Path) -> None:
    ready = tmp_path / "ready"
    agent = subprocess.Popen([sys.executable, "-c", AGENT, WORKER, str(ready)], stdout=subprocess.PIPE, text=True)
    assert agent.stdout is not None
    worker = int(agent.stdout.readline())
    deadline = time.monotonic() + 60
    while not ready.exists():  # the worker asked to end with its parent
        assert time.monotonic() < deadline
        time.sleep(0.1)
    agent.kill()
    agent.wait()
    agent.stdout.close()
    deadline = time.monotonic() + 10
    while Path(f"/proc/{worker}").exists() and _state(worker) != "Z":
        assert time.monotonic() < deadline, "the worker outlived its agent"
        time.sleep(0.1)


def _state(pid: int) -> str:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return "X"
    return text[text.rindex(")") + 2]
