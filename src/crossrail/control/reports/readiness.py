"""`crossrail readiness`: a workspace scored against the first article's four checks before mixing TPUs and GPUs.

  1. configs: training and eval use versioned configs and resumable checkpoints;
  2. portable: data, images and experiment metadata are reachable the same way from both environments;
  3. queues: queues are isolated by stage, and their waits are measured;
  4. metrics: there are enough end-to-end metrics to judge whether a hardware move shortened the cycle.

Each check scores 0..1 from what the store holds (runs as submitted, their checkpoints, the event log) and
the fleet and policy, with the evidence behind the score and what to fix; the workspace's score is their
mean x 100. Runs are judged against the article's portability requirements whatever the workspace's own
policy relaxes, since that is what the other environment will need (docs/readiness.md).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from crossrail.control.reports.facts import workspace_runs
from crossrail.metrics import RunFacts
from crossrail.spec import Fleet, PlacementPolicy, default_policy, lint_experiment
from crossrail.spec.lint import OBJECT_STORAGE_SCHEMES
from crossrail.spec.loader import Document
from crossrail.store import RunRecord, Store

MIN_RUNS = 10
"""Succeeded runs per stage below which a before/after verdict is rarely significant (compare says the exact
number for the effect it sees); a rule of thumb, not a guarantee."""
SHOWN = 3
"""Offending runs named per finding; the rest are counted."""
THROUGHPUT = ("tokens_per_second", "steps_per_hour", "samples_per_second")
"""Reported samples that say how fast a run trained (metrics loads these among `SAMPLE_NAMES`)."""
_VERSION_IN_URI = re.compile(r"/v[0-9]+(/|$)|[?&](versionId|generation)=")
"""A config URI that names its version: a `/v3/` path segment, or an object version (S3 versionId, GCS generation)."""


@dataclass(frozen=True)
class Check:
    key: str
    title: str
    score: float
    evidence: list[str] = field(default_factory=list)
    fixes: list[str] = field(default_factory=list)

    @property
    def status(self) -> str:
        return "pass" if self.score >= 1 else "partial" if self.score > 0 else "fail"

    def as_dict(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "title": self.title,
            "score": round(self.score, 3),
            "status": self.status,
            "evidence": self.evidence,
            "fixes": self.fixes,
        }


@dataclass(frozen=True)
class Readiness:
    checks: list[Check]
    runs: int

    @property
    def score(self) -> float:
        """0..100: the mean of the checks' scores."""
        return 100 * math.fsum(c.score for c in self.checks) / len(self.checks)

    def as_dict(self) -> dict[str, Any]:
        return {"kind": "Readiness", "score": round(self.score, 1), "runs": self.runs,
                "checks": [c.as_dict() for c in self.checks]}  # fmt: skip


def audit(store: Store, fleet: Fleet, policy: PlacementPolicy, now: float) -> Readiness:
    """Score the store's runs, the fleet and the policy against the four checks."""
    runs = store.list_runs(newest_first=False)
    facts = workspace_runs(store, now)
    committed = {r.id: bool(store.checkpoints(r.id, usable=True)) for r in runs}
    checks = [
        configs_check(runs, facts, committed),
        portable_check(runs, fleet, policy),
        queues_check(facts, fleet, policy),
        metrics_check(facts, fleet),
    ]
    return Readiness(checks, len(runs))


# --- 1. versioned configs and resumable checkpoints -----------------------------------------------------


def configs_check(runs: Sequence[RunRecord], facts: Sequence[RunFacts], committed: dict[str, bool]) -> Check:
    title = "versioned configs and resumable checkpoints"
    if not runs:
        return Check("configs", title, 0.0, ["no run in the store yet"], ["submit and run the team's experiments"])
    no_config = [r.id for r in runs if not _versioned_config(r)]
    no_commit = [r.id for r in runs if not r.code_commit]
    formats = [r.id for r in runs if not _versioned_format(r.spec)]
    ran = {f.id for f in facts if f.attempts and f.outcome in ("succeeded", "failed", "active")}
    # An eval writes no checkpoint a retry resumes from: it is judged by the checkpoint it read.
    evals = {r.id for r in runs if r.stage == "eval"}
    resumable = [r.id for r in runs if r.id in ran - evals and not committed.get(r.id)]
    unread = [r.id for r in runs if r.id in ran & evals and not r.parent_checkpoint]
    evidence = [
        _share(
            "runs record a versioned config (its digest, or a version in its URI)", len(runs) - len(no_config), runs
        ),
        _share("runs record their code commit", len(runs) - len(no_commit), runs),
        _share("runs write checkpoints in a versioned format", len(runs) - len(formats), runs),
        f"{len(ran - evals) - len(resumable)} of {len(ran - evals)} training runs that ran committed a checkpoint"
        " a retry can resume from",
    ]
    if ran & evals:
        evidence.append(f"{len(ran & evals) - len(unread)} of {len(ran & evals)} eval runs read a recorded checkpoint")
    fixes = []
    if no_config:
        fixes.append(
            f"give {_names(no_config)} a spec.config readable at submit (its digest is recorded) or naming its "
            "version (.../v3/...)"
        )
    if no_commit:
        fixes.append(
            f"record {_names(no_commit)}'s code commit: spec.code with commit: auto, submitted from a git checkout "
            "(or the commit itself)"
        )
    if formats:
        fixes.append(f"write {_names(formats)}'s checkpoints as spec.checkpoint.format: crossrail-ckpt/v1")
    if resumable:
        fixes.append(f"make {_names(resumable)} checkpoint (spec.checkpoint.every, or Checkpointer.save in the code)")
    if unread:
        fixes.append(f"name the checkpoint {_names(unread)} evaluate (spec.parent: {{run: ..., checkpoint: ...}})")
    versioned = 1 - (len(no_config) + len(no_commit)) / (2 * len(runs))
    parts = [versioned, 1 - len(formats) / len(runs)]
    parts.append(1 - (len(resumable) + len(unread)) / len(ran) if ran else 0.0)
    if not ran:
        fixes.append("run the experiments once, so their checkpoints show they can resume")
    return Check("configs", title, math.fsum(parts) / len(parts), evidence, fixes)


