"""The parts the cycle is built from: host allocator, quota arithmetic, snapshot restore, fleet diffs."""

from __future__ import annotations

import pytest

from crossrail.scheduling import fleet_changes
from crossrail.scheduling.pool import ACTIVE, GONE, LEAVING, PoolState
from crossrail.scheduling.quota import UNLIMITED, QuotaBook
from crossrail.scheduling.snapshot import Snapshot
from crossrail.spec import Pool, Queue

from .builders import T0, admitted, fleet, gpu, queue, req, scheduler, tpu


def _pool(**fields: object) -> PoolState:
    return PoolState(Pool.model_validate(fields))


@pytest.mark.parametrize(
    ("pool", "low", "high", "sizes"),
    [
        pytest.param(gpu(chips=32), 1, 32, [32, 24, 16, 8, 7, 6, 5, 4, 3, 2, 1], id="gpu-whole-hosts-above-one"),
        pytest.param(gpu(chips=32), 9, 15, [], id="gpu-between-one-and-two-hosts"),
        pytest.param(tpu(chips=16), 1, 16, [16, 8, 4], id="tpu-slice-shapes-only"),
        pytest.param(tpu(chips=16, topologies=["2x3"]), 1, 16, [], id="tpu-shape-not-whole-hosts"),
        pytest.param(gpu(chips=16), 4, 64, [16, 8, 7, 6, 5, 4], id="capped-at-capacity"),
    ],
)
def test_gang_sizes_a_pool_allows(pool: dict[str, object], low: int, high: int, sizes: list[int]) -> None:
    assert list(_pool(**pool).sizes(low, high)) == sizes


def test_one_host_gangs_take_the_fullest_host_that_fits() -> None:
    pool = _pool(**gpu(chips=24))
    pool.take(((0, 6), (1, 2)))

    assert pool.find(2, frozenset()) == ((0, 2),)
    assert pool.find(6, frozenset()) == ((1, 6),)
    assert pool.find(16, frozenset()) is None  # only one wholly free host
    assert pool.find(8, frozenset()) == ((2, 8),)


def test_shrinking_drops_free_hosts_first_then_lets_the_least_busy_leave() -> None:
    pool = _pool(**gpu(chips=32))
    pool.take(((1, 8),))
    pool.take(((3, 4),))

    pool.resize(8)

    assert pool.state == [GONE, ACTIVE, GONE, LEAVING]
    assert (pool.capacity, pool.free_chips) == (8, 0)
    assert pool.find(4, frozenset()) is None  # the leaving host's free chips take no new work
    pool.release(((3, 4),))
    pool.settle(((3, 4),))
    assert pool.state[3] == GONE
    pool.resize(24)
    assert (pool.capacity, pool.state.count(ACTIVE)) == (24, 3)


@pytest.mark.parametrize(
    ("used", "queue", "expected"),
    [
        pytest.param({}, "solo", 8, id="no-cohort-nominal-only"),
        pytest.param({("solo", "p"): 8}, "solo", 0, id="no-cohort-at-quota"),
        pytest.param({}, "b", 20, id="cohort-lends-all-but-what-a-lending-limit-keeps"),
        pytest.param({}, "a", 12, id="borrowing-limit-caps"),
        pytest.param({("a", "p"): 12, ("b", "p"): 8}, "c", 4, id="lending-limit-keeps-guarantee"),
        pytest.param({}, "stranger", UNLIMITED, id="unknown-queue-unlimited"),
    ],
)
def test_headroom_follows_nominal_quota_borrowing_and_lending(
    used: dict[tuple[str, str], int], queue: str, expected: int
) -> None:
    queues = [
        Queue(name="solo", stage="eval", quota={"p": 8}),
        Queue(name="a", stage="experiment", quota={"p": 8}, cohort="c1", borrowing_limit={"p": 4}),
        Queue(name="b", stage="pretraining", quota={"p": 8}, cohort="c1"),
        Queue(name="c", stage="inference", quota={"p": 8}, cohort="c1", lending_limit={"p": 4}),
    ]
    book = QuotaBook(queues)
    usage: dict[tuple[str, str], int] = {}
    excess: dict[tuple[str, str], int] = {}
    for (q, pool), chips in used.items():
        book.charge(usage, excess, q, pool, chips)

    room = book.headroom(usage, excess, queue, "p")

    assert room == expected


def test_a_queue_without_quota_of_its_own_borrows_where_its_cohort_lends() -> None:
    sched = scheduler(
        [gpu("mine", chips=8), gpu("theirs", chips=8)],
        [queue("a", {"mine": 8}, cohort="c"), queue("b", {"theirs": 8}, cohort="c")],
    )
    sched.started(req("holder", "a", 8), "mine", 8, T0)
    sched.submitted(req("spill", "a", 8))

    assert admitted(sched.cycle(T0)) == {"spill": ("theirs", 8)}


def test_a_restored_snapshot_is_what_it_was() -> None:
    sched = scheduler([gpu(chips=16)], [queue("a", {"gpu": 16}, cohort="c"), queue("b", {"gpu": 0}, cohort="c")])
    sched.started(req("x", "a", 8), "gpu", 8, T0)
    snap = Snapshot(sched.cache, T0)
    before = (list(snap.pool("gpu").free), dict(snap.used), dict(snap.excess), snap.share("team a"))

    mark = snap.mark()
    snap.release(sched.cache.allocs["x"])
    snap.restore(mark)

    assert (list(snap.pool("gpu").free), dict(snap.used), dict(snap.excess), snap.share("team a")) == before
    assert sched.cache.pools["gpu"].free == [0, 8]  # the cache never saw the trial


def test_a_pool_drained_in_the_fleet_file_takes_no_work() -> None:
    sched = scheduler([gpu(chips=8, drained=True), gpu("other", chips=8, cost_per_chip_hour=5.0)], [])
    sched.submitted(req("r", "a", 8))

    assert admitted(sched.cycle(T0)) == {"r": ("other", 8)}


def test_fleet_changes_name_each_difference() -> None:
    old = fleet([gpu(chips=16), tpu()], [queue("a", {"gpu": 8})])
    new = fleet([gpu(chips=8, cost_per_chip_hour=2.0), tpu(), gpu("fresh", chips=8)], [queue("a", {"gpu": 8})])

    changes = [(c.kind, str(c)) for c in fleet_changes(old, new)]

    assert changes == [
        ("capacity", "gpu: 16 -> 8 chips (1 hosts leave)"),
        ("pool_settings", "gpu: cost_per_chip_hour changed"),
        ("pool_added", "fresh: new pool of 8 h100 chips"),
    ]
