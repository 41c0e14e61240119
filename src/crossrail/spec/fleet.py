"""The Fleet document: pools of chips crossrail may place on, and the stage queues that share them."""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import AwareDatetime, BeforeValidator, Field, field_validator, model_validator

from crossrail.core import parse_duration, parse_topology
from crossrail.core.periods import Period
from crossrail.spec.common import (
    Accelerator,
    ApiVersion,
    Items,
    Name,
    NonEmpty,
    Seconds,
    SpecModel,
    Stage,
    as_dict,
    as_int,
    as_list,
    nested,
    raise_items,
)
from crossrail.spec.experiment import Metadata
from crossrail.spec.peaks import PeakTflops
from crossrail.spec.problems import did_you_mean
from crossrail.spec.targets import KubernetesFleet, KubernetesPool, SkyPilotPool, SlurmPool, target_items
from crossrail.spec.tpu import host_problem, shape_problem, tpu_version

Backend = Literal["local", "ray", "kubernetes"]
Queueing = Literal["strict_fifo", "best_effort_fifo"]
DrainPolicy = Literal["finish", "preempt"]
PolicyName = Literal[
    "fifo",
    "priority",
    "las",
    "max_min_fairness",
    "fifo_hetero",
    "las_hetero",
    "max_min_fairness_hetero",
    "min_jct_hetero",
]
"""Scheduling policies (crossrail.scheduling.policies.POLICY_NAMES; docs/policies.md)."""
ROUND_BASED_POLICIES = frozenset({"las", "max_min_fairness", "las_hetero", "max_min_fairness_hetero", "min_jct_hetero"})
"""The policies that time-slice the pools marked `time_sliced` (their `round_based`, held to it by a test)."""
PositiveInt = Annotated[int, Field(strict=True, gt=0)]
Chips = Annotated[int, Field(strict=True, ge=0)]
MAX_POOL_CHIPS = 16_777_216
"""A pool's chips at most (2**24: a 12.5M-chip pool of 256-chip hosts fits, a pool of 10**30 chips does not)."""
MAX_POOL_HOSTS = 1_000_000
"""A pool's hosts at most: the scheduler keeps a slot per host, so the bound on memory is on hosts."""
PoolChips = Annotated[int, Field(strict=True, gt=0, le=MAX_POOL_CHIPS)]
Provisioning = Literal["flex-start", "autoscaled"]
"""Capacity that arrives on demand: GKE flex-start (Dynamic Workload Scheduler) or a cluster-autoscaled node pool."""
SPOT_NOTICE_S = 30.0
"""GKE's termination notice for Spot VMs: a reclaimed Spot VM stops 30 seconds after its termination notice, and
the pods on it get at most that to shut down gracefully
(https://cloud.google.com/kubernetes-engine/docs/concepts/spot-vms, "Termination and graceful shutdown of Spot VMs")."""
FLEX_START_MAX_RUN_S = 7 * 24 * 3600.0
"""The longest a flex-start (DWS) VM runs: seven days
(https://cloud.google.com/kubernetes-engine/docs/concepts/dws#flex-start)."""


class RayPoolSpec(SpecModel):
    """Where a `backend: ray` pool's work runs: the Ray cluster's `address`, the custom resource one chip counts
    as (`chip_resource`, default the pool's chip_type), extra Ray resources each host of an attempt asks for,
    and the node labels its work must land on (`label_selector`, default the pool's node_labels).
    `placement_strategy` is how Ray places the workers of a data-parallel run, one bundle each: `PACK`
    (default: as few nodes as fit), `STRICT_SPREAD` (one node per worker), `SPREAD` or `STRICT_PACK`."""

    address: NonEmpty
    chip_resource: NonEmpty | None = None
    resources: dict[str, Annotated[float, Field(gt=0, allow_inf_nan=False)]] = Field(default_factory=dict)
    label_selector: dict[str, str] | None = None
    namespace: Name = "crossrail"
    placement_timeout_s: Seconds = Field(default=60.0, alias="placement_timeout", gt=0)
    placement_strategy: Literal["PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"] = "PACK"


