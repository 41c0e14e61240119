"""Time-sliced rounds in bulk give what the same rounds give through the executor's stops and starts (sums to 1e-9)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from crossrail.sim import CheckpointSpec, Simulation
from crossrail.sim.fleets import build_fleet
from crossrail.sim.generated import JobStream
from crossrail.sim.records import SimResult
from crossrail.sim.slicing import why_not_bulk
from crossrail.sim.traces import gavel_jobs
from crossrail.sim.workload import SimJob, parse_workload
from crossrail.spec import Fleet

DATA = Path(__file__).resolve().parents[3] / "data" / "gavel"
MATRIX = DATA / "simulation_throughputs.json"


def gavel_fleet(v100: int, p100: int, k80: int) -> Fleet:
    counts = {"v100": v100, "p100": p100, "k80": k80}
    return build_fleet(
        [{"name": t, "accelerator": "gpu", "chip_type": t, "chips": n, "chips_per_host": 1}
         for t, n in counts.items() if n],
        name="gavel",
    )  # fmt: skip


def everything(result: SimResult) -> dict[str, Any]:
    """What a simulation reports, but for how long it took and how many engine events it ran."""
    out = result.to_json()
    for key in ("wall_s", "events", "events_per_s"):
        out.pop(key, None)
    out["records"] = {name: dataclasses.asdict(rec) for name, rec in sorted(result.runs.items())}
    return out


def assert_same(fast: SimResult, ref: SimResult) -> None:
    """Bulk rounds report what the executor's path reports: the same counts, times and outcomes, and sums within
    a relative 1e-9 (the bulk path adds a round's swaps as one sum, not one event after another)."""
    _close(everything(fast), everything(ref), "result")


def _close(got: Any, want: Any, where: str) -> None:
    if isinstance(want, dict):
        assert isinstance(got, dict), where
        assert sorted(got) == sorted(want), where
        for key in want:
            _close(got[key], want[key], f"{where}.{key}")
    elif isinstance(want, list | tuple):
        assert len(got) == len(want), where
        for i, (a, b) in enumerate(zip(got, want, strict=True)):
            _close(a, b, f"{where}[{i}]")
    elif isinstance(want, float) and not isinstance(got, bool):
        assert got == pytest.approx(want, rel=1e-9, abs=1e-12, nan_ok=True), where
    else:
        assert got == want, where


def swaps(result: SimResult) -> int:
    return sum(rec.preemptions for rec in result.runs.values())


def through_both(
    fleet: Fleet, jobs: Callable[[], Sequence[SimJob] | JobStream], policy: str, until_s: float | None = None
) -> tuple[Simulation, SimResult, Simulation, SimResult]:
    """The same simulation in bulk and through the executor (recording the event log takes the executor)."""
    bulk = Simulation(fleet, jobs(), policy=policy)
    slow = Simulation(fleet, jobs(), policy=policy, record_events=True)
    return bulk, bulk.run(until_s), slow, slow.run(until_s)


@pytest.mark.parametrize("policy", ["max_min_fairness", "max_min_fairness_hetero"])
def test_gavels_trace_in_bulk_reports_exactly_what_the_executor_does(policy: str) -> None:
    jobs = gavel_jobs(DATA / "artifact_evaluation.trace", MATRIX)
    bulk, fast, slow, ref = through_both(gavel_fleet(2, 0, 4), lambda: jobs, policy)

    assert bulk.driver is not None
    assert bulk.driver.slices is not None
    assert slow.driver is not None
    assert slow.driver.slices is None
    assert swaps(ref) > 0
    assert_same(fast, ref)


@pytest.mark.slow
def test_generated_jobs_in_bulk_report_exactly_what_the_executor_does() -> None:
    def gen() -> JobStream:
        found = parse_workload("gavel-gen:rate=1/h,window=30-60,seed=1", throughputs=str(MATRIX))
        assert isinstance(found, JobStream)
        return found

    # Two simulated days, cut mid-round with jobs running and waiting: the state at the cut is compared too.
    _, fast, _, ref = through_both(gavel_fleet(6, 6, 6), gen, "max_min_fairness", until_s=2 * 86_400 + 100)

    assert swaps(ref) > 100
    assert_same(fast, ref)


@pytest.mark.slow
def test_a_report_taken_while_rounds_run_in_bulk_changes_nothing_after_it() -> None:
    """The swap book hands its runs back for a report mid-run and takes them again at the next round."""

    def gen() -> JobStream:
        found = parse_workload("gavel-gen:rate=1/h,window=30-60,seed=1", throughputs=str(MATRIX))
        assert isinstance(found, JobStream)
        return found

    fleet = gavel_fleet(6, 6, 6)
    looked = Simulation(fleet, gen(), policy="max_min_fairness")
    reports: list[float] = []

    def look() -> None:
        reports.append(looked.metrics.report(looked.engine.now()).totals.chip_hours)

    for at in (0.5, 1.0, 1.5, 2.0, 2.5):  # mid-round instants, with jobs running and waiting
        looked.engine.schedule(at * 86_400 + 100, look)
    seen = looked.run(until_s=3 * 86_400)
    plain = Simulation(fleet, gen(), policy="max_min_fairness").run(until_s=3 * 86_400)

    assert len(reports) == 5
    assert reports[0] > 0
    assert reports == sorted(reports)  # chip-hours used only grow
    assert everything(seen) == everything(plain)


def mixed_fleet(v100_host: int) -> Fleet:
    """Two pools of one chip type (the plan picks between them) and one of another."""
    return build_fleet(
        [{"name": "v100-a", "accelerator": "gpu", "chip_type": "v100", "chips": 8, "chips_per_host": v100_host},
         {"name": "v100-b", "accelerator": "gpu", "chip_type": "v100", "chips": 4, "chips_per_host": v100_host},
         {"name": "k80", "accelerator": "gpu", "chip_type": "k80", "chips": 8, "chips_per_host": 1}],
        name="mixed",
    )  # fmt: skip


def multi_gpu() -> JobStream:
    found = parse_workload("gavel-gen:rate=2/h,window=20-40,seed=3,multi_gpu=1", throughputs=str(MATRIX))
    assert isinstance(found, JobStream)
    return found


@pytest.mark.parametrize("policy", ["max_min_fairness", "max_min_fairness_hetero"])
@pytest.mark.slow
def test_gangs_on_pools_a_chip_type_shares_report_in_bulk_exactly_what_the_executor_does(policy: str) -> None:
    bulk, fast, _, ref = through_both(mixed_fleet(1), multi_gpu, policy, until_s=86_400 + 50)

    assert bulk.driver is not None
    assert bulk.driver.slices is not None
    assert swaps(ref) > 100
    assert {rec.pool for rec in ref.runs.values()} >= {"v100-a", "v100-b", "k80"}
    assert_same(fast, ref)


def test_gangs_that_share_hosts_go_through_the_executor() -> None:
    """On hosts of several chips a gang needs free chips on whole hosts, which the executor finds and the
    bulk rounds would not: such rounds take the executor's path."""
    sim = Simulation(mixed_fleet(4), multi_gpu(), policy="max_min_fairness")

    assert sim.driver is not None
    assert sim.driver.slices is None
    assert why_not_bulk(sim, sim.driver) == "gangs of several chips share hosts with other gangs"


def test_one_chip_jobs_on_hosts_of_several_chips_report_in_bulk_exactly_what_the_executor_does() -> None:
    def single() -> JobStream:
        found = parse_workload("gavel-gen:rate=1/h,window=30-60,seed=1", throughputs=str(MATRIX))
        assert isinstance(found, JobStream)
        return found

    bulk, fast, _, ref = through_both(mixed_fleet(4), single, "max_min_fairness", until_s=86_400 + 50)

    assert bulk.driver is not None
    assert bulk.driver.slices is not None
    assert swaps(ref) > 50
    assert_same(fast, ref)


@pytest.mark.parametrize(
    ("change", "why"),
    [
        ({"policy": "las"}, "the policy keeps no round ledger"),
        ({"record_events": True}, "the event log is recorded"),
        ({"checkpoint": CheckpointSpec(cost_s=30.0)}, "checkpoints or restores cost time"),
        ({"checkpoint": CheckpointSpec(restore_s=60.0)}, "checkpoints or restores cost time"),
    ],
    ids=["an ordering of its own", "a recorded log", "a checkpoint that costs", "a restore that costs"],
)
def test_rounds_go_through_the_executor_where_a_swap_is_more_than_bookkeeping(change: dict[str, Any], why: str) -> None:
    jobs = gavel_jobs(DATA / "artifact_evaluation.trace", MATRIX)
    sim = Simulation(gavel_fleet(2, 0, 4), jobs, **{"policy": "max_min_fairness", **change})

    assert sim.driver is not None
    assert sim.driver.slices is None
    assert why_not_bulk(sim, sim.driver) == why
