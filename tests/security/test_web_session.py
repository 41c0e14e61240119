"""The dashboard's browser session cannot be turned against its user, and the audit names the real peer.

A page of another origin (another port on the same host is the same *site*, so SameSite=Strict does not stop
its form posts) must not write through the dashboard's cookie, nor sign the browser in; bearer requests from
scripts work as before; `X-Forwarded-For` is believed only from proxies `serve --forwarded-allow-ips` names;
and another team's many runs do not push a team's own off its Runs page. Requests go through the ASGI app in
process, over one small workspace for the module.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.api.conftest import CROSSRAIL
from tests.conftest import api_app, free_port, in_process, wait_for

from crossrail.api.session import COOKIE
from crossrail.cli.serve import server_config
from crossrail.client import Client

HERE = "http://crossrail.test:8470"
"""The server as the browser addressed it (the Host header the test client sends)."""
OTHER_PORT = "http://crossrail.test:9999"
"""A page on another port of the same host: the same site, another origin."""
TEAM, OTHER = "foundation", "alignment"


class Browser:
    """Requests to an ASGI app in process, each from `peer`, to the server at `base`."""

    def __init__(self, app: Any, base: str = HERE, peer: tuple[str, int] = ("127.0.0.1", 40001)) -> None:
        self.app, self.base, self.peer = app, base, peer

    def request(self, method: str, path: str, **kw: Any) -> httpx.Response:
        with in_process(self.app, peer=self.peer, base_url=self.base) as http:  # a fresh client: it keeps no cookie
            response: httpx.Response = http.request(method, path, **kw)
            return response

    def get(self, path: str, **kw: Any) -> httpx.Response:
        return self.request("GET", path, **kw)

    def post(self, path: str, **kw: Any) -> httpx.Response:
        return self.request("POST", path, **kw)


@dataclass
class Site:
    home: Path
    local: Client
    browser: Browser  # a server that requires tokens, as a browser reaches it
    viewer: str  # tokens of team foundation
    submitter: str
    other_viewer: str  # a token of team alignment


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    root = tmp_path_factory.mktemp("web-session")
    Client.init(root)
    home = root / ".crossrail"
    with Client(home) as local:
        tokens = {r: local.token_create(team=TEAM, role=r, user=f"ada-{r}")["token"] for r in ("viewer", "submitter")}
        other = local.token_create(team=OTHER, role="viewer", user="mallory")["token"]
        with api_app(home, require_auth=True) as app:
            yield Site(home, local, Browser(app), tokens["viewer"], tokens["submitter"], other)


def _submit(site: Site, team: str = TEAM, name: str = "held") -> str:
    exp = site.home / "experiments" / "pretrain-small.yaml"
    return str(site.local.submit(exp, sets=[f"metadata.team={team}", f"metadata.name={name}"])["run"]["id"])


def _state(site: Site, run: str) -> str:
    return str(site.local.service.store.get_run(run).state)


def _last_audit(site: Site) -> dict[str, Any]:
    rows: list[dict[str, Any]] = site.local.service.store.audit(limit=1)
    return rows[-1]


def _signed_in(site: Site, token: str) -> dict[str, str]:
    """The cookie header a browser sends after signing in through the form on this server's page."""
    signed = site.browser.post(
        "/ui/login", data={"token": token, "next": "/ui/runs"}, headers={"Origin": HERE}, follow_redirects=False
    )
    assert signed.status_code == 303, signed.text
    cookie = signed.headers["set-cookie"].split(";")[0]
    assert cookie == f"{COOKIE}={token}"
    return {"Cookie": cookie}


def _csrf(site: Site, cookie: dict[str, str]) -> str:
    """The CSRF token the dashboard's pages hand the signed-in browser."""
    page = site.browser.get("/ui/runs", headers=cookie)
    assert page.status_code == 200
    found = re.search(r'<meta name="crossrail-csrf" content="([0-9a-f]+)">', page.text)
    assert found, "a signed-in page carries its session's CSRF token"
    return found.group(1)


def test_a_form_post_from_another_port_cannot_cancel_through_the_cookie(site: Site) -> None:
    run = _submit(site)
    cookie = _signed_in(site, site.submitter)
    before = site.local.service.store.audit_count()

    # What a form on http://crossrail.test:9999 makes the browser send: the cookie rides along, Origin says
    # where the page is. It cannot read this server's pages, so it has no CSRF token; given one, it is still
    # another origin.
    csrf = None
    for _ in range(2):
        sent = cookie | {"Origin": OTHER_PORT} | ({"X-CSRF-Token": csrf} if csrf else {})
        forged = site.browser.post(f"/v1/runs/{run}/cancel", headers=sent)
        assert forged.status_code == 403, forged.text
        assert forged.json()["kind"] == "Error"
        row = _last_audit(site)
        assert (row["action"], row["result"], row["status"]) == ("POST /v1/runs/{ref}/cancel", "refused", 403)
        assert (row["who"], row["target"]) == ("ada-submitter", run)
        csrf = _csrf(site, cookie)
    assert site.local.service.store.audit_count() == before + 2
    assert csrf is not None
    # Same origin without the session's token (or with another session's), or with no Origin at all: refused.
    other_csrf = _csrf(site, _signed_in(site, site.other_viewer))
    for headers in ({"Origin": HERE}, {"Origin": HERE, "X-CSRF-Token": other_csrf}, {"X-CSRF-Token": csrf}):
        assert site.browser.post(f"/v1/runs/{run}/cancel", headers=cookie | headers).status_code == 403
    assert _state(site, run) == "queued"


