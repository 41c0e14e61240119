"""Start-time and run-time estimators on constructed queues whose answers can be worked out by hand."""

from __future__ import annotations

import pytest

from crossrail.scheduling.estimate import (
    Busy,
    PlacementWork,
    PoolInfo,
    Waiting,
    cost,
    estimate_starts,
    recovery_s,
    run_time_s,
)

NOW = 1_000.0
HOUR = 3600.0


def pool(name: str = "p", capacity: int = 8, **extra: object) -> PoolInfo:
    fields: dict[str, object] = {"accelerator": "gpu", "chip_type": "h100", **extra}
    return PoolInfo(name, capacity=capacity, **fields)  # type: ignore[arg-type]


def wait(run: str, chips: int, *pools_durations: tuple[str, float | None], **extra: object) -> Waiting:
    return Waiting(run, chips, dict(pools_durations), **extra)  # type: ignore[arg-type]


# --- start times ---------------------------------------------------------------------------------


def test_a_queue_behind_a_full_pool_starts_as_running_work_ends_in_admission_order() -> None:
    running = [Busy("a", "p", 8, NOW + 100)]
    pending = [
        wait("b", 4, ("p", 50.0), queued_at=1),
        wait("c", 4, ("p", 200.0), queued_at=2),
        wait("d", 8, ("p", 10.0), queued_at=3),
        wait("e", 2, ("p", 5.0), queued_at=4),
    ]

    got = estimate_starts(pending, running, [pool()], NOW)

    assert {r: (e.start, e.end) for r, e in got.items()} == {
        "b": (NOW + 100, NOW + 150),
        "c": (NOW + 100, NOW + 300),
        "d": (NOW + 300, NOW + 310),  # the whole pool frees when c ends
        "e": (NOW + 310, NOW + 315),  # no backfill past the waiting gang d, though 4 chips were free at 150
    }


def test_with_backfill_a_small_run_passes_a_gang_still_waiting_for_its_chips() -> None:
    running = [Busy("a", "p", 8, NOW + 100)]
    pending = [
        wait("b", 4, ("p", 50.0), queued_at=1),
        wait("c", 4, ("p", 200.0), queued_at=2),
        wait("d", 8, ("p", 10.0), queued_at=3),
        wait("e", 2, ("p", 5.0), queued_at=4),
    ]

    got = estimate_starts(pending, running, [pool()], NOW, backfill=True)

    assert {r: (e.pool, e.start, e.end) for r, e in got.items()} == {
        "b": ("p", NOW + 100, NOW + 150),
        "c": ("p", NOW + 100, NOW + 300),
        "d": ("p", NOW + 300, NOW + 310),
        "e": ("p", NOW + 150, NOW + 155),  # into the 4 chips b frees, while d waits for 8
    }


def test_with_backfill_a_run_starts_on_whichever_candidate_frees_first() -> None:
    pools = [pool("tpu", accelerator="tpu"), pool("gpu"), pool("small", capacity=2)]
    running = [Busy("x", "tpu", 8, NOW + 1000), Busy("y", "gpu", 6, NOW + 400)]
    pending = [
        wait("r", 4, ("tpu", 100.0), ("gpu", 80.0)),
        wait("pinned", 4, ("tpu", 100.0), ("gpu", 80.0), pool="tpu", queued_at=1),
        wait("huge", 32, ("tpu", 1.0), queued_at=2),
    ]

    got = estimate_starts(pending, running, pools, NOW, backfill=True)

    assert (got["r"].pool, got["r"].start) == ("gpu", NOW + 400)
    assert (got["pinned"].pool, got["pinned"].start) == ("tpu", NOW + 1000)
    assert (got["huge"].pool, got["huge"].start) == (None, None)


def test_priority_goes_before_time_queued() -> None:
    pending = [wait("early", 8, ("p", 60.0), queued_at=1), wait("urgent", 8, ("p", 30.0), queued_at=5, rank=0)]

    got = estimate_starts(pending, [], [pool()], NOW)

    assert (got["urgent"].start, got["early"].start) == (NOW, NOW + 30)


def test_a_run_starts_on_whichever_candidate_frees_first_and_reports_every_candidate() -> None:
    pools = [pool("tpu", accelerator="tpu"), pool("gpu")]
    running = [Busy("x", "tpu", 8, NOW + 1000), Busy("y", "gpu", 6, NOW + 400)]

    got = estimate_starts([wait("r", 4, ("tpu", 100.0), ("gpu", 80.0))], running, pools, NOW)

    assert (got["r"].pool, got["r"].start, got["r"].end) == ("gpu", NOW + 400, NOW + 480)
    assert got["r"].by_pool == {"tpu": NOW + 1000, "gpu": NOW + 400}


