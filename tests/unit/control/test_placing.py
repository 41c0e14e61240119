"""Placement estimates through the client: `place --explain`, estimated starts in the queue, and the
placement history `show` keeps, including a re-placement when a pool drains."""

from __future__ import annotations

from pathlib import Path

import pytest

from crossrail.client import Client
from crossrail.control.placing import Placer, QueuePlacement
from crossrail.core import ManualClock
from crossrail.errors import SpecError, UsageError
from crossrail.scheduling.plan import Plan
from crossrail.store import AttemptRecord

HOUR = 3600.0
POST_TRAINING = ["spec.stage=post_training", "spec.resources.chips=8", "spec.resources.duration=1h"]


def fleet_edit(checkout: Path, old: str, new: str) -> None:
    path = checkout / ".crossrail" / "fleet.yaml"
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new))


@pytest.mark.slow
def test_place_explains_why_pretraining_leaves_its_tpu_for_a_faster_cheaper_gpu(
    client: Client, experiments: Path, checkout: Path
) -> None:
    fleet_edit(checkout, "relative_speed: 0.9", "relative_speed: 1.5")  # the H100s finish it in 2/3 the time

    out = client.place(experiments / "pretrain-small.yaml")

    assert out["kind"] == "Placement"
    assert (out["pool"], out["objective"], out["estimated_start_in_s"]) == ("h100", "throughput_per_cost", 0.0)
    assert out["reason"].startswith("left preferred tpu by the pretraining placement policy: h100 finishes")
    assert "costs $" in out["reason"]
    terms = {c["pool"]: c for c in out["candidates"]}
    assert terms["tpu-v5p"]["run_s"] == 1200.0  # duration 20m on the reference speed
    assert terms["h100"]["run_s"] == 800.0
    assert terms["h100"]["cost"] == pytest.approx(4 * 800 / 3600 * 3.00, abs=1e-4)
    assert client.service.store.list_runs() == []  # placing writes nothing


def test_place_keeps_the_preferred_tpu_when_the_gpu_gains_less_than_the_margin(
    client: Client, experiments: Path
) -> None:
    out = client.place(experiments / "pretrain-small.yaml")

    assert out["pool"] == "tpu-v5p"
    assert "h100 gains less than the 25% margin" in out["reason"]


def test_place_rejects_a_bad_experiment_with_the_submit_checks(client: Client, experiments: Path) -> None:
    with pytest.raises(SpecError):
        client.place(experiments / "pretrain-small.yaml", sets=["spec.resources.chips=0"])


@pytest.mark.slow
def test_the_queue_shows_each_pending_runs_estimated_start_and_pool(client: Client, experiments: Path) -> None:
    """Three 8-chip, 1 h post-training runs on two 8-chip pools: the GPU, then the idle TPU (the GPU's
    wait would double the result time), then the GPU again once the first run ends (1 h / 0.9)."""
    for _ in range(3):
        client.submit(experiments / "eval-smoke.yaml", sets=POST_TRAINING)

    pending = client.queue()["queues"][1]["pending"]

    got = [(p["id"], p["planned_pool"], p["estimated_start_in_s"]) for p in pending]
    assert got == [("eval-smoke-1", "h100", 0.0), ("eval-smoke-2", "tpu-v5p", 0.0), ("eval-smoke-3", "h100", 4000.0)]


def test_show_keeps_each_placement_and_a_drain_re_places_the_pending_run(
    client: Client, experiments: Path, checkout: Path
) -> None:
    service = client.service
    for _ in range(2):
        client.submit(experiments / "eval-smoke.yaml", sets=POST_TRAINING)
    placing = QueuePlacement(service.store)
    queued = service.store.list_runs(states=["queued"], newest_first=False)
    planned = placing.place(service.fleet, service.policy, queued, [], drained=[], now=client.clock.now())
    placing.record(planned, [], client.clock.now())
    assert placing.current == {"eval-smoke-1": "h100", "eval-smoke-2": "tpu-v5p"}

    client.clock.advance(60)
    again = placing.place(service.fleet, service.policy, queued, [], drained=["tpu-v5p"], now=client.clock.now())
    events = placing.record(again, [], client.clock.now())

    assert [(e.type, e.run, e.data["from"], e.data["pool"]) for e in events] == [
        ("replaced", "eval-smoke-2", "tpu-v5p", "h100")
    ]
    shown = client.show("eval-smoke-2")["placements"]
    assert [(p["type"], p["pool"], p["from"]) for p in shown] == [
        ("planned", "tpu-v5p", None),
        ("replaced", "h100", "tpu-v5p"),
    ]
    assert shown[0]["reason"].startswith("left preferred gpu by the post_training placement policy: tpu-v5p")
    assert shown[1]["reason"].startswith("re-placed from tpu-v5p (drained: takes no new work)")
    assert {c["pool"] for c in shown[1]["candidates"]} == {"tpu-v5p", "h100"}
    assert (
        QueuePlacement(service.store)
        .place(service.fleet, service.policy, queued, [], drained=["tpu-v5p"], now=client.clock.now())
        .moved()
        == []
    ), "a restarted agent reads current placements back from the events"


