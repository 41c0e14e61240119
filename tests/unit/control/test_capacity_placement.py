"""Spot and queued capacity priced into placement: a spot pool's interruptions (declared, or measured from
its `preempted` events once there are enough) and a flex-start pool's provisioning wait, each named with its
source in `place --explain`."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from crossrail.cli import app
from crossrail.client import Client
from crossrail.control.placing import MIN_PREEMPTIONS, measured_interruptions
from crossrail.core import Event, EventType
from crossrail.errors import SpecError

H100 = "      relative_speed: 0.9\n"
TPU = "      relative_speed: 1.0\n"


def fleet_edit(checkout: Path, old: str, new: str) -> None:
    path = checkout / ".crossrail" / "fleet.yaml"
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new))


def spot_and_flex(checkout: Path, rate: float = 0.05) -> None:
    """h100 becomes spot with a declared interruption rate; tpu-v5p flex-start with a 15 minute wait."""
    fleet_edit(
        checkout,
        H100,
        H100 + f"      kubernetes: {{spot: true}}\n      interruptions_per_chip_hour: {rate}\n      restore: 5m\n",
    )
    fleet_edit(checkout, TPU, TPU + "      provisioning: flex-start\n      provisioning_wait: 15m\n")


def preempted_on(client: Client, pool: str, count: int, hours_each: float = 1.0) -> None:
    """`count` attempts of 4 chips on `pool`, each preempted after `hours_each` hours."""
    now = client.clock.now()
    events = []
    for i in range(count):
        start = now - (i + 1) * 10 * 3600
        run = f"spot-run-{i}"
        events.append(Event(EventType.STARTED, start, run, 1, {"pool": pool, "chips": 4}))
        events.append(Event(EventType.PREEMPTED, start + hours_each * 3600, run, 1, {"pool": pool}))
    client.service.store.append_events(sorted(events, key=lambda e: e.ts))


def test_place_prices_spot_interruptions_and_the_flex_start_wait_with_their_sources(
    client: Client, experiments: Path, checkout: Path
) -> None:
    spot_and_flex(checkout)

    out = client.place(experiments / "pretrain-small.yaml")
    by_pool = {c["pool"]: c for c in out["candidates"]}

    spot, flex = by_pool["h100"], by_pool["tpu-v5p"]
    assert spot["terms"] == [
        {
            "term": "spot interruptions",
            "value": "0.05/chip-hour, restore 5m",
            "source": "declared (interruptions_per_chip_hour)",
        }
    ]
    # 0.05 x 4 chips x 1200/0.9 s = 0.074 interruptions, each losing half of `checkpoint.every` (2m) and 5m restore
    assert spot["recovery_s"] == pytest.approx(0.05 * 4 * (1200 / 0.9) / 3600 * (60 + 300), abs=0.1)
    assert flex["terms"] == [
        {"term": "flex-start", "value": "provisioning wait 15m", "source": "declared (provisioning_wait)"}
    ]
    assert flex["provisioning_s"] == 900.0
    assert flex["total_s"] == pytest.approx(flex["wait_s"] + 900.0 + flex["run_s"] + flex["recovery_s"], abs=0.2)


def test_place_explain_prints_each_capacity_term_and_its_source(
    checkout: Path, experiments: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spot_and_flex(checkout)
    monkeypatch.chdir(checkout)
    monkeypatch.setenv("COLUMNS", "200")

    result = CliRunner().invoke(app, ["place", str(experiments / "pretrain-small.yaml"), "--explain"])

    assert result.exit_code == 0, result.output
    lines = [line.strip() for line in result.output.splitlines()]
    assert "h100: spot interruptions 0.05/chip-hour, restore 5m (declared (interruptions_per_chip_hour))" in lines
    assert "tpu-v5p: flex-start provisioning wait 15m (declared (provisioning_wait))" in lines


def test_five_preempted_events_replace_the_declared_rate_and_fewer_do_not(
    client: Client, experiments: Path, checkout: Path
) -> None:
    spot_and_flex(checkout)
    preempted_on(client, "h100", MIN_PREEMPTIONS - 1)
    assert measured_interruptions(client.service.store, ["h100"]) == {}

    preempted_on(client, "h100", 1, hours_each=0.5)  # the fifth: 5 preemptions over 4 x 4.5 = 18 chip-hours
    rate, count, hours = measured_interruptions(client.service.store, ["h100"])["h100"]
    assert (count, hours) == (5, pytest.approx(18.0))
    assert rate == pytest.approx(5 / 18)

    out = client.place(experiments / "pretrain-small.yaml")
    (term,) = next(c for c in out["candidates"] if c["pool"] == "h100")["terms"]
    assert term["source"] == "measured (5 preempted events over 18 chip-hours)"
    assert term["value"].startswith("0.2778/chip-hour")


def test_a_measured_high_preemption_rate_moves_the_run_off_the_spot_pool(
    client: Client, experiments: Path, checkout: Path
) -> None:
    fleet_edit(checkout, "      relative_speed: 0.9\n", "      relative_speed: 2.0\n      kubernetes: {spot: true}\n")
    sets = ["spec.checkpoint.every=30m"]  # an interruption loses 15 minutes of work on average
    before = client.place(experiments / "pretrain-small.yaml", sets=sets)
    assert before["pool"] == "h100"  # twice as fast and cheaper per chip: leaves the preferred TPU

    preempted_on(client, "h100", 8, hours_each=1 / 16)  # 8 preemptions in 2 chip-hours: 4 per chip-hour
    after = client.place(experiments / "pretrain-small.yaml", sets=sets)

    assert after["pool"] == "tpu-v5p"
    spot = next(c for c in after["candidates"] if c["pool"] == "h100")
    assert spot["recovery_s"] > spot["run_s"]


def test_a_spot_notice_on_a_pool_that_is_not_spot_is_refused(client: Client, experiments: Path, checkout: Path) -> None:
    fleet_edit(checkout, TPU, TPU + "      preemption_notice: 30s\n")
    with pytest.raises(SpecError, match="preemption_notice"):
        client.place(experiments / "pretrain-small.yaml")
