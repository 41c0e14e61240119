"""The workspace's runs as metrics' per-run facts: its event log and every metric sample its runs reported."""

from __future__ import annotations

from crossrail.core import EventType
from crossrail.metrics import RunFacts, Sample, Target, fold_runs
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
