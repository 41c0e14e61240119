"""The dashboard's pages over the demo workspace, fetched from a real server: what each shows, and that they
load nothing from outside."""

from __future__ import annotations

import re
import urllib.error
import urllib.request
from collections.abc import Iterator
from html import unescape
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import api_app, in_process

from crossrail.client import Client
from crossrail.core import ManualClock, format_duration, format_money
from crossrail.store import Store

from .conftest import PENDING
from .dashboard_world import FELL_BACK, NOW, RUNNING, SCAN, Told, tell

PAGES = ["/ui/runs", "/ui/runs/pretrain-small-1", "/ui/queues", "/ui/lineage", "/ui/fleet", "/ui/report"]
DEMO_RUNS = ["pretrain-small-1", "posttrain-042-1", "eval-smoke-1", "sweep-lr-1-1", "sweep-lr-2-1"]


def get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=30) as resp:
        assert resp.status == 200
        assert resp.headers["Content-Type"].startswith("text/html")
        return str(resp.read().decode())


def text(html: str) -> str:
    return unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html)))


def test_the_root_leads_to_the_runs_page_which_lists_every_run_with_pool_progress_loss_cost_and_checkpoint(
    demo_server: str,
) -> None:
    html = get(f"{demo_server}/")
    for run in [*DEMO_RUNS, f"{PENDING}-1"]:
        assert f'href="/ui/runs/{run}"' in html
    row = re.search(r'<tr data-run="pretrain-small-1">(.*?)</tr>', html, re.S)
    assert row is not None
    cells = [text(c).strip() for c in re.findall(r"<td[^>]*>(.*?)</td>", row[1], re.S)]
    assert cells[1:8] == ["pretrain-small-1", "-", "pretraining", "foundation", "succeeded", "h100", "2"]
    assert cells[8] == "60/60"  # the last reported step of --steps 60, which its trainer said it trains to
    assert cells[9] == "-"  # ended: no ETA
    assert float(cells[10]) > 0  # the latest loss
    assert cells[11].startswith("$")  # what its two attempts cost
    assert cells[12] == "step 60"
    assert 'data-refresh="5"' in html


def test_a_run_page_shows_the_retry_moving_between_pools_why_each_attempt_was_placed_and_a_loss_curve(
    demo_server: str,
) -> None:
    html = get(f"{demo_server}/ui/runs/pretrain-small-1")
    page = text(html)
    assert "attempt 1 on tpu-v5p" in page
    assert "killed by signal 9" in page
    assert "attempt 2 on h100" in page
    assert "moved from tpu-v5p to h100" in page
    assert "placed: tpu preferred by the pretraining placement policy" in page
    assert "retry moved off tpu-v5p" in page
    assert "derived runs posttrain-042-1" in page
    curve = re.search(r'<svg id="loss-curve".*?</svg>', html, re.S)
    assert curve is not None
    lines = re.findall(r'<polyline class="loss attempt-\d" data-attempt="(\d)" points="([^"]+)"', curve[0])
    assert [a for a, _ in lines] == ["1", "2"]  # one line per attempt: the killed one and its resumed retry
    assert all(len(points.split()) >= 2 for _, points in lines)
    # The killed attempt's first checkpoint and the retry's last are listed with their state. Step 40 is written by
    # whichever attempt reached it first; the killed attempt's may be on disk before its report is in the store.
    assert re.search(r"<td>20</td><td>1</td><td>(committed|deleted|damaged)", html)
    assert re.search(r"<td>60</td><td>2</td><td>committed", html)  # the newest, written by the retry


def test_queues_show_the_pending_run_with_its_estimated_start_pool_and_reason(demo_server: str) -> None:
    page = text(get(f"{demo_server}/ui/queues"))
    assert re.search(rf"1 {PENDING}-1 low 4 \S+ in \S+ tpu-v5p fits on tpu-v5p now", page), page
    assert page.count("no pending runs") == 5  # every other queue of the fleet


def test_lineage_draws_dataset_run_checkpoint_and_derived_run(demo_server: str) -> None:
    html = get(f"{demo_server}/ui/lineage")
    edge = re.search(r'<li class="edge" id="edge-pretrain-small-1-posttrain-042-1">(.*?)</li>', html, re.S)
    assert edge is not None
    assert text(edge[1]).strip() == "pretrain-small-1 checkpoint step 60 → posttrain-042-1"
    assert 'id="edge-posttrain-042-1-eval-smoke-1"' in html
    assert "corpus.txt" in html
    assert "sft.jsonl" in html