def attempt_on(
    client: Client,
    run: str,
    pool: str,
    chip_type: str,
    steps_per_hour: float,
    state: str = "starting",
    chips: int = 4,
) -> None:
    store, now = client.service.store, client.clock.now()
    att = AttemptRecord(
        run_id=run,
        number=1,
        state=state,
        pool=pool,
        accelerator="tpu" if pool == "tpu-v5p" else "gpu",
        chip_type=chip_type,
        chips=chips,
        cost_per_chip_hour=1.0,
        dataset_uri="file:///data",
        dataset_version="v1",
        code_commit=None,
        config_digest=None,
        image_digest=None,
        started_at=None,
        ended_at=None,
        exit_code=None,
        reason=None,
        created_at=now,
    )
    assert store.admit(att, []) is not None
    store.add_metric_samples(
        [{"run_id": run, "attempt": 1, "ts": now, "step": 10, "name": "steps_per_hour", "value": steps_per_hour}]
    )


def test_measured_throughput_of_earlier_attempts_replaces_the_fleets_relative_speed(
    client: Client, experiments: Path
) -> None:
    """The fleet says the H100 is 0.9x the TPU; this experiment's attempts measured it at 4x per chip."""
    first = client.submit(experiments / "pretrain-small.yaml")["run"]["id"]
    second = client.submit(experiments / "pretrain-small.yaml")["run"]["id"]
    attempt_on(client, first, "tpu-v5p", "tpu-v5p", 3600.0)  # 1 step/s on 4 chips
    attempt_on(client, second, "h100", "h100", 14400.0)

    out = client.place(experiments / "pretrain-small.yaml")
    terms = {c["pool"]: c for c in out["candidates"]}

    # h100 anchors (declared duration at its relative speed); tpu-v5p is scaled by the measured ratio.
    assert terms["h100"]["speed_source"] == "relative_speed"
    assert terms["tpu-v5p"]["speed_source"] == "measured ratio; measured at 4 chips"
    assert terms["h100"]["run_s"] == pytest.approx(1200 / 0.9, abs=0.1)  # the fastest measured type anchors
    assert terms["tpu-v5p"]["run_s"] == pytest.approx(4 * 1200 / 0.9, abs=0.1)
    assert out["pool"] == "h100"
    assert out["reason"].startswith("left preferred tpu by the pretraining placement policy: h100 finishes")


def test_throughput_measured_at_several_degrees_is_fitted_and_explained_for_the_runs_chips(
    client: Client, experiments: Path
) -> None:
    """H100 attempts at 1, 2 and 4 chips lose 20% per added chip (Amdahl, serial 0.2); the TPU was measured
    at 4 chips only. For 8 chips the H100's rate comes from the fit, not from 1 chip x 8."""
    runs = [client.submit(experiments / "pretrain-small.yaml")["run"]["id"] for _ in range(4)]
    for run, chips in zip(runs, (1, 2, 4), strict=False):
        attempt_on(client, run, "h100", "h100", 3600.0 * 4 * chips / (1 + 0.2 * (chips - 1)), chips=chips)
    attempt_on(client, runs[3], "tpu-v5p", "tpu-v5p", 3600.0 * 2 * 4, chips=4)  # 2 steps/s per chip
    placer = Placer(client.service.store, client.service.fleet, client.service.policy)
    assert placer.scaling("pretrain-small")["h100"] == {1: 4.0, 2: 4 / 1.2, 4: 4 / 1.6}

    out = client.place(experiments / "pretrain-small.yaml", sets=["spec.resources.chips=8"])
    terms = {c["pool"]: c for c in out["candidates"]}

    # At 8 chips the H100 runs 4 / (1 + 0.2 x 7) = 1.67 steps/s per chip, below the TPU's 2 (on one chip, 4):
    # the TPU anchors and the H100 takes 2 / 1.67 = 1.2 times as long.
    assert terms["tpu-v5p"]["speed_source"] == "relative_speed"
    h100 = terms["h100"]
    assert h100["speed_source"] == "measured ratio; Amdahl fit over 1, 2, 4 chips (serial 20.0%)"
    assert h100["run_s"] == pytest.approx(terms["tpu-v5p"]["run_s"] * 1.2, abs=0.1)


def test_measured_throughputs_of_many_experiments_are_read_together_and_kept_apart(
    client: Client, experiments: Path
) -> None:
    first = client.submit(experiments / "pretrain-small.yaml")["run"]["id"]
    second = client.submit(experiments / "pretrain-small.yaml")["run"]["id"]
    other = client.submit(experiments / "pretrain-small.yaml", sets=["metadata.name=pretrain-other"])["run"]["id"]
    attempt_on(client, first, "tpu-v5p", "tpu-v5p", 3600.0)  # 1 step/s on 4 chips: 0.25 per chip
    attempt_on(client, second, "h100", "h100", 14400.0)
    attempt_on(client, other, "h100", "h100", 7200.0)
    service = client.service
    placer = Placer(service.store, service.fleet, service.policy)

    placer.measure(["pretrain-small", "pretrain-other", "never-run"])

    assert placer.measured("pretrain-small") == {"tpu-v5p": 0.25, "h100": 1.0}
    assert placer.measured("pretrain-other") == {"h100": 0.5}
    assert placer.measured("never-run") == {}


