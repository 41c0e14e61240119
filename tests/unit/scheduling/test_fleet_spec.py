"""The fleet fields the scheduling core reads: limits, queueing, fair share, preemption and reservations."""

from __future__ import annotations

import pytest

from crossrail.errors import SpecError
from crossrail.spec import parse_document, parse_fleet

FLEET = """\
apiVersion: crossrail/v1
kind: Fleet
metadata: {name: lab}
spec:
  pools:
    - {name: tpu-v5p, accelerator: tpu, chip_type: tpu-v5p, chips: 16, chips_per_host: 4}
    - {name: h100, accelerator: gpu, chip_type: h100, chips: 16, chips_per_host: 8, drained: true}
  queues:
    - {name: pre, stage: pretraining, quota: {tpu-v5p: 8}, cohort: lab, borrowing_limit: {tpu-v5p: 4}}
    - {name: post, stage: post_training, quota: {tpu-v5p: 8}, cohort: lab, lending_limit: {tpu-v5p: 2}}
    - {name: evals, stage: eval, queueing: best_effort_fifo}
  fair_share: {half_life: 6h}
  preemption: {grace: 10m, max_per_window: 3, window: 2h, on_drain: preempt}
  reservations:
    - {name: frontier, pool: tpu-v5p, chips: 8, start: "2026-03-01T00:00:00Z", duration: 14d, team: pre}
"""


def test_the_scheduling_fields_parse() -> None:
    fleet = parse_fleet(parse_document(FLEET, "fleet.yaml"))

    pre, post, evals = fleet.spec.queues
    assert (pre.borrowing_limit, pre.lending_limit, pre.queueing) == ({"tpu-v5p": 4}, {}, "strict_fifo")
    assert (post.lending_limit, evals.queueing) == ({"tpu-v5p": 2}, "best_effort_fifo")
    assert fleet.spec.fair_share.half_life_s == 6 * 3600
    pre = fleet.spec.preemption
    assert (pre.grace_s, pre.max_per_window, pre.window_s, pre.on_drain) == (600, 3, 7200, "preempt")
    (res,) = fleet.spec.reservations
    assert (res.start_s, res.end_s - res.start_s, res.team) == (1_772_323_200.0, 14 * 86400, "pre")
    assert [p.drained for p in fleet.pools] == [False, True]


def test_a_fleet_without_them_gets_the_defaults() -> None:
    text = FLEET.split("  fair_share:", maxsplit=1)[0].replace(", drained: true", "")
    fleet = parse_fleet(parse_document(text, "fleet.yaml"))

    assert (fleet.spec.fair_share.half_life_s, fleet.spec.preemption.grace_s) == (3600, 300)
    assert (fleet.spec.preemption.on_drain, fleet.spec.reservations) == ("finish", [])


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        pytest.param(
            "cohort: lab, borrowing_limit",
            "borrowing_limit",
            ("spec.queues[0].borrowing_limit", 9, "only a queue in a cohort borrows or lends"),
            id="limit-without-a-cohort",
        ),
        pytest.param(
            "lending_limit: {tpu-v5p: 2}",
            "lending_limit: {tpu-v5: 2}",
            ("spec.queues[1].lending_limit.tpu-v5", 10, "unknown pool 'tpu-v5'"),
            id="limit-on-an-unknown-pool",
        ),
        pytest.param(
            "queueing: best_effort_fifo",
            "queueing: best_effort",
            ("spec.queues[2].queueing", 11, "'best_effort' is not one of strict_fifo, best_effort_fifo"),
            id="unknown-queueing",
        ),
        pytest.param(
            "pool: tpu-v5p, chips: 8",
            "pool: tpu-v5q, chips: 8",
            ("spec.reservations[0].pool", 15, "unknown pool 'tpu-v5q'"),
            id="reservation-on-an-unknown-pool",
        ),
        pytest.param(
            "chips: 8, start",
            "chips: 6, start",
            ("spec.reservations[0].chips", 15, "6 chips are not whole hosts of 4"),
            id="reservation-not-in-whole-hosts",
        ),
        pytest.param(
            "chips: 8, start",
            "chips: 20, start",
            (
                "spec.reservations[0].chips",
                15,
                "reservations on tpu-v5p overlapping this one hold 20 chips; the pool has 16",
            ),
            id="reservation-larger-than-the-pool",
        ),
        pytest.param(
            '"2026-03-01T00:00:00Z"',
            '"2026-03-01T00:00:00"',
            (
                "spec.reservations[0].start",
                15,
                "'2026-03-01T00:00:00' has no time zone; write a time with its zone, e.g. 2026-03-01T00:00:00Z",
            ),
            id="start-without-a-time-zone",
        ),
    ],
)
def test_each_mistake_is_reported_with_its_line(old: str, new: str, expected: tuple[str, int, str]) -> None:
    assert old in FLEET

    with pytest.raises(SpecError) as caught:
        parse_fleet(parse_document(FLEET.replace(old, new, 1), "fleet.yaml"))

    found = [(p.path, p.line, p.message) for p in caught.value.problems]
    path, line, message = expected
    assert (path, line, message) in found


def test_overlapping_reservations_are_checked_together_even_when_other_fields_fail() -> None:
    text = FLEET.replace(
        '    - {name: frontier, pool: tpu-v5p, chips: 8, start: "2026-03-01T00:00:00Z", duration: 14d, team: pre}\n',
        '    - {name: a, pool: tpu-v5p, chips: 12, start: "2026-03-01T00:00:00Z", duration: 14d}\n'
        '    - {name: b, pool: tpu-v5p, chips: 8, start: "2026-03-05T00:00:00Z", duration: 1d}\n',
    ).replace("chips: 16, chips_per_host: 8", "chips: -1, chips_per_host: 8")

    with pytest.raises(SpecError) as caught:
        parse_fleet(parse_document(text, "fleet.yaml"))

    messages = {(p.path, p.message) for p in caught.value.problems}
    assert ("spec.pools[1].chips", "must be > 0 (got -1)") in messages
    overlap = "reservations on tpu-v5p overlapping this one hold 20 chips; the pool has 16"
    assert ("spec.reservations[1].chips", overlap) in messages