def test_fleet_and_metrics_pages_show_pools_agents_quotas_and_each_stage_by_pool(
    demo_server: str, demo_workspace: Path
) -> None:
    html = get(f"{demo_server}/ui/fleet")
    agent = re.search(r'<tr data-agent="[0-9a-f]+">(.*?)</tr>', html, re.S)
    assert agent is not None
    assert text(agent[1]).strip().endswith("ago stopped")  # the demo's agent ran in its process, then stopped
    fleet = text(html)
    assert "tpu-v5p 8 0 8" in fleet
    assert "h100 8 0 8" in fleet
    assert "pretraining pretraining tpu-v5p: 8 h100: 4 1" in fleet
    report = get(f"{demo_server}/ui/report")
    # Where the post-training run goes depends on when the demo's kill freed its pool: read where each ran.
    store = Store.open(f"sqlite:///{demo_workspace / '.crossrail' / 'state.db'}", read_only=True)
    ran = {f"{store.get_run(r).stage}/{a.pool}" for r in DEMO_RUNS for a in store.attempts(r)}
    assert {"pretraining/h100", "experiment/h100"} <= ran
    for group in (*sorted(ran), "*/*"):
        assert f'data-group="{group}"' in report


def test_an_unknown_run_is_a_404_that_names_it(demo_server: str) -> None:
    with pytest.raises(urllib.error.HTTPError) as err:
        get(f"{demo_server}/ui/runs/no-such-run")
    assert err.value.code == 404
    assert "no-such-run" in err.value.read().decode()


def test_pages_load_nothing_from_outside_this_server(demo_server: str) -> None:
    for path in PAGES:
        html = get(f"{demo_server}{path}")
        refs = re.findall(r'(?:src|href)="([^"]*)"', html)
        assert refs, path
        outside = [r for r in refs if not r.startswith(("/", "#", "data:"))]
        assert outside == [], (path, outside)


def test_a_loss_curve_needs_two_finite_points_and_draws_one_line_per_attempt() -> None:
    from crossrail.api.dashboard import loss_curve

    def sample(step: int, value: float, attempt: int) -> dict[str, object]:
        return {"step": step, "value": value, "attempt": attempt}

    assert loss_curve([]) is None
    assert loss_curve([sample(1, 2.0, 1), sample(2, float("nan"), 1)]) is None
    curve = loss_curve([sample(1, 4.0, 1), sample(2, 3.0, 1), sample(3, 2.0, 2), sample(4, 2.0, 2)], 100, 100)
    assert curve is not None
    assert [line["attempt"] for line in curve["lines"]] == [1, 2]
    assert curve["lines"][0]["points"].split()[0] == "36.0,36.0"  # the first step at the highest loss: top left
    assert curve["lines"][1]["points"].split()[-1] == "64.0,64.0"  # the last step at the lowest: bottom right
    assert curve["step_range"] == (1, 4)
    assert curve["loss_range"] == (2.0, 4.0)


def test_the_page_of_a_run_still_queued_says_it_has_no_attempt_loss_or_checkpoint_yet(demo_server: str) -> None:
    page = text(get(f"{demo_server}/ui/runs/{PENDING}-1"))
    assert "queued pretraining" in page
    assert "no attempt yet" in page
    assert "no loss reported yet" in page
    assert "step attempt state uri none" in page


def test_the_metrics_page_shows_the_reports_figures_drawn_by_the_same_code_as_report_out(demo_server: str) -> None:
    from crossrail.control.reports.figures import SIZE_PX

    html = get(f"{demo_server}/ui/report")
    with urllib.request.urlopen(f"{demo_server}/ui/report/figures/queue-wait-cdf.png", timeout=30) as answer:
        png = answer.read()
    with pytest.raises(urllib.error.HTTPError) as missing:
        urllib.request.urlopen(f"{demo_server}/ui/report/figures/compare.png", timeout=30).close()
    missing.value.close()

    assert '<img src="/ui/report/figures/queue-wait-cdf.png"' in html
    assert '<img src="/ui/report/figures/cost-by-pool.png"' in html
    assert "Not drawn: no before/after given" in text(html)
    assert png.startswith(b"\x89PNG")
    width, height = int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big")  # the IHDR chunk
    assert (width, height) == SIZE_PX
    assert missing.value.code == 404


# --- a hand-told fleet, in process: filters, progress and ETA, cost, quota, comparison, RL backlog -----------


@pytest.fixture(scope="module")
def told(tmp_path_factory: pytest.TempPathFactory) -> Told:
    return tell(tmp_path_factory.mktemp("told"))


@pytest.fixture(scope="module")
def page(told: Told) -> Iterator[Any]:
    """GET a dashboard page of the told workspace in process, as an admin (who sees every team's runs)."""
    with api_app(told.home, clock=ManualClock(NOW)) as app, in_process(app) as http:

        def get(path: str, status: int = 200) -> str:
            answer = http.get(path, headers={"Accept": "text/html", "Authorization": f"Bearer {told.admin}"})
            assert answer.status_code == status, answer.text
            return answer.text

        yield get


