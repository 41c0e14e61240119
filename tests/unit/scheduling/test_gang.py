"""Data-parallel workers are one gang in the scheduling core: admitted whole or not at all, on one host or
whole hosts when those are free, else spread over hosts in whole workers of chips/N each."""

from __future__ import annotations

import pytest

from crossrail.errors import PlacementError
from crossrail.scheduling import Scheduler
from crossrail.scheduling.feasibility import require_feasible
from crossrail.spec import Experiment, parse_document, parse_experiment

from .builders import T0, admitted, fleet, gpu, req, scheduler, tpu


def _busy(holders: dict[str, int]) -> Scheduler:
    """A 16-chip pool of two 8-GPU hosts with one holder per host, using the given chips."""
    sched = scheduler([gpu(chips=16)], [])
    for run, chips in holders.items():
        sched.started(req(run, "a", chips), "gpu", chips, T0 - 10)
    return sched


def test_a_4_worker_run_spreads_in_whole_workers_where_no_host_holds_it_and_a_plain_gang_waits() -> None:
    sched = _busy({"left": 6, "right": 6})  # two free GPUs on each host
    sched.submitted(req("plain", "a", 4))
    assert sched.cycle(T0).blocked["plain"] == "gpu has 4 free chips, but not one host of 8 for a 4-chip gang"
    sched.submitted(req("workers", "b", 4, workers=4, queued_at=T0 + 1))  # another queue: not behind `plain`

    result = sched.cycle(T0 + 2)

    (admission,) = result.admitted
    assert (admission.run, admission.hosts) == ("workers", ((0, 2), (1, 2)))
    assert "plain" in result.blocked


def test_a_4_worker_run_is_admitted_whole_or_not_at_all() -> None:
    sched = _busy({"left": 6, "right": 7})  # three free GPUs: room for three of the four workers
    sched.submitted(req("workers", "a", 4, workers=4))

    first = sched.cycle(T0)

    assert first.admitted == []
    assert first.blocked["workers"] == "gpu has 3 free chips; needs 4"
    sched.finished("right", T0 + 1)
    assert {a.run: a.hosts for a in sched.cycle(T0 + 2).admitted} == {"workers": ((1, 4),)}  # one host now


def test_workers_of_two_gpus_never_split_a_worker_across_hosts() -> None:
    sched = _busy({"left": 5, "right": 5})  # three free GPUs on each host: one 2-GPU worker fits on each
    sched.submitted(req("workers", "a", 8, workers=4))

    result = sched.cycle(T0)

    assert result.admitted == []
    assert result.blocked["workers"] == "gpu has 6 free chips; needs 8"
    sched.submitted(req("trio", "c", 6, workers=3))
    assert sched.cycle(T0 + 1).blocked["trio"] == (
        "gpu has 6 free chips, but not one host of 8, nor room for 3 workers of 2 chips on its hosts for a 6-chip gang"
    )
    sched.submitted(req("pair", "b", 4, workers=2, queued_at=T0 + 1))
    assert {a.run: a.hosts for a in sched.cycle(T0 + 2).admitted} == {"pair": ((0, 2), (1, 2))}


def test_twelve_workers_take_a_host_and_a_half_where_a_plain_gang_must_take_whole_hosts() -> None:
    sched = scheduler([gpu(chips=16)], [])
    sched.submitted(req("workers", "a", 12, workers=12))

    (admission,) = sched.cycle(T0).admitted

    assert admission.hosts == ((0, 8), (1, 4))
    built = fleet([gpu(chips=16)])
    assert [f.pool for f in require_feasible(_experiment(12, 12), built)] == ["gpu"]  # at submit, too
    with pytest.raises(PlacementError, match="span hosts of 8 chips"):
        require_feasible(_experiment(12, 1), built)


def test_tpu_workers_keep_their_slice_shape() -> None:
    sched = scheduler([tpu(chips=16)], [])
    sched.started(req("pair", "a", 2), "tpu", 2, T0 - 10)
    sched.submitted(req("workers", "a", 8, workers=8))  # 2x2x2: two whole 4-chip hosts

    assert admitted(sched.cycle(T0)) == {"workers": ("tpu", 8)}
    sched.submitted(req("more", "a", 6, workers=6))  # no slice holds 6 chips, whatever the workers
    assert "no slice shape of tpu fits 6 chips" in sched.cycle(T0 + 1).blocked["more"]


def _experiment(chips: int, workers: int) -> Experiment:
    text = f"""
apiVersion: crossrail/v1
kind: Experiment
metadata: {{name: gang, owner: ada@example.com}}
spec:
  stage: experiment
  image: trainer@sha256:{"ab" * 32}
  command: [python, -m, train]
  dataset: {{uri: gs://data/x, version: v1}}
  checkpoint: {{dir: gs://ckpt/gang}}
  resources: {{chips: {chips}}}
  parallelism: {{data: {workers}}}
"""
    return parse_experiment(parse_document(text, "gang.yaml"))
