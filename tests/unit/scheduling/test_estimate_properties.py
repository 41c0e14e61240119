"""Properties of the start-time estimator over random queues: the schedule it implies is one that could
happen (no pool over capacity, admission order kept per pool, nothing before now)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crossrail.scheduling.estimate import Busy, PoolInfo, Waiting, estimate_starts

NOW = 1_000.0
POOLS = [PoolInfo("a", "tpu", "v5p", 8), PoolInfo("b", "gpu", "h100", 16), PoolInfo("c", "gpu", "l4", 4)]
CAPACITY = {p.name: p.capacity for p in POOLS}


@st.composite
def queues(draw: st.DrawFn) -> tuple[list[Busy], list[Waiting]]:
    running = []
    for i, pool in enumerate(POOLS):
        left = pool.capacity
        for k in range(draw(st.integers(0, 3))):
            chips = draw(st.integers(1, max(left, 1)))
            if chips > left:
                break
            left -= chips
            end = draw(st.one_of(st.none(), st.floats(NOW - 100, NOW + 5_000)))
            running.append(Busy(f"busy-{i}-{k}", pool.name, chips, end))
    pending = []
    for i in range(draw(st.integers(0, 25))):
        names = draw(st.lists(st.sampled_from([p.name for p in POOLS]), min_size=1, max_size=3, unique=True))
        durations = {n: draw(st.one_of(st.none(), st.floats(1, 3_000))) for n in names}
        pin = draw(st.one_of(st.none(), st.sampled_from(names)))
        chips = draw(st.integers(1, 16))
        rank = draw(st.integers(0, 3))
        pending.append(Waiting(f"r{i:02}", chips, durations, rank, float(draw(st.integers(0, 50))), pin))
    return running, pending


def intervals(running: list[Busy], unknown_s: float) -> dict[str, list[tuple[float, float, int]]]:
    """Chips each pool's running work holds, as (from, to, chips)."""
    out: dict[str, list[tuple[float, float, int]]] = {n: [] for n in CAPACITY}
    for b in running:
        end = NOW + unknown_s if b.expected_end is None else max(b.expected_end, NOW)
        out[b.pool].append((NOW, end, b.chips))
    return out


@settings(max_examples=40, deadline=None)
@given(queues(), st.booleans())
@pytest.mark.slow
def test_the_estimated_schedule_never_overfills_a_pool_and_keeps_admission_order(
    drawn: tuple[list[Busy], list[Waiting]], backfill: bool
) -> None:
    running, pending = drawn
    got = estimate_starts(pending, running, POOLS, NOW, unknown_duration_s=600.0, backfill=backfill)

    assert set(got) == {w.run for w in pending}
    held = intervals(running, 600.0)
    order = sorted(pending, key=lambda w: (w.rank, w.queued_at, w.run))
    last_start: dict[str, float] = {}
    for w in order:
        e = got[w.run]
        if e.pool is None:
            assert all(CAPACITY[n] < w.chips for n in w.durations if n in CAPACITY)
            continue
        assert e.start is not None
        assert e.end is not None
        assert e.start >= NOW
        assert e.pool in w.durations
        if w.pool is not None and CAPACITY.get(w.pool, 0) >= w.chips:
            assert e.pool == w.pool  # held to its pool whenever that pool can hold it at all
        if not backfill:
            assert e.start >= last_start.get(e.pool, NOW)  # never before a run ahead of it on that pool
            last_start[e.pool] = e.start
            if w.pool not in e.by_pool:
                assert e.start == min(e.by_pool.values())  # the earliest candidate
        held[e.pool].append((e.start, e.end, w.chips))
    for pool, spans in held.items():
        for t, _, _ in spans:
            used = sum(chips for s, end, chips in spans if s <= t < end)
            assert used <= CAPACITY[pool], (pool, t, used)
    if backfill:  # work-conserving: a run only waits while its pool lacks the chips
        for w in pending:
            e = got[w.run]
            if e.pool is None or e.start is None or len(w.durations) > 1:
                continue
            spans = held[e.pool]
            for t in {NOW, *(end for _, end, _ in spans)}:
                if t < e.start:
                    used = sum(chips for s, end, chips in spans if s <= t < end)
                    assert used + w.chips > CAPACITY[e.pool], (w.run, t, used)