class Pool(SpecModel):
    """Chips of one type behind one backend; `topologies` are the slice shapes a TPU pool can form."""

    name: Name
    accelerator: Accelerator
    chip_type: NonEmpty
    chips: PoolChips
    chips_per_host: PoolChips
    topologies: list[str] = Field(default_factory=list)
    cost_per_chip_hour: float = Field(default=0.0, strict=True, ge=0, allow_inf_nan=False)
    relative_speed: float = Field(default=1.0, strict=True, gt=0, allow_inf_nan=False)
    peak_tflops: PeakTflops = Field(default_factory=dict)
    """Dense TFLOP/s one chip reaches per precision (`{bf16: 989.4}`): accelerator_utilization's peak on this pool,
    instead of the vendors' table in crossrail.core.peaks."""
    interruptions_per_chip_hour: float = Field(default=0.0, ge=0, allow_inf_nan=False)
    """Expected interruptions (spot reclaims, host failures) per chip-hour: feeds the recovery estimate."""
    restore_s: Seconds = Field(default=0.0, alias="restore", ge=0)
    """Time to restore a run from its checkpoint here after an interruption."""
    node_labels: dict[str, str] = Field(default_factory=dict)
    backend: Backend = "local"
    ray: RayPoolSpec | None = None  # the Ray cluster and resources of a backend: ray pool
    drained: bool = False
    trusted: bool = False
    """Local pools only: where attempts cannot run under a uid of their team's own (the agent is not root),
    an admin accepts that commands of team tokens run as the agent's OS user here (docs/auth.md)."""
    time_sliced: bool = False
    """Round-based scheduling policies may preempt and move work here at each round's end."""
    slowdown: float = Field(default=1.0, strict=False, ge=1, le=100, allow_inf_nan=False)
    """Local pools only: how many times slower than this machine the pool runs its attempts (the local executor
    lets each attempt's processes run 1/slowdown of the time), to try a heterogeneous fleet on one machine.
    Declare the pool's `relative_speed` to match, as a measured fleet would."""
    kubernetes: KubernetesPool | None = None  # GKE selectors and Kueue flavor (spec/targets.py)
    slurm: SlurmPool | None = None
    skypilot: SkyPilotPool | None = None
    cluster: Name | None = None
    """The cluster (`spec.clusters`) whose nodes the pool is; each Kubernetes pool names one when there are some."""
    provisioning: Provisioning | None = None
    """Nodes that arrive when work asks for them: `flex-start` (GKE DWS queued provisioning) or `autoscaled`;
    Kueue admits to them through a ProvisioningRequest admission check."""
    provisioning_wait_s: Seconds = Field(default=0.0, alias="provisioning_wait", ge=0)
    """The expected time from admission until provisioned nodes are ready: placement adds it to the wait."""
    max_run_duration_s: Seconds | None = Field(default=None, alias="max_run_duration", gt=0)
    """flex-start only: how long provisioned nodes live (default and at most GKE's 7 days)."""
    preemption_notice_s: Seconds | None = Field(default=None, alias="preemption_notice", ge=0)
    """Spot pools only: the notice a reclaim gives a pod before it is killed (default GKE's 30 s, SPOT_NOTICE_S)."""

    @field_validator("topologies")
    @classmethod
    def _shapes(cls, value: list[str]) -> list[str]:
        items: Items = []
        for i, text in enumerate(value):
            try:
                parse_topology(text)
            except ValueError as exc:
                items.append(((i,), str(exc), None))
        raise_items(items)
        return value

    @model_validator(mode="after")
    def _sizes(self) -> Pool:
        raise_items(
            pool_size_items(self.chips, self.chips_per_host, self.topologies)
            + gke_tpu_items(
                self.accelerator, self.backend, self.chip_type, self.chips, self.topologies, self.chips_per_host
            )
            + target_items(self.accelerator, self.kubernetes)
        )
        return self

    @model_validator(mode="after")
    def _ray_settings(self) -> Pool:
        if self.backend == "ray" and self.ray is None:
            fix = "add `ray: {address: <head>:6379}` naming the Ray cluster, or choose another backend"
            raise_items([(("ray",), "a pool with backend: ray needs a ray block with its cluster's address", fix)])
        if self.backend != "ray" and self.ray is not None:
            fix = "set `backend: ray`, or remove the ray block"
            raise_items([(("ray",), f"ray settings on a pool whose backend is {self.backend}", fix)])
        return self

    @model_validator(mode="after")
    def _local_slowdown(self) -> Pool:
        if self.slowdown != 1.0 and self.backend != "local":
            fix = "remove `slowdown` (only the local executor emulates a slower pool), or set `backend: local`"
            raise_items([(("slowdown",), f"slowdown on a pool whose backend is {self.backend}", fix)])
        return self

    @model_validator(mode="after")
    def _capacity_terms(self) -> Pool:
        items: Items = []
        if self.provisioning_wait_s and self.provisioning is None:
            fix = "set `provisioning: flex-start` or `provisioning: autoscaled`, or remove provisioning_wait"
            message = "only a pool whose nodes are provisioned on demand waits for them"
            items.append((("provisioning_wait",), message, fix))
        if self.max_run_duration_s is not None and self.provisioning != "flex-start":
            fix = "set `provisioning: flex-start`, or remove max_run_duration"
            items.append((("max_run_duration",), "only flex-start nodes have a maximum run duration", fix))
        elif self.max_run_duration_s is not None and self.max_run_duration_s > FLEX_START_MAX_RUN_S:
            message = f"{self.max_run_duration_s:g} s is longer than flex-start nodes live (7 days)"
            items.append((("max_run_duration",), message, "write at most 7d"))
        if self.preemption_notice_s is not None and not self.spot:
            fix = "set `kubernetes: {spot: true}` on a spot pool, or remove preemption_notice"
            items.append((("preemption_notice",), "only a spot pool's nodes give a preemption notice", fix))
        raise_items(items)
        return self

    @property
    def spot(self) -> bool:
        """Whether the pool's nodes are Spot VMs, reclaimed with a short notice."""
        return self.kubernetes is not None and self.kubernetes.spot

    @property
    def run_limit_s(self) -> float | None:
        """How long a flex-start pool's nodes live (declared, else GKE's 7 days); None for other pools."""
        if self.provisioning != "flex-start":
            return None
        return FLEX_START_MAX_RUN_S if self.max_run_duration_s is None else self.max_run_duration_s

    @property
    def notice_s(self) -> float | None:
        """The notice a spot reclaim gives (declared, else GKE's 30 s); None for a pool that is not spot."""
        if not self.spot:
            return None
        return SPOT_NOTICE_S if self.preemption_notice_s is None else self.preemption_notice_s

    @property
    def topology_shapes(self) -> list[tuple[int, ...]]:
        return [parse_topology(text) for text in self.topologies]

    def topology_chips(self) -> list[int]:
        """Chips in each slice shape, in the order the shapes are listed."""
        return [math.prod(shape) for shape in self.topology_shapes]

    @property
    def hosts(self) -> int:
        return self.chips // self.chips_per_host


