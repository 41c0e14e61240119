"""Fleets for simulation: `--pools v100:8,p100:16,k80:24` built in code, one queue per stage.

`name:chips[:chips_per_host[:price]]`; a name starting with `tpu` is a TPU pool, any other a GPU pool. The
chip type is the name before any `-` suffix (`v100-b:8` is another pool of v100 chips). Every stage queue
gets a quota of every pool's chips, so only capacity limits admission (a fleet file can say otherwise).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from crossrail.errors import Problem, ProblemCode, SpecError
from crossrail.sim.workload import SimJob
from crossrail.spec import Document, Fleet, Stage, parse_fleet

WHERE = "--pools"


def parse_pools(text: str) -> list[dict[str, object]]:
    """Pool dicts (the Fleet document's shape) from `--pools`; SpecError listing every bad item."""
    pools, problems = [], []
    for i, item in enumerate(filter(None, (p.strip() for p in text.split(",")))):
        parts = item.split(":")
        try:
            if len(parts) < 2 or len(parts) > 4:
                raise ValueError("write name:chips[:chips_per_host[:price]]")
            name, chips = parts[0], int(parts[1])
            per_host = int(parts[2]) if len(parts) > 2 and parts[2] else min(chips, 8)
            price = float(parts[3]) if len(parts) > 3 else 0.0
            if chips <= 0 or per_host <= 0 or chips % per_host or price < 0:
                raise ValueError(f"chips must be > 0 and a multiple of chips_per_host ({per_host})")
        except ValueError as exc:
            problems.append(Problem(WHERE, f"[{i}] {item}", str(exc), code=ProblemCode.BAD_VALUE))
            continue
        kind = "tpu" if name.lower().startswith("tpu") else "gpu"
        chip_type = name.split("-")[0] if kind == "gpu" else name
        pools.append(
            {"name": name, "accelerator": kind, "chip_type": chip_type, "chips": chips, "chips_per_host": per_host,
             "cost_per_chip_hour": price}
        )  # fmt: skip
    if not pools and not problems:
        problems.append(
            Problem(
                WHERE, "", "no pools given", fix="e.g. --pools v100:8,p100:16,k80:24", code=ProblemCode.MISSING_FIELD
            )
        )
    if problems:
        raise SpecError(problems)
    return pools


def build_fleet(
    pools: Sequence[Mapping[str, object]],
    *,
    name: str = "simulated",
    speeds: Mapping[str, float] | None = None,
    scheduling: Mapping[str, object] | None = None,
) -> Fleet:
    """A Fleet with these pools (relative speeds by chip type when given) and one queue per stage."""
    specs = []
    for pool in pools:
        speed = (speeds or {}).get(str(pool["chip_type"]))
        specs.append({**pool, **({"relative_speed": speed} if speed else {})})
    quota = {str(p["name"]): p["chips"] for p in pools}
    queues = [{"name": str(s.value).replace("_", "-"), "stage": str(s.value), "quota": dict(quota)} for s in Stage]
    doc: dict[str, object] = {"apiVersion": "crossrail/v1", "kind": "Fleet", "metadata": {"name": name}}
    doc["spec"] = {"pools": specs, "queues": queues, **({"scheduling": dict(scheduling)} if scheduling else {})}
    return parse_fleet(Document(WHERE, doc, {}))  # SpecError naming every bad pool, never a traceback


def pools_fleet(
    text: str, jobs: Sequence[SimJob] = (), *, time_sliced: bool = False, round_s: float | None = None
) -> Fleet:
    """The fleet of `--pools`; with jobs that carry throughput rows, pools rank by their typical speed.

    `time_sliced` marks every pool time-sliced (`--time-sliced`), with rounds of `round_s` (default 6 min).
    """
    pools = [{**p, "time_sliced": True} for p in parse_pools(text)] if time_sliced else parse_pools(text)
    scheduling = {"round": round_s} if round_s is not None else None
    return build_fleet(pools, speeds=typical_speeds(jobs), scheduling=scheduling)


def typical_speeds(jobs: Sequence[SimJob]) -> dict[str, float]:
    """Per chip type, the geometric mean over jobs of its rate over the job's best rate (1 = always fastest).

    This is how an operator without per-job knowledge would rank pools; FIFO uses it to pick the pool.
    """
    logs: dict[str, list[float]] = {}
    for job in jobs:
        best = max(job.throughput.values(), default=0.0)
        for chip_type, rate in job.throughput.items():
            if best > 0 and rate > 0:
                logs.setdefault(chip_type, []).append(math.log(rate / best))
    return {t: round(math.exp(sum(v) / len(v)), 6) for t, v in logs.items() if v}
