"""Research-cycle metrics per stage x pool, folded from the event log (pure; definitions: docs/metrics.md)."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from crossrail.metrics.accumulator import MetricsAccumulator, compute
    from crossrail.metrics.comparable import Difference, FleetTimeline
    from crossrail.metrics.distribution import Distribution, percentile
    from crossrail.metrics.registry import METRICS, Metric
    from crossrail.metrics.report import GroupMetrics, Report
    from crossrail.metrics.runs import AttemptFacts, QualityTarget, RunFacts, Sample, fold_runs
    from crossrail.metrics.table import DIMENSIONS, Row, Selection, Table, parse_selection, table
    from crossrail.metrics.verdict import Change, Verdict, change, compare, format_value

# Each name loads its module on first use, so a command that needs one metric module (status: progress)
# does not load them all.
_HOMES = {
    "MetricsAccumulator": "crossrail.metrics.accumulator",
    "compute": "crossrail.metrics.accumulator",
    "Difference": "crossrail.metrics.comparable",
    "FleetTimeline": "crossrail.metrics.comparable",
    "Distribution": "crossrail.metrics.distribution",
    "percentile": "crossrail.metrics.distribution",
    "METRICS": "crossrail.metrics.registry",
    "Metric": "crossrail.metrics.registry",
    "GroupMetrics": "crossrail.metrics.report",
    "Report": "crossrail.metrics.report",
    "AttemptFacts": "crossrail.metrics.runs",
    "RunFacts": "crossrail.metrics.runs",
    "Sample": "crossrail.metrics.runs",
    "QualityTarget": "crossrail.metrics.runs",
    "fold_runs": "crossrail.metrics.runs",
    "DIMENSIONS": "crossrail.metrics.table",
    "Row": "crossrail.metrics.table",
    "Selection": "crossrail.metrics.table",
    "Table": "crossrail.metrics.table",
    "parse_selection": "crossrail.metrics.table",
    "table": "crossrail.metrics.table",
    "Change": "crossrail.metrics.verdict",
    "Verdict": "crossrail.metrics.verdict",
    "change": "crossrail.metrics.verdict",
    "compare": "crossrail.metrics.verdict",
    "format_value": "crossrail.metrics.verdict",
}

__all__ = [
    "DIMENSIONS",
    "METRICS",
    "AttemptFacts",
    "Change",
    "Difference",
    "Distribution",
    "FleetTimeline",
    "GroupMetrics",
    "Metric",
    "MetricsAccumulator",
    "QualityTarget",
    "Report",
    "Row",
    "RunFacts",
    "Sample",
    "Selection",
    "Table",
    "Verdict",
    "change",
    "compare",
    "compute",
    "fold_runs",
    "format_value",
    "parse_selection",
    "percentile",
    "table",
]


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'crossrail.metrics' has no attribute {name!r}")
    module = importlib.import_module(home)
    if home == "crossrail.metrics.table":  # importing the submodule bound `table` to it: the name is the function
        globals()["table"] = module.table
    value = getattr(module, name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_HOMES])
