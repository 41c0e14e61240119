"""Who may do what over HTTP: every route × every role × own team / other team / no or dead token.

One server with `require_auth` over one workspace for the module. Team `foundation` owns one run, team
`alignment` another; tokens of foundation act on both. On every refusal the store is unchanged and the audit
log gained the attempt; every allowed write is audited too. The routes come from the app itself, so an
endpoint added later without a case here fails `test_every_route_has_a_case`.
"""

from __future__ import annotations

import hashlib
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.conftest import IN_PROCESS_URL, asgi_client, free_port, in_process, serving

from crossrail.api import create_app
from crossrail.api.route_access import ROUTES, routes_of
from crossrail.client import Client
from crossrail.core import ManualClock
from crossrail.core.access import WRITES, Role

CLOCK = ManualClock(1_800_000_000.0)
OWN, OTHER = "foundation", "alignment"
DEAD = ("no-token", "expired", "revoked", "rotated")
ROLES = tuple(r.value for r in Role)


@dataclass
class World:
    home: Path
    app: Any  # the app, answering `http` in this process (tests.conftest.in_process)
    http: httpx.Client
    tokens: dict[str, str]  # role or dead kind -> secret (all of team foundation)
    other_tokens: dict[str, str]  # role -> secret of team alignment
    runs: dict[str, str]  # team -> a queued run of it, never changed by an allowed request
    experiment: str


_LOCAL: dict[Path, Client] = {}


def _local(home: Path) -> Client:
    """The workspace's local client (an admin under the OS user), one for the module."""
    if home not in _LOCAL:
        _LOCAL[home] = Client(home, clock=CLOCK)
    return _LOCAL[home]


def _submit(home: Path, team: str, name: str) -> str:
    c = _local(home)
    exp = home / "experiments" / "pretrain-small.yaml"
    sets = [f"metadata.team={team}", f"metadata.name={name}"]
    return str(c.submit(exp, sets=sets)["run"]["id"])


def _fleet_with_team_queues(home: Path) -> None:
    """The pretraining stage's one queue admits two teams; alignment is not one of them."""
    path = home / "fleet.yaml"
    text = path.read_text()
    old = "    - name: pretraining\n      stage: pretraining\n"
    assert old in text
    path.write_text(text.replace(old, old + "      teams: [foundation, evals]\n"))


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    root = tmp_path_factory.mktemp("access")
    Client.init(root)
    home = root / ".crossrail"
    _fleet_with_team_queues(home)
    c = _local(home)
    tokens = {r: c.token_create(team=OWN, role=r, user=f"ada-{r}")["token"] for r in ROLES}
    other = {r: c.token_create(team=OTHER, role=r, user=f"mallory-{r}")["token"] for r in ROLES}
    tokens["expired"] = c.token_create(team=OWN, role="admin", expires="1h")["token"]
    revoked = c.token_create(team=OWN, role="admin")
    tokens["revoked"] = revoked["token"]
    c.token_revoke(revoked["id"])
    rotated = c.token_create(team=OWN, role="admin")
    tokens["rotated"] = rotated["token"]
    c.token_rotate(rotated["id"])
    tokens["no-token"] = ""
    runs = {team: _submit(home, team, f"held-{team}") for team in (OWN, OTHER)}
    CLOCK.advance(2 * 3600)  # the 1h token is expired now
    app = create_app(home, clock=CLOCK, require_auth=True)
    experiment = (home / "experiments" / "pretrain-small.yaml").read_text()
    with in_process(app, timeout=30) as http:
        yield World(home, app, http, tokens, other, runs, experiment)
    app.state.client.close()
    _LOCAL.pop(home).close()


@pytest.fixture
def world_url(world: World) -> Iterator[str]:
    """The world's app on a socket, for the real CLI in a subprocess (its lifespan is the module's, not this)."""
    with serving(world.app, lifespan="off") as url:
        yield url


# --- what each request is, and what it needs ---------------------------------------------------------


@dataclass(frozen=True)
class Case:
    """How to call one route; `target` says what makes it another team's: a run in the path (`run`), the
    team named in the body or query (`team`), or nothing (`none`: the same request for every team)."""

    method: str
    path: str
    target: str = "none"
    fresh_run: str | None = None  # an allowed write needs its own run in this state (it changes it)
    fresh_token: bool = False
    ok: frozenset[int] = frozenset({200, 201})


