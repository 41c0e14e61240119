"""The workspace's runs as metrics' per-run facts: its event log and every metric sample its runs reported.

A selection (SEL), as `crossrail compare` and `crossrail report --before/--after` take it, is either event
filters over the workspace's runs (`stage=post_training,pool=h100,since=2026-11-01,until=2026-12-01,
team=nlp`) or a simulation result written by `simulate --json --records` (`sim:result.json`, optionally
followed by filters: `sim:result.json,stage=eval`): `select_runs` reads both.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path

from crossrail.core import EventType
from crossrail.errors import UsageError
from crossrail.metrics import RunFacts, Sample, Target, fold_runs, parse_selection
from crossrail.metrics.registry import SAMPLE_NAMES
from crossrail.store import Store


def workspace_runs(store: Store, now: float) -> list[RunFacts]:
    """Every run in the store, folded from its events and the samples metrics read, as of `now`.

    Only the reported metrics a computation reads (and each run's target metric) are loaded: a training run
    reports loss and step times every step, which no metric here needs.
    """
    events = store.events()
    ids = sorted({e.run for e in events if e.run is not None})
    wanted = set(SAMPLE_NAMES)
    for e in events:
        target = Target.of(e.data.get("target")) if e.type is EventType.SUBMITTED else None
        if target is not None:
            wanted.add(target.metric)
    samples = [
        Sample(s["run_id"], s["attempt"], float(s["ts"]), str(s["name"]), float(s["value"]), s["step"])
        for rid in ids
        for s in store.metric_samples(rid)
        if s["name"] in wanted
    ]
    return fold_runs(events, samples, now=now)


SIM = "sim:"


def select_runs(text: str, flag: str, workspace: Callable[[], Sequence[RunFacts]]) -> list[RunFacts]:
    """The runs a selection names: of a simulation result (`sim:FILE[,filters]`), else of `workspace()`.

    `flag` names the option in errors; `workspace` is called only when the selection reads the workspace.
    """
    if text.startswith(SIM):
        path, _, filters = text[len(SIM) :].partition(",")
        return parse_selection(filters, flag).pick(sim_runs(Path(path), flag))
    return parse_selection(text, flag).pick(workspace())


def sim_runs(path: Path, flag: str) -> list[RunFacts]:
    """Every run record of a `simulate --json --records` result."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise UsageError(f"{flag} {SIM}{path}: cannot read it ({exc})") from None
    records = data.get("records") if isinstance(data, dict) else None
    if not isinstance(records, list):
        raise UsageError(f"{flag} {SIM}{path} has no per-run records; write it with `simulate --json --records`")
    return [RunFacts.from_dict(r) for r in records]