def pool_size_items(chips: int | None, chips_per_host: int | None, topologies: list[Any]) -> Items:
    """Whole hosts, and slice shapes no larger than the pool; shapes that do not parse are skipped."""
    items: Items = []
    if chips is None:
        return items
    if chips_per_host is not None and chips % chips_per_host:
        message = f"{chips_per_host} does not divide chips ({chips})"
        items.append((("chips_per_host",), message, "make chips a whole number of hosts times chips_per_host"))
    if isinstance(chips_per_host, int) and chips_per_host > 0 and chips // chips_per_host > MAX_POOL_HOSTS:
        hosts = chips // chips_per_host
        message = f"must be <= {MAX_POOL_HOSTS:,} hosts (got {hosts:,}): the scheduler keeps a slot per host"
        fix = f"describe hosts of at least {-(-chips // MAX_POOL_HOSTS)} chips (chips_per_host)"
        items.append((("chips",), message, fix))
    for i, text in enumerate(topologies):
        try:
            size = math.prod(parse_topology(text))
        except (ValueError, AttributeError):
            continue
        if size > chips:
            items.append((("topologies", i), f"{text} needs {size} chips; the pool has {chips}", _SHAPE_FIX))
    return items


_SHAPE_FIX = "remove the shape or raise chips"


def gke_tpu_items(  # noqa: PLR0917 -- the pool's fields, read before the model exists
    accelerator: Any, backend: Any, chip_type: Any, chips: Any, topologies: list[Any], chips_per_host: Any = None
) -> Items:
    """A TPU pool on GKE (`backend: kubernetes`) lists slice shapes, each one GKE offers for its TPU version,
    on hosts of the chips GKE builds that shape from (spec/tpu.py: v5p hosts have 4 chips; multi-host v5e
    and v6e slices are 4-chip hosts).

    Other backends keep any shape: local pools are virtual chips and Ray clusters bring their own.
    """
    if accelerator != "tpu" or backend != "kubernetes" or not isinstance(chip_type, str):
        return []
    version = tpu_version(chip_type)
    if version is None:
        return []  # an unknown chip type is refused where GKE names are derived, unless the pool names them
    budget = chips if isinstance(chips, int) else None
    if not topologies:
        shapes = ", ".join(version.shapes(budget)[:12]) or version.shapes()[0]
        fix = f"list the slice shapes its node pools have, e.g. topologies: [{shapes}]"
        return [(("topologies",), "a TPU pool on GKE needs its slice topologies", fix)]
    items: Items = []
    for i, text in enumerate(topologies):
        try:
            shape = parse_topology(text)
        except (ValueError, AttributeError):
            continue
        found = shape_problem(version, shape, budget or math.prod(shape))
        if found is None and isinstance(chips_per_host, int) and chips_per_host > 0:
            found = host_problem(version, shape, chips_per_host)
        if found is not None:
            items.append((("topologies", i), *found))
    return items