CASES: dict[tuple[str, str], Case] = {
    ("GET", "/v1/health"): Case("GET", "/v1/health"),
    ("POST", "/v1/ingest/{run}/{attempt}"): Case("POST", "/v1/ingest/{run}/1", ok=frozenset({401})),
    ("GET", "/ui/static/{name}"): Case("GET", "/ui/static/style.css"),
    ("GET", "/"): Case("GET", "/", ok=frozenset({307})),
    ("GET", "/ui"): Case("GET", "/ui", ok=frozenset({307})),
    # Not from a page of this server (no Origin): refused, whoever asks; from one, with no form: the sign-in
    # form again, 401 (test_a_browser_signs_in_through_the_form, tests/security/test_web_session.py).
    ("POST", "/ui/login"): Case("POST", "/ui/login", ok=frozenset({403})),
    ("GET", "/ui/"): Case("GET", "/ui/", ok=frozenset({307})),
    ("GET", "/v1/openapi.json"): Case("GET", "/v1/openapi.json"),
    ("GET", "/v1/docs"): Case("GET", "/v1/docs"),
    ("GET", "/v1/docs/static/{name}"): Case("GET", "/v1/docs/static/swagger-ui.css"),
    ("GET", "/metrics"): Case("GET", "/metrics"),
    ("POST", "/v1/runs"): Case("POST", "/v1/runs", target="team"),
    ("GET", "/v1/runs"): Case("GET", "/v1/runs", target="team"),
    ("GET", "/v1/runs/{ref}"): Case("GET", "/v1/runs/{run}", target="run"),
    ("POST", "/v1/runs/{ref}/cancel"): Case("POST", "/v1/runs/{run}/cancel", target="run", fresh_run="queued"),
    ("POST", "/v1/runs/{ref}/suspend"): Case("POST", "/v1/runs/{run}/suspend", target="run", fresh_run="queued"),
    ("POST", "/v1/runs/{ref}/resume"): Case("POST", "/v1/runs/{run}/resume", target="run", fresh_run="suspended"),
    ("POST", "/v1/runs/{ref}/resubmit"): Case("POST", "/v1/runs/{run}/resubmit", target="run"),
    ("GET", "/v1/runs/{ref}/logs"): Case("GET", "/v1/runs/{run}/logs", target="run"),
    ("GET", "/v1/status"): Case("GET", "/v1/status"),
    ("GET", "/v1/queue"): Case("GET", "/v1/queue"),
    ("GET", "/v1/events"): Case("GET", "/v1/events?run={run}", target="run"),
    ("GET", "/v1/report"): Case("GET", "/v1/report"),
    ("POST", "/v1/place"): Case("POST", "/v1/place"),
    ("GET", "/v1/agents"): Case("GET", "/v1/agents"),
    ("POST", "/v1/sweeps"): Case("POST", "/v1/sweeps", target="team"),
    # No sweep of that id: 404 to whoever may look (tests/integration/test_sweeps.py hides another team's members).
    ("GET", "/v1/sweeps/{sweep}"): Case("GET", "/v1/sweeps/sw-000000000000", ok=frozenset({404})),
    ("POST", "/v1/sweeps/{sweep}/cancel"): Case("POST", "/v1/sweeps/sw-000000000000/cancel", ok=frozenset({404})),
    ("GET", "/v1/sweeps/{sweep}/fit"): Case("GET", "/v1/sweeps/sw-000000000000/fit", ok=frozenset({404})),
    ("GET", "/v1/runs/{ref}/checkpoints"): Case("GET", "/v1/runs/{run}/checkpoints", target="run"),
    # The held runs never ran: no checkpoint to show or verify, which only someone allowed to look learns.
    ("GET", "/v1/runs/{ref}/checkpoints/{step}"): Case(
        "GET", "/v1/runs/{run}/checkpoints/latest", target="run", ok=frozenset({404})
    ),
    ("POST", "/v1/runs/{ref}/checkpoints/verify"): Case(
        "POST", "/v1/runs/{run}/checkpoints/verify", target="run", ok=frozenset({404})
    ),
    ("GET", "/v1/fleet"): Case("GET", "/v1/fleet"),
    ("PUT", "/v1/fleet"): Case("PUT", "/v1/fleet"),
    ("POST", "/v1/fleet/pools/{pool}/drain"): Case("POST", "/v1/fleet/pools/tpu-v5p/drain"),
    ("POST", "/v1/fleet/pools/{pool}/undrain"): Case("POST", "/v1/fleet/pools/tpu-v5p/undrain"),
    ("GET", "/v1/fleet/reservations"): Case("GET", "/v1/fleet/reservations"),
    ("POST", "/v1/fleet/reservations"): Case("POST", "/v1/fleet/reservations"),
    ("GET", "/v1/usage"): Case("GET", "/v1/usage", target="team"),
    ("GET", "/v1/whoami"): Case("GET", "/v1/whoami"),
    ("GET", "/v1/audit"): Case("GET", "/v1/audit?limit=5"),
    ("GET", "/v1/tokens"): Case("GET", "/v1/tokens"),
    ("POST", "/v1/tokens"): Case("POST", "/v1/tokens"),
    ("POST", "/v1/tokens/{token_id}/revoke"): Case("POST", "/v1/tokens/{token}/revoke", fresh_token=True),
    ("POST", "/v1/tokens/{token_id}/rotate"): Case("POST", "/v1/tokens/{token}/rotate", fresh_token=True),
    ("GET", "/ui/runs"): Case("GET", "/ui/runs"),
    ("GET", "/ui/runs/{ref}"): Case("GET", "/ui/runs/{run}", target="run"),
    ("GET", "/ui/queues"): Case("GET", "/ui/queues"),
    ("GET", "/ui/compare"): Case("GET", "/ui/compare?run={run}", target="run"),
    ("GET", "/ui/sweeps/{sweep}"): Case("GET", "/ui/sweeps/sw-000000000000", ok=frozenset({404})),
    ("GET", "/ui/lineage"): Case("GET", "/ui/lineage"),
    ("GET", "/ui/fleet"): Case("GET", "/ui/fleet"),
    ("GET", "/ui/report"): Case("GET", "/ui/report"),
    # A figure the report of a store where nothing ran does not draw: 404 to whoever may look.
    ("GET", "/ui/report/figures/{name}.png"): Case("GET", "/ui/report/figures/nosuch.png", ok=frozenset({404})),
}


