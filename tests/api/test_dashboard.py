"""The dashboard's pages over the demo workspace, fetched from a real server: what each shows, and that they
load nothing from outside."""

from __future__ import annotations

import re
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from crossrail.store import Store

from .conftest import PENDING

PAGES = ["/ui/runs", "/ui/runs/pretrain-small-1", "/ui/queues", "/ui/lineage", "/ui/fleet", "/ui/report"]
DEMO_RUNS = ["pretrain-small-1", "posttrain-042-1", "eval-smoke-1", "sweep-lr-1-1", "sweep-lr-2-1"]


def get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=30) as resp:
        assert resp.status == 200
        assert resp.headers["Content-Type"].startswith("text/html")
        return str(resp.read().decode())


def text(html: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html))


def test_the_root_leads_to_the_runs_page_which_lists_every_run_with_pool_step_loss_and_checkpoint(
    demo_server: str,
) -> None:
    html = get(f"{demo_server}/")
    for run in [*DEMO_RUNS, f"{PENDING}-1"]:
        assert f'href="/ui/runs/{run}"' in html
    row = re.search(r'<tr data-run="pretrain-small-1">(.*?)</tr>', html, re.S)
    assert row is not None
    cells = [
        c.strip() for c in re.findall(r"<td>(.*?)</td>", re.sub(r"<a [^>]*>|</a>|<span[^>]*>|</span>", "", row[1]))
    ]
    assert cells[:6] == ["pretrain-small-1", "pretraining", "foundation", "succeeded", "h100", "2"]
    assert cells[6] == "60"  # the last reported step of --steps 60
    assert float(cells[7]) > 0  # the latest loss
    assert cells[8] == "step 60"
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
    from crossrail.control.figures import SIZE_PX

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