class Queue(SpecModel):
    """A stage's queue (optionally of some teams): `quota` is chips per pool it is guaranteed.

    `teams: [a, b]` lists the teams it admits (`team: a` is short for `teams: [a]`); a queue naming no team
    admits every team. In a cohort, `borrowing_limit` caps the chips per pool it may use beyond its quota and
    `lending_limit` the part of its quota others may borrow; a pool missing from either map is unlimited.
    """

    name: Name
    stage: Stage
    team: NonEmpty | None = None
    teams: list[NonEmpty] = Field(default_factory=list)
    quota: dict[str, Chips] = Field(default_factory=dict)
    cohort: NonEmpty | None = None
    borrowing_limit: dict[str, Chips] = Field(default_factory=dict)
    lending_limit: dict[str, Chips] = Field(default_factory=dict)
    queueing: Queueing = "strict_fifo"

    @model_validator(mode="before")
    @classmethod
    def _team_shorthand(cls, data: Any) -> Any:
        """`team: a` reads as `teams: [a]`, so code reads `teams` only."""
        if isinstance(data, dict) and data.get("team") is not None and not data.get("teams"):
            return {**data, "teams": [data["team"]]}
        return data

    @model_validator(mode="after")
    def _one_team_list(self) -> Queue:
        if self.team is not None and self.team not in self.teams:
            message = f"team {self.team!r} is not among teams {self.teams}"
            raise_items([(("team",), message, "give `teams: [...]` alone, or `team:` as its shorthand")])
        if len(set(self.teams)) != len(self.teams):
            raise_items([(("teams",), f"teams {self.teams} names a team twice", "name each team once")])
        return self


class FairShareSpec(SpecModel):
    """Fair sharing between teams: past usage counts with weight 1/2 after each `half_life`."""

    half_life_s: Seconds = Field(default=3600.0, alias="half_life")


class PlacementSpec(SpecModel):
    """Placement by estimates: a run leaves its preferred accelerator only for a pool whose score is better
    by more than `prefer_margin`, and a placed pending run moves only for one better by more than
    `hysteresis` (fractions); either way the new pool must finish `min_gain` sooner or cost less."""

    prefer_margin: float = Field(default=0.25, ge=0, lt=1, allow_inf_nan=False)
    hysteresis: float = Field(default=0.1, ge=0, lt=1, allow_inf_nan=False)
    min_gain_s: Seconds = Field(default=60.0, alias="min_gain", ge=0)


class SchedulingSpec(SpecModel):
    """The order pending work is admitted in (`policy`), and the `round` length on time-sliced pools."""

    policy: PolicyName = "priority"
    round_s: Seconds = Field(default=360.0, alias="round", gt=0)


class PreemptionSpec(SpecModel):
    """How running work is preempted: the grace it gets to checkpoint, and how often one run may be."""

    grace_s: Seconds = Field(default=300.0, alias="grace")
    max_per_window: int = Field(default=2, strict=True, ge=0)
    window_s: Seconds = Field(default=3600.0, alias="window")
    on_drain: DrainPolicy = "finish"


def _start_time(value: Any) -> Any:
    if isinstance(value, str) and _timestamp(value) is None:
        example = "write a time with its zone, e.g. 2026-03-01T00:00:00Z"
        try:
            datetime.fromisoformat(value)
        except ValueError:
            raise ValueError(f"{value!r} is not a time; {example}") from None
        raise ValueError(f"{value!r} has no time zone; {example}")
    return value


