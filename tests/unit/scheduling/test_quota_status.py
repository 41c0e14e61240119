"""The quota read model `fleet show` and the dashboard's Queues page read: chips used against nominal per queue."""

from __future__ import annotations

from .builders import T0, gpu, queue, req, scheduler, tpu


def test_quota_status_gives_each_queues_chips_used_against_its_nominal_and_what_it_borrows() -> None:
    queues = [queue("a", {"gpu": 8, "tpu": 4}, cohort="lab"), queue("b", {"gpu": 8}, cohort="lab")]
    sched = scheduler([gpu(chips=16), tpu(chips=16)], queues)
    sched.started(req("big", "a", 12), "gpu", 12, T0)
    sched.started(req("small", "b", 2), "gpu", 2, T0)
    sched.started(req("off-quota", "b", 4), "tpu", 4, T0)

    rows = [(q.queue, q.pool, q.nominal, q.used, q.borrowed) for q in sched.quota_status()]

    assert rows == [
        ("a", "gpu", 8, 12, 4),
        ("a", "tpu", 4, 0, 0),
        ("b", "gpu", 8, 2, 0),
        ("b", "tpu", 0, 4, 4),  # no quota there, lent by its cohort: listed after its own pools
    ]


def test_a_finished_run_gives_its_chips_back_to_its_queues_count() -> None:
    sched = scheduler([gpu(chips=16)], [queue("a", {"gpu": 8})])
    sched.started(req("r", "a", 6), "gpu", 6, T0)
    sched.finished("r", T0 + 60)

    assert [(q.used, q.borrowed) for q in sched.quota_status()] == [(0, 0)]