def rows(html: str) -> dict[str, str]:
    """Each listed run's row of the Runs page, as text."""
    return {m[1]: text(m[2]).strip() for m in re.finditer(r'<tr data-run="([^"]+)">(.*?)</tr>', html, re.S)}


def cell(html: str, run: str, name: str) -> str:
    row = re.search(rf'<tr data-run="{re.escape(run)}">(.*?)</tr>', html, re.S)
    assert row is not None, run
    found = re.search(rf'<td class="{name}">(.*?)</td>', row[1], re.S)
    assert found is not None, (run, name)
    return text(found[1]).strip()


@pytest.mark.parametrize(
    ("query", "shown"),
    [
        pytest.param("", {"done", "running", "rl", "other", *SCAN}, id="no filter lists every run"),
        pytest.param("?team=alignment", {"other"}, id="a team"),
        pytest.param("?stage=pretraining", {"done", "other"}, id="a stage"),
        pytest.param("?pool=h100", {"done", "rl"}, id="the pool of the last attempt"),
        pytest.param("?state=running", {"running", "rl"}, id="a state"),
        pytest.param("?experiment=posttrain-042", {"running"}, id="an experiment"),
        pytest.param("?q=POSTTRAIN", {"running"}, id="a search, in any case"),
        pytest.param("?stage=pretraining&state=queued", {"other"}, id="filters together"),
        pytest.param("?pool=tpu-v5p&team=alignment", set(), id="nothing matches"),
        pytest.param("?sweep={sweep}", set(SCAN), id="a sweep's members"),
        pytest.param("?sweep={sweep}&state=queued&q=eval", set(SCAN), id="a sweep and others"),
        pytest.param("?sweep={sweep}&state=running", set(), id="no member of the sweep runs"),
    ],
)
def test_the_runs_page_filters_narrow_the_runs_listed(told: Told, page: Any, query: str, shown: set[str]) -> None:
    listed = set(rows(page(f"/ui/runs{query.format(sweep=told.sweep)}")))
    assert listed == {told.runs[k] for k in shown}


def test_a_bad_filter_value_is_refused_naming_what_would_do(page: Any) -> None:
    html = page("/ui/runs?state=sleeping&pool=a100", status=400)
    refused = text(html)
    assert "state 'sleeping' is not one of queued, admitted, running" in refused
    assert "pool 'a100' is not one of tpu-v5p, h100" in refused


def test_runs_show_progress_towards_the_total_an_eta_at_the_measured_pace_and_cost_so_far(
    told: Told, page: Any
) -> None:
    html = page("/ui/runs")
    running, done = told.runs["running"], told.runs["done"]
    # step 30 of 100 at one step a second, last heard at T0+30: 70 s to go from then, 60 s from T0+40
    assert cell(html, running, "progress") == "30/100"
    assert cell(html, running, "eta") == format_duration(60.0)
    # its chips of tpu-v5p ($4.20 a chip-hour) for 40 s; done's of h100 ($3.00) for one hour
    chips = chips_of(told)
    assert cell(html, running, "cost") == format_money(chips[running] * 4.20 * 40 / 3600)
    assert cell(html, done, "progress") == "5/5"
    assert cell(html, done, "eta") == "-"  # ended: nothing left to wait for
    assert cell(html, done, "cost") == format_money(chips[done] * 3.00)
    assert cell(html, told.runs["other"], "cost") == "-"  # never started


def test_a_run_page_shows_its_progress_eta_and_cost(told: Told, page: Any) -> None:
    running = told.runs["running"]
    summary = text(page(f"/ui/runs/{running}"))
    cost = format_money(chips_of(told)[running] * 4.20 * 40 / 3600)
    assert f"step 30/100 · ETA {format_duration(60.0)} · cost {cost}" in summary


def test_queues_show_each_queues_quota_used_against_its_nominal_chips(told: Told, page: Any) -> None:
    html = page("/ui/queues")
    with Client(told.home) as c:
        fleet, store = c.service.fleet, c.service.store
        in_use = {(store.get_run(told.runs[k]).queue, pool): chips_of(told)[told.runs[k]] for k, pool in RUNNING}
    assert len(in_use) == 2
    for queue in fleet.spec.queues:
        table = re.search(rf'<table class="quota" data-queue="{queue.name}">(.*?)</table>', html, re.S)
        assert table is not None, queue.name
        used = dict(re.findall(r'<tr data-pool="([^"]+)">.*?<td class="used">(\d+ / \d+)</td>', table[1], re.S))
        held = {pool: n for (q, pool), n in in_use.items() if q == queue.name}
        assert used == {pool: f"{held.get(pool, 0)} / {chips}" for pool, chips in queue.quota.items()}


