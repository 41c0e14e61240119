"""Pipeline runs: parts admitted together or not at all, on different pools under `mixed`, retried one by one."""

from __future__ import annotations

import pytest

from crossrail.scheduling import Request
from crossrail.scheduling.pipeline import parts_of, retry_part
from crossrail.scheduling.types import PartRequest
from crossrail.spec import Part

from .builders import T0, admitted, gpu, req, scheduler, tpu

RL_PARTS = (PartRequest("sampler", 8, 2), PartRequest("reward", 1), PartRequest("learner", 8))


def pipeline(prefer: str = "mixed", parts: tuple[PartRequest, ...] = RL_PARTS, **fields: object) -> Request:
    return req("rl", "q", sum(p.chips for p in parts), prefer=prefer, parts=parts, **fields)


def three_pools() -> list[dict[str, object]]:
    cpu = {"name": "cpu", "accelerator": "cpu", "chip_type": "epyc", "chips": 4, "chips_per_host": 4}
    return [tpu("tpu", chips=16), gpu("h100", chips=16), cpu]


def test_a_mixed_pipeline_puts_its_parts_on_different_pools_in_one_cycle() -> None:
    sched = scheduler(three_pools(), [])
    sched.submitted(pipeline())

    result = sched.cycle(T0)

    placed = admitted(result)
    assert set(placed) == {"rl/sampler", "rl/reward", "rl/learner"}
    assert len({pool for pool, _ in placed.values()}) == 3
    assert {a.part for a in result.admitted} == {"sampler", "reward", "learner"}
    assert all("its parts admitted together" in a.reason for a in result.admitted)


def test_a_pipeline_that_prefers_one_accelerator_may_share_a_pool() -> None:
    sched = scheduler([gpu("h100", chips=32)], [])
    sched.submitted(pipeline(prefer="gpu"))

    assert {pool for pool, _ in admitted(sched.cycle(T0)).values()} == {"h100"}


def test_preferred_accelerators_send_each_part_to_its_kind_of_pool() -> None:
    parts = (PartRequest("sampler", 8, 2, prefer="tpu"), PartRequest("learner", 8, prefer="gpu"))
    sched = scheduler([gpu("h100", chips=16), tpu("tpu", chips=16)], [])
    sched.submitted(pipeline(parts=parts))

    assert admitted(sched.cycle(T0)) == {"rl/sampler": ("tpu", 8), "rl/learner": ("h100", 8)}


def test_when_one_part_has_no_room_none_is_admitted_and_nothing_is_held() -> None:
    sched = scheduler([tpu("tpu", chips=16), gpu("h100", chips=8)], [])
    sched.submitted(req("other", "q", 8, queued_at=T0 - 10, allow=("gpu",)))
    sched.submitted(pipeline(parts=(PartRequest("sampler", 8, 2), PartRequest("learner", 16))))

    result = sched.cycle(T0)

    assert admitted(result) == {"other": ("h100", 8)}
    assert "part sampler (8 chips) has no room: h100 has 0 free chips" in result.blocked["rl"]
    assert "start together or not at all" in result.blocked["rl"]
    assert {p.name: p.free for p in sched.pool_status()} == {"tpu": 16, "h100": 0}


def test_a_failed_part_is_retried_alone_while_the_others_keep_their_chips() -> None:
    sched = scheduler(three_pools(), [])
    whole = pipeline()
    sched.submitted(whole)
    first = admitted(sched.cycle(T0))
    for a in first:
        sched.started(a, first[a][0], first[a][1], T0)
    failed_on = first["rl/sampler"][0]

    sched.finished("rl/sampler", T0 + 60)
    sched.submitted(retry_part(whole, "sampler", queued_at=T0 + 60, avoid_pool=failed_on))
    again = sched.cycle(T0 + 61)

    assert set(admitted(again)) == {"rl/sampler"}
    assert [a.part for a in again.admitted] == ["sampler"]
    assert admitted(again)["rl/sampler"][0] != failed_on
    held = {p.name: p.free for p in sched.pool_status()}
    assert sum(held.values()) == 36 - 17


def test_retrying_a_part_the_run_lacks_names_its_parts() -> None:
    with pytest.raises(KeyError, match="has no part 'critic'; its parts are sampler, reward, learner"):
        retry_part(pipeline(), "critic", queued_at=T0)


def test_the_spec_parts_become_part_requests_with_workers_and_hints() -> None:
    parts = {
        "sampler": Part.model_validate({"chips": 4, "replicas": 2, "prefer": "tpu"}),
        "learner": Part.model_validate({"chips": 8, "parallelism": {"data": 2}}),
    }

    assert parts_of(parts) == (PartRequest("sampler", 8, 2, "tpu"), PartRequest("learner", 8, 2, None))