def test_the_dashboards_own_page_cancels_with_the_sessions_csrf_token(site: Site) -> None:
    cookie = _signed_in(site, site.submitter)
    csrf = _csrf(site, cookie)
    for sent_from in ({"Origin": HERE}, {"Referer": f"{HERE}/ui/runs"}):  # Referer where no Origin is sent
        run = _submit(site)
        done = site.browser.post(f"/v1/runs/{run}/cancel", headers=cookie | sent_from | {"X-CSRF-Token": csrf})
        assert done.status_code == 200, done.text
        assert _state(site, run) == "cancelled"
        row = _last_audit(site)
        assert (row["who"], row["target"], row["result"]) == ("ada-submitter", run, "ok")


def test_a_script_with_a_bearer_token_needs_no_origin_nor_csrf_token(site: Site) -> None:
    run = _submit(site)
    done = site.browser.post(f"/v1/runs/{run}/cancel", headers={"Authorization": f"Bearer {site.submitter}"})
    assert done.status_code == 200, done.text
    assert _state(site, run) == "cancelled"


def test_signing_in_from_another_origin_is_refused(site: Site) -> None:
    form = {"token": site.other_viewer, "next": "/ui/runs"}
    for headers in ({"Origin": OTHER_PORT}, {"Origin": "null"}, {"Referer": f"{OTHER_PORT}/x"}, {}):
        refused = site.browser.post("/ui/login", data=form, headers=headers, follow_redirects=False)
        assert refused.status_code == 403, (headers, refused.text)
        assert "set-cookie" not in refused.headers
        row = _last_audit(site)
        assert (row["action"], row["result"], row["status"]) == ("POST /ui/login", "refused", 403)
    assert _signed_in(site, site.other_viewer)  # from this server's own page: signed in


def test_a_token_in_a_link_from_another_site_does_not_sign_the_browser_in(site: Site) -> None:
    url = f"/ui/runs?token={site.viewer}"
    followed = site.browser.get(url, headers={"Sec-Fetch-Site": "same-site"})  # a link on another port's page
    assert followed.status_code == 200
    assert "set-cookie" not in followed.headers
    typed = site.browser.get(url, headers={"Sec-Fetch-Site": "none"})  # typed, or opened from a terminal
    assert typed.headers["set-cookie"].startswith(f"{COOKIE}={site.viewer};")


def test_a_page_elsewhere_cannot_write_as_the_anonymous_admin_of_loopback(tmp_path: Path) -> None:
    """A one-person workspace (no tokens) served on loopback without auth: the CLI is its anonymous admin."""
    Client.init(tmp_path)
    home = tmp_path / ".crossrail"
    with Client(home) as local:
        alone = Site(home, local, Browser(None), "", "", "")
        run, kept = _submit(alone), _submit(alone)
        with api_app(home, require_auth=False) as app:
            loopback = Browser(app, "http://127.0.0.1:8470")
            forged = loopback.post(f"/v1/runs/{run}/cancel", headers={"Origin": "http://evil.example"})
            assert forged.status_code == 403, forged.text
            assert _last_audit(alone)["result"] == "refused"
            assert _state(alone, run) == "queued"
            assert loopback.post(f"/v1/runs/{kept}/cancel").status_code == 200  # the CLI sends no Origin
            assert _state(alone, kept) == "cancelled"


def test_a_workspace_with_tokens_has_no_anonymous_admin_on_loopback_either(site: Site) -> None:
    """Where teams act (the store has tokens), a run's isolated command could reach a loopback server without
    auth and act as its anonymous admin: a request without a token is refused there too."""
    run = _submit(site)
    with api_app(site.home, require_auth=False) as app:
        loopback = Browser(app, "http://127.0.0.1:8470")
        refused = loopback.post(f"/v1/runs/{run}/cancel")
        assert refused.status_code == 401, refused.text
        assert (_last_audit(site)["result"], _last_audit(site)["status"]) == ("refused", 401)
        assert _state(site, run) == "queued"
        tokened = loopback.post(f"/v1/runs/{run}/cancel", headers={"Authorization": f"Bearer {site.submitter}"})
        assert tokened.status_code == 200, tokened.text