def _body(w: World, key: tuple[str, str], team: str) -> Any:
    method, path = key
    if path in ("/v1/runs", "/v1/place", "/v1/sweeps") and method == "POST":
        name = f"m-{team[:5]}-{time.monotonic_ns() % 10**9}"
        body = {"document": w.experiment, "sets": [f"metadata.team={team}", f"metadata.name={name}"]}
        return body | ({"grid": ["spec.priority=low,normal"]} if path == "/v1/sweeps" else {})
    if path == "/v1/fleet":
        return {"document": (w.home / "fleet.yaml").read_text(), "source": "fleet.yaml"}
    if path == "/v1/fleet/reservations":
        return {"pool": "tpu-v5p", "chips": 4, "start": "now", "duration": "1m", "name": f"r{time.monotonic_ns()}"}
    if path == "/v1/ingest/{run}/{attempt}":  # an API token is not the attempt's secret, whatever its role
        return {"incarnation": 0, "records": []}
    if path == "/v1/tokens":
        return {"team": OWN, "role": "viewer"}
    return None


def _expected(case: Case, action_needed: Any, who: str, team: str) -> str:
    """'ok', 401, 403 or 404 by the stated rules (docs/auth.md): another team's run that does not share with
    the token's team is, to a non-admin, a run that does not exist."""
    if action_needed is None:
        return "ok"
    if who in DEAD:
        return "401"
    from crossrail.core.access import allows

    if not allows(Role(who), action_needed):
        return "403"
    if team == OTHER and case.target == "run" and who != "admin":
        return "404"
    if team == OTHER and case.target != "none" and who != "admin":
        return "403"
    return "ok"


def _fingerprint(w: World) -> tuple[Any, ...]:
    """What a refused request must leave as it was: runs and their states, events, tokens, the fleet file."""
    c = _local(w.home)
    store = c.service.store
    runs = tuple((r.id, r.state) for r in store.list_runs())
    tokens = tuple((t["id"], t["revoked_at"]) for t in store.tokens())
    return runs, store.last_seq(), tokens, hashlib.sha256((w.home / "fleet.yaml").read_bytes()).hexdigest()


def _last_audit(w: World) -> dict[str, Any]:
    c = _local(w.home)
    return c.service.store.audit(limit=1)[-1]


def _fresh_run(w: World, team: str, state: str) -> str:
    rid = _submit(w.home, team, f"f-{team[:5]}-{time.monotonic_ns() % 10**9}")
    if state == "suspended":
        c = _local(w.home)
        c.suspend(rid)
    return rid


def _matrix() -> list[Any]:
    params = []
    for key, case in CASES.items():
        teams = (OWN, OTHER) if case.target != "none" else (OWN,)
        for who in (*ROLES, *DEAD):
            for team in teams:
                params.append(pytest.param(key, who, team, id=f"{key[0]} {key[1]} as {who} on {team}"))
    return params