class ReservationSpec(SpecModel):
    """`chips` of `pool` held from `start` for `duration`, for `team` or for runs that name the reservation."""

    name: Name
    pool: Name
    chips: PositiveInt
    start: Annotated[AwareDatetime, BeforeValidator(_start_time)]
    duration_s: Seconds = Field(alias="duration")
    team: NonEmpty | None = None

    @property
    def start_s(self) -> float:
        return self.start.timestamp()

    @property
    def end_s(self) -> float:
        return self.start_s + self.duration_s


class BudgetSpec(SpecModel):
    """At most `amount` per UTC `period` for `team`'s chip-hours, priced at the pools' `cost_per_chip_hour`
    (so in their currency). Crossing it records one `budget_exceeded` event per period; with `hold`, the
    team's queued runs are not admitted until the period ends (running work goes on)."""

    team: NonEmpty
    amount: float = Field(gt=0, allow_inf_nan=False)
    period: Period = "month"
    hold: bool = False


class SharingSpec(SpecModel):
    """Team `from`'s runs, with their checkpoints, may be named as parents by runs of the teams in `to` (and
    are visible to them); no other team's run is. Declared by an admin, in the fleet (docs/auth.md)."""

    from_team: NonEmpty = Field(alias="from")
    to: list[NonEmpty] = Field(min_length=1)


class IsolationSpec(SpecModel):
    """Who an attempt's command runs as on local pools (docs/auth.md): `run_as: per-team` gives each team a
    uid and gid of its own (`uids` pins a team's, else one derived from its name); any other value names the
    OS user every attempt runs as."""

    run_as: NonEmpty = "per-team"
    uids: dict[NonEmpty, Annotated[int, Field(strict=True, ge=1000, lt=2**31)]] = Field(default_factory=dict)


class PathsSpec(SpecModel):
    """Local directories a request to the server may name in an experiment (config, dataset, checkpoints),
    beside the workspace's configs/, data/ and checkpoints/ (crossrail.control.uris)."""

    roots: list[NonEmpty] = Field(default_factory=list)

    @field_validator("roots")
    @classmethod
    def _absolute(cls, roots: list[str]) -> list[str]:
        relative = [r for r in roots if not r.removeprefix("file://").startswith("/")]
        if relative:
            raise ValueError(f"roots must be absolute directories (got {', '.join(map(repr, relative))})")
        return roots


class ClusterSpec(SpecModel):
    """One Kubernetes cluster of a fleet of several (MultiKueue): crossrail submits to the manager cluster (the
    kube context it is given), whose Kueue dispatches each workload to one of these worker clusters.

    `kubeconfig_secret` is the Secret in the manager's `kueue-system` namespace holding the worker's
    kubeconfig (key `kubeconfig`), which Kueue's MultiKueueCluster names (default `<name>-kubeconfig`);
    `context` is the kube context crossrail reads the worker through, else it reads that Secret."""

    name: Name
    context: NonEmpty | None = None
    kubeconfig_secret: Name | None = None

    @property
    def secret(self) -> str:
        return self.kubeconfig_secret or f"{self.name}-kubeconfig"


class FleetSpec(SpecModel):
    pools: list[Pool] = Field(min_length=1)
    clusters: list[ClusterSpec] = Field(default_factory=list)
    queues: list[Queue] = Field(default_factory=list)
    fair_share: FairShareSpec = Field(default_factory=FairShareSpec)
    preemption: PreemptionSpec = Field(default_factory=PreemptionSpec)
    placement: PlacementSpec = Field(default_factory=PlacementSpec)
    scheduling: SchedulingSpec = Field(default_factory=SchedulingSpec)
    reservations: list[ReservationSpec] = Field(default_factory=list)
    budgets: list[BudgetSpec] = Field(default_factory=list)
    sharing: list[SharingSpec] = Field(default_factory=list)
    paths: PathsSpec = Field(default_factory=PathsSpec)
    isolation: IsolationSpec | None = None
    kubernetes: KubernetesFleet = Field(default_factory=KubernetesFleet)
    currency: str = Field(
        "USD", pattern=r"^[A-Z]{3}$", description="The ISO 4217 code of every pool's cost_per_chip_hour and budget."
    )

    @property
    def teams(self) -> list[str]:
        """Every team the fleet names: in a queue, a reservation or a Kubernetes team namespace."""
        named = [t for q in self.queues for t in q.teams] + [r.team for r in self.reservations]
        return sorted({t for t in named if t} | set(self.kubernetes.team_namespaces))

    @model_validator(mode="after")
    def _references(self) -> FleetSpec:
        queues = [(q.name, str(q.stage), q.teams, list(q.quota)) for q in self.queues]
        items = reference_items([p.name for p in self.pools], queues)
        limits = [(q.cohort, list(q.borrowing_limit), list(q.lending_limit)) for q in self.queues]
        items += limit_items([p.name for p in self.pools], limits)
        pools = {p.name: (p.chips, p.chips_per_host) for p in self.pools}
        held = [(r.name, r.pool, r.chips, r.start_s, r.duration_s) for r in self.reservations]
        items += reservation_items(pools, held)
        items += budget_items(self.teams, [b.team for b in self.budgets])
        items += sharing_items([(s.from_team, s.to) for s in self.sharing])
        clusters = [c.name for c in self.clusters]
        items += cluster_items(clusters, [(p.cluster, p.backend) for p in self.pools])
        raise_items(items)
        return self


