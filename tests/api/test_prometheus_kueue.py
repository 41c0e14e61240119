"""/metrics under Kueue's names: a scrape of the API server in process shows the Kueue-named series (cluster_queue,
status, priority_class, admitted_workloads_total, quota and usage per flavor, Kueue's buckets) beside the old ones."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx
import pytest

from crossrail.client import Client
from crossrail.core import Event, EventType, ManualClock

pytest.importorskip("prometheus_client", reason="the api extra is not installed: pip install -e '.[api]'")

NOW = 2000.0
KUEUE_BUCKETS = ["1.0", *(f"{2.5 * 2**k:.1f}" for k in range(13)), "+Inf"]
"""Kueue's wait-time buckets (pkg/metrics generateExponentialBuckets(14)): 1, then 2.5·2^k for k = 0..12."""


def ev(kind: EventType, ts: float, run: str, attempt: int | None = None, **data: Any) -> Event:
    return Event(type=kind, ts=ts, run=run, attempt=attempt, data=data)


def kueue_log() -> list[Event]:
    """In init's fleet: r1 (high) is admitted on tpu-v5p, fails, is retried and admitted on h100, where it runs;
    r2 (normal) runs on tpu-v5p; r3 waits in eval; r4 waits in experiment while its team's budget holds it."""
    pre = {"stage": "pretraining", "team": "foundation", "queue": "pretraining"}
    return [
        ev(EventType.QUEUED, 1000, "r1", **pre, priority="high"),
        ev(EventType.ADMITTED, 1010, "r1", 1, pool="tpu-v5p", chips=4),
        ev(EventType.FAILED, 1100, "r1", 1, pool="tpu-v5p", cause="signal", final=False),
        ev(EventType.RETRIED, 1100, "r1", None, cause="signal", next_attempt=2),
        ev(EventType.QUEUED, 1100, "r1", **pre, priority="high"),
        ev(EventType.ADMITTED, 1103, "r1", 2, pool="h100", chips=4),
        ev(EventType.STARTED, 1103, "r1", 2, pool="h100", chips=4, cost_per_chip_hour=3.0),
        ev(EventType.QUEUED, 1000, "r2", **pre, priority="normal"),
        ev(EventType.ADMITTED, 1001, "r2", 1, pool="tpu-v5p", chips=4),
        ev(EventType.QUEUED, 1200, "r3", stage="eval", team="evals", queue="eval", priority="low"),
        ev(EventType.QUEUED, 1300, "r4", stage="experiment", team="alignment", queue="experiment", priority="normal"),
        ev(EventType.BUDGET_EXCEEDED, 1400, None, None, team="alignment", period_end=NOW + 600, hold=True),
    ]


def scrape(home: Path) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """GET /metrics of the workspace's API server, in process, parsed by prometheus-client's own parser."""
    from prometheus_client.parser import text_string_to_metric_families

    from crossrail.api import create_app

    app = create_app(home, clock=ManualClock(NOW))

    async def get() -> httpx.Response:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as client:
            return await client.get("/metrics")

    resp = asyncio.run(get())
    assert resp.status_code == 200, resp.text
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(resp.text)
        for s in family.samples
    }


def series(name: str, **labels: str) -> tuple[str, frozenset[tuple[str, str]]]:
    return name, frozenset(labels.items())


@pytest.fixture
def scraped(checkout: Path) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    home = checkout / ".crossrail"
    with Client(home) as c:
        c.service.store.append_events(kueue_log())
    return scrape(home)


def test_a_scrape_shows_kueue_named_series_with_cluster_queue_status_and_priority_class(
    scraped: dict[tuple[str, frozenset[tuple[str, str]]], float],
) -> None:
    got = scraped
    admitted = "crossrail_admitted_workloads_total"
    # every admission counts, the retry's too: r1 was admitted twice, r2 once
    assert got[series(admitted, cluster_queue="pretraining", priority_class="crossrail-high")] == 2
    assert got[series(admitted, cluster_queue="pretraining", priority_class="crossrail-normal")] == 1
    pending = "crossrail_pending_workloads"
    assert got[series(pending, cluster_queue="eval", status="active")] == 1
    assert got[series(pending, cluster_queue="experiment", status="inadmissible")] == 1  # held by its team's budget
    assert got[series(pending, cluster_queue="experiment", status="active")] == 0
    assert got[series(pending, cluster_queue="pretraining", status="active")] == 0
    assert got[series("crossrail_admitted_active_workloads", cluster_queue="pretraining")] == 2
    # the old series, beside them, carry `queue` and `cluster_queue` alike for one release
    assert got[series("crossrail_pending_runs", queue="eval", cluster_queue="eval")] == 1
    assert got[series("crossrail_active_runs", queue="pretraining", cluster_queue="pretraining")] == 2


def test_quota_and_usage_per_flavor_name_the_cohort_flavor_and_resource_as_the_kueue_render_does(
    scraped: dict[tuple[str, frozenset[tuple[str, str]]], float],
) -> None:
    got = scraped
    tpu = {"cohort": "research", "cluster_queue": "pretraining", "flavor": "tpu-v5p", "resource": "google.com/tpu"}
    gpu = {"cohort": "research", "cluster_queue": "pretraining", "flavor": "h100", "resource": "nvidia.com/gpu"}
    assert got[series("crossrail_cluster_queue_nominal_quota", **tpu)] == 8
    assert got[series("crossrail_cluster_queue_nominal_quota", **gpu)] == 4
    # r1's failed attempt gave its TPU chips back; r2 holds 4 on tpu-v5p, r1's retry 4 on h100
    assert got[series("crossrail_cluster_queue_resource_usage", **tpu)] == 4
    assert got[series("crossrail_cluster_queue_resource_usage", **gpu)] == 4
    eval_tpu = {"cohort": "", "cluster_queue": "eval", "flavor": "tpu-v5p", "resource": "google.com/tpu"}
    assert got[series("crossrail_cluster_queue_resource_usage", **eval_tpu)] == 0


def test_the_admission_wait_uses_kueues_buckets_under_old_and_new_labels(
    scraped: dict[tuple[str, frozenset[tuple[str, str]]], float],
) -> None:
    got = scraped
    labels = {"queue": "pretraining", "cluster_queue": "pretraining", "stage": "pretraining"}
    high = {**labels, "priority_class": "crossrail-high"}
    bounds = [
        dict(key)["le"]
        for name, key in got
        if name == "crossrail_admission_wait_time_seconds_bucket" and key >= frozenset(high.items())
    ]
    assert sorted(bounds, key=float) == KUEUE_BUCKETS
    # r1 waited 10 s, then 3 s after its retry
    bucket = "crossrail_admission_wait_time_seconds_bucket"
    assert [got[series(bucket, **high, le=le)] for le in ("1.0", "2.5", "5.0", "10.0", "+Inf")] == [0, 0, 1, 2, 2]
    assert got[series("crossrail_admission_wait_time_seconds_sum", **high)] == 13
    normal = {**labels, "priority_class": "crossrail-normal"}
    assert got[series(bucket, **normal, le="1.0")] == 1  # r2 waited 1 s: Kueue's first bucket holds it