def test_every_route_has_a_case(world: World) -> None:
    app = create_app(world.home, clock=CLOCK)
    routes = set(routes_of(app))
    assert routes <= set(CASES), (
        f"routes without a case: {routes - set(CASES)}; cases without a route: {set(CASES) - routes}"
    )
    assert routes <= set(ROUTES)


@pytest.mark.parametrize(("key", "who", "team"), _matrix())
@pytest.mark.slow
def test_access_matrix(world: World, key: tuple[str, str], who: str, team: str) -> None:
    case = CASES[key]
    expected = _expected(case, ROUTES[key], who, team)
    run = world.runs[team]
    if expected == "ok" and case.fresh_run:
        run = _fresh_run(world, team, case.fresh_run)
    token_id = "nosuch"
    if case.fresh_token and expected == "ok":
        c = _local(world.home)
        token_id = c.token_create(team=OWN, role="viewer")["id"]
    path = case.path.format(run=run, token=token_id)
    if case.target == "team" and case.method == "GET":
        path += f"?team={team}"
    secret = world.tokens[who]
    headers = {"Authorization": f"Bearer {secret}"} if secret else {}
    before, audited = _fingerprint(world), _audit_count(world)

    response = world.http.request(
        case.method, path, json=_body(world, key, team), headers=headers, follow_redirects=False
    )

    got = response.status_code
    if expected == "ok":
        assert got in case.ok, f"{case.method} {path} as {who} of {OWN} on {team}: {got} {response.text[:300]}"
    else:
        assert got == int(expected), f"{case.method} {path} as {who} on {team}: {got} {response.text[:300]}"
        if got == 401 and path.startswith("/ui/"):  # a dashboard page: the sign-in form
            assert 'action="/ui/login"' in response.text
        else:
            assert response.json()["kind"] == "Error"
        assert _fingerprint(world) == before, "a refused request changed the store"
        row = _last_audit(world)
        assert _audit_count(world) == audited + 1
        assert (row["action"], row["result"], row["status"]) == (f"{key[0]} {key[1]}", "refused", got)
        assert row["who"] == ("anonymous" if who == "no-token" and got == 401 else row["who"])
        if case.target == "run" and got in (403, 404):
            assert row["target"] == run
        if got == 404:  # word for word what a run that does not exist gets
            absent = world.http.request(
                case.method, path.replace(run, "no-such-run-9"), json=_body(world, key, team), headers=headers
            )
            assert absent.status_code == 404
            said = absent.json()["message"].replace("no-such-run-9", run)
            assert response.json() == {**absent.json(), "message": said}
        if got == 403 and team == OTHER and case.target != "none" and who != "viewer":
            assert OWN in response.json()["message"]
            assert OTHER in response.json()["message"]
    if expected == "ok" and ROUTES[key] in WRITES and case.method != "GET":
        row = _last_audit(world)
        assert row["action"] == f"{key[0]} {key[1]}"
        assert row["who"] == f"ada-{who}"
        assert row["result"] == ("ok" if got < 400 else "failed")


def _audit_count(w: World) -> int:
    c = _local(w.home)
    return c.service.store.audit_count()


# --- the paths around the matrix: runs named as parents, in selectors, on dashboard pages ---------------

NAMING = ("parent at submit", "parent at place", "report selector", "dashboard run page", "lineage page")


def _naming(w: World, how: str, run: str, headers: dict[str, str]) -> Any:
    """A request that names run `run` the way `how` says (the run's experiment, for a selector)."""
    experiment = run.rsplit("-", 1)[0]
    if how.startswith("parent"):
        path = "/v1/runs" if how.endswith("submit") else "/v1/place"
        sets = ["metadata.name=naming-probe", f"spec.parent.run={run}", "spec.parent.checkpoint=7"]
        return w.http.post(path, json={"document": w.experiment, "sets": sets}, headers=headers)
    if how == "report selector":
        query = f"before=experiment={experiment}&after=experiment={experiment}"
        return w.http.get(f"/ui/report?{query}", headers=headers)
    if how == "dashboard run page":
        return w.http.get(f"/ui/runs/{run}", headers=headers)
    return w.http.get("/ui/lineage", headers=headers)


