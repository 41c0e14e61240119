"""crossrail/v1 Experiment specs as simulated jobs: every field the live path honours is modelled or refused.

A workload item `{experiment: FILE | {apiVersion: crossrail/v1, kind: Experiment, ...}, submit_s, work_s}` (or
a bare Experiment document, whose work is its `resources.duration`) becomes one `SimJob`:

  metadata.name, metadata.team          the job's name and team
  spec.stage, spec.priority             its stage queue and priority
  spec.resources.chips / min_chips      its size; `min_chips` makes it elastic: it shrinks through a failure
                                        that leaves it at least `min_chips`, and restarts below that
  spec.resources.max_chips              above `chips`: admitted at up to that many, and grown to it while its
                                        pool has chips no waiting run wants (the cycle's `grown`, as live)
  spec.resources.duration               the run time it declares (and its work when no `work_s` is given)
  spec.parallelism.data                 its data-parallel workers: one gang, spread in whole workers
  spec.accelerators.prefer / allow      where it would rather run, and where it may
  spec.retries.max / backoff            how often an interrupted attempt is retried, and how long it waits first
  spec.checkpoint.every                 its checkpoint interval (instead of the simulation's chooser)
  spec.parent (`latest`)                it waits until its parent, when the workload holds it, has ended
  spec.target                           the quality target its `submitted` event carries
  spec.parts                            a pipeline: its parts admitted together (each an attempt of its own,
                                        retried alone); it ends when its learner (or its only part) has done
                                        its work, and its other parts are cancelled then. The item's `work_s`
                                        is that part's work, or a mapping of part -> work

Fields about what the run executes or where it keeps files (image, command, args, config, code, dataset, env,
checkpoint dir/format/keep_last, labels, owner, oversubscribe) change neither when nor where it runs, nor for
how long. `retries.exit_codes` has nothing to apply to: simulated attempts end by success, interruption or
preemption, never by an exit code. Any other field set, among them fields a later version adds, is refused
with its path: never silently ignored.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from crossrail.errors import Problem, ProblemCode, SpecError
from crossrail.scheduling.backlog import LEARNER
from crossrail.scheduling.decisions import RetryPolicy
from crossrail.scheduling.pipeline import parts_of
from crossrail.sim.job import SimJob
from crossrail.spec import Experiment
from crossrail.spec.loader import Document, load_document
from crossrail.spec.validate import parse_experiment

MODELLED = frozenset({
    "metadata.name", "metadata.team", "spec.stage", "spec.priority", "spec.resources.chips",
    "spec.resources.min_chips", "spec.resources.max_chips", "spec.resources.duration", "spec.parallelism.data",
    "spec.accelerators.prefer", "spec.accelerators.allow", "spec.retries.max", "spec.retries.backoff",
    "spec.checkpoint.every", "spec.parent", "spec.target", "spec.parts",
})  # fmt: skip
"""Paths (and everything under them) the simulation models."""
INERT = frozenset({
    "apiVersion", "kind", "metadata.owner", "metadata.labels", "spec.image", "spec.command", "spec.args",
    "spec.config", "spec.code", "spec.dataset", "spec.env", "spec.checkpoint.dir", "spec.checkpoint.format",
    "spec.checkpoint.keep_last", "spec.parallelism.oversubscribe", "spec.retries.exit_codes",
})  # fmt: skip
"""Paths that change neither when nor where a run runs, nor for how long (module docstring)."""
WHY_NOT: dict[str, str] = {}
"""Paths the simulation refuses with a sentence of their own (none now: each refusal says its path)."""
ROW_KEYS = frozenset({"experiment", "submit_s", "work_s", "throughput"})
"""What a workload item that holds an Experiment may say besides it (all simulation facts, not spec fields)."""


def is_experiment_row(row: Mapping[str, Any]) -> bool:
    """Whether a workload item is an Experiment: `{experiment: ...}` or a bare `kind: Experiment` document."""
    return "experiment" in row or row.get("kind") == "Experiment"


def experiment_job(row: Mapping[str, Any], source: str, where: str, base: Path | None) -> SimJob:
    """The SimJob of one workload item holding an Experiment; SpecError naming every problem's path."""
    if "experiment" not in row:
        row = {"experiment": dict(row)}
    unknown = sorted(set(row) - ROW_KEYS)
    if unknown:
        fix = f"an experiment item holds {', '.join(sorted(ROW_KEYS))}"
        raise SpecError(
            [Problem(source, where, f"unknown fields {', '.join(unknown)}", fix=fix, code=ProblemCode.UNKNOWN_FIELD)]
        )
    doc, at = _document(row["experiment"], source, where, base)
    exp = parse_experiment(doc)
    problems = _unmodelled(doc.data, exp, doc.source, at)
    res = exp.spec.resources
    work = row.get("work_s", res.duration_s)
    part_work: dict[str, float] = {}
    if exp.spec.parts:
        work, part_work = _pipeline_work(exp, work, source, where, problems)
    if work is None and not problems:  # a pipeline's work_s already said what is wrong with it
        fix = "give the item a work_s (its run time at speed 1) or the experiment a resources.duration"
        problems.append(
            Problem(source, where, "the experiment's work is unknown", fix=fix, code=ProblemCode.MISSING_FIELD)
        )
    if problems:
        raise SpecError(problems)
    return replace(_job(exp, float(work), row), part_work_s=part_work)


