"""The /v1 API over a fresh workspace: the client's objects, one error shape, nothing changed on refusal."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.conftest import api_app, asgi_client, free_port, in_process, serving

from crossrail.client import Client
from crossrail.core import ManualClock
from crossrail.errors import NotFoundError, SpecError, UsageError

CLOCK = ManualClock()  # the server's and the local clients': objects with ages and waits compare equal

BAD = "apiVersion: crossrail/v1\nkind: Experiment\nmetadata:\n  name: bad\nspec:\n  stage: pretraining\n"


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("api")
    Client.init(root)
    return root / ".crossrail"


@pytest.fixture(scope="module")
def app(home: Path) -> Iterator[Any]:
    with api_app(home, clock=CLOCK) as app:
        yield app


@pytest.fixture(scope="module")
def http(app: Any) -> Iterator[httpx.Client]:
    """Requests the app answers in this process: no port (tests.conftest.in_process)."""
    with in_process(app) as http:
        yield http


def _experiment(home: Path) -> Path:
    return home / "experiments" / "pretrain-small.yaml"


def _counts(home: Path) -> dict[str, int]:
    with Client(home, clock=CLOCK) as c:
        return {"runs": len(c.service.store.list_runs()), "events": len(c.service.store.events())}


def test_submit_show_list_and_events_answer_the_clients_objects(home: Path, http: httpx.Client) -> None:
    exp = _experiment(home)
    body = {"document": exp.read_text(), "source": str(exp), "sets": ["metadata.name=api-a"], "idempotencyKey": "a"}
    created = http.post("/v1/runs", json=body)
    assert created.status_code == 201
    run = created.json()["run"]
    assert created.json()["apiVersion"] == "crossrail/v1"
    assert run["uid"]
    again = http.post("/v1/runs", json=body)
    assert again.status_code == 200
    assert again.json()["created"] is False
    assert again.json()["run"]["id"] == run["id"]
    for name in ("api-b", "api-c"):
        http.post("/v1/runs", json={**body, "sets": [f"metadata.name={name}"], "idempotencyKey": name})

    with Client(home, clock=CLOCK) as local:
        shown = http.get(f"/v1/runs/{run['id']}").json()
        expected = local.show(run["id"])
        assert shown == expected

    seen, cursor = [], None
    while True:
        page = http.get("/v1/runs", params={"limit": 2, "cursor": cursor, "stage": "pretraining"}).json()
        seen += [r["id"] for r in page["runs"]]
        cursor = page["next"]
        if cursor is None:
            break
    assert seen == ["api-c-1", "api-b-1", "api-a-1"]
    both = {"limit": 2, "state": ["queued", "running"], "team": run["team"]}
    first = http.get("/v1/runs", params=both).json()
    rest = http.get("/v1/runs", params={**both, "cursor": first["next"]}).json()
    assert [r["id"] for r in first["runs"] + rest["runs"]] == seen
    assert rest["next"] is None
    unknown = http.get("/v1/runs", params={"team": "nobody"})  # a team no fleet or run names: refused, not empty
    assert unknown.status_code == 404
    assert "no team 'nobody'" in unknown.json()["message"]

    events = http.get("/v1/events", params={"run": run["id"], "type": "queued"}).json()["events"]
    assert [e["type"] for e in events] == ["queued"]


def test_refusals_share_one_shape_and_change_nothing(home: Path, http: httpx.Client) -> None:
    before = _counts(home)
    missing = http.get("/v1/runs/no-such-run")
    assert missing.status_code == 404
    assert missing.json()["error"] == "NotFoundError"
    assert "no-such-run" in missing.json()["message"]
    assert http.post("/v1/runs/no-such-run/cancel").status_code == 404

    bad = http.post("/v1/runs", json={"document": BAD, "source": "bad.yaml"})
    assert bad.status_code == 422
    with Client(home, clock=CLOCK) as local, pytest.raises(SpecError) as local_error:
        local.submit_text(BAD, source="bad.yaml")
    assert bad.json()["problems"] == [p.as_dict() for p in local_error.value.problems]
    assert bad.json()["message"] == local_error.value.render()

    for page in ({"limit": -1}, {"offset": -2}, {"limit": "all"}):
        refused = http.get("/v1/queue", params=page)
        assert refused.status_code == 422
        assert {p["path"] for p in refused.json()["problems"]} == set(page)

    shapeless = http.post("/v1/runs", json={"documnet": "x", "sets": "not-a-list"})
    assert shapeless.status_code == 422
    paths = {p["path"] for p in shapeless.json()["problems"]}
    assert {"document", "documnet", "sets"} <= paths
    fleet = (home / "fleet.yaml").read_text()
    for source in ("fleet.yaml", "..", "."):
        refused = http.put("/v1/fleet", json={"document": "kind: Fleet\nspec: {}\n", "source": source})
        assert refused.status_code == 422
        assert refused.json()["problems"]
    assert (home / "fleet.yaml").read_text() == fleet
    assert _counts(home) == before


@pytest.mark.slow
def test_remote_client_returns_and_raises_what_the_local_one_does(home: Path, app: Any) -> None:
    with asgi_client(app) as remote, Client(home, clock=CLOCK) as local:
        assert type(remote) is Client  # one client; the transport differs
        assert (remote.is_local, local.is_local) == (False, True)
        assert remote.queue() == local.queue()
        assert remote.queue(limit=1, offset=1) == local.queue(limit=1, offset=1)
        assert remote.queue(limit=0) == local.queue(limit=0)
        assert remote.report() == local.report()
        assert remote.fleet_show() == local.fleet_show()
        assert remote.status() | {"agent": None} == local.status() | {"agent": None}
        with pytest.raises(NotFoundError, match="no-such-run"):
            remote.show("no-such-run")
        with pytest.raises(UsageError, match="a server lints with its own policy"):
            Client(server="http://127.0.0.1:9", policy=home / "policy.yaml")
        bad = home.parent / "bad.yaml"
        bad.write_text(BAD)
        with pytest.raises(SpecError) as remote_error:
            remote.submit(bad)
        with pytest.raises(SpecError) as local_error:
            local.submit(bad)
        assert remote_error.value.render() == local_error.value.render()


def test_events_follow_streams_new_events(home: Path, app: Any, http: httpx.Client) -> None:
    seen = http.get("/v1/events").json()["events"]
    last = seen[-1]["seq"] if seen else 0  # the module's other tests may have run first, elsewhere or not at all
    exp = _experiment(home)
    body = {"document": exp.read_text(), "source": str(exp), "sets": ["metadata.name=api-follow"]}
    with (
        serving(app, lifespan="off") as url,  # a stream that follows needs a socket
        httpx.stream("GET", f"{url}/v1/events", params={"after": last, "follow": 1}, timeout=20) as stream,
    ):
        assert stream.headers["content-type"].startswith("text/event-stream")
        assert http.post("/v1/runs", json=body).status_code == 201
        got = []
        for line in stream.iter_lines():
            if line.startswith("data: "):
                got.append(json.loads(line[6:]))
            if len(got) == 2:
                break
    assert [e["type"] for e in got] == ["submitted", "queued"]
    assert all(e["run"] == got[0]["run"] and e["run"].startswith("api-follow") and e["seq"] > last for e in got), got


def test_openapi_document_lists_the_endpoints(http: httpx.Client) -> None:
    paths = http.get("/v1/openapi.json").json()["paths"]
    for path in ("/v1/runs", "/v1/runs/{ref}", "/v1/queue", "/v1/events", "/v1/ingest/{run}/{attempt}", "/v1/fleet"):
        assert path in paths


@pytest.mark.slow
def test_serve_with_an_agent_runs_one_in_process_and_stops_it_with_the_app(tmp_path: Path) -> None:
    from crossrail.api import create_app
    from crossrail.control.agent.lock import agent_running
    from crossrail.control.agent.loop import AgentConfig

    Client.init(tmp_path)
    home = tmp_path / ".crossrail"
    app = create_app(home, agent=True, agent_config=AgentConfig(poll_s=0.05))
    with serving(app) as url:  # the app's lifespan starts and stops its agent
        (agent,) = httpx.get(f"{url}/v1/agents").json()["agents"]
        assert agent["alive"] is True
        assert agent["pid"] == os.getpid()
        assert agent_running(home)  # the server's agent holds the workspace's lock
    with Client(home) as c:
        (row,) = c.agents()["agents"]
    assert row["alive"] is False
    assert row["stopped_at"] is not None


def test_the_api_docs_load_every_file_from_this_server(http: httpx.Client) -> None:
    import re

    page = http.get("/v1/docs")
    assert page.status_code == 200
    loaded = re.findall(r'(?:src|href)="([^"]+)"', page.text)
    assert "/v1/docs/static/swagger-ui-bundle.js" in loaded
    assert "'/v1/openapi.json'" in page.text
    for url in loaded:
        assert url.startswith("/v1/docs/static/"), url  # nothing from a CDN: the page works offline
        got = http.get(url)
        assert got.status_code == 200, url
        assert len(got.content) > 100
    assert "SwaggerUIBundle" in http.get("/v1/docs/static/swagger-ui-bundle.js").text
    assert http.get("/v1/docs/static/..%2Fswagger-ui.js").status_code == 404


def test_a_browser_refused_a_dashboard_page_gets_a_page_and_a_script_gets_json(http: httpx.Client) -> None:
    browser = {"accept": "text/html,application/xhtml+xml,*/*;q=0.8"}
    missing = http.get("/ui/runs/no-such-run", headers=browser)
    assert (missing.status_code, missing.headers["content-type"]) == (404, "text/html; charset=utf-8")
    assert "<title>404 · Not found · crossrail</title>" in missing.text
    assert "no run or experiment named &#39;no-such-run&#39;" in missing.text
    assert '<a href="/ui/runs">Back to the runs</a>' in missing.text
    nowhere = http.get("/ui/nowhere", headers=browser)
    assert nowhere.status_code == 404
    assert "no page /ui/nowhere on this server" in nowhere.text
    bad = http.get("/ui/report", params={"before": "zzz", "after": "yyy"}, headers=browser)
    assert (bad.status_code, bad.headers["content-type"]) == (400, "text/html; charset=utf-8")
    assert "is not KEY=VALUE" in bad.text
    for page in (missing, nowhere, bad):
        assert not re.search(r"\b(None|nan)\b", page.text)
    scripted = http.get("/ui/runs/no-such-run")  # no text/html asked for: the API's one error shape
    assert scripted.json()["error"] == "NotFoundError"
    assert http.get("/v1/runs/no-such-run", headers=browser).json()["status"] == 404


@pytest.mark.slow
def test_serve_on_a_busy_port_says_which_port_and_who_holds_it_and_never_that_it_started(home: Path) -> None:
    import socket
    import subprocess
    import sys

    exe = str(Path(sys.executable).with_name("crossrail"))
    env = {k: v for k, v in os.environ.items() if k not in ("CROSSRAIL_HOME", "CROSSRAIL_SERVER")}
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        done = subprocess.run(
            [exe, "serve", "--port", str(port), "--home", str(home)],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    assert done.returncode == 2
    (line,) = done.stderr.splitlines()
    assert line.startswith(f"crossrail: port {port} on 127.0.0.1 is in use by pid {os.getpid()} (")
    assert line.endswith(f"pass another --port (e.g. --port {port + 1})")
    assert "crossrail serve on" not in done.stderr


@pytest.mark.slow
def test_the_serve_command_serves_until_interrupted_even_with_a_stream_open(home: Path) -> None:
    import signal
    import subprocess
    import sys
    import time

    port = free_port()
    exe = str(Path(sys.executable).with_name("crossrail"))
    env = {k: v for k, v in os.environ.items() if k not in ("CROSSRAIL_HOME", "CROSSRAIL_SERVER")}
    proc = subprocess.Popen(
        [exe, "serve", "--port", str(port), "--home", str(home)], env=env, stderr=subprocess.PIPE, text=True
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                assert httpx.get(f"{url}/v1/health").json()["ok"] is True
                break
            except httpx.TransportError:
                assert proc.poll() is None, "crossrail serve exited"
                assert time.monotonic() < deadline, "crossrail serve did not start"
                time.sleep(0.1)
        with httpx.stream("GET", f"{url}/v1/events", params={"follow": 1}, timeout=30) as stream:
            assert next(stream.iter_lines()) == ": following"
            proc.send_signal(signal.SIGINT)
            assert proc.wait(15) == 0
    finally:
        proc.kill()
        _, err = proc.communicate()
    assert f"crossrail serve on {url}/v1" in err
    assert "Traceback" not in err
