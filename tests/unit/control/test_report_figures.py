"""`crossrail report --out`: Markdown, HTML and PNG figures drawn from a simulated fleet's event log; the
figures decode, have their stated size and are not blank. matplotlib is imported once, by the shared fixture."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from crossrail.cli import app
from crossrail.client import Client
from crossrail.control.reports.figures import SIZE_PX, Figure, figures
from crossrail.core import Event, ManualClock
from crossrail.metrics import RunFacts, compare, fold_runs
from crossrail.sim.checkpointing import CheckpointModel
from crossrail.sim.failures import FailureSpec
from crossrail.sim.simulation import Simulation
from crossrail.sim.workload import SimJob
from crossrail.spec import load_fleet

FLEET = """\
apiVersion: crossrail/v1
kind: Fleet
metadata: {name: report-fleet}
spec:
  pools:
    - {name: tpu-a, accelerator: tpu, chip_type: tpu-v5p, chips: 8, chips_per_host: 4, cost_per_chip_hour: 4.0}
    - {name: h100, accelerator: gpu, chip_type: h100, chips: 8, chips_per_host: 8, cost_per_chip_hour: 3.0}
  queues:
    - {name: pretraining, stage: pretraining, quota: {tpu-a: 8, h100: 8}}
    - {name: eval, stage: eval, quota: {tpu-a: 8, h100: 8}}
