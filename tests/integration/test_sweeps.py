"""Sweeps through the agent: a 3 x 2 grid of real bigram runs submitted, run, ranked, fitted and cancelled."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import pytest
from matplotlib.image import imread
from tests.conftest import api_app, asgi_client
from tests.conftest import drive as drive_agent
from typer.testing import CliRunner

from crossrail.cli import app
from crossrail.client import Client
from crossrail.control.agent.loop import AgentConfig
from crossrail.errors import ForbiddenError, NotFoundError, SpecError

FAST = AgentConfig(poll_s=0.1, fallback_wait_s=0.0, stop_grace_s=5.0, heartbeat_s=1.0)
drive = partial(drive_agent, config=FAST)
SETS = [
    "spec.command=[python, -m, crossrail.workloads.bigram]",
    "spec.args=[--steps, '12', --checkpoint-every-steps, '12', --step-sleep, '0', --lr, '0.01']",
]
LR = "spec.args.7"  # the value after --lr
GRID = [f"{LR}=0.003,0.03,0.3", "spec.resources.chips=1,2"]
TERMINAL = ("succeeded", "failed", "cancelled")


@pytest.fixture
def client(checkout: Path) -> Iterator[Client]:
    with Client(cwd=checkout) as c:
        yield c


def _run_count(c: Client) -> int:
    return len(c.service.store.list_runs())


@pytest.mark.slow
def test_a_3x2_sweep_is_submitted_run_ranked_fitted_resubmitted_as_nothing_new_and_a_draw_cancelled(
    client: Client, experiments: Path, tmp_path: Path
) -> None:
    exp = experiments / "pretrain-small.yaml"
    submitted = client.sweep_submit(exp, grid=GRID, sets=SETS)
    sid = submitted["id"]
    assert submitted["created"] is True
    assert len(submitted["runs"]) == 6
    ids = [r["id"] for r in submitted["runs"]]
    assert {r["params"][LR] for r in submitted["runs"]} == {0.003, 0.03, 0.3}

    store = client.service.store
    drive(client, lambda: all(store.get_run(r).state in TERMINAL for r in ids), timeout_s=120)

    shown = client.sweep_show(sid)  # by loss, lower first
    assert shown["parameters"] == [LR, "spec.resources.chips"]
    assert shown["states"] == {"succeeded": 6}
    members = shown["members"]
    assert [m["rank"] for m in members] == [1, 2, 3, 4, 5, 6]
    losses = [m["metric"] for m in members]
    assert losses == sorted(losses)
    assert {m["run"] for m in members} == set(ids)
    assert {(m["params"][LR], m["params"]["spec.resources.chips"]) for m in members} == {
        (lr, n) for lr in (0.003, 0.03, 0.3) for n in (1, 2)
    }
    assert all(store.get_run(m["run"]).chips == m["params"]["spec.resources.chips"] for m in members)
    assert members[0]["params"][LR] != 0.003  # 12 steps at the smallest rate learn least
    fastest = client.sweep_show(sid, metric="tokens_per_second")["members"]
    assert [m["metric"] for m in fastest] == sorted((m["metric"] for m in fastest), reverse=True)

    fitted = client.fit(sid, target_tokens=1e6)
    assert fitted["pools"]
    for pool in fitted["pools"]:
        f = pool["fits"]["amdahl"]
        base, serial = f["params"]["base"], f["params"]["serial"]
        for p in pool["predictions"]:
            n = p["chips"]
            by_hand = base * n / (1 + serial * (n - 1))
            assert p["amdahl"]["throughput"] == pytest.approx(by_hand)
            assert p["amdahl"]["time_s"] == pytest.approx(1e6 / by_hand)
            assert p["amdahl"]["chip_hours"] == pytest.approx(n * 1e6 / by_hand / 3600)

    png = tmp_path / "fit.png"
    home = ["--home", str(client.workspace.root)]
    cli = CliRunner().invoke(app, ["fit", sid, "--target-tokens", "1e6", "--out", str(png), "--json", *home])
    assert cli.exit_code == 0, cli.output
    assert json.loads(cli.stdout) == fitted | {"figure": str(png)}
    image = imread(io.BytesIO(png.read_bytes()), format="png")
    assert image.shape[:2] == (450, 800)
    assert float(image[..., :3].std()) > 0.05  # points and curves drawn, not a blank canvas

    count = _run_count(client)
    again = client.sweep_submit(exp, grid=GRID, sets=SETS)
    assert (again["id"], again["created"]) == (sid, False)
    assert [r["id"] for r in again["runs"]] == ids
    assert _run_count(client) == count

    drawn = client.sweep_submit(exp, grid=GRID, sets=SETS, random=4, seed=1)
    redrawn = client.sweep_submit(exp, grid=GRID, sets=SETS, random=4, seed=1)
    assert drawn["id"] == redrawn["id"] != sid
    assert (drawn["created"], redrawn["created"]) == (True, False)
    assert [r["id"] for r in redrawn["runs"]] == [r["id"] for r in drawn["runs"]]
    assert [r["params"] for r in redrawn["runs"]] == [r["params"] for r in drawn["runs"]]
    assert _run_count(client) == count + 4

    cancelled = client.sweep_cancel(drawn["id"])
    assert sorted(r["id"] for r in cancelled["cancelled"]) == sorted(r["id"] for r in drawn["runs"])
    assert client.sweep_show(drawn["id"])["states"] == {"cancelled": 4}
    assert client.sweep_cancel(sid)["cancelled"] == []  # the first sweep had ended: nothing to cancel


def test_a_bad_key_or_value_anywhere_in_the_grid_submits_nothing(client: Client, experiments: Path) -> None:
    exp = experiments / "pretrain-small.yaml"
    for grid in (["spec.resources.chipz=1,2"], ["spec.resources.chips=1,2,lots"]):
        with pytest.raises(SpecError) as caught:
            client.sweep_submit(exp, grid=grid)
        (problem,) = caught.value.problems  # said once, not once per point
        assert "--grid" in problem.message
    home = ["--home", str(client.workspace.root)]
    cli = CliRunner().invoke(app, ["sweep", "submit", str(exp), "--grid", "spec.resources.chips", *home])
    assert cli.exit_code == 2
    assert "expected KEY=V1,V2" in cli.output
    assert _run_count(client) == 0


@pytest.mark.slow
def test_a_sweep_of_another_team_is_a_sweep_that_does_not_exist_over_the_api(
    client: Client, experiments: Path, checkout: Path
) -> None:
    exp = experiments / "pretrain-small.yaml"
    sid = client.sweep_submit(exp, grid=["spec.priority=low,high"])["id"]  # team foundation's
    own = client.token_create(team="foundation", role="viewer")["token"]
    shared = client.token_create(team="alignment", role="submitter")["token"]  # foundation shares with it
    other = client.token_create(team="evals", role="submitter")["token"]
    with api_app(checkout / ".crossrail", require_auth=True) as app:
        seen = asgi_client(app, own).sweep_show(sid)
        assert seen == client.sweep_show(sid)  # the same object over HTTP as in this process
        with pytest.raises(NotFoundError, match="no sweep"):
            asgi_client(app, other).sweep_show(sid)
        with pytest.raises(NotFoundError, match="no sweep"):
            asgi_client(app, other).sweep_cancel(sid)
        assert len(asgi_client(app, shared).sweep_show(sid)["members"]) == 2
        with pytest.raises(ForbiddenError, match="may not cancel"):
            asgi_client(app, shared).sweep_cancel(sid)
    assert {client.service.store.get_run(r["run"]).state for r in client.sweep_show(sid)["members"]} == {"queued"}