QueueKeys = tuple[Any, Any, Any, list[Any]]
"""(name, stage, team or list of teams, quota pool names) of one queue, possibly unvalidated."""


def reference_items(pools: list[Any], queues: list[QueueKeys]) -> Items:
    """Unique pool and queue names, one queue per (stage, team), quotas only on pools that exist."""
    items = _duplicates("pools", pools, "pool")
    items += _duplicates("queues", [q[0] for q in queues], "queue")
    seen: dict[tuple[str, Any], int] = {}
    for i, (name, stage, named, _) in enumerate(queues):
        teams = named if isinstance(named, list) else [named]
        if not isinstance(stage, str) or not all(isinstance(team, str | None) for team in teams):
            continue
        for team in teams or [None]:
            first = seen.setdefault((stage, team), i)
            if first != i:
                whose = f"team {team}" if team else "no team"
                message = f"queue {name!r} repeats stage {stage} with {whose} (see queues[{first}])"
                items.append((("queues", i, "stage"), message, "give one queue per stage and team, or set a team"))
                break
    names = [p for p in pools if isinstance(p, str)]
    for i, (_, _, _, quota) in enumerate(queues):
        for pool in quota:
            if pool not in names:
                fix = did_you_mean(pool, names) or f"pools are {', '.join(names)}"
                items.append((("queues", i, "quota", pool), f"unknown pool {pool!r}", fix))
    return items


LimitKeys = tuple[Any, list[Any], list[Any]]
"""(cohort, borrowing_limit pool names, lending_limit pool names) of one queue, possibly unvalidated."""


def limit_items(pools: list[Any], queues: list[LimitKeys]) -> Items:
    """Borrowing and lending limits only in a cohort, and only on pools that exist."""
    items: Items = []
    names = [p for p in pools if isinstance(p, str)]
    for i, (cohort, borrowing, lending) in enumerate(queues):
        for key, limited in (("borrowing_limit", borrowing), ("lending_limit", lending)):
            if limited and cohort is None:
                fix = "set `cohort:` so the queue has others to borrow from and lend to, or remove the limit"
                items.append((("queues", i, key), "only a queue in a cohort borrows or lends", fix))
            for pool in limited:
                if pool not in names:
                    fix = did_you_mean(str(pool), names) or f"pools are {', '.join(names)}"
                    items.append((("queues", i, key, pool), f"unknown pool {pool!r}", fix))
    return items


ReservationKeys = tuple[Any, Any, Any, float | None, float | None]
"""(name, pool, chips, start in seconds, duration in seconds) of one reservation, possibly unvalidated."""


def reservation_items(pools: dict[str, tuple[Any, Any]], held: Sequence[ReservationKeys]) -> Items:
    """Reservations on pools that exist, in whole hosts, and never more chips at once than the pool has."""
    items = _duplicates("reservations", [r[0] for r in held], "reservation")
    for i, (_, pool, chips, _, _) in enumerate(held):
        if not isinstance(pool, str) or not isinstance(chips, int) or isinstance(chips, bool):
            continue
        if pool not in pools:
            fix = did_you_mean(pool, pools) or f"pools are {', '.join(pools)}"
            items.append((("reservations", i, "pool"), f"unknown pool {pool!r}", fix))
            continue
        total, per_host = pools[pool]
        if isinstance(per_host, int) and per_host > 0 and chips % per_host:
            fix = f"reserve a multiple of {per_host} chips"
            items.append((("reservations", i, "chips"), f"{chips} chips are not whole hosts of {per_host}", fix))
        peak = _peak(i, held)
        if isinstance(total, int) and peak > total:
            message = f"reservations on {pool} overlapping this one hold {peak} chips; the pool has {total}"
            items.append((("reservations", i, "chips"), message, "move or shrink one of the reservations"))
    return items


