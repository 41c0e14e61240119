"""bench/chaos.py, reduced: agent and training kills, a kill mid-save and fuzzed submissions lose and repeat nothing."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

from crossrail.client import Client
from crossrail.core import Event, EventType

pytestmark = pytest.mark.slow

BENCH = Path(__file__).resolve().parents[2] / "bench" / "chaos.py"


def load_chaos() -> ModuleType:
    spec = importlib.util.spec_from_file_location("crossrail_bench_chaos", BENCH)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


def test_reduced_chaos_loses_duplicates_and_misresumes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CROSSRAIL_HOME", raising=False)
    monkeypatch.delenv("CROSSRAIL_STORE_URL", raising=False)
    chaos = load_chaos()
    plan = chaos.Plan(
        runs=2,
        steps=200,
        every=5,
        step_sleep_s=0.05,
        agent_kills=6,
        training_kills=1,
        save_kills=1,
        fuzz=12,
        fuzz_cli=2,
        seconds=60.0,  # a bound only: the kills are done in about 15 s
        seed=11,
    )
    run = chaos.Chaos(tmp_path, plan)
    tally = run.run()
    assert tally.findings() == []
    assert tally.agent_kills >= plan.agent_kills  # one more when the training kills needed an agent alive
    assert tally.training_kills + tally.save_kills >= 1, "no training process was killed"
    assert tally.fuzz_accepted + tally.fuzz_refused == plan.fuzz
    assert tally.summary() == f"SUMMARY kills={tally.kills} lost=0 duplicated=0 wrong_resume=0 hangs=0 tracebacks=0"

    # The audit has teeth: a resume from the other run's directory and an attempt started twice are found.
    first, second = run.runs
    elsewhere = f"{run.checkpoint_dir(second).as_uri()}/step-0000000005"
    resumed = {"name": "resumed", "data": {"step": 5, "from": elsewhere}}
    with Client(cwd=tmp_path) as c:
        c.service.store.append_events(
            [Event(EventType.REPORTED, 0.0, first, 1, resumed), Event(EventType.STARTED, 0.0, second, 1, {})]
        )
    run.tally = chaos.Tally()
    chaos.audit(run)
    assert any(f"{first}/1 resumed from {elsewhere}, outside" in w for w in run.tally.wrong_resume)
    assert f"{second}/1: started 2 times" in run.tally.duplicated