@pytest.mark.parametrize("how", NAMING)
@pytest.mark.parametrize("who", ROLES)
def test_naming_another_teams_unshared_run_is_naming_no_run(world: World, how: str, who: str) -> None:
    """alignment does not share with foundation: to foundation's viewers and submitters its run does not exist
    on any of these paths (the same answer as for a name nothing has); admins see it. A parent across teams is
    refused to everyone, admins included, until the fleet shares (foundation shares with alignment, so the
    other way round is allowed: the shared case below)."""
    if how == "parent at submit" and who == "viewer":
        pytest.skip("viewers may not submit: the matrix covers that 403")
    headers, hidden = _as(world, who), world.runs[OTHER]
    before, audited = _fingerprint(world), _audit_count(world)
    named = _naming(world, how, hidden, headers)
    refusal = _last_audit(world) if _audit_count(world) > audited else None
    absent = _naming(world, how, "held-nobody-1", headers)
    assert _fingerprint(world) == before, "naming a run changed the store"
    text = named.text.replace(hidden, "held-nobody-1").replace(f"held-{OTHER}", "held-nobody")
    if who == "admin":
        if how.startswith("parent"):
            assert named.status_code == 422
            assert f"{{from: {OTHER}, to: [{OWN}]}}" in named.text
        else:
            assert named.status_code == 200
            assert hidden in named.text or re.search(r"experiment=held-alignment \([1-9]\d* runs\)", named.text)
    elif how == "lineage page":
        assert hidden not in named.text
    elif how == "report selector":
        assert "(0 runs)" in named.text
        assert "(1 runs)" not in named.text
    else:
        assert named.status_code == absent.status_code
        assert named.status_code in (200, 404, 422)  # place answers a missing parent as a problem of its placement
        assert text == absent.text
        assert refusal is not None, "naming a hidden run is audited"
        assert (refusal["result"], refusal["status"]) == ("refused", named.status_code)
        assert OTHER in refusal["detail"]


def test_a_shared_run_is_named_as_a_parent_by_the_team_it_is_shared_with(world: World) -> None:
    """foundation shares with alignment: alignment's place of an experiment starting from foundation's run goes
    past the parent to that run's checkpoints (it has none at step 7), where foundation's run is visible."""
    sets = [f"spec.parent.run={world.runs[OWN]}", "spec.parent.checkpoint=7"]
    body = {"document": world.experiment, "sets": [*sets, f"metadata.team={OTHER}"]}
    placed = world.http.post("/v1/place", json=body, headers=_as(world, "viewer", other=True))
    assert placed.status_code == 422
    assert f"run {world.runs[OWN]} has no checkpoint at step 7" in placed.text


# --- visibility, submit into queues, the dashboard's login -------------------------------------------


def _as(w: World, who: str, *, other: bool = False) -> dict[str, str]:
    return {"Authorization": f"Bearer {(w.other_tokens if other else w.tokens)[who]}"}


def test_a_teams_reads_hide_other_teams_runs_but_keep_their_place_in_the_queue(world: World) -> None:
    h = _as(world, "viewer")
    listed = world.http.get("/v1/runs", headers=h).json()["runs"]
    assert listed
    assert {r["team"] for r in listed} == {OWN}
    events = world.http.get("/v1/events", headers=h).json()["events"]
    assert world.runs[OTHER] not in {e["run"] for e in events}
    assert world.runs[OWN] in {e["run"] for e in events}
    pending = [p for q in world.http.get("/v1/queue", headers=h).json()["queues"] for p in q["pending"]]
    theirs = [p for p in pending if p["team"] == OTHER]
    assert theirs, "the other team's queued run keeps its place"
    assert all(p["hidden"] and "id" not in p and "experiment" not in p and p["chips"] > 0 for p in theirs)
    assert all("id" in p for p in pending if p["team"] == OWN)
    page = world.http.get("/ui/runs", headers=h).text
    assert world.runs[OWN] in page
    assert world.runs[OTHER] not in page
    assert world.runs[OTHER] not in world.http.get("/ui/queues", headers=h).text
    assert world.runs[OTHER] not in world.http.get("/ui/lineage", headers=h).text
    admin = world.http.get("/v1/runs", headers=_as(world, "admin")).json()["runs"]
    assert {OWN, OTHER} <= {r["team"] for r in admin}


def test_a_submitter_takes_its_team_from_the_token_and_only_queues_that_admit_it(world: World) -> None:
    doc = world.experiment.replace("team: foundation", "team: alignment")  # the queue admits foundation, evals
    unnamed = "\n".join(line for line in world.experiment.splitlines() if not line.strip().startswith("team:"))
    made = world.http.post(
        "/v1/runs", json={"document": unnamed, "sets": ["metadata.name=from-token"]}, headers=_as(world, "submitter")
    )
    assert made.status_code == 201, made.text
    assert made.json()["run"]["team"] == OWN
    before = _fingerprint(world)
    refused = world.http.post(
        "/v1/runs",
        json={"document": doc, "sets": ["metadata.name=not-admitted"]},
        headers=_as(world, "submitter", other=True),
    )
    assert refused.status_code == 403, refused.text
    assert "no pretraining queue admits team 'alignment'" in refused.json()["message"]
    assert _fingerprint(world) == before
    row = _last_audit(world)
    assert (row["who"], row["team"], row["result"]) == ("mallory-submitter", OTHER, "refused")


