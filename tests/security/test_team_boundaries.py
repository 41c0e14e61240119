"""Team boundaries on every path that names a run or a file: parents, place, resubmit, the dashboard's runs,
lineage and report selectors, `sim:` results and the paths an experiment names.

One workspace from `crossrail init` (its fleet shares foundation -> alignment and alignment -> evals) and one
server over it that requires tokens, reached in process through the ASGI app. A run of a team a token does
not see is, to that token, a run that does not exist: the same status and the same words.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.conftest import in_process

from crossrail.api import create_app
from crossrail.client import Client
from crossrail.core import ManualClock

ABSENT = "no-such-run-7"


@dataclass
class Site:
    home: Path
    local: Client
    http: httpx.Client  # the app in this process (tests.conftest.in_process)
    tokens: dict[str, str]  # "<team>-<role>" -> secret
    pretrain: str  # a queued run of foundation
    experiments: dict[str, str]  # init's experiment texts by name


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    root = tmp_path_factory.mktemp("boundaries")
    Client.init(root)
    home = root / ".crossrail"
    local = Client(home)
    tokens = {
        f"{team}-{role}": local.token_create(team=team, role=role, user=f"{team}-{role}")["token"]
        for team in ("foundation", "alignment", "evals")
        for role in ("viewer", "submitter")
    }
    pretrain = str(local.submit(home / "experiments" / "pretrain-small.yaml")["run"]["id"])
    texts = {p.stem: p.read_text() for p in (home / "experiments").glob("*.yaml")}
    app = create_app(home, require_auth=True, clock=ManualClock(1_800_000_000.0))  # one instant: estimates compare
    try:
        yield Site(home, local, in_process(app), tokens, pretrain, texts)
    finally:
        app.state.client.close()
        local.close()


def _as(site: Site, who: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {site.tokens[who]}"}


def _post(site: Site, path: str, who: str, text: str, sets: list[str]) -> Any:
    body = {"document": text, "source": "exp.yaml", "sets": sets}
    return site.http.post(path, json=body, headers=_as(site, who))


def _same_as_absent(hidden: Any, absent: Any, name: str) -> None:
    """`hidden` (naming run `name`) says word for word what `absent` (naming ABSENT) says."""
    assert hidden.status_code == absent.status_code
    assert hidden.text.replace(name, ABSENT) == absent.text


def _runs(site: Site) -> int:
    return len(site.local.service.store.list_runs())


def _audit(site: Site) -> dict[str, Any]:
    rows: list[dict[str, Any]] = site.local.service.store.audit(limit=1)
    return rows[-1]


# --- parents --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("checkpoint", ["latest", "40"], ids=["latest checkpoint", "a step"])
def test_a_team_cannot_start_from_a_checkpoint_of_a_team_that_does_not_share_with_it(
    site: Site, checkpoint: str
) -> None:
    """evals is shared nothing by foundation: naming its run as a parent is naming no run (before: 201, and a
    named step listed the run's usable steps)."""
    text, before = site.experiments["eval-smoke"], _runs(site)
    sets = [f"spec.parent.checkpoint={checkpoint}"]
    for path in ("/v1/runs", "/v1/place"):
        hidden = _post(site, path, "evals-submitter", text, [f"spec.parent.run={site.pretrain}", *sets])
        absent = _post(site, path, "evals-submitter", text, [f"spec.parent.run={ABSENT}", *sets])
        assert hidden.status_code == (422 if path == "/v1/runs" else 200), hidden.text  # place: a problem in its answer
        assert "spec.parent.run" in hidden.text
        _same_as_absent(hidden, absent, site.pretrain)
        assert "usable steps" not in hidden.text
    assert _runs(site) == before


def test_a_viewer_cannot_list_another_teams_checkpoint_steps_through_place(site: Site) -> None:
    text = site.experiments["eval-smoke"]
    sets = [f"spec.parent.run={site.pretrain}", "spec.parent.checkpoint=40"]
    hidden = _post(site, "/v1/place", "evals-viewer", text, sets)
    absent = _post(site, "/v1/place", "evals-viewer", text, [f"spec.parent.run={ABSENT}", "spec.parent.checkpoint=40"])
    _same_as_absent(hidden, absent, site.pretrain)


def test_a_shared_parent_is_taken_and_the_crossing_is_in_lineage_and_audit(site: Site) -> None:
    """The fleet shares foundation -> alignment: post-training starts from pretraining's run."""
    made = _post(site, "/v1/runs", "alignment-submitter", site.experiments["posttrain-042"], [])
    assert made.status_code == 201, made.text
    run = made.json()["run"]["id"]
    assert made.json()["lineage"]["parent_run"] == site.pretrain
    submitted = site.local.show(run)["events"][0]
    assert submitted["type"] == "submitted"
    assert (submitted["data"]["parent_run"], submitted["data"]["shared_from"]) == (site.pretrain, "foundation")
    row = _audit(site)
    assert (row["action"], row["result"], row["target"]) == ("POST /v1/runs", "ok", run)
    assert site.pretrain in row["detail"]
    assert "foundation" in row["detail"]
    assert "alignment" in row["detail"]
    # and alignment sees the run it starts from, which it may not change
    assert site.http.get(f"/v1/runs/{site.pretrain}", headers=_as(site, "alignment-viewer")).status_code == 200
    cancel = site.http.post(f"/v1/runs/{site.pretrain}/cancel", headers=_as(site, "alignment-submitter"))
    assert cancel.status_code == 403, cancel.text
    assert site.local.service.store.get_run(site.pretrain).state == "queued"


def test_an_admin_too_needs_the_fleet_to_share_before_a_team_crosses(site: Site) -> None:
    """The local CLI (the workspace's admin) sees every run, yet a parent of a team that does not share with
    the child's team is refused, naming the line the fleet needs."""
    from crossrail.errors import SpecError

    with pytest.raises(SpecError) as refused:
        site.local.submit(site.home / "experiments" / "eval-smoke.yaml", sets=[f"spec.parent.run={site.pretrain}"])
    assert "{from: foundation, to: [evals]}" in str(refused.value)


@pytest.mark.slow
def test_a_stored_parent_that_is_no_longer_shared_is_kept_and_its_resubmit_names_the_line_to_add(
    tmp_path: Path,
) -> None:
    Client.init(tmp_path)
    home = tmp_path / ".crossrail"
    with Client(home) as local:
        parent = local.submit(home / "experiments" / "pretrain-small.yaml")["run"]["id"]
        child = local.submit(home / "experiments" / "posttrain-042.yaml")["run"]["id"]
        token = local.token_create(team="alignment", role="submitter")["token"]
        fleet = home / "fleet.yaml"
        fleet.write_text(fleet.read_text().replace("    - {from: foundation, to: [alignment]}\n", ""))
        app = create_app(home, require_auth=True)
        try:
            http = in_process(app)
            again = http.post(f"/v1/runs/{child}/resubmit", json={}, headers={"Authorization": f"Bearer {token}"})
            assert again.status_code == 403, again.text
            assert "{from: foundation, to: [alignment]}" in again.json()["message"]
            assert local.service.store.get_run(child).parent_run == parent  # stored, not rewritten
            assert len(local.service.store.list_runs()) == 2
        finally:
            app.state.client.close()


# --- the dashboard and report selectors --------------------------------------------------------------


def test_the_dashboard_answers_a_hidden_run_as_no_run_and_leaves_it_out_of_lineage(site: Site) -> None:
    viewer = _as(site, "evals-viewer")
    hidden = site.http.get(f"/ui/runs/{site.pretrain}", headers=viewer)
    absent = site.http.get(f"/ui/runs/{ABSENT}", headers=viewer)
    assert hidden.status_code == 404
    _same_as_absent(hidden, absent, site.pretrain)
    row = _audit(site)  # the refusal is audited; the nonexistent run after it is not
    assert (row["action"], row["result"], row["status"], row["target"]) == (
        "GET /ui/runs/{ref}",
        "refused",
        404,
        site.pretrain,
    )
    assert site.pretrain not in site.http.get("/ui/lineage", headers=viewer).text
    assert site.pretrain in site.http.get("/ui/lineage", headers=_as(site, "foundation-viewer")).text


def test_report_selectors_pick_only_runs_the_token_sees(site: Site) -> None:
    query = "/ui/report?before=experiment=pretrain-small&after=experiment=pretrain-small"
    hidden = site.http.get(query, headers=_as(site, "evals-viewer"))
    absent = site.http.get(query.replace("pretrain-small", "nothing-here"), headers=_as(site, "evals-viewer"))
    shown = site.http.get(query, headers=_as(site, "foundation-viewer"))
    assert hidden.status_code == absent.status_code == shown.status_code
    assert "(0 runs)" in hidden.text
    assert "(1 runs)" in shown.text
    assert "(1 runs)" not in hidden.text


# --- sim: results and paths ---------------------------------------------------------------------------


def test_a_request_names_a_stored_simulation_by_id_never_a_server_path(site: Site, tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    viewer = _as(site, "evals-viewer")
    answers = [
        site.http.get(f"/ui/report?before=sim:{path}&after=sim:{path}", headers=viewer)
        for path in (fifo, "/etc/passwd", "/nonexistent", "/dev/zero")
    ]
    assert {a.status_code for a in answers} == {400}
    words = {a.json()["message"].split(":", 2)[-1].split("'")[0] for a in answers}
    assert all("not a stored simulation id" in a.json()["message"] for a in answers)
    assert len(words) == 1  # the same words whether the file exists, is a FIFO or a device


@pytest.mark.slow
def test_a_simulation_stored_by_the_cli_is_compared_by_id_over_the_server(site: Site) -> None:
    from crossrail.control.reports.facts import sim_file_runs

    records = [
        {"id": f"job-{i}", "now": 100.0, "stage": "eval", "team": "evals", "outcome": "succeeded"} for i in range(3)
    ]
    sim_id = site.local.service.store.add_simulation(records, policy="fifo", by="test", now=1.0)
    assert site.local.service.store.add_simulation(records, policy="fifo", by="test", now=2.0) == sim_id
    page = site.http.get(f"/ui/report?before=sim:{sim_id}&after=sim:{sim_id}", headers=_as(site, "evals-viewer"))
    assert page.status_code == 200, page.text
    assert "(3 runs)" in page.text
    # the local CLI keeps reading files, through the bounded reader
    path = site.home.parent / "result.json"
    path.write_text(json.dumps({"records": records}))
    assert [r.id for r in sim_file_runs(str(path), "--before")] == ["job-0", "job-1", "job-2"]


@pytest.mark.parametrize(
    ("field", "inside", "name"),
    [
        ("spec.config", ".crossrail/ingest.key", "a key of the workspace"),
        ("spec.config", ".crossrail/state.db", "the store"),
        ("spec.dataset.uri", ".crossrail/fleet.yaml", "the fleet"),
        ("spec.checkpoint.dir", ".crossrail/attempts", "the attempts of every team"),
    ],
    ids=lambda v: v if " " in str(v) else "",
)
def test_a_request_cannot_name_the_workspaces_own_files_and_learns_nothing_of_them(
    site: Site, field: str, inside: str, name: str
) -> None:
    """Before: `spec.config: file:///…/.crossrail/ingest.key` answered that file's sha256 as config_digest."""
    root = site.home.parent
    text, before = site.experiments["pretrain-small"], _runs(site)
    there = _post(site, "/v1/runs", "foundation-submitter", text, [f"{field}=file://{root / inside}"])
    missing = _post(site, "/v1/runs", "foundation-submitter", text, [f"{field}=file://{root / inside}-none"])
    assert there.status_code == 422, there.text
    assert there.text.replace(f"{root / inside}", f"{root / inside}-none") == missing.text
    assert _runs(site) == before


def test_a_request_may_name_the_workspaces_configs_data_and_object_storage(site: Site) -> None:
    from crossrail.control.uris import reach_for

    rule = reach_for(True, site.home)
    assert rule.refusal(f"file://{site.home}/configs/eval.yaml") is None
    assert rule.refusal(f"{site.home}/data/corpus.txt") is None
    assert rule.refusal("gs://bucket/data") is None
    assert rule.refusal(f"file://{site.home}/configs/../state.db") is not None
    assert rule.refusal("http://169.254.169.254/latest") is not None
    assert rule.refusal("relative/path.yaml") is not None
    link = site.home / "configs" / "escape.yaml"
    link.symlink_to(site.home / "ingest.key")
    try:
        assert rule.refusal(f"file://{link}") is not None  # a link cannot lead out of a root
    finally:
        link.unlink()
    assert reach_for(False, site.home).refusal(f"file://{site.home}/state.db") is None  # the owner's own CLI


@pytest.mark.parametrize("what", ["spec.config", "spec.dataset.uri"])
def test_validate_and_place_refuse_what_submit_refuses(tmp_path: Path, what: str) -> None:
    """A FIFO as config or unversioned dataset: submit refused it, validate and place accepted it."""
    from crossrail.errors import SpecError

    Client.init(tmp_path)
    home = tmp_path / ".crossrail"
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    exp = tmp_path / "exp.yaml"
    text = (home / "experiments" / "pretrain-small.yaml").read_text()
    exp.write_text(text)
    with Client(home) as local:
        for call in (local.submit, local.place):
            with pytest.raises(SpecError) as refused:
                call(exp, sets=[f"{what}=file://{fifo}"])
            assert what in str(refused.value)
            assert "regular file" in str(refused.value)
        assert len(local.service.store.list_runs()) == 0
        exp.write_text(
            text.replace(str(home / "data" / "corpus.txt"), str(fifo))
            if what == "spec.dataset.uri"
            else text.replace(str(home / "configs" / "pretrain-small.yaml"), str(fifo))
        )
        checked = local.validate([exp])
        assert not checked["valid"]
        assert any(p["path"] == what and "regular file" in p["message"] for p in checked["problems"]), checked


@pytest.mark.slow
def test_simulate_store_keeps_a_result_that_compare_names_by_id(tmp_path: Path) -> None:
    """`simulate --store` prints sim:ID; the local CLI compares by that id (or a file), as the server does."""
    import subprocess
    import sys

    cli = str(Path(sys.executable).with_name("crossrail"))
    Client.init(tmp_path)
    data = Path(__file__).parents[2] / "data" / "gavel"
    sim = [cli, "simulate", "--pools", "v100:2:2,k80:4:4", "--workload", f"gavel:{data / 'artifact_evaluation.trace'}"]
    sim += ["--throughputs", str(data / "simulation_throughputs.json"), "--store", "--json"]
    done = subprocess.run(sim, cwd=tmp_path, capture_output=True, text=True, timeout=120, check=True)
    stored = json.loads(done.stdout)["stored"]
    assert stored.startswith("sim:")
    with Client(tmp_path / ".crossrail") as local:
        assert [s["runs"] for s in local.service.store.simulations()] == [15]
    compare = [cli, "compare", "--before", stored, "--after", stored, "--json"]
    verdict = subprocess.run(compare, cwd=tmp_path, capture_output=True, text=True, timeout=120, check=True)
    cycle = json.loads(verdict.stdout)["research_cycle"]
    assert (cycle["n_before"], cycle["n_after"], cycle["change"]) == (15, 15, 0.0)