def _peak(i: int, held: Sequence[ReservationKeys]) -> int:
    """Chips reserved on reservation i's pool while it starts, counting every reservation active then."""
    _, pool, _, start, _ = held[i]
    if start is None:
        return 0
    total = 0
    for _, other_pool, chips, other_start, duration in held:
        if other_pool != pool or not isinstance(chips, int) or other_start is None or duration is None:
            continue
        if other_start <= start < other_start + duration:
            total += chips
    return total


def budget_items(teams: list[str], budgeted: list[Any]) -> Items:
    """Budgets only for teams the fleet names, one per team."""
    items: Items = []
    for i, team in enumerate(budgeted):
        if not isinstance(team, str):
            continue
        if budgeted.index(team) != i:
            message = f"team {team!r} has a budget already (see budgets[{budgeted.index(team)}])"
            items.append((("budgets", i, "team"), message, "give each team one budget"))
        elif team not in teams:
            named = f"teams the fleet names are {', '.join(teams)}" if teams else "the fleet names no team"
            fix = did_you_mean(team, teams) or (
                f"{named}; name the team in a queue (`team:`) or in kubernetes.team_namespaces first"
            )
            items.append((("budgets", i, "team"), f"unknown team {team!r}", fix))
    return items


def sharing_items(sharing: list[tuple[Any, list[Any]]]) -> Items:
    """A team shares with other teams, never with itself."""
    items: Items = []
    for i, (giver, takers) in enumerate(sharing):
        for j, taker in enumerate(takers):
            if taker == giver:
                message = f"team {giver!r} shares with itself"
                items.append((("sharing", i, "to", j), message, "a team always sees its own runs: leave it out"))
    return items


def cluster_items(clusters: list[Any], pools: list[tuple[Any, Any]]) -> Items:
    """Unique cluster names; with clusters, every Kubernetes pool names one of them, and no pool names one without."""
    items = _duplicates("clusters", clusters, "cluster")
    names = [c for c in clusters if isinstance(c, str)]
    for i, (cluster, backend) in enumerate(pools):
        if cluster is None and names and backend == "kubernetes":
            fix = f"set `cluster:` to one of {', '.join(names)}"
            items.append((("pools", i, "cluster"), "a Kubernetes pool of a fleet with clusters names its cluster", fix))
        elif cluster is not None and not names:
            fix = "declare the cluster under spec.clusters, or remove `cluster:`"
            items.append((("pools", i, "cluster"), f"unknown cluster {cluster!r}: the fleet declares none", fix))
        elif cluster is not None and cluster not in names:
            fix = did_you_mean(str(cluster), names) or f"clusters are {', '.join(names)}"
            items.append((("pools", i, "cluster"), f"unknown cluster {cluster!r}", fix))
    return items


def _duplicates(field: str, names: list[Any], noun: str) -> Items:
    items: Items = []
    for i, name in enumerate(names):
        if isinstance(name, str) and names.index(name) != i:
            items.append(((field, i, "name"), f"{noun} name {name!r} is used twice", f"give each {noun} its own name"))
    return items