def test_the_dashboard_takes_a_token_once_and_keeps_it_in_a_cookie(world: World) -> None:
    with in_process(world.app) as browser:
        assert browser.get("/ui/runs").status_code == 401
        first = browser.get("/ui/runs", params={"token": world.tokens["viewer"]})
        assert first.status_code == 200
        assert "HttpOnly" in first.headers["set-cookie"]
        again = browser.get("/ui/queues")  # no token in the URL: the cookie carries it
        assert again.status_code == 200
        assert browser.get("/metrics").status_code == 200


def test_a_browser_signs_in_through_the_form_and_stays_on_this_site(world: World) -> None:
    viewer = world.tokens["viewer"]
    with in_process(world.app, headers={"Origin": IN_PROCESS_URL}) as browser:  # the form's own page
        assert browser.post("/ui/login").status_code == 401  # no token: the form again
        form = browser.get("/ui/queues", params={"stage": "eval"})
        assert form.status_code == 401
        assert form.headers["content-type"].startswith("text/html")
        assert 'action="/ui/login"' in form.text
        assert 'name="next" value="/ui/queues?stage=eval"' in form.text
        dead = browser.post("/ui/login", data={"token": world.tokens["revoked"], "next": "/ui/queues"})
        assert (dead.status_code, "set-cookie" in dead.headers) == (401, False)
        assert "revoked" in dead.text
        row = _last_audit(world)
        assert (row["action"], row["result"], row["status"]) == ("POST /ui/login", "refused", 401)
        assert "revoked" in row["detail"]
        signed = browser.post("/ui/login", data={"token": viewer, "next": "/ui/queues?stage=eval"})
        assert signed.status_code == 303
        assert signed.headers["location"] == "/ui/queues?stage=eval"
        assert "HttpOnly" in signed.headers["set-cookie"]
        assert browser.get("/ui/fleet").status_code == 200  # the cookie carries the token
        away = browser.post("/ui/login", data={"token": viewer, "next": "//elsewhere.example/ui/runs"})
        assert (away.status_code, away.headers["location"]) == (303, "/ui/runs")
    with in_process(world.app) as api:  # the API answers JSON, never the form
        assert api.get("/v1/runs").json()["kind"] == "Error"


# --- who acted: the token says, never $CROSSRAIL_USER -------------------------------------------------


def _cli(url: str, token: str, user: str, *args: str) -> Any:
    import os
    import subprocess

    from tests.api.conftest import CROSSRAIL

    env = {k: v for k, v in os.environ.items() if k not in ("CROSSRAIL_HOME", "CROSSRAIL_TOKEN")}
    env |= {"CROSSRAIL_USER": user, "COLUMNS": "200"}
    command = [CROSSRAIL, "--server", url, "--token", token, *args]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=60, check=False)


@pytest.mark.slow
def test_claiming_another_user_changes_nothing_of_who_acts(world: World, world_url: str) -> None:
    ada_run = _fresh_run(world, OWN, "queued")
    store = _local(world.home).service.store

    as_ada = _cli(world_url, world.other_tokens["submitter"], "ada-submitter", "cancel", ada_run)
    assert as_ada.returncode != 0
    assert "belongs to team foundation" in as_ada.stderr
    assert store.get_run(ada_run).state == "queued"
    row = _last_audit(world)
    assert (row["who"], row["team"], row["result"], row["target"]) == ("mallory-submitter", OTHER, "refused", ada_run)

    by_ada = _cli(world_url, world.tokens["submitter"], "mallory", "cancel", ada_run)
    assert by_ada.returncode == 0, by_ada.stderr
    cancelled = store.events(run=ada_run, types=["cancelled"])[-1]
    assert cancelled.data["by"] == "ada-submitter"
    assert "claimed_by" not in cancelled.data
    row = _last_audit(world)
    assert (row["who"], row["claimed"], row["result"], row["run_uid"]) == (
        "ada-submitter",
        None,
        "ok",
        store.get_run(ada_run).uid,
    )