def _pipeline_work(
    exp: Experiment, work: Any, source: str, where: str, problems: list[Problem]
) -> tuple[Any, dict[str, float]]:
    """A pipeline's work and each part's: the run ends when its learner (or its only part) has done its work,
    and the other parts run until then. `work_s` is that part's work, or a mapping of part -> work (a part it
    does not name runs until the pipeline ends); without it, the pipeline's `resources.duration`."""
    names = list(exp.spec.parts)
    ends = LEARNER if LEARNER in names else names[0] if len(names) == 1 else None
    if ends is None:
        fix = f"name one part {LEARNER!r}: its end is the pipeline's"
        problems.append(
            Problem(
                source,
                where,
                f"the pipeline {exp.name} has no part whose end ends it",
                fix=fix,
                code=ProblemCode.BAD_VALUE,
            )
        )
        return None, {}
    if not isinstance(work, Mapping):
        return work, {ends: float(work)} if work is not None else {}
    unknown = sorted(set(work) - set(names))
    bad = sorted(k for k, v in work.items() if not isinstance(v, int | float) or not 0 < v < math.inf)
    if unknown or bad:
        what = f"parts it does not have: {', '.join(unknown)}" if unknown else f"work not > 0: {', '.join(bad)}"
        fix = f"work_s maps its parts ({', '.join(names)}) to seconds of work at speed 1"
        problems.append(Problem(source, f"{where}.work_s", f"work_s names {what}", fix=fix, code=ProblemCode.BAD_VALUE))
        return None, {}
    if ends not in work:
        fix = f"give {ends} a work: the pipeline ends when it has done it"
        problems.append(
            Problem(source, f"{where}.work_s", f"work_s gives no work to {ends}", fix=fix, code=ProblemCode.BAD_VALUE)
        )
        return None, {}
    return work[ends], {k: float(v) for k, v in work.items()}


def _document(value: Any, source: str, where: str, base: Path | None) -> tuple[Document, str]:
    if isinstance(value, str):
        path = Path(value)
        if not path.is_absolute() and base is not None:
            path = base / path
        return load_document(path), ""
    if isinstance(value, dict):
        return Document(source, value, {}), f"{where}.experiment."
    fix = "give a file name or the Experiment document itself"
    raise SpecError(
        [
            Problem(
                source, f"{where}.experiment", "must be a file name or a mapping", fix=fix, code=ProblemCode.WRONG_TYPE
            )
        ]
    )


def _unmodelled(data: Any, exp: Experiment, source: str, at: str) -> list[Problem]:
    """A problem for every field set that the simulation neither models nor may ignore."""
    problems = []
    for path in _paths(data, ""):
        if any(path == p or path.startswith(p + ".") for p in MODELLED | INERT) and path not in WHY_NOT:
            continue
        why = WHY_NOT.get(path, f"the simulator does not model {path}; remove it to simulate this experiment")
        problems.append(Problem(source, at + path, why, code=ProblemCode.UNSUPPORTED))
    return problems


def _paths(data: Any, prefix: str) -> list[str]:
    """The dotted paths of a document's leaves and of the mappings the rules name (spec.parts, ...)."""
    if not isinstance(data, dict) or prefix in WHY_NOT or prefix in MODELLED or prefix in INERT:
        return [prefix] if prefix else []
    return [p for key, value in data.items() for p in _paths(value, f"{prefix}.{key}" if prefix else str(key))]


def _job(exp: Experiment, work_s: float, row: Mapping[str, Any]) -> SimJob:
    spec, res = exp.spec, exp.spec.resources
    raw_retries = spec.retries.model_dump(exclude={"exit_codes"})
    parent = spec.parent
    throughput = row.get("throughput") or {}
    if not isinstance(throughput, dict) or not math.isfinite(work_s) or work_s <= 0:
        raise SpecError(
            [Problem("workload", exp.name, "work_s must be > 0 and throughput a mapping", code=ProblemCode.BAD_VALUE)]
        )
    return SimJob(
        name=exp.name,
        stage=str(spec.stage),
        chips=res.chips,
        work_s=work_s,
        submit_s=float(row.get("submit_s", 0.0)),
        team=exp.metadata.team,
        priority=str(spec.priority),
        throughput=throughput,
        elastic=res.min_chips is not None and res.min_chips < res.chips,
        min_chips=res.min_chips,
        max_chips=res.max_chips if res.max_chips is not None and res.max_chips > res.chips else None,
        prefer=str(spec.accelerators.prefer or "any"),
        estimate_s=res.duration_s,
        accelerators=tuple(str(a) for a in spec.accelerators.allow) if spec.accelerators.allow else None,
        workers=spec.parallelism.data,
        target=spec.target.model_dump() if spec.target is not None else None,
        retries=RetryPolicy.from_spec(raw_retries),
        checkpoint_every_s=spec.checkpoint.every_s,
        parent=parent.run if parent is not None and parent.checkpoint == "latest" else None,
        parts=parts_of(spec.parts),
    )
