"""A fleet pool's `peak_tflops`: accelerator_utilization's peak there instead of the vendors' table, refused when
it is not a positive number per known precision."""

from __future__ import annotations

from typing import Any

import pytest

from crossrail.control.reports.facts import pool_peaks, workspace_runs
from crossrail.core import EventType
from crossrail.core.peaks import peak_flops
from crossrail.errors import SpecError
from crossrail.metrics import METRICS
from crossrail.metrics.registry import utilization_peak
from crossrail.spec import parse_document, parse_fleet

from .stories import Story, tell

FLEET = """\
apiVersion: crossrail/v1
kind: Fleet
metadata: {name: local}
spec:
  pools:
    - {name: tpu-local, accelerator: tpu, chip_type: tpu-v5p, chips: 4, chips_per_host: 4}
    - name: h100-local
      accelerator: gpu
      chip_type: h100
      chips: 8
      chips_per_host: 8
      peak_tflops: <peaks>
"""


def declared(peaks: str) -> str:
    """A fleet with `peak_tflops: <peaks>` on its h100 pool."""
    return FLEET.replace("<peaks>", peaks)


class Events:
    """What workspace_runs reads of a store: its events, its runs' records and their metric samples."""

    def __init__(self, story: Story) -> None:
        self.story = story

    def events(self) -> list[Any]:
        return tell(self.story)

    def runs_by_id(self, ids: Any) -> dict[str, Any]:
        return {}

    def metric_samples(self, rid: str) -> list[dict[str, Any]]:
        return [
            {"run_id": s.run, "attempt": s.attempt, "ts": s.ts, "name": s.name, "value": s.value, "step": s.step}
            for s in self.story.samples
            if s.run == rid
        ]


def bf16_on_h100_local() -> Story:
    """Two chips of h100 at bf16 reaching 400 and 600 TFLOP/s of model FLOPs."""
    s = Story("sft-1", chips=2)
    data = {"pool": "h100-local", "accelerator": "gpu", "chip_type": "h100", "chips": 2, "cost_per_chip_hour": 3.0}
    s.emit(EventType.STARTED, attempt=1, **data)
    s.emit(EventType.REPORTED, attempt=1, name="runtime", data={"framework": "torch", "precision": "bf16"})
    s.metric("model_flops_per_second", 400e12).metric("model_flops_per_second", 600e12)
    return s.wait(60).succeed()


def test_a_pools_declared_peak_replaces_the_vendors_figure_for_its_chips() -> None:
    fleet = parse_fleet(parse_document(declared("{bf16: 500, fp8: 1000}"), "fleet.yaml"))
    store: Any = Events(bf16_on_h100_local())

    (table,) = workspace_runs(store, now=1e10)
    (pool,) = workspace_runs(store, now=1e10, peaks=pool_peaks(fleet))

    utilization = METRICS["accelerator_utilization"]
    assert utilization.value([table]) == pytest.approx(500e12 / (2 * 989.4e12))  # NVIDIA's bf16 figure
    assert utilization.value([pool]) == pytest.approx(500e12 / (2 * 500e12))
    assert utilization_peak(pool.attempts[0]) == (2 * 500e12, "pool h100-local's peak_tflops at bf16")
    assert pool_peaks(fleet) == {"h100-local": {"bf16": 500.0, "fp8": 1000.0}}


def test_a_precision_the_pool_does_not_declare_falls_back_to_its_bf16_figure() -> None:
    assert peak_flops("h100", "fp8", {"bf16": 500.0, "fp8": 1000.0}) == 1000e12
    assert peak_flops("h100", "fp32", {"bf16": 500.0}) == 500e12
    assert peak_flops("unknown-chip", "bf16", {"bf16": 42.0}) == 42e12  # a chip the table lacks gets a peak
    assert peak_flops("h100", "fp32", {}) == 67e12  # an empty declaration leaves the table in charge


@pytest.mark.parametrize(
    ("peaks", "path", "message", "fix"),
    [
        pytest.param("{bf61: 500}", "peak_tflops.bf61", "unknown precision 'bf61'", "did you mean 'bf16'?", id="typo"),
        pytest.param("{bf16: 0}", "peak_tflops.bf16", "must be > 0.0 (got 0)", None, id="zero"),
        pytest.param("{bf16: -3}", "peak_tflops.bf16", "must be > 0.0 (got -3)", None, id="negative"),
        pytest.param("{bf16: fast}", "peak_tflops.bf16", "expected a number, got 'fast'", None, id="text"),
        pytest.param("{bf16: .inf}", "peak_tflops.bf16", "input should be a finite number (got inf)", None, id="inf"),
        pytest.param("989", "peak_tflops", "expected a mapping, got 989", None, id="not-per-precision"),
    ],
)
def test_a_bad_peak_is_refused_at_its_line_with_the_fix(peaks: str, path: str, message: str, fix: str | None) -> None:
    text = declared(peaks)
    with pytest.raises(SpecError) as caught:
        parse_fleet(parse_document(text, "fleet.yaml"))

    (problem,) = caught.value.problems
    line = text.splitlines().index(f"      peak_tflops: {peaks}") + 1
    assert (problem.path.split(".", 2)[-1], problem.message, problem.fix, problem.line) == (path, message, fix, line)
    assert problem.path.startswith("spec.pools[1].")