def test_the_local_cli_acts_as_the_os_user_and_keeps_a_claimed_user_apart(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    from crossrail.control.access import os_user

    run = _fresh_run(world, OTHER, "queued")
    monkeypatch.setenv("CROSSRAIL_USER", "ada")
    shown = _local(world.home).suspend(run)
    assert shown["run"]["state"] == "suspended"
    store = _local(world.home).service.store
    event = store.events(run=run, types=["suspended"])[-1]
    assert (event.data["by"], event.data["claimed_by"]) == (os_user(), "ada")
    row = _last_audit(world)
    assert (row["who"], row["claimed"], row["role"], row["origin"]) == (os_user(), "ada", "admin", f"local:{os_user()}")
    assert (row["action"], row["target"], row["result"], row["status"]) == ("suspend", run, "ok", None)
    assert row["team"] == OTHER  # the run's team


def test_a_local_writes_audit_row_names_the_team_it_wrote_for_or_local(world: World) -> None:
    from crossrail.control.access import LOCAL_TEAM
    from crossrail.errors import CrossrailError, NotFoundError

    c = _local(world.home)
    _submit(world.home, OTHER, "audited")
    assert (_last_audit(world)["action"], _last_audit(world)["team"]) == ("submit", OTHER)
    with pytest.raises(NotFoundError):
        c.cancel("no-such-run")
    assert (_last_audit(world)["result"], _last_audit(world)["team"]) == ("failed", LOCAL_TEAM)
    made = c.token_create(team=OTHER, role="viewer")
    assert (_last_audit(world)["action"], _last_audit(world)["team"]) == ("token_create", OTHER)
    c.token_revoke(made["id"])
    assert (_last_audit(world)["action"], _last_audit(world)["team"]) == ("token_revoke", OTHER)
    with pytest.raises(CrossrailError):
        c.drain("no-such-pool")  # a fleet write belongs to no one team
    row = _last_audit(world)
    assert (row["target"], row["team"], row["role"]) == ("no-such-pool", LOCAL_TEAM, "admin")


def test_the_audit_log_refuses_to_be_rewritten(world: World) -> None:
    from sqlalchemy import text
    from sqlalchemy.exc import DBAPIError

    store = _local(world.home).service.store
    before = store.audit_count()
    assert before > 0
    for statement in ("UPDATE audit SET who = 'nobody'", "DELETE FROM audit"):
        with pytest.raises(DBAPIError, match="append-only"), store._engine.begin() as conn:
            conn.execute(text(statement))
    assert store.audit_count() == before
    assert "nobody" not in {r["who"] for r in store.audit()}


def test_usage_is_kept_per_team_and_a_team_reads_its_own(world: World) -> None:
    from crossrail.core import Event, EventType

    store = _local(world.home).service.store
    now = CLOCK.now()
    for team, chips, hours in ((OWN, 4, 2.0), (OTHER, 8, 1.0)):
        run = _fresh_run(world, team, "queued")
        start = {"pool": "h100", "chips": chips, "cost_per_chip_hour": 3.0}
        store.append_events(
            [
                Event(EventType.STARTED, now - hours * 3600, run, 1, data=start),
                Event(EventType.SUCCEEDED, now, run, 1, data={}),
            ]
        )
    every = world.http.get("/v1/usage", headers=_as(world, "admin")).json()
    totals = {t["team"]: (t["chip_hours"], t["cost"]) for t in every["teams"]}
    assert totals == {OWN: (8.0, 24.0), OTHER: (8.0, 24.0)}
    own = world.http.get("/v1/usage", headers=_as(world, "viewer")).json()
    assert [t["team"] for t in own["teams"]] == [OWN]
    assert world.http.get(f"/v1/usage?team={OTHER}", headers=_as(world, "viewer")).status_code == 403
    local = _local(world.home).usage(team=OTHER, since="1d")
    assert [(r["team"], r["pool"], r["chip_hours"]) for r in local["rows"]] == [(OTHER, "h100", 8.0)]


def test_rotating_keeps_the_expiry_and_refuses_the_old_secret_at_once(world: World) -> None:
    from crossrail.errors import ConflictError

    c = _local(world.home)
    old = c.token_create(team=OWN, role="viewer", user="rot", expires="3h")
    new = c.token_rotate(old["id"])
    assert (new["team"], new["role"], new["user"], new["expires_at"]) == (OWN, "viewer", "rot", old["expires_at"])
    assert world.http.get("/v1/whoami", headers={"Authorization": f"Bearer {new['token']}"}).json()["user"] == "rot"
    refused = world.http.get("/v1/whoami", headers={"Authorization": f"Bearer {old['token']}"})
    assert refused.status_code == 401
    assert f"replaced by token {new['id']}" in refused.json()["message"]
    with pytest.raises(ConflictError, match="already revoked"):
        c.token_rotate(old["id"])
    states = {t["id"]: t["state"] for t in c.tokens()["tokens"]}
    assert (states[old["id"]], states[new["id"]]) == ("rotated", "active")
    assert all("secret_sha256" not in t and "token" not in t for t in c.tokens()["tokens"])


@pytest.mark.slow
def test_serve_beyond_loopback_requires_a_token_without_being_asked(world: World) -> None:
    import subprocess

    from tests.api.conftest import CROSSRAIL

    port = free_port()
    command = [CROSSRAIL, "serve", "--host", "0.0.0.0", "--port", str(port), "--home", str(world.home)]
    err = ""
    with subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True) as proc:
        try:
            url = f"http://127.0.0.1:{port}"
            deadline = time.monotonic() + 60
            while True:
                try:
                    if httpx.get(f"{url}/v1/health", timeout=1).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                assert proc.poll() is None, "crossrail serve exited"
                assert time.monotonic() < deadline, "crossrail serve did not start"
                time.sleep(0.1)
            assert httpx.get(f"{url}/v1/runs").status_code == 401
            assert httpx.get(f"{url}/metrics").status_code == 401
            assert httpx.get(f"{url}/v1/runs", headers=_as(world, "viewer")).status_code == 200
        finally:
            proc.terminate()
            err = proc.communicate(timeout=30)[1]
    assert "tokens required" in err


