"""One accelerator_utilization: model FLOP/s over the chip type's declared peak, whatever the framework measured."""

from __future__ import annotations

import pytest

from crossrail.core import EventType
from crossrail.core.peaks import peak_flops
from crossrail.metrics import METRICS, fold_runs

from .stories import Story, tell


def on_h100(run: str, framework: str, measured_peak: float, achieved: float) -> Story:
    """A 4-chip bf16 run on h100 whose trainer measured its own peak and reports the model FLOP/s it achieved."""
    s = Story(run, chips=4)
    data = {"pool": "h100", "accelerator": "gpu", "chip_type": "h100", "chips": 4, "cost_per_chip_hour": 3.0}
    s.emit(EventType.STARTED, attempt=1, **data)
    started = {"framework": framework, "dtype": "bf16", "peak_flops": measured_peak, "degree": 1}
    s.emit(EventType.REPORTED, attempt=1, name="started", data=started)
    s.metric("model_flops_per_second", achieved).metric("model_flops_per_second", achieved * 3)
    return s.wait(60).succeed()


def test_two_frameworks_on_one_chip_are_judged_against_one_declared_peak() -> None:
    torch = on_h100("torch-1", "torch", measured_peak=28e9, achieved=0.5e15)
    jax = on_h100("jax-1", "jax", measured_peak=49.8e9, achieved=1.0e15)
    stories = (torch, jax)
    runs = {r.id: r for r in fold_runs(tell(*stories), [x for s in stories for x in s.samples], now=1e10)}

    peak = 4 * 989.4e12  # 4 chips of h100 at bf16 (NVIDIA's datasheet, dense)
    assert peak_flops("h100", "bf16") == 989.4e12
    assert METRICS["accelerator_utilization"].value([runs["torch-1"]]) == pytest.approx((0.5e15 + 1.5e15) / 2 / peak)
    assert METRICS["accelerator_utilization"].value([runs["jax-1"]]) == pytest.approx((1e15 + 3e15) / 2 / peak)
    # the self-measured peaks (28 and 49.8 GFLOP/s) play no part: jax did twice the work, and scores twice as high
    ratio = METRICS["accelerator_utilization"].value([runs["jax-1"]]) / METRICS["accelerator_utilization"].value(
        [runs["torch-1"]]
    )
    assert ratio == pytest.approx(2.0)


def test_a_virtual_pool_is_judged_against_the_host_peak_its_trainer_measured() -> None:
    s = on_h100("cpu-1", "torch", measured_peak=28e9, achieved=14e9)
    (run,) = fold_runs(tell(s), s.samples, now=1e10)
    run.attempts[0].virtual = True

    assert METRICS["accelerator_utilization"].value([run]) == pytest.approx((14e9 + 42e9) / 2 / 28e9)