"""
START = 1_767_225_600.0  # the workspace clock's 2026-01-01T00:00:00Z: the simulated log is moved there


def simulated_events(tmp: Path) -> list[Event]:
    """A day of work on two pools with host failures: queue waits, retries and lost work to draw."""
    path = tmp / "fleet.yaml"
    path.write_text(FLEET)
    jobs = [
        SimJob(
            f"job-{i}",
            "pretraining" if i % 3 else "eval",
            4,
            work_s=1800.0 + 600 * (i % 4),
            submit_s=300.0 * i,
            team="foundation" if i % 2 else "alignment",
        )
        for i in range(30)
    ]
    failures = FailureSpec(host_mtbf_s=4 * 3600.0)
    checkpoint = CheckpointModel(cost_s=60.0)  # checkpoints cost time, so a failure loses the work since the last
    sim = Simulation(load_fleet(path), jobs, failures=failures, checkpoint=checkpoint, seed=3, record_events=True)
    sim.run()
    assert sim.events is not None
    return [Event(e.type, e.ts + START, e.run, e.attempt, e.data) for e in sim.events]


@pytest.fixture(scope="module")
def events(tmp_path_factory: pytest.TempPathFactory) -> list[Event]:
    return simulated_events(tmp_path_factory.mktemp("sim"))


@pytest.fixture(scope="module")
def runs(events: list[Event]) -> list[RunFacts]:
    return fold_runs(events, now=max(e.ts for e in events))


@pytest.fixture(scope="module")
def drawn(runs: list[RunFacts]) -> dict[str, Figure]:
    """Every figure, drawn once for the module (the first draw pays for importing matplotlib)."""
    before = [r for r in runs if r.dimension("pool") == "h100"]
    after = [r for r in runs if r.dimension("pool") == "tpu-a"]
    verdict = compare(before, after, resamples=300)
    return {f.name: f for f in figures(runs, verdict, "pool=h100 vs pool=tpu-a")}


def pixels(png: bytes) -> Any:
    from matplotlib.image import imread

    return imread(io.BytesIO(png), format="png")


@pytest.mark.parametrize("name", ["queue-wait-cdf", "cost-by-pool", "goodput-over-time", "compare"])
def test_each_figure_decodes_at_its_size_and_is_not_blank(drawn: dict[str, Figure], name: str) -> None:
    fig = drawn[name]
    assert fig.png is not None, fig.note
    image = pixels(fig.png)
    height, width = image.shape[:2]
    rgb = (image[..., :3] * 255).astype(np.uint32)
    colours = np.unique(rgb[..., 0] << 16 | rgb[..., 1] << 8 | rgb[..., 2])

    assert (width, height) == SIZE_PX
    assert float(image[..., :3].std()) > 0.05
    assert len(colours) > 20


def test_figures_say_why_they_are_not_drawn_when_the_log_has_nothing_to_show() -> None:
    waiting = fold_runs([Event("submitted", START, "r1", None, {"stage": "eval"})], now=START + 60)  # type: ignore[arg-type]

    shown = figures(waiting)

    assert [f.png for f in shown] == [None, None, None, None, None]
    assert shown[0].note == "no run has started yet, so no queue wait is known"
    assert shown[3].note.startswith("no before/after given: pass --before SEL --after SEL")


@pytest.mark.slow
def test_report_out_writes_markdown_html_and_the_figures_from_the_workspace_log(
    checkout: Path, clock: ManualClock, events: list[Event]
) -> None:
    client = Client(cwd=checkout, clock=clock)
    client.service.store.append_events(events)
    client.close()
    out = checkout / "report"

    result = CliRunner().invoke(
        app,
        [
            "report",
            "--home",
            str(checkout / ".crossrail"),
            "--out",
            str(out),
            "--before",
            "pool=h100",
            "--after",
            "pool=tpu-a",
            "--json",
        ],
        catch_exceptions=False,
    )

    assert result.exit_code == 0, result.output
    listed = json.loads(result.output)
    assert sorted(listed["figures"]) == ["compare", "cost-by-pool", "goodput-over-time", "queue-wait-cdf"]
    markdown = (out / "report.md").read_text()
    page = (out / "report.html").read_text()
    for name in listed["figures"]:
        assert pixels((out / f"{name}.png").read_bytes()).shape[:2] == SIZE_PX[::-1]
        assert f"]({name}.png)" in markdown
        assert f'<img src="{name}.png"' in page
    assert "| alignment | eval | h100 |" in markdown  # the cost table, by team, stage and pool
    assert "## Verdict" in markdown


@pytest.mark.slow
def test_the_report_prices_each_team_stage_and_pool_and_shows_each_budgets_spend(
    checkout: Path, clock: ManualClock, events: list[Event]
) -> None:
    from crossrail.control.reports import report_doc
    from crossrail.metrics.usage import by_team

    fleet_path = checkout / ".crossrail" / "fleet.yaml"
    budgets = "  budgets:\n    - {team: foundation, amount: 10, period: month, hold: true}\n"
    fleet_path.write_text(fleet_path.read_text() + budgets)
    client = Client(cwd=checkout, clock=clock)
    client.service.store.append_events(events)
    clock.set(max(e.ts for e in events))
    try:
        doc = report_doc.build(client.service.store, client.fleet, clock.now(), since=START + 3600)
    finally:
        client.close()
    markdown = report_doc.markdown(doc)

    spent = by_team(doc.usage)["foundation"][1]
    (budget,) = doc.budgets
    assert spent > 10
    assert (budget["team"], budget["state"]) == ("foundation", "held")
    assert budget["spent"] > spent  # its month began before the report's window
    assert f"| foundation | month from 2026-01-01 00:00 UTC | {budget['spent']:,.2f} | 10.00 | held |" in markdown
    assert "Attempts from 2026-01-01 01:00 UTC to " in markdown


@pytest.mark.slow
def test_report_compares_simulation_results_named_as_compare_takes_them(checkout: Path, runs: list[RunFacts]) -> None:
    """`--before sim:FILE --after sim:FILE,filters`: the same selections, and the same verdict, as `compare`."""
    for name, pool in (("before", "h100"), ("after", "tpu-a")):
        records = [r.as_dict() for r in runs if r.dimension("pool") == pool]
        (checkout / f"{name}.json").write_text(json.dumps({"records": records}))
    sels = [f"sim:{checkout / 'before.json'}", f"sim:{checkout / 'after.json'},stage=pretraining"]
    home, out = ["--home", str(checkout / ".crossrail")], checkout / "report"

    written = CliRunner().invoke(
        app, ["report", *home, "--out", str(out), "--before", sels[0], "--after", sels[1]], catch_exceptions=False
    )
    compared = CliRunner().invoke(app, ["compare", *home, "--before", sels[0], "--after", sels[1], "--json"])

    assert written.exit_code == 0, written.output
    assert compared.exit_code == 0, compared.output
    sentence = json.loads(compared.output)["verdict"]
    pretraining = [r for r in runs if r.dimension("pool") == "tpu-a" and r.stage == "pretraining"]
    assert f"({len(pretraining)} runs)" in (out / "report.md").read_text()
    assert sentence in written.output
    assert sentence in (out / "report.md").read_text()
    assert (out / "compare.png").exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param(["--since", "2026-11-01"], "--since, --before and --after shape the written report", id="no-out"),
        pytest.param(["--out", "OUT", "--since", "yesterday"], "--since 'yesterday' is not a date", id="since"),
        pytest.param(["--out", "OUT", "--before", "pool=h100"], "give both --before and --after", id="one-side"),
        pytest.param(
            ["--out", "OUT", "--before", "color=red", "--after", "pool=h100"], "unknown key 'color'", id="key"
        ),
        pytest.param(
            ["--out", "OUT", "--before", "sim:missing.json", "--after", "pool=h100"],
            "--before sim:missing.json",
            id="sim-file",
        ),
    ],
)
@pytest.mark.slow
def test_report_refuses_bad_options_and_writes_nothing(checkout: Path, args: list[str], message: str) -> None:
    out = checkout / "out"
    argv = ["report", "--home", str(checkout / ".crossrail"), *[str(out) if a == "OUT" else a for a in args]]

    result = CliRunner().invoke(app, argv)

    assert result.exit_code != 0
    assert message in result.output
    assert not out.exists()


@pytest.mark.slow
def test_runs_that_met_their_targets_add_the_cost_to_target_bars(drawn: dict[str, Figure]) -> None:
    from tests.unit.metrics.stories import Story, tell

    target = {"metric": "eval_loss", "op": "<=", "value": 2.0}
    stories = []
    for i, (pool, price) in enumerate([("tpu-a", 4.0), ("h100", 3.0), ("tpu-a", 4.0)]):
        s = Story(f"post-{i}", stage="post_training", chips=4, target=target).wait(60).start(pool, price=price)
        stories.append(s.wait(1800).metric("eval_loss", 1.9).wait(1800).succeed())
    runs = fold_runs(tell(*stories), [x for s in stories for x in s.samples], now=max(s.now for s in stories))

    with_target = next(f for f in figures(runs) if f.name == "cost-by-pool")

    assert with_target.png is not None
    assert "No run met a target yet" not in with_target.note
    assert "No run met a target yet" in drawn["cost-by-pool"].note  # the simulated runs name no target
    assert with_target.png != drawn["cost-by-pool"].png
