"""The workspace's runs as metrics' per-run facts: its event log and every metric sample its runs reported.

A selection (SEL), as `crossrail compare` and `crossrail report --before/--after` take it, is either event
filters over the workspace's runs (`stage=post_training,pool=h100,since=2026-11-01,until=2026-12-01,
team=nlp`) or a simulation result: locally a file written by `simulate --json --records` (`sim:result.json`,
optionally followed by filters: `sim:result.json,stage=eval`), over the API a result `simulate --store` kept
in the store (`sim:3f9a0c2e71b4`): `select_runs` reads both.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

from crossrail.core import EventType
from crossrail.errors import NotFoundError, SpecError, UsageError
from crossrail.metrics import FleetTimeline, QualityTarget, RunFacts, Sample, Selection, fold_runs, parse_selection
from crossrail.metrics.comparable import capacity_steps
from crossrail.metrics.registry import SAMPLE_NAMES
from crossrail.spec import work_digest
from crossrail.store import Store
from crossrail.store.records import RunRecord


def workspace_runs(
    store: Store,
    now: float,
    *,
    virtual_pools: Collection[str] = (),
    peaks: Mapping[str, Mapping[str, float]] | None = None,
) -> list[RunFacts]:
    """Every run in the store, folded from its events and the samples metrics read, as of `now`.

    Only the reported metrics a computation reads (and each run's target metric) are loaded: a training run
    reports loss and step times every step, which no metric here needs. Each run carries what a verdict
    checks for comparability (its work digest, arguments, code commit and dataset version, from its recorded
    spec), and its attempts on `virtual_pools` (local pools: chips standing in for accelerators) say so. An
    attempt on a pool in `peaks` (pool name -> its `peak_tflops`: pool_peaks) is judged against that peak.
    """
    events = store.events()
    ids = sorted({e.run for e in events if e.run is not None})
    wanted = set(SAMPLE_NAMES)
    for e in events:
        target = QualityTarget.of(e.data.get("target")) if e.type is EventType.SUBMITTED else None
        if target is not None:
            wanted.add(target.metric)
    samples = [
        Sample(s["run_id"], s["attempt"], float(s["ts"]), str(s["name"]), float(s["value"]), s["step"])
        for rid in ids
        for s in store.metric_samples(rid)
        if s["name"] in wanted
    ]
    runs = fold_runs(events, samples, now=now)
    _describe_work(runs, store.runs_by_id(ids), frozenset(virtual_pools), peaks or {})
    return runs


def _describe_work(
    runs: list[RunFacts],
    records: Mapping[str, RunRecord],
    virtual_pools: frozenset[str],
    peaks: Mapping[str, Mapping[str, float]],
) -> None:
    for run in runs:
        for attempt in run.attempts:
            attempt.virtual = attempt.pool in virtual_pools
            attempt.peak_tflops = peaks.get(attempt.pool) or None
        rec = records.get(run.id)
        if rec is None:
            continue
        spec = rec.spec.get("spec") if isinstance(rec.spec, Mapping) else None
        args = spec.get("args") if isinstance(spec, Mapping) else None
        run.work = work_digest(rec.spec)
        run.args = tuple(str(a) for a in args) if isinstance(args, list) else ()
        run.commit = rec.code_commit or None
        run.dataset_version = rec.dataset_version or None


def workspace_fleet(store: Store, runs: Sequence[RunFacts]) -> FleetTimeline:
    """The fleet around the workspace's runs, for a verdict's warnings: recorded capacity and every attempt."""
    return FleetTimeline(capacity_steps(store.events()), runs)


def pool_peaks(fleet: Any) -> dict[str, Mapping[str, float]]:
    """The fleet's pools that declare their chips' peak TFLOP/s (`peak_tflops`), by name."""
    return {p.name: p.peak_tflops for p in fleet.spec.pools if p.peak_tflops}


def local_pools(fleet: Any) -> frozenset[str]:
    """The fleet's pools of the local backend: virtual chips, whose timings measure the software path."""
    return frozenset(p.name for p in fleet.spec.pools if str(p.backend) == "local")


SIM = "sim:"
SIM_FILE_MAX_BYTES = 512 * 1024 * 1024
"""The largest `simulate --json --records` result `sim:FILE` reads (about 1.5 million runs)."""

SimulationReader = Callable[[str, str], list[RunFacts]]
"""(what follows `sim:`, the option's name for errors) -> the runs of that simulation result."""


def select_runs(
    text: str,
    flag: str,
    workspace: Callable[[], Sequence[RunFacts]],
    simulation: SimulationReader | None = None,
) -> list[RunFacts]:
    """The runs a selection names: of a simulation result (`sim:NAME[,filters]`), else of `workspace()`.

    `flag` names the option in errors; `workspace` is called only when the selection reads the workspace;
    `simulation` reads `sim:NAME` (the local CLI: a file, `sim_file_runs`; the server: a stored result by
    id, `stored_sim_runs`, so that no request names a path on the server).
    """
    if text.startswith(SIM):
        name, _, filters = text[len(SIM) :].partition(",")
        return _picked(parse_selection(filters, flag), (simulation or sim_file_runs)(name, flag), f"{flag} {text!r}")
    return _picked(parse_selection(text, flag), workspace(), f"{flag} {text!r}")


def _picked(selection: Selection, runs: Sequence[RunFacts], where: str) -> list[RunFacts]:
    """The runs `selection` picks; a UsageError with a did-you-mean when it picks none and a filter's value is
    one no run has, spelt like one a run has (`team=alignmnet`)."""
    picked = selection.pick(runs)
    said = [] if picked else selection.misspelt(runs)
    if said:
        raise UsageError(f"{where}: " + "; ".join(said))
    return picked


def sim_file_runs(path: str, flag: str) -> list[RunFacts]:
    """Every run record of a `simulate --json --records` result file, read on the caller's side (the local
    CLI) through the bounded reader: a FIFO, a device or a file past SIM_FILE_MAX_BYTES is refused."""
    from crossrail.spec.loader import read_bounded

    try:
        data = json.loads(read_bounded(Path(path), SIM_FILE_MAX_BYTES))
    except SpecError as exc:
        raise UsageError(f"{flag} {SIM}{path}: {exc.problems[0].message}") from None
    except ValueError as exc:
        raise UsageError(f"{flag} {SIM}{path}: cannot read it ({exc})") from None
    records = data.get("records") if isinstance(data, dict) else None
    if not isinstance(records, list):
        raise UsageError(f"{flag} {SIM}{path} has no per-run records; write it with `simulate --json --records`")
    return _facts(records, f"{flag} {SIM}{path}")


def stored_sim_runs(store: Store) -> SimulationReader:
    """`sim:ID` as a server reads it: the records `simulate --store` kept in `store` under ID, never a file."""

    def read(sim_id: str, flag: str) -> list[RunFacts]:
        try:
            return _facts(store.simulation(sim_id), f"{flag} {SIM}{sim_id}")
        except NotFoundError as exc:
            raise UsageError(f"{flag} {SIM}{sim_id[:40]}: {exc}") from None

    return read


def _facts(records: list[Any], where: str) -> list[RunFacts]:
    try:
        return [RunFacts.from_dict(r) for r in records]
    except (TypeError, KeyError, ValueError, AttributeError) as exc:
        raise UsageError(f"{where}: a run record is not one `simulate --records` writes ({exc})") from None
