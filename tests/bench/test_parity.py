"""bench/parity.py in its reduced form: the live agent and the simulator decide the policies they share alike.

Six jobs (seed 34: a lost attempt, a drain that preempts, a budget that holds a run to the next day) and the
pipeline, for `fifo`, `priority`, `max_min_fairness` (round-based) and `fifo_hetero` (an ordering that picks
pools), whose admission both drivers run through `Scheduler.cycle` (its rounds included), with the
end-of-attempt decisions of scheduling/decisions.py. Every decision must be equal, with its time, the
pipeline's too (its parts admitted together, its sampler cancelled when its learner ends); the summary line
must parse.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

import pytest

from crossrail.spec import load_fleet

pytestmark = pytest.mark.slow

BENCH = Path(__file__).resolve().parents[2] / "bench" / "parity.py"


def parity() -> ModuleType:
    spec = importlib.util.spec_from_file_location("parity_bench", BENCH)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_the_shared_policies_decide_alike_live_and_simulated(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    for name in ("CROSSRAIL_HOME", "CROSSRAIL_STORE_URL", "CROSSRAIL_SERVER"):
        monkeypatch.delenv(name, raising=False)
    bench = parity()
    work = bench.jobs(6, 34)
    # The workload exercises what it claims (one run of the simulated side is enough to show it).
    path = tmp_path / "fleet.yaml"
    path.write_text(bench.fleet_text("fifo"))
    trace = bench.sim_trace("fifo", load_fleet(path), work)
    kinds = {(e[1], e[-1]) for e in trace}
    assert {("end", "lost"), ("preempt", "drained"), ("retry", "lost"), ("retry", "drained")} <= kinds
    assert {(e[1], e[2], e[-1]) for e in trace if e[2].startswith("rl/")} == {
        ("admit", "rl/learner", 4),
        ("admit", "rl/sampler", 4),
        ("end", "rl/learner", "succeeded"),
        ("end", "rl/sampler", "cancelled"),
    }
    assert any(e[1] == "budget" for e in trace)
    assert any(e[1] == "admit" and e[0] >= bench.DAY_S for e in trace), "the budget holds a run to the next day"

    policies = ("fifo", "priority", "max_min_fairness", "fifo_hetero")
    assert bench.main(["--jobs", "6", "--seed", "34", "--policies", ",".join(policies)]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    for policy in policies:
        line = next(line for line in lines if line.startswith(policy + " "))
        assert "mismatches=0 " in line, "\n".join(lines)
        assert line.endswith("pipeline=0"), line
    found = re.fullmatch(r"SUMMARY parity policies=(\d+) decisions=(\d+) mismatches=(\d+)", lines[-1])
    assert found is not None, lines[-1]
    count, decisions, mismatches = (int(g) for g in found.groups())
    assert (count, mismatches) == (4, 0)
    assert decisions > 4 * 34