def test_the_rl_backlog_panel_shows_each_running_pipelines_queue_as_last_reported(told: Told, page: Any) -> None:
    html = page("/ui/queues")
    panel = re.search(r'<section id="rl-backlog".*?</section>', html, re.S)
    assert panel is not None
    row = re.search(rf'<tr data-run="{told.runs["rl"]}" data-queue="samples">(.*?)</tr>', panel[0], re.S)
    assert row is not None
    assert text(row[1]).split()[1:4] == ["samples", "12", format_duration(8.0)]  # the 4th report: 12 items, 8 s
    spark = re.search(r'<polyline points="([^"]+)"', row[1])
    assert spark is not None
    assert len(spark[1].split()) == 4


def test_the_comparison_chart_draws_one_line_per_ticked_run(told: Told, page: Any) -> None:
    running, done = told.runs["running"], told.runs["done"]
    html = page(f"/ui/compare?run={running}&run={done}&metric=loss")
    chart = re.search(r'<svg id="compare-chart".*?</svg>', html, re.S)
    assert chart is not None
    lines = dict(re.findall(r'<polyline class="series series-\d+" data-run="([^"]+)" points="([^"]+)"', chart[0]))
    assert set(lines) == {running, done}
    assert len(lines[running].split()) == 3
    assert len(lines[done].split()) == 5
    assert "step 1" in text(chart[0])  # the shared step axis runs from the first step either reported
    assert "step 30" in text(chart[0])
    page("/ui/compare", status=400)


def test_a_team_sees_only_its_own_runs_on_the_runs_and_compare_pages(told: Told) -> None:
    with (
        api_app(told.home, clock=ManualClock(NOW)) as app,
        in_process(app, headers={"Authorization": f"Bearer {told.viewer}", "Accept": "text/html"}) as http,
    ):
        listed = set(rows(http.get("/ui/runs").text))
        hidden = http.get(f"/ui/compare?run={told.runs['running']}&run={told.runs['other']}")
        narrowed = http.get("/ui/runs?team=alignment")
    assert listed == {told.runs[k] for k in ("done", "running", "rl", *SCAN)}
    assert hidden.status_code == 404
    assert narrowed.status_code == 400  # not a team it may filter by: the ones it sees are offered
    assert "team 'alignment' is not one of foundation" in text(narrowed.text)


def test_a_run_page_says_when_its_load_fell_back_to_an_older_checkpoint(told: Told, page: Any) -> None:
    fell_back = re.findall(r'<dd class="fallback">(.*?)</dd>', page(f"/ui/runs/{told.runs['running']}"))
    assert len(fell_back) == 1
    assert "step 40" in fell_back[0]
    assert "step 60" in fell_back[0]
    assert "checksum mismatch" in fell_back[0]
    assert 'class="fallback"' not in page(f"/ui/runs/{told.runs['done']}")


def test_a_run_page_says_when_its_attempt_runs_on_a_fallback_pool_and_why(told: Told, page: Any) -> None:
    placed = re.findall(
        r'<span class="fallback" id="placement-fallback">(.*?)</span>', page(f"/ui/runs/{told.runs['rl']}")
    )
    assert len(placed) == 1
    assert "h100" in placed[0]
    assert FELL_BACK in placed[0]
    assert 'id="placement-fallback"' not in page(f"/ui/runs/{told.runs['running']}")  # its preferred pool


def chips_of(told: Told) -> dict[str, int]:
    with Client(told.home) as c:
        return {rid: c.service.store.get_run(rid).chips for rid in told.runs.values()}


def test_a_sweep_page_ranks_its_members_and_plots_the_metric_against_each_parameter(told: Told, page: Any) -> None:
    html = page(f"/ui/sweeps/{told.sweep}")
    members = re.search(r'<table class="members">.*?</table>', html, re.S)
    assert members is not None
    ranked = re.findall(r'<tr data-run="([^"]+)">', members[0])
    best_first = sorted(told.losses, key=lambda r: told.losses[r])
    assert ranked[:3] == best_first  # lower loss is better; the member with none comes last
    assert ranked[3] == told.runs["scan-1-normal"]
    figures = dict(re.findall(r'<figure class="param" data-parameter="([^"]+)">(.*?)</figure>', html, re.S))
    assert set(figures) == {"spec.resources.chips", "spec.priority"}
    for drawn in figures.values():
        circles = re.findall(r'<circle class="point" cx="[^"]+" cy="([^"]+)" r="5" data-run="([^"]+)"', drawn)
        dots = {r: float(cy) for cy, r in circles}
        assert set(dots) == set(told.losses)  # one point per member that reported a loss
        assert max(dots, key=lambda r: dots[r]) == best_first[0]  # the lowest loss lowest on the chart
    page("/ui/sweeps/sw-000000000000", status=404)