def _versioned_config(run: RunRecord) -> bool:
    """A config whose content is pinned: its digest was recorded at submit, or its URI names a version."""
    uri = run.config_uri or ""
    return bool(uri) and (run.config_digest is not None or _VERSION_IN_URI.search(uri) is not None)


def _versioned_format(spec: dict[str, Any]) -> bool:
    data = spec.get("spec") if isinstance(spec.get("spec"), dict) else {}
    ckpt = data.get("checkpoint") if isinstance(data, dict) else None
    fmt = ckpt.get("format") if isinstance(ckpt, dict) else None
    return isinstance(fmt, str) and "/v" in fmt


# --- 2. data, images and metadata reachable by both environments ----------------------------------------


def portable_check(runs: Sequence[RunRecord], fleet: Fleet, policy: PlacementPolicy) -> Check:
    title = "data, images and metadata reachable by both environments"
    kinds = sorted({str(p.accelerator) for p in fleet.pools})
    backends = sorted({str(p.backend) for p in fleet.pools})
    evidence = [f"the fleet has {', '.join(kinds)} pools on {', '.join(backends)} backends"]
    fixes = _policy_fixes(policy)
    if not runs:
        return Check("portable", title, 0.0, [*evidence, "no run in the store yet"], fixes)
    article = default_policy()
    found: dict[str, list[str]] = {}
    hints: dict[str, str] = {}
    for run in runs:
        for kind, fix in _portability(run, article):
            found.setdefault(kind, []).append(run.id)
            hints.setdefault(kind, fix)
    clean = len(runs) - len({r for ids in found.values() for r in ids})
    evidence.append(_share("runs are portable as the article requires", clean, runs))
    for kind, ids in sorted(found.items()):
        evidence.append(f"{kind}: {_names(ids)}")
        fixes.append(f"{kind} ({_names(ids)}): {hints[kind]}")
    # A policy that lets local paths or unpinned images in will let the next run break the other environment.
    return Check("portable", title, clean / len(runs) * (0.75 if _policy_fixes(policy) else 1.0), evidence, fixes)


def _portability(run: RunRecord, article: PlacementPolicy) -> list[tuple[str, str]]:
    """(what is wrong, its fix) for each way the run's spec is not portable, by the article's requirements."""
    out: dict[str, str] = {}
    doc = Document(f"run {run.id}", run.spec, {})
    for problem in lint_experiment(doc, article):
        path = problem.path
        if path.startswith("spec.image"):
            out.setdefault("image not pinned by digest", problem.fix or "pin it: image@sha256:<digest>")
        elif path.startswith("metadata"):
            out.setdefault("experiment metadata missing", problem.fix or "set metadata.team and metadata.owner")
        elif "uri" in path or path.startswith(("spec.dataset", "spec.config", "spec.checkpoint.dir")):
            out.setdefault("data on a path only one environment reaches", _storage_fix())
    if not _object_storage(run.dataset_uri):  # a bare path the lint reads as a relative file
        out.setdefault("data on a path only one environment reaches", _storage_fix())
    return sorted(out.items())


def _object_storage(uri: str) -> bool:
    scheme, sep, _ = uri.partition("://")
    return bool(sep) and scheme.lower() in OBJECT_STORAGE_SCHEMES


def _storage_fix() -> str:
    return "keep datasets, configs and checkpoints on object storage (gs://, s3://) that both environments read"


def _policy_fixes(policy: PlacementPolicy) -> list[str]:
    needs = policy.portability_requirements
    relaxed = [
        name
        for name, value, strict in (
            ("container_image", needs.container_image, "pinned-by-digest"),
            ("dataset_uri_scheme", needs.dataset_uri_scheme, "object-storage"),
            ("experiment_metadata", needs.experiment_metadata, "required"),
            ("checkpoint_format", needs.checkpoint_format, "versioned"),
        )
        if value != strict
    ]
    if needs.local_uri_schemes:
        relaxed.append(f"local_uri_schemes ({', '.join(needs.local_uri_schemes)})")
    if not relaxed:
        return []
    return [f"the policy relaxes {', '.join(relaxed)}: restore the article's portability_requirements"]