def test_the_agent_replans_when_runs_arrive_or_pools_drain_and_otherwise_every_few_seconds(
    client: Client, experiments: Path
) -> None:
    service, clock = client.service, client.clock
    placing = QueuePlacement(service.store, replan_s=5.0)
    client.submit(experiments / "eval-smoke.yaml", sets=POST_TRAINING)

    def place(drained: list[str] | None = None) -> Plan:
        queued = service.store.list_runs(states=["queued"], newest_first=False)
        return placing.place(service.fleet, service.policy, queued, [], drained=drained or [], now=clock.now())

    first = place()
    clock.advance(1)
    assert place() is first  # nothing changed
    client.submit(experiments / "eval-smoke.yaml", sets=POST_TRAINING)
    arrived = place()
    assert arrived is not first
    assert set(arrived.choices) == {"eval-smoke-1", "eval-smoke-2"}
    drained = place(["h100"])
    assert drained is not arrived
    clock.advance(1)
    assert place(["h100"]) is drained
    clock.advance(5)
    assert place(["h100"]) is not drained  # the interval passed: a fresh plan


def test_a_retry_is_placed_away_from_the_pool_its_last_attempt_failed_on(client: Client, experiments: Path) -> None:
    service = client.service
    run = client.submit(experiments / "eval-smoke.yaml", sets=POST_TRAINING)["run"]["id"]
    record = service.store.get_run(run)
    attempt_on(client, run, "h100", "h100", 3600.0, state="failed")

    planned = QueuePlacement(service.store).place(
        service.fleet, service.policy, [record], [], drained=[], now=client.clock.now()
    )

    assert planned.choices[run].pool == "tpu-v5p"
    assert planned.choices[run].reason.startswith(
        "retry moved off h100, where the previous attempt ended; no other gpu pool; best time to result: tpu-v5p"
    )
    assert service.store.last_attempts([run, "no-such-run"])[run].state == "failed"


def test_a_page_of_the_queue_is_what_the_whole_queue_says_of_those_runs(
    client: Client, experiments: Path, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Post-training runs competing for two pools with priorities mixed, and a critical child of the newest
    pretraining run, which waits for that parent far behind the page: every page's entries are the whole
    queue's at the same positions, with each queue's total, and a page plans only the runs ahead of it."""
    for _ in range(4):
        client.submit(experiments / "pretrain-small.yaml")
        clock.advance(1)
    for i in range(7):
        client.submit(experiments / "eval-smoke.yaml", sets=[*POST_TRAINING, f"spec.priority={('low', 'high')[i % 2]}"])
        clock.advance(1)
    child = client.submit(
        experiments / "eval-smoke.yaml",
        sets=[
            *POST_TRAINING,
            "spec.priority=critical",
            "spec.parent.run=pretrain-small-4",
            "metadata.team=foundation",  # the fleet shares foundation's checkpoints with alignment, not evals
            "spec.parent.checkpoint=latest",
        ],
    )["run"]["id"]
    planned: list[int] = []
    real = client.service.store.queued_runs
    monkeypatch.setattr(client.service.store, "queued_runs", lambda ids=None: planned.append(len(r := real(ids))) or r)
    whole = client.queue(limit=0)
    assert [q["pending_total"] for q in whole["queues"] if q["pending"]] == [4, 8]

    for limit, offset in [(1, 0), (2, 2), (3, 4), (100, 0), (2, 7), (5, 20)]:
        page = client.queue(limit=limit, offset=offset)
        assert (page["limit"], page["offset"]) == (limit, offset)
        for got, want in zip(page["queues"], whole["queues"], strict=True):
            assert got["pending_total"] == want["pending_total"]
            assert got["pending"] == want["pending"][offset : offset + limit], (limit, offset, got["name"])
    first = next(p for q in client.queue(limit=1)["queues"] for p in q["pending"] if p["id"] == child)
    assert first["waiting_for_parent"]["run"] == "pretrain-small-4"
    assert first["waiting_for_parent"]["estimated_start_in_s"] is not None
    assert planned[0] == 12  # the whole queue, then each page only up to its last run (and that parent)
    # The first page: the critical child, its parent pretrain-small-4 and every run ahead of that parent in
    # admission order (the 4 pretraining runs, the 3 high-priority post-training runs); not the 4 low ones.
    assert planned[1] == 8


@pytest.mark.parametrize(
    ("limit", "offset"), [(-1, 0), (2, -3), (True, 0)], ids=["negative-limit", "negative-offset", "bool-limit"]
)
def test_a_bad_page_of_the_queue_is_refused_by_name(client: Client, limit: int, offset: int) -> None:
    with pytest.raises(UsageError, match=r"(limit|offset) must be a whole number >= 0"):
        client.queue(limit=limit, offset=offset)
