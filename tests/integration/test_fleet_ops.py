"""Changing the fleet of a live workspace: drain, undrain, apply, reserve; each capacity change is an event."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from tests.integration.test_agent import FAST, drive

from crossrail.client import Client
from crossrail.errors import CrossrailError


@pytest.fixture
def live(checkout: Path) -> Client:
    return Client(cwd=checkout)


def capacity_events(client: Client) -> list[dict[str, object]]:
    return [e.data for e in client.service.store.events(types=["capacity_changed"])]


def test_a_drained_pool_takes_no_new_work_until_it_is_undrained(live: Client, experiments: Path) -> None:
    out = live.drain("h100")
    assert out["changes"] == ["h100: drained: takes no new work"]
    assert capacity_events(live)[-1] == {
        "pool": "h100",
        "chips_before": 8,
        "chips_after": 0,
        "reason": "drained by user: h100: drained: takes no new work",
    }
    run = live.submit(
        experiments / "eval-smoke.yaml",
        sets=["spec.command=[python, -c, 'print(1)']", "spec.args=[]", "spec.accelerators={allow: [gpu]}"],
    )["run"]["id"]
    agent = live.agent(FAST)
    for _ in range(5):
        agent.reconcile()
    assert live.service.store.get_run(run).state == "queued"
    live.drain("h100", drained=False)
    drive(live, lambda: live.service.store.get_run(run).state == "succeeded")
    assert live.show(run)["attempts"][0]["pool"] == "h100"


def test_applying_a_bigger_pool_records_the_capacity_change(live: Client, checkout: Path) -> None:
    fleet = (checkout / ".crossrail" / "fleet.yaml").read_text()
    bigger = checkout / "bigger.yaml"
    bigger.write_text(
        fleet.replace(
            "chip_type: h100\n      chips: 8\n      chips_per_host: 8",
            "chip_type: h100\n      chips: 16\n      chips_per_host: 8",
        )
    )
    changes = live.fleet_apply(bigger)["changes"]
    assert any(c.startswith("h100:") for c in changes)
    assert capacity_events(live)[-1]["chips_before"] == 8
    assert capacity_events(live)[-1]["chips_after"] == 16
    assert {p["name"]: p["capacity"] for p in live.fleet_show()["pools"]}["h100"] == 16


def test_a_reservation_is_listed_and_one_the_pool_cannot_hold_changes_nothing(live: Client, checkout: Path) -> None:
    live.reserve(
        "tpu-v5p", chips=4, start="2030-01-01T00:00:00+00:00", duration="14d", team="foundation", name="big-run"
    )
    (held,) = live.reservations()["reservations"]
    assert (held["name"], held["pool"], held["chips"]) == ("big-run", "tpu-v5p", 4)
    before = (checkout / ".crossrail" / "fleet.yaml").read_text()
    with pytest.raises(CrossrailError, match="overlapping"):
        live.reserve("tpu-v5p", chips=8, start="2030-01-02T00:00:00+00:00", duration="1d")
    assert (checkout / ".crossrail" / "fleet.yaml").read_text() == before
    with pytest.raises(CrossrailError, match="time zone"):
        live.reserve("tpu-v5p", chips=4, start="2030-01-02T00:00:00", duration="1d")


@pytest.mark.slow
def test_the_fleet_commands_speak_json(checkout: Path) -> None:
    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "crossrail.cli", *args],
            cwd=checkout,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    shown = json.loads(cli("fleet", "show", "--json").stdout)
    assert shown["apiVersion"] == "crossrail/v1"
    assert {p["name"] for p in shown["pools"]} == {"tpu-v5p", "h100"}
    assert cli("fleet", "drain", "nope").returncode == 2
    assert cli("reserve", "h100", "--chips", "8", "--start", "now", "--duration", "1h").returncode == 0
    listed = json.loads(cli("reservations", "--json").stdout)
    assert listed["reservations"][0]["pool"] == "h100"


def test_draining_a_misspelt_pool_names_the_close_one_and_changes_nothing(live: Client, checkout: Path) -> None:
    fleet_yaml = checkout / ".crossrail" / "fleet.yaml"
    before = fleet_yaml.read_text()
    with pytest.raises(CrossrailError, match="no pool 'h1000' in the fleet; did you mean 'h100'"):
        live.drain("h1000")
    with pytest.raises(CrossrailError, match="no pool 'zz' in the fleet; pools: tpu-v5p, h100"):
        live.drain("zz")
    assert fleet_yaml.read_text() == before
    assert capacity_events(live) == []


def test_drain_and_reserve_edit_fleet_yaml_in_place_keeping_its_comments(live: Client, checkout: Path) -> None:
    fleet_yaml = checkout / ".crossrail" / "fleet.yaml"
    before = fleet_yaml.read_text()
    assert before.startswith("# The local fleet")

    live.drain("h100")
    drained = fleet_yaml.read_text()
    added = [line for line in drained.splitlines() if line not in before.splitlines()]
    assert added == ["      drained: true"]
    assert drained.splitlines()[:2] == before.splitlines()[:2]  # the comments are still there

    live.drain("h100", drained=False)
    assert fleet_yaml.read_text() == before

    live.reserve("tpu-v5p", chips=4, start="now", duration="1h", team="research", name="hold")
    reserved = fleet_yaml.read_text()
    assert "Replace or extend with real pools" in reserved  # the header comment survives
    assert "name: hold" in reserved
    assert [line for line in before.splitlines() if line not in reserved.splitlines()] == []
