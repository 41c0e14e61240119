"""Sizing RL pipelines for a large fleet: which sampler:learner ratio gives the most samples/s per chip.

    crossrail plan --rl sampler=tpu-v5e:4:4 --rl reward=epyc:1:100 --rl learner=h100:8:8 \\
                   --rl-fleet tpu-v5e=4096,h100=1024,epyc=512 --lag 2

Each stage is `PART=CHIP_TYPE:CHIPS_PER_REPLICA:SAMPLES_PER_SECOND_PER_CHIP`. For every ratio of 1 to
`most` sampler replicas per learner, a pipeline gets the reward workers that keep up with its samplers
(with the learner, when the stages overlap), and the
fleet holds as many pipelines as its scarcest chip type allows. A pipeline's steady state is the model
the simulator (`crossrail.sim.rl`) runs and the tests hold it to: with a lag bound of 1 or more the stages
overlap and a batch takes as long as the slowest stage; synchronous (lag 0) the learner waits for its
batch to be made and scored (the reward stage scoring samples as they come), and the samplers wait for
the learner's step, so a batch takes the slower of sampling and scoring plus the learner's step. The
recommendation is the ratio with the most samples/s from the whole fleet, and of ratios alike in that,
the one with the most samples/s per chip held (the fewest idle samplers).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from crossrail.errors import CrossrailError
from crossrail.scheduling.backlog import LEARNER, REWARD, SAMPLER

__all__ = ["RatioRow", "StageRate", "parse_fleet_chips", "parse_stages", "plan_ratios", "recommend", "steady_state"]

STAGES = (SAMPLER, REWARD, LEARNER)
FORMAT = "PART=CHIP_TYPE:CHIPS_PER_REPLICA:SAMPLES_PER_SECOND_PER_CHIP, e.g. sampler=tpu-v5e:4:4"


@dataclass(frozen=True)
class StageRate:
    chip_type: str
    chips: int
    """Chips per replica."""
    per_chip: float
    """Samples per second per chip."""

    @property
    def per_replica(self) -> float:
        return self.chips * self.per_chip


@dataclass(frozen=True)
class RatioRow:
    samplers: int
    """Sampler replicas per learner."""
    reward_workers: int
    pipelines: int
    samples_per_second: float
    """The whole fleet's learners together."""
    learner_idle: float
    chips: dict[str, int]
    """Chips the pipelines hold, per chip type."""

    @property
    def samples_per_chip_second(self) -> float:
        used = sum(self.chips.values())
        return self.samples_per_second / used if used else 0.0


def parse_stages(items: Iterable[str]) -> dict[str, StageRate]:
    """`--rl` values: every problem named at once, and all three stages required."""
    stages: dict[str, StageRate] = {}
    problems: list[str] = []
    for item in items:
        part, _, rest = item.partition("=")
        fields = rest.split(":")
        if part not in STAGES:
            problems.append(f"--rl {item!r}: unknown part {part!r}; parts are {', '.join(STAGES)}")
            continue
        try:
            chip_type, chips, rate = fields[0], int(fields[1]), float(fields[2])
        except (IndexError, ValueError):
            problems.append(f"--rl {item!r}: write {FORMAT}")
            continue
        if len(fields) != 3 or not chip_type or chips <= 0 or not rate > 0 or not math.isfinite(rate):
            problems.append(f"--rl {item!r}: chips and rate must be > 0; write {FORMAT}")
            continue
        stages[part] = StageRate(chip_type, chips, rate)
    missing = [p for p in STAGES if p not in stages and not any(i.startswith(f"{p}=") for i in items)]
    problems += [f"--rl: no {p} given; add --rl {p}=CHIP_TYPE:CHIPS:RATE" for p in missing]
    if problems:
        raise CrossrailError("\n".join(problems))
    return stages


def parse_fleet_chips(text: str) -> dict[str, int]:
    """`--rl-fleet tpu-v5e=4096,h100=1024`: chips of each chip type the pipelines may hold."""
    chips: dict[str, int] = {}
    for item in filter(None, (s.strip() for s in text.split(","))):
        name, _, count = item.partition("=")
        if not name or not count.isdigit() or int(count) <= 0:
            raise CrossrailError(f"--rl-fleet {item!r}: write CHIP_TYPE=CHIPS with CHIPS > 0, e.g. h100=1024")
        chips[name] = chips.get(name, 0) + int(count)
    if not chips:
        raise CrossrailError("--rl-fleet is empty; write CHIP_TYPE=CHIPS,... e.g. tpu-v5e=4096,h100=1024")
    return chips


def steady_state(stages: dict[str, StageRate], samplers: int, reward_workers: int, lag: int) -> tuple[float, float]:
    """(samples/s, learner idle fraction) of one pipeline in steady state."""
    rates = {
        SAMPLER: samplers * stages[SAMPLER].per_replica,
        REWARD: reward_workers * stages[REWARD].per_replica,
        LEARNER: stages[LEARNER].per_replica,
    }
    making = max(1 / rates[SAMPLER], 1 / rates[REWARD])  # the reward stage scores samples as they come
    seconds = making + 1 / rates[LEARNER] if lag == 0 else max(making, 1 / rates[LEARNER])
    throughput = 1 / seconds
    return throughput, 1 - throughput / rates[LEARNER]


def plan_ratios(stages: dict[str, StageRate], fleet_chips: dict[str, int], lag: int, most: int = 16) -> list[RatioRow]:
    """One row per sampler:learner ratio from 1 to `most`."""
    unknown = sorted({s.chip_type for s in stages.values()} - set(fleet_chips))
    if unknown:
        raise CrossrailError(f"--rl-fleet has no {', '.join(unknown)}; add CHIP_TYPE=CHIPS for every stage's chip type")
    rows = []
    for samplers in range(1, most + 1):
        supply = samplers * stages[SAMPLER].per_replica
        if lag > 0:  # overlapped: scoring faster than the learner takes samples only idles reward workers
            supply = min(supply, stages[LEARNER].per_replica)
        rewards = max(1, math.ceil(supply / stages[REWARD].per_replica - 1e-9))
        need: dict[str, int] = {}
        for part, count in ((SAMPLER, samplers), (REWARD, rewards), (LEARNER, 1)):
            need[stages[part].chip_type] = need.get(stages[part].chip_type, 0) + count * stages[part].chips
        pipelines = min(fleet_chips[t] // n for t, n in need.items())
        rate, idle = steady_state(stages, samplers, rewards, lag)
        rows.append(
            RatioRow(samplers, rewards, pipelines, pipelines * rate, idle, {t: pipelines * n for t, n in need.items()})
        )
    return rows


def recommend(rows: list[RatioRow]) -> RatioRow | None:
    """The ratio with the most samples/s from the fleet; of those alike, the fewest chips per sample."""
    fitting = [r for r in rows if r.pipelines > 0]
    if not fitting:
        return None
    return max(fitting, key=lambda r: (round(r.samples_per_second, 6), r.samples_per_chip_second))
