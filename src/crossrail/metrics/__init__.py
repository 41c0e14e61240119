"""Research-cycle metrics per stage x pool, folded from the event log (pure; definitions: docs/metrics.md)."""

from crossrail.metrics.accumulator import MetricsAccumulator, compute
from crossrail.metrics.comparable import Difference, FleetTimeline
from crossrail.metrics.distribution import Distribution, percentile
from crossrail.metrics.registry import METRICS, Metric
from crossrail.metrics.report import GroupMetrics, Report
from crossrail.metrics.runs import AttemptFacts, RunFacts, Sample, Target, fold_runs
from crossrail.metrics.table import DIMENSIONS, Row, Selection, Table, parse_selection, table
from crossrail.metrics.verdict import Change, Verdict, change, compare, format_value

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
    "Report",
    "Row",
    "RunFacts",
    "Sample",
    "Selection",
    "Table",
    "Target",
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
