"""Builders for scheduling tests: fleets from a few keywords, requests, and a scheduler over them."""

from __future__ import annotations

from typing import Any

from crossrail.scheduling import Request, Scheduler, SchedulerConfig
from crossrail.spec import Fleet

HOUR = 3600.0
T0 = 1_767_225_600.0  # 2026-01-01T00:00:00Z


def tpu(name: str = "tpu", chips: int = 16, per_host: int = 4, **extra: Any) -> dict[str, Any]:
    shapes = extra.pop("topologies", ["2x2x1", "2x2x2", "2x2x4"])
    return {
        "name": name,
        "accelerator": "tpu",
        "chip_type": "tpu-v5p",
        "chips": chips,
        "chips_per_host": per_host,
        "topologies": shapes,
        **extra,
    }


def gpu(name: str = "gpu", chips: int = 16, per_host: int = 8, **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "accelerator": "gpu",
        "chip_type": "h100",
        "chips": chips,
        "chips_per_host": per_host,
        **extra,
    }


def queue(name: str, quota: dict[str, int] | None = None, **extra: Any) -> dict[str, Any]:
    stage = extra.pop("stage", "experiment")
    return {"name": name, "stage": stage, "team": extra.pop("team", name), "quota": quota or {}, **extra}


def fleet(
    pools: list[dict[str, Any]],
    queues: list[dict[str, Any]] | None = None,
    **spec: Any,
) -> Fleet:
    data = {
        "apiVersion": "crossrail/v1",
        "kind": "Fleet",
        "metadata": {"name": "test"},
        "spec": {"pools": pools, "queues": queues or [], **spec},
    }
    return Fleet.model_validate(data)


def scheduler(pools: list[dict[str, Any]], queues: list[dict[str, Any]] | None = None, **config: Any) -> Scheduler:
    spec = config.pop("spec", {})
    built = fleet(pools, queues, **spec)
    base = SchedulerConfig.from_fleet(built, fallback_wait_s=config.pop("fallback_wait_s", 60.0))
    return Scheduler.from_fleet(built, SchedulerConfig(**{**base.__dict__, **config}))


def req(run: str, queue: str, chips: int, **fields: Any) -> Request:
    fields.setdefault("queued_at", T0)
    fields.setdefault("team", queue)
    return Request(run=run, queue=queue, chips=chips, **fields)


def admitted(result: Any) -> dict[str, tuple[str, int]]:
    """run -> (pool, chips) of a cycle's admissions."""
    return {a.run: (a.pool, a.chips) for a in result.admitted}
