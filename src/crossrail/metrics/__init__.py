"""Research-cycle metrics per stage x pool, folded from the event log (pure; definitions: docs/metrics.md)."""

from crossrail.metrics.accumulator import MetricsAccumulator, compute
from crossrail.metrics.distribution import Distribution, percentile
from crossrail.metrics.report import GroupMetrics, Report

__all__ = ["Distribution", "GroupMetrics", "MetricsAccumulator", "Report", "compute", "percentile"]