def cross_checks(data: Any) -> Items:
    """The cross-field checks above, run on unvalidated data so they report even when other fields fail."""
    spec = as_dict(as_dict(data).get("spec"))
    pools = [as_dict(p) for p in as_list(spec.get("pools"))]
    items: Items = []
    for i, pool in enumerate(pools):
        chips, per_host = (as_int(pool.get(k)) for k in ("chips", "chips_per_host"))
        if chips is not None and chips > 0 and (per_host is None or per_host > 0):
            sizes = pool_size_items(chips, per_host, as_list(pool.get("topologies")))
            items += nested(("spec", "pools", i), sizes)
        gke = gke_tpu_items(
            pool.get("accelerator"),
            pool.get("backend"),
            pool.get("chip_type"),
            chips,
            as_list(pool.get("topologies")),
            per_host,
        )
        items += nested(("spec", "pools", i), gke)
    queues = [as_dict(q) for q in as_list(spec.get("queues"))]
    keys = [
        (q.get("name"), q.get("stage"), q.get("teams") or q.get("team"), list(as_dict(q.get("quota")))) for q in queues
    ]
    names = [p.get("name") for p in pools]
    items += nested(("spec",), reference_items(names, keys))
    limits = [
        (q.get("cohort"), list(as_dict(q.get("borrowing_limit"))), list(as_dict(q.get("lending_limit"))))
        for q in queues
    ]
    items += nested(("spec",), limit_items(names, limits))
    hosts = {p["name"]: (as_int(p.get("chips")), as_int(p.get("chips_per_host"))) for p in pools if _named(p)}
    held = [_reservation_keys(as_dict(r)) for r in as_list(spec.get("reservations"))]
    items += nested(("spec",), reservation_items(hosts, held))
    reservations = [as_dict(r) for r in as_list(spec.get("reservations"))]
    named = [q.get("team") for q in queues] + [r.get("team") for r in reservations]
    named += [t for q in queues for t in as_list(q.get("teams"))]
    named += list(as_dict(as_dict(spec.get("kubernetes")).get("team_namespaces")))
    teams = sorted({t for t in named if isinstance(t, str) and t})
    budgeted = [as_dict(b).get("team") for b in as_list(spec.get("budgets"))]
    items += nested(("spec",), budget_items(teams, budgeted))
    clusters = [as_dict(c).get("name") for c in as_list(spec.get("clusters"))]
    return items + nested(("spec",), cluster_items(clusters, [(p.get("cluster"), p.get("backend")) for p in pools]))


def _named(pool: dict[str, Any]) -> bool:
    return isinstance(pool.get("name"), str)


def _reservation_keys(r: dict[str, Any]) -> ReservationKeys:
    duration: float | None = None
    if isinstance(r.get("duration"), str | int | float):
        try:
            duration = parse_duration(r["duration"])
        except (ValueError, OverflowError):
            duration = None
    return (r.get("name"), r.get("pool"), as_int(r.get("chips")), _timestamp(r.get("start")), duration)


def _timestamp(value: Any) -> float | None:
    """Seconds since the epoch of a reservation's `start` as written, or None when it is not a time with a zone."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    if not isinstance(value, str):
        return None
    try:
        when = datetime.fromisoformat(value)
    except ValueError:
        return None
    return when.timestamp() if when.tzinfo is not None else None


class Fleet(SpecModel):
    api_version: ApiVersion = Field(alias="apiVersion")
    kind: Literal["Fleet"]
    metadata: Metadata
    spec: FleetSpec

    @property
    def name(self) -> str:
        return self.metadata.name

    @property
    def pools(self) -> list[Pool]:
        return self.spec.pools

    @property
    def queues(self) -> list[Queue]:
        return self.spec.queues

    def cluster_of(self, pool: str) -> ClusterSpec | None:
        """The cluster `pool` is in; None in a fleet of one cluster."""
        name = self.pool(pool).cluster
        return next((c for c in self.spec.clusters if c.name == name), None)

    def pool(self, name: str) -> Pool:
        """The pool called `name`; KeyError naming the fleet's pools when there is none."""
        for p in self.spec.pools:
            if p.name == name:
                return p
        raise KeyError(f"no pool {name!r} in fleet {self.name}; pools are {', '.join(self.pool_names)}")

    def shared_with(self, team: str | None) -> frozenset[str]:
        """The teams that share their runs and checkpoints with `team` (`spec.sharing`), not `team` itself."""
        if team is None:
            return frozenset()
        return frozenset(s.from_team for s in self.spec.sharing if team in s.to)

    def shares(self, giver: str, taker: str) -> bool:
        """Whether team `giver` shares its runs and checkpoints with team `taker`."""
        return giver in self.shared_with(taker)

    @property
    def pool_names(self) -> list[str]:
        return [p.name for p in self.spec.pools]

    def queue_for(self, stage: Stage | str, team: str | None = None) -> Queue | None:
        """A queue of `stage` that admits the team by name when there is one, else the stage's team-less queue."""
        stage = Stage(stage)
        shared = None
        for q in self.spec.queues:
            if q.stage is stage and team is not None and team in q.teams:
                return q
            if q.stage is stage and not q.teams and shared is None:
                shared = q
        return shared
