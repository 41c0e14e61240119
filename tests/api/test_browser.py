"""A real headless Chromium (Debian's, driven by playwright) opens every dashboard page over the demo workspace,
and walks what a lead works from over a workspace told by hand (tests/api/dashboard_world.py): filters, a
sweep, a comparison of runs' curves, quotas and the RL backlog.

Screenshots are kept under the test's temporary directory (`pytest --basetemp DIR` keeps them where you say);
the test prints where.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import serving

from crossrail.core import ManualClock

from .conftest import PENDING
from .dashboard_world import NOW, SCAN, Told, tell

pytestmark = pytest.mark.browser

CHROMIUM = os.environ.get("CROSSRAIL_CHROMIUM", "/usr/bin/chromium")
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


# Skipped before the session's demo workspace is built for it.
if not (Path(CHROMIUM).is_file() or shutil.which(CHROMIUM)):
    pytest.skip(f"no Chromium at {CHROMIUM} (.ci/run installs Debian's chromium package)", allow_module_level=True)
sync_api = pytest.importorskip(
    "playwright.sync_api", reason="the browser extra is not installed: pip install -e '.[browser]'"
)


@pytest.fixture(scope="module")
def browser() -> Any:
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        yield b
        b.close()


def test_every_dashboard_page_renders_in_chromium_with_no_console_errors_or_failed_requests(
    browser: Any, demo_server: str, tmp_path: Path
) -> None:
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    problems: list[str] = []
    page.on("console", lambda m: m.type == "error" and problems.append(f"console: {m.text}"))
    page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
    page.on("requestfailed", lambda r: problems.append(f"request failed: {r.url} {r.failure}"))
    page.on("response", lambda r: r.status >= 400 and problems.append(f"HTTP {r.status}: {r.url}"))
    outside: list[str] = []
    page.on("request", lambda r: r.url.startswith(demo_server) or outside.append(r.url))

    def visit(path: str, name: str) -> None:
        page.goto(f"{demo_server}{path}", wait_until="load")
        page.screenshot(path=str(tmp_path / f"{name}.png"), full_page=True)
        shown = page.locator("body").inner_text()
        blank = re.findall(r".{0,30}\b(?:None|nan|NaN)\b.{0,30}", shown)
        assert not blank, f"{path} shows {blank}"

    # Runs: every run of the demo, the one left queued, and a link into each.
    visit("/", "runs")
    assert page.url == f"{demo_server}/ui/runs"
    for run in ["pretrain-small-1", "posttrain-042-1", "eval-smoke-1", "sweep-lr-1-1", f"{PENDING}-1"]:
        assert page.locator(f'tr[data-run="{run}"]').count() == 1, run
    assert page.locator('tr[data-run="pretrain-small-1"] .state').inner_text() == "succeeded"

    # A run: reached by its link; the killed attempt, the retry's move between pools, the loss curve.
    page.click('a[href="/ui/runs/pretrain-small-1"]')
    page.wait_for_load_state("load")
    page.screenshot(path=str(tmp_path / "run.png"), full_page=True)
    assert page.locator('li.attempt[data-attempt="1"]').get_attribute("data-pool") == "tpu-v5p"
    assert page.locator('li.attempt[data-attempt="2"]').get_attribute("data-pool") == "h100"
    assert page.locator("li.attempt .move").inner_text() == "moved from tpu-v5p to h100"
    curve = page.locator("svg#loss-curve")
    assert curve.is_visible()
    box = curve.bounding_box()
    assert box["width"] > 300
    assert box["height"] > 100
    assert page.locator("svg#loss-curve polyline.loss").count() == 2

    # The queue, the lineage edge from pretraining's checkpoint to post-training, the fleet, the metrics.
    visit("/ui/queues", "queues")
    assert page.locator(f'table.pending tr[data-run="{PENDING}-1"]').count() == 1
    visit("/ui/lineage", "lineage")
    edge = page.locator("li#edge-pretrain-small-1-posttrain-042-1")
    assert edge.inner_text() == "pretrain-small-1 checkpoint step 60 → posttrain-042-1"
    edge.locator('a[href="/ui/runs/posttrain-042-1"]').click()
    page.wait_for_load_state("load")
    assert page.locator("h1").inner_text() == "posttrain-042-1"
    visit("/ui/fleet", "fleet")
    assert page.locator('tr[data-pool="tpu-v5p"]').count() == 1
    visit("/ui/report", "metrics")
    assert page.locator('tr[data-group="pretraining/h100"]').count() == 1

    # Every run's page, then the API docs (Swagger UI from this server: it draws with no network).
    for run in sorted(visited_runs(page, demo_server)):
        visit(f"/ui/runs/{run}", f"run-{run}")
    visit("/v1/docs", "api-docs")
    page.wait_for_selector(".swagger-ui .opblock", timeout=30_000)
    assert page.locator(".swagger-ui .opblock").count() > 20

    # The runs page refreshes itself in place without errors.
    visit("/ui/runs", "runs-again")
    with page.expect_response(lambda r: r.url == f"{demo_server}/ui/runs", timeout=15_000):
        pass
    page.close()
    print(f"screenshots: {tmp_path}")
    assert problems == []
    assert outside == []
    assert {"fleet.png", "lineage.png", "metrics.png", "queues.png", "run.png", "runs.png", "api-docs.png"} <= {
        p.name for p in tmp_path.glob("*.png")
    }
    assert len(list(tmp_path.glob("run-*.png"))) >= 5


def visited_runs(page: Any, server: str) -> set[str]:
    """Every run the runs page lists."""
    page.goto(f"{server}/ui/runs", wait_until="load")
    return {str(r.get_attribute("data-run")) for r in page.locator("tr[data-run]").all()}


def test_refused_dashboard_pages_are_pages_in_chromium(browser: Any, demo_server: str) -> None:
    page = browser.new_page()
    outside: list[str] = []
    page.on("request", lambda r: r.url.startswith(demo_server) or outside.append(r.url))
    for path, status, words in [
        ("/ui/runs/no-such-run", 404, "no run or experiment named 'no-such-run'"),
        ("/ui/nowhere", 404, "no page /ui/nowhere on this server"),
        ("/ui/report?before=zzz&after=yyy", 400, "is not KEY=VALUE"),
    ]:
        answer = page.goto(f"{demo_server}{path}", wait_until="load")
        assert answer is not None
        assert answer.status == status
        assert words in page.locator("p.refused").inner_text()
        assert page.locator('nav a[href="/ui/runs"]').count() == 1  # the dashboard's own page, with its menu
    page.close()
    assert outside == []


@pytest.fixture(scope="module")
def told_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Told, str]]:
    """The told workspace served on a socket, its clock at NOW; yields it and the base URL."""
    from crossrail.api import create_app

    told = tell(tmp_path_factory.mktemp("told"))
    with serving(create_app(told.home, clock=ManualClock(NOW))) as url:
        yield told, url


@pytest.mark.slow
def test_a_lead_filters_runs_compares_their_curves_and_reads_a_sweep_in_chromium(
    browser: Any, told_server: tuple[Told, str], tmp_path: Path
) -> None:
    told, server = told_server
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    problems: list[str] = []
    page.on("console", lambda m: m.type == "error" and problems.append(f"console: {m.text}"))
    page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
    page.on("requestfailed", lambda r: problems.append(f"request failed: {r.url} {r.failure}"))
    page.on("response", lambda r: r.status >= 400 and problems.append(f"HTTP {r.status}: {r.url}"))
    outside: list[str] = []
    page.on("request", lambda r: r.url.startswith(server) or outside.append(r.url))

    def listed() -> set[str]:
        return {str(r.get_attribute("data-run")) for r in page.locator("#runs tr[data-run]").all()}

    # Runs, filtered by the form: a stage, then a search on top of it.
    page.goto(f"{server}/ui/runs?token={told.admin}", wait_until="load")
    assert listed() == set(told.runs.values())
    page.select_option('form#filters select[name="stage"]', "pretraining")
    page.click('form#filters button[type="submit"]')
    page.wait_for_load_state("load")
    assert "stage=pretraining" in page.url
    assert listed() == {told.runs["done"], told.runs["other"]}
    page.fill('form#filters input[name="q"]', "theirs")
    page.click('form#filters button[type="submit"]')
    page.wait_for_load_state("load")
    assert listed() == {told.runs["other"]}
    page.screenshot(path=str(tmp_path / "runs-filtered.png"), full_page=True)

    # Two runs ticked and compared: one line each on one chart, drawn across it.
    page.goto(f"{server}/ui/runs", wait_until="load")
    running = page.locator(f'tr[data-run="{told.runs["running"]}"]')
    assert running.locator("td.progress").inner_text().startswith("30/100")
    for key in ("running", "done"):
        page.check(f'#runs input[type="checkbox"][value="{told.runs[key]}"]')
    page.click('form#compare button[type="submit"]')
    page.wait_for_load_state("load")
    chart = page.locator("svg#compare-chart")
    assert chart.is_visible()
    lines = chart.locator("polyline.series")
    assert lines.count() == 2
    for i in range(2):
        box = lines.nth(i).bounding_box()
        assert box is not None
        assert box["width"] > 20  # a line across steps, not a dot
    page.screenshot(path=str(tmp_path / "compare.png"), full_page=True)

    # The sweep, reached from a member's row: its metric against each parameter, members ranked.
    page.goto(f"{server}/ui/runs?sweep={told.sweep}", wait_until="load")
    assert listed() == {told.runs[k] for k in SCAN}
    page.click(f'#runs tr[data-run="{told.runs["scan-2-low"]}"] a[href="/ui/sweeps/{told.sweep}"]')
    page.wait_for_load_state("load")
    assert page.locator("figure.param").count() == 2
    for figure in page.locator("figure.param").all():
        assert figure.locator("circle.point").count() == len(told.losses)
        assert figure.locator("svg").is_visible()
    first = page.locator("table.members tbody tr").first
    assert first.get_attribute("data-run") == min(told.losses, key=lambda r: told.losses[r])
    page.screenshot(path=str(tmp_path / "sweep.png"), full_page=True)

    # Quotas used against nominal, the RL backlog, and a run whose load fell back to an older checkpoint.
    page.goto(f"{server}/ui/queues", wait_until="load")
    assert page.locator('table.quota[data-queue="post-training"] tr[data-pool="tpu-v5p"] td.used').count() == 1
    assert page.locator(f'#rl-backlog tr[data-run="{told.runs["rl"]}"] svg.spark polyline').is_visible()
    page.screenshot(path=str(tmp_path / "queues.png"), full_page=True)
    page.goto(f"{server}/ui/runs/{told.runs['running']}", wait_until="load")
    assert page.locator("dd.fallback").is_visible()
    page.close()
    print(f"screenshots: {tmp_path}")
    assert problems == []
    assert outside == []