def test_the_python_client_sends_its_token_and_raises_the_servers_refusals(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    from crossrail.errors import ForbiddenError, UnauthenticatedError

    monkeypatch.delenv("CROSSRAIL_TOKEN", raising=False)
    with asgi_client(world.app, token=world.tokens["admin"]) as admin:
        assert admin.whoami()["user"] == "ada-admin"
        made = admin.token_create(team=OTHER, role="viewer", user="ops")
        assert made["token"].startswith("crt_")
        assert made["created_by"] == "ada-admin"
        assert made["id"] in {t["id"] for t in admin.tokens()["tokens"]}
        admin.token_revoke(made["id"])
        assert admin.audit(limit=1)["entries"][-1]["action"] == "POST /v1/tokens/{token_id}/revoke"
    monkeypatch.setenv("CROSSRAIL_TOKEN", world.tokens["viewer"])
    with Client(server="http://127.0.0.1:9") as viewer:  # $CROSSRAIL_TOKEN goes with every request
        assert viewer.transport._http.headers["authorization"] == f"Bearer {world.tokens['viewer']}"  # type: ignore[attr-defined]
    with asgi_client(world.app, token=world.tokens["viewer"]) as viewer:
        assert viewer.whoami()["role"] == "viewer"
        with pytest.raises(ForbiddenError, match="viewer tokens may not manage tokens"):
            viewer.tokens()
    monkeypatch.delenv("CROSSRAIL_TOKEN")
    with asgi_client(world.app) as nobody, pytest.raises(UnauthenticatedError, match="requires a token"):
        nobody.queue()


def test_another_teams_idempotency_key_is_refused_without_naming_its_run(world: World) -> None:
    theirs = {"document": world.experiment, "sets": ["metadata.team=alignment", "metadata.name=keyed"]}
    first = world.http.post(
        "/v1/runs", json=theirs | {"idempotencyKey": "k-shared"}, headers=_as(world, "admin", other=True)
    )
    assert first.status_code == 201, first.text
    before = _fingerprint(world)
    ours = {"document": world.experiment, "sets": ["metadata.name=keyed"], "idempotencyKey": "k-shared"}
    refused = world.http.post("/v1/runs", json=ours, headers=_as(world, "submitter"))
    assert refused.status_code == 403, refused.text
    assert "taken by a run of team alignment" in refused.json()["message"]
    assert first.json()["run"]["id"] not in refused.text
    assert _fingerprint(world) == before
    mine = world.http.post("/v1/runs", json=ours | {"idempotencyKey": "k-mine"}, headers=_as(world, "submitter"))
    changed = {**ours, "idempotencyKey": "k-mine", "sets": [*ours["sets"], "spec.priority=high"]}
    conflict = world.http.post("/v1/runs", json=changed, headers=_as(world, "submitter"))
    assert conflict.status_code == 409  # one's own key keeps its conflict, naming one's own run
    assert mine.json()["run"]["id"] in conflict.json()["message"]