def _origin_through_serve(site: Site, run: str, forwarded_allow_ips: str | None) -> str:
    """The audited origin of a cancel from 127.0.0.1 claiming X-Forwarded-For 203.0.113.9, through the app as
    `crossrail serve` configures uvicorn."""
    with api_app(site.home, require_auth=True) as app:
        config = server_config(app, "127.0.0.1", 8470, forwarded_allow_ips)
        config.load()
        proxied = Browser(config.loaded_app, "http://127.0.0.1:8470", peer=("127.0.0.1", 40001))
        headers = {"Authorization": f"Bearer {site.submitter}", "X-Forwarded-For": "203.0.113.9"}
        assert proxied.post(f"/v1/runs/{run}/cancel", headers=headers).status_code == 200
    row = _last_audit(site)
    assert row["target"] == run
    return str(row["origin"])


@pytest.mark.slow
def test_x_forwarded_for_is_believed_only_from_named_proxies(site: Site) -> None:
    assert _origin_through_serve(site, _submit(site), None) == "127.0.0.1:40001"
    assert _origin_through_serve(site, _submit(site), "10.0.0.1") == "127.0.0.1:40001"
    assert _origin_through_serve(site, _submit(site), "127.0.0.1") == "203.0.113.9:0"


def test_behind_a_named_tls_proxy_the_dashboards_https_origin_is_this_servers(site: Site) -> None:
    """The proxy at 10.0.0.5 terminates TLS: the browser's Origin is https, the server hears http. Only a
    proxy the server believes can say so (X-Forwarded-Proto)."""
    sent = {"Origin": "https://crossrail.test", "X-Forwarded-Proto": "https"}
    form = {"token": site.viewer, "next": "/ui/runs"}
    for trusted, status in ((None, 403), ("10.0.0.5", 303)):
        with api_app(site.home, require_auth=True) as app:
            config = server_config(app, "127.0.0.1", 8470, trusted)
            config.load()
            proxied = Browser(config.loaded_app, "http://crossrail.test", peer=("10.0.0.5", 40001))
            signed = proxied.post("/ui/login", data=form, headers=sent, follow_redirects=False)
            assert signed.status_code == status, (trusted, signed.text)


@pytest.mark.slow
def test_crossrail_serve_believes_x_forwarded_for_only_from_the_proxy_it_names(site: Site) -> None:
    """A real `crossrail serve --forwarded-allow-ips 127.0.0.2`: the same header from 127.0.0.1 (loopback, which
    uvicorn alone would believe) is ignored, from the named proxy it is believed."""
    port = free_port()
    argv = [CROSSRAIL, "serve", "--port", str(port), "--home", str(site.home), "--forwarded-allow-ips", "127.0.0.2"]
    url = f"http://127.0.0.1:{port}"
    with subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) as server:
        try:
            wait_for(
                lambda: _answers(url), what=f"crossrail serve at {url}", timeout_s=60, interval_s=0.1, alive=server
            )
            _cancel_through(site, url)
        finally:
            server.terminate()


def _cancel_through(site: Site, url: str) -> None:
    for peer, origin in (("127.0.0.1", "127.0.0.1:"), ("127.0.0.2", "203.0.113.9:")):
        transport = httpx.HTTPTransport(local_address=peer)
        with httpx.Client(transport=transport, base_url=url, timeout=30) as http:
            claimed = {"X-Forwarded-For": "203.0.113.9", "Authorization": f"Bearer {site.submitter}"}
            sent = http.post(f"/v1/runs/nosuch-{peer}/cancel", headers=claimed)
        assert sent.status_code == 404
        row = _last_audit(site)
        assert row["target"] == f"nosuch-{peer}"
        assert str(row["origin"]).startswith(origin), (peer, row["origin"])


def _answers(url: str) -> bool:
    try:
        return httpx.get(f"{url}/v1/health", timeout=5).status_code == 200
    except httpx.TransportError:
        return False


@pytest.mark.slow
def test_another_teams_many_runs_leave_a_teams_runs_page_its_own(site: Site) -> None:
    own = _submit(site, TEAM, "mine")
    exp = site.home / "experiments" / "pretrain-small.yaml"
    flood = site.local.submit_many([exp] * 201, sets=[f"metadata.team={OTHER}", "metadata.name=flood"])
    assert len(flood["results"]) == 201
    page = site.browser.get("/ui/runs", headers={"Authorization": f"Bearer {site.viewer}"})
    assert page.status_code == 200
    assert own in page.text
    assert "flood-" not in page.text
    theirs = site.browser.get("/ui/runs", headers={"Authorization": f"Bearer {site.other_viewer}"}).text
    assert "flood-201" in theirs
