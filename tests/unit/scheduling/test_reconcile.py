"""The reconcile step's shared decisions (scheduling/reconcile.py): placement before a cycle, pipeline rules."""

from __future__ import annotations

import pytest

from crossrail.scheduling.estimate import Busy, PlacementWork, PoolInfo
from crossrail.scheduling.reconcile import Placing, halted, pipeline_state, placed, stop_reason
from crossrail.scheduling.types import Request

from .builders import T0

POOLS = [
    PoolInfo("tpu-a", "tpu", "tpu-v5p", 8, cost_per_chip_hour=4.0),
    PoolInfo("tpu-b", "tpu", "tpu-v5p", 8, cost_per_chip_hour=4.2),
]


def work(run: str, chips: int = 8, rank: int = 2) -> PlacementWork:
    return PlacementWork(run, chips, stage="experiment", reference_s=600.0, prefer="tpu", allow=("tpu",), rank=rank)


def test_pending_requests_take_the_pool_their_choice_names_and_keep_theirs_without_one() -> None:
    placing = Placing()
    pending = [Request("x", "q", 8), Request("y", "q", 8)]
    requests, plan = placing.place(pending, [work("x", rank=1), work("y")], [], POOLS, T0)
    assert {r.run: r.pool for r in requests} == {"x": "tpu-a", "y": "tpu-b"}, "x goes first: both start at once"
    assert all(r.pool_reason for r in requests)
    assert placed([Request("z", "q", 4)], plan.choices) == [Request("z", "q", 4)]


def test_a_placed_run_stays_on_its_pool_unless_another_is_clearly_better_and_is_forgotten_once_admitted() -> None:
    placing = Placing()
    pending = [Request("y", "q", 8)]
    busy = [Busy("w", "tpu-a", 8, T0 + 60.0)]  # tpu-a frees in a minute: tpu-b now is better
    requests, _ = placing.place(pending, [work("y")], busy, POOLS, T0)
    assert requests[0].pool == "tpu-b"
    requests, _ = placing.place(pending, [work("y")], [], POOLS, T0 + 1)  # tpu-a free too, cheaper by 5%
    assert requests[0].pool == "tpu-b", "within the hysteresis: it stays"
    placing.place([], [], [], POOLS, T0 + 2)
    assert placing.current == {}


@pytest.mark.parametrize(
    ("run_state", "part", "stops"),
    [
        pytest.param("running", None, False, id="a-running-run-goes-on"),
        pytest.param("cancelled", None, True, id="a-cancelled-run-stops"),
        pytest.param("suspended", "sampler", True, id="a-suspended-pipeline-stops-its-parts"),
        pytest.param("succeeded", "sampler", True, id="a-part-of-a-pipeline-that-succeeded-stops"),
        pytest.param("failed", "reward", True, id="a-part-of-a-pipeline-that-failed-stops"),
        pytest.param("running", "sampler", False, id="a-part-of-a-running-pipeline-goes-on"),
    ],
)
def test_which_attempts_stop(run_state: str, part: str | None, stops: bool) -> None:
    assert halted(run_state, part) is stops


def test_a_stop_says_suspended_for_a_suspended_run_and_cancelled_otherwise() -> None:
    assert (stop_reason("suspended"), stop_reason("succeeded"), stop_reason("cancelled")) == (
        "suspended",
        "cancelled",
        "cancelled",
    )


@pytest.mark.parametrize(
    ("parts", "part", "decided", "expected"),
    [
        pytest.param(["sampler", "learner"], "learner", "succeeded", "succeeded", id="the-learner-ends-the-pipeline"),
        pytest.param(["sampler", "learner"], "sampler", "succeeded", None, id="a-sampler-ending-does-not"),
        pytest.param(["eval"], "eval", "succeeded", "succeeded", id="an-only-part-without-a-learner-ends-it"),
        pytest.param(["sampler", "learner"], "sampler", "failed", "failed", id="a-part-not-retried-fails-it"),
        pytest.param(["sampler", "learner"], "sampler", "queued", None, id="a-retried-part-keeps-it-running"),
    ],
)
def test_what_a_parts_end_means_for_its_pipeline(
    parts: list[str], part: str, decided: str, expected: str | None
) -> None:
    assert pipeline_state(parts, part, decided) == expected