def test_a_pinned_run_waits_for_its_pool_even_when_another_frees_sooner() -> None:
    pools = [pool("tpu", accelerator="tpu"), pool("gpu")]
    running = [Busy("x", "tpu", 8, NOW + 1000)]

    got = estimate_starts([wait("r", 4, ("tpu", 100.0), ("gpu", 80.0), pool="tpu")], running, pools, NOW)

    assert (got["r"].pool, got["r"].start) == ("tpu", NOW + 1000)


def test_equal_starts_go_to_the_earlier_candidate() -> None:
    pools = [pool("a"), pool("b")]

    got = estimate_starts([wait("r", 4, ("b", 10.0), ("a", 10.0))], [], pools, NOW)

    assert got["r"].pool == "b"


@pytest.mark.parametrize(
    ("pools", "why"),
    [
        pytest.param([pool(capacity=4)], "too small", id="pool-too-small-for-the-gang"),
        pytest.param([pool(drained=True)], "drained", id="drained-pool-takes-nothing"),
        pytest.param([pool("other")], "absent", id="candidate-not-in-the-fleet"),
    ],
)
def test_a_run_no_candidate_can_hold_gets_no_start(pools: list[PoolInfo], why: str) -> None:
    got = estimate_starts([wait("r", 8, ("p", 10.0))], [], pools, NOW)

    assert (got["r"].pool, got["r"].start, got["r"].end) == (None, None, None), why


def test_unknown_ends_count_as_the_default_and_overdue_work_frees_its_chips_now() -> None:
    running = [Busy("unknown", "p", 4, None), Busy("overdue", "p", 4, NOW - 50)]
    pending = [wait("a", 4, ("p", None), queued_at=1), wait("b", 8, ("p", 10.0), queued_at=2)]

    got = estimate_starts(pending, running, [pool()], NOW, unknown_duration_s=500)

    assert (got["a"].start, got["a"].end) == (NOW, NOW + 500)
    assert got["b"].start == NOW + 500


def test_starts_for_a_long_queue_are_exact_for_equal_runs() -> None:
    """100 runs of 2 chips and 60 s on 8 chips: four start every minute."""
    pending = [wait(f"r{i:03}", 2, ("p", 60.0), queued_at=i) for i in range(100)]

    got = estimate_starts(pending, [], [pool()], NOW)

    assert all(got[f"r{i:03}"].start == NOW + 60 * (i // 4) for i in range(100))


# --- run time, recovery, cost --------------------------------------------------------------------


def test_run_time_is_the_reference_duration_scaled_by_relative_speed() -> None:
    assert run_time_s(PlacementWork("r", 4, reference_s=10 * HOUR), pool(relative_speed=2.0)) == (
        5 * HOUR,
        "relative_speed",
    )
    assert run_time_s(PlacementWork("r", 4), pool()) == (None, "unknown")


def test_measured_throughput_with_known_work_gives_run_time_directly() -> None:
    work = PlacementWork("r", 4, reference_s=HOUR, measured={"h100": 0.5}, work_units=1000)

    assert run_time_s(work, pool()) == (500.0, "measured")


def test_measured_throughput_replaces_relative_speed_between_chip_types() -> None:
    """The fleet says the GPU is 1.5x the TPU; the workload measured it at half the TPU's throughput."""
    tpu = pool("tpu", accelerator="tpu", chip_type="v5p", relative_speed=1.0)
    gpu = pool("gpu", relative_speed=1.5)
    l4 = pool("l4", chip_type="l4", relative_speed=0.5)
    work = PlacementWork("r", 4, reference_s=HOUR, measured={"v5p": 2.0, "h100": 1.0})

    # The fastest measured type anchors: its run time is the declared duration at its relative speed.
    assert run_time_s(work, tpu, [tpu, gpu, l4]) == (HOUR, "relative_speed")
    assert run_time_s(work, gpu, [tpu, gpu, l4]) == (2 * HOUR, "measured ratio")  # not HOUR / 1.5
    assert run_time_s(work, l4, [tpu, gpu, l4]) == (2 * HOUR, "relative_speed")  # never measured


def test_recovery_is_interruptions_times_lost_work_plus_restore() -> None:
    """0.001 per chip-hour x 100 chips x 10 h = 1 interruption, losing half of a 20 min interval + 5 min."""
    flaky = pool(capacity=128, interruptions_per_chip_hour=0.001, restore_s=300.0)

    assert recovery_s(100, 10 * HOUR, flaky, 1200.0) == pytest.approx(900.0)
    assert recovery_s(100, 10 * HOUR, flaky, None) == pytest.approx(5 * HOUR + 300.0)  # never checkpoints
    assert recovery_s(100, 10 * HOUR, pool(restore_s=300.0), 1200.0) == 0.0  # never interrupted


def test_cost_is_chips_times_hours_times_price() -> None:
    assert cost(100, 10.25 * HOUR, pool(cost_per_chip_hour=2.0)) == pytest.approx(2050.0)