# --- 3. queues isolated by stage with measured waits -----------------------------------------------------


def queues_check(facts: Sequence[RunFacts], fleet: Fleet, policy: PlacementPolicy) -> Check:
    title = "queues isolated by stage, with measured waits"
    stages = sorted({f.stage for f in facts} | {str(s) for s in policy.workloads})
    queued = {str(q.stage) for q in fleet.queues}
    evidence, fixes, parts = [], [], []
    for stage in stages:
        waits = sorted(f.queue_s for f in facts if f.stage == stage and f.queue_s is not None)
        own = stage in queued
        if waits:
            p50, p95 = _quantile(waits, 0.5), _quantile(waits, 0.95)
            evidence.append(f"{stage}: {'own queue' if own else 'no queue of its own'}; "
                            f"{len(waits)} waits measured, p50 {p50:.0f}s, p95 {p95:.0f}s")  # fmt: skip
        else:
            evidence.append(f"{stage}: {'own queue' if own else 'no queue of its own'}; no wait measured yet")
            fixes.append(f"run {stage} work through crossrail so its queue waits are measured")
        if not own:
            fixes.append(f"add a queue with stage: {stage} to the fleet, with its own quota")
        parts.append((0.5 if own else 0.0) + (0.5 if waits else 0.0))
    score = math.fsum(parts) / len(parts) if parts else 0.0
    return Check("queues", title, score, evidence, fixes)


def _quantile(ordered: list[float], q: float) -> float:
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


# --- 4. enough end-to-end metrics to judge a migration --------------------------------------------------


def metrics_check(facts: Sequence[RunFacts], fleet: Fleet) -> Check:
    title = "enough end-to-end metrics to judge a migration"
    by_stage: dict[str, list[RunFacts]] = {}
    for f in facts:
        if f.cycle_s is not None:
            by_stage.setdefault(f.stage, []).append(f)
    kinds = {p.name: str(p.accelerator) for p in fleet.pools}  # logs that name only the pool (the simulator's)

    def ran_on(runs: list[RunFacts]) -> list[str]:
        """Accelerators of completed attempts only: a killed attempt measured no stage on its accelerator."""
        return sorted({a.accelerator if a.accelerator != "-" else kinds.get(a.pool, "-") for f in runs
                       for a in f.attempts if a.end == "succeeded"})  # fmt: skip

    evidence, fixes = [], []
    best = max((len(v) for v in by_stage.values()), default=0)
    for stage, done in sorted(by_stage.items()):
        where = ran_on(done)
        evidence.append(f"{stage}: {len(done)} research cycles measured, on {', '.join(where)}")
    if best < MIN_RUNS:
        fixes.append(f"a stage needs about {MIN_RUNS} succeeded runs before a before/after verdict means much "
                     f"(most has {best}); `crossrail compare` says how many the effect it sees needs")  # fmt: skip
    succeeded = [f for runs in by_stage.values() for f in runs]
    reporting = [f for f in succeeded if any(f.values(name) for name in THROUGHPUT)]
    what = "succeeded runs report throughput (tokens or samples per second, or steps per hour)"
    evidence.append(_count(what, reporting, succeeded))
    if len(reporting) < len(succeeded) or not succeeded:
        fixes.append(
            "report throughput from training code (the runtime reporter's metrics({'tokens_per_second': ...}, step))"
        )
    mixed = [s for s, runs in sorted(by_stage.items()) if len(ran_on(runs)) > 1]
    evidence.append(f"stages measured on more than one accelerator: {', '.join(mixed) or 'none'}")
    if not mixed:
        fixes.append("run a stage on both accelerators (spec.accelerators.allow) so a move has a baseline")
    unpriced = [p.name for p in fleet.pools if p.cost_per_chip_hour <= 0]
    evidence.append(f"pools without a price: {', '.join(unpriced) or 'none'}")
    if unpriced:
        fixes.append(f"set cost_per_chip_hour on {', '.join(unpriced)} so cost per effective run can be judged")
    parts = [
        min(best / MIN_RUNS, 1.0),
        len(reporting) / len(succeeded) if succeeded else 0.0,
        1.0 if mixed else 0.0,
        1 - len(unpriced) / len(fleet.pools),
    ]
    return Check("metrics", title, math.fsum(parts) / len(parts), evidence, fixes)


# --- wording -------------------------------------------------------------------------------------------


def _share(what: str, good: int, runs: Sequence[object]) -> str:
    return f"{good} of {len(runs)} {what}"


def _count(what: str, good: Sequence[object], of: Sequence[object]) -> str:
    return f"{len(good)} of {len(of)} {what}"


def _names(ids: Sequence[str]) -> str:
    shown = ", ".join(ids[:SHOWN])
    return shown if len(ids) <= SHOWN else f"{shown} and {len(ids) - SHOWN} more"
