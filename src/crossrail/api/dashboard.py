"""The dashboard: server-rendered pages under `/ui` over the app's client (docs/dashboard.md).

Each page is a view (a function building plain data from the client and the store) rendered by a Jinja2
template in `api/web/templates`. The pages load only `/ui/static/*` from this server; the one script
(`refresh.js`) reloads the part of a page marked `data-refresh` every few seconds.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from fastapi import APIRouter, HTTPException, Request
from fastapi.responses import FileResponse, HTMLResponse, RedirectResponse, Response

from crossrail.api.auth import CSRF_META, login_cookie, request_actor, scoped, session_csrf
from crossrail.control.operations import Operations
from crossrail.core import format_duration, format_money
from crossrail.errors import NotFoundError, UnauthenticatedError, UsageError

WEB = Path(__file__).with_name("web")
STATIC = {"style.css": "text/css", "refresh.js": "text/javascript"}
PAGES = [("runs", "Runs"), ("queues", "Queues"), ("lineage", "Lineage"), ("fleet", "Fleet"), ("report", "Metrics")]
HIDDEN_EVENTS = frozenset({"heartbeat", "reported"})
LOG_TAIL_LINES = 40

router = APIRouter(include_in_schema=False)


def _templates() -> Any:
    from jinja2 import Environment, FileSystemLoader, pass_context, select_autoescape

    env = Environment(
        loader=FileSystemLoader(WEB / "templates"),
        autoescape=select_autoescape(["html"]),
        finalize=_shown,  # what a page prints for a value it lacks: '-', never None or nan
    )
    env.filters["duration"] = lambda s: format_duration(None if s is None else float(s))
    env.filters["num"] = lambda v, digits=3: "-" if v is None else f"{v:.{digits}f}"
    env.filters["money"] = pass_context(lambda ctx, v: format_money(v, ctx.get("currency") or "USD"))
    env.filters["pct"] = lambda v: "-" if v is None else f"{100 * v:.0f}%"
    return env


def _shown(value: Any) -> Any:
    """A value as a page prints it: '-' for nothing (None) or a number that is none (nan)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return value


_ENV = _templates()


def _page(request: Request, template: str, title: str, **context: Any) -> HTMLResponse:
    html = _ENV.get_template(template).render(
        pages=PAGES,
        title=title,
        path=request.url.path,
        csrf=session_csrf(request.scope),  # a write a page makes carries it (docs/auth.md)
        csrf_meta=CSRF_META,
        currency=request.app.state.client.service.fleet.spec.currency,  # of every amount the page shows
        **context,
    )
    return HTMLResponse(html)


def _client(request: Request) -> Operations:
    """The app's client as the request's actor may use it: other teams' runs hidden (docs/auth.md)."""
    return scoped(request)


@router.get("/", response_class=RedirectResponse)
def home() -> RedirectResponse:
    return RedirectResponse("/ui/runs")


@router.get("/ui", response_class=RedirectResponse)
@router.get("/ui/", response_class=RedirectResponse)
def ui_home() -> RedirectResponse:
    return RedirectResponse("/ui/runs")


def login_page(next_path: str, message: str | None = None, status: int = 401) -> HTMLResponse:
    """The sign-in form a browser gets for a page it may not see yet: its token, posted to `/ui/login`, goes
    into the dashboard's cookie and the browser back to `next_path`."""
    html = _ENV.get_template("login.html").render(
        pages=[], title="Sign in", path="/ui/login", next=_page_after_login(next_path), message=message
    )
    return HTMLResponse(html, status_code=status)


ERROR_TITLES = {400: "Bad request", 401: "Sign-in needed", 403: "Not allowed", 404: "Not found", 422: "Not valid"}
ERROR_HINTS = {
    401: "This page needs an API token; sign in from any page of the dashboard.",
    403: "Your token's role may not do this; an admin can make a token whose role may.",
    404: "Nothing of that name that your token can see; the Runs page lists what it can.",
    422: "The page's parameters were not valid; fix them as said above.",
}


def wants_page(scope: Any) -> bool:
    """Whether a refusal goes to a person's browser on a dashboard page (HTML), not to a script (JSON)."""
    path = str(scope.get("path", ""))
    if scope.get("method") not in ("GET", "HEAD") or not path.startswith("/ui/") or path.startswith("/ui/static/"):
        return False
    accept = dict(scope.get("headers") or []).get(b"accept", b"").decode("latin-1")
    return "text/html" in accept


def error_page(status: int, message: str, path: str, problems: list[dict[str, Any]] | None = None) -> HTMLResponse:
    """A refusal of a dashboard page as a page: what went wrong, in the API's words, and where to go next."""
    if status == 404 and message == "Not Found":  # no route: Starlette's words say less than the path
        message = f"no page {path} on this server"
    html = _ENV.get_template("error.html").render(
        pages=PAGES,
        title=f"{status} · {ERROR_TITLES.get(status, 'Refused')}",
        path=path,
        message=message,
        problems=problems or [],
        hint=ERROR_HINTS.get(status, "The Runs page lists what this server holds."),
    )
    return HTMLResponse(html, status_code=status)


def _page_after_login(path: str) -> str:
    """A dashboard page of this server to go to after signing in (never another site's)."""
    return path if path.startswith("/ui/") and not path.startswith("/ui/login") and "//" not in path else "/ui/runs"


@router.post("/ui/login")
async def login(request: Request) -> Response:
    """The sign-in form's post: a valid token goes into the dashboard's HttpOnly cookie (as `?token=` does);
    a missing or dead one gets the form again, saying why (401, audited)."""
    from urllib.parse import parse_qs

    from starlette.concurrency import run_in_threadpool

    form = parse_qs((await request.body()).decode("utf-8", "replace"))
    secret, after = form.get("token", [""])[0].strip(), form.get("next", ["/ui/runs"])[0]
    origin = f"{request.client.host}:{request.client.port}" if request.client else "unknown"
    try:
        await run_in_threadpool(request_actor, request.app.state.client, secret or None, origin, require_auth=True)
    except UnauthenticatedError as exc:
        request.scope.setdefault("state", {})["refusal"] = str(exc)
        return login_page(after, str(exc) if secret else "Paste a token to sign in.")
    answer = RedirectResponse(_page_after_login(after), status_code=303)
    answer.headers.append("set-cookie", login_cookie(secret))
    return answer


@router.get("/ui/static/{name}")
def static(name: str) -> Response:
    if name not in STATIC:
        raise HTTPException(404, f"no static file {name!r}")
    return FileResponse(WEB / "static" / name, media_type=STATIC[name])


@router.get("/ui/runs", response_class=HTMLResponse)
def runs_page(request: Request) -> HTMLResponse:
    c = _client(request)
    return _page(request, "runs.html", "Runs", runs=c.visible(runs_view(c)))


@router.get("/ui/runs/{ref}", response_class=HTMLResponse)
def run_page(request: Request, ref: str) -> HTMLResponse:
    try:
        view = run_view(_client(request), ref)
    except NotFoundError as exc:
        raise HTTPException(404, str(exc)) from None
    return _page(request, "run.html", view["run"]["id"], **view)


@router.get("/ui/queues", response_class=HTMLResponse)
def queues_page(request: Request) -> HTMLResponse:
    return _page(request, "queues.html", "Queues", queues=_client(request).queue()["queues"])


@router.get("/ui/lineage", response_class=HTMLResponse)
def lineage_page(request: Request) -> HTMLResponse:
    return _page(request, "lineage.html", "Lineage", **lineage_view(_client(request)))


@router.get("/ui/fleet", response_class=HTMLResponse)
def fleet_page(request: Request) -> HTMLResponse:
    c = _client(request)
    agents = [a | {"heartbeat_age_s": _age(a.get("heartbeat_at"), c)} for a in c.agents()["agents"]]
    return _page(request, "fleet.html", "Fleet", fleet=c.fleet_show(), queues=c.queue()["queues"], agents=agents)


def _age(ts: float | None, c: Operations) -> float | None:
    return None if ts is None else max(0.0, c.clock.now() - float(ts))


@router.get("/ui/report", response_class=HTMLResponse)
def report_page(request: Request, before: str | None = None, after: str | None = None) -> HTMLResponse:
    from crossrail.control.report_doc import figures_html

    doc = _report_doc(request, before, after)
    query = f"?{request.url.query}" if request.url.query else ""
    shown = "\n".join(figures_html(doc, "/ui/report/figures/", query))
    return _page(request, "report.html", "Metrics", report=_client(request).report(), figures=shown)


@router.get("/ui/report/figures/{name}.png")
def report_figure(request: Request, name: str, before: str | None = None, after: str | None = None) -> Response:
    """A figure of the report page, drawn by the same code as `crossrail report --out` (control/figures.py)."""
    doc = _report_doc(request, before, after)
    fig = next((f for f in doc.figures if f.name == name), None)
    if fig is None or fig.png is None:
        raise HTTPException(404, f"no figure {name!r}" if fig is None else f"{name} is not drawn: {fig.note}")
    return Response(fig.png, media_type="image/png", headers={"Cache-Control": "no-store"})


REPORT_CACHE_S = 30.0
"""A page and its figures are drawn from one report, reused this long (drawing costs about a second)."""


def _report_doc(request: Request, before: str | None, after: str | None) -> Any:
    from crossrail.control import report_doc
    from crossrail.control.facts import stored_sim_runs

    c = _client(request)
    now = c.clock.now()
    key = (before, after, c.sight)  # selections pick from the runs the actor sees: one report per sight
    cached = getattr(request.app.state, "report_doc", None)
    if cached is not None and cached[0] == key and 0 <= now - cached[1].generated_at < REPORT_CACHE_S:
        return cached[1]
    service = c.service
    try:
        doc = report_doc.build(
            service.store,
            service.fleet,
            now,
            before=before,
            after=after,
            sight=c.sight,
            simulation=stored_sim_runs(service.store),
        )
    except UsageError as exc:
        raise HTTPException(400, str(exc)) from None
    request.app.state.report_doc = (key, doc)
    return doc


# --- views -------------------------------------------------------------------------------------------


def runs_view(c: Operations, limit: int = 200) -> list[dict[str, Any]]:
    """The newest runs the actor sees (its team's and those shared with it; an admin's: every team's) with
    their pool, step, latest loss and last committed checkpoint. The store picks the newest of those teams, so
    other teams' runs never crowd them out."""
    from crossrail.control.service import summary

    store, now = c.service.store, c.clock.now()
    runs = store.list_runs(limit=limit, teams=c.sight.teams)
    last = store.last_attempts(r.id for r in runs)
    out = []
    for run in runs:
        losses = store.metric_samples(run.id, "loss")
        committed = [k for k in store.checkpoints(run.id) if k.state == "committed"]
        attempt = last.get(run.id)
        out.append(
            summary(run, now)
            | {
                "pool": attempt.pool if attempt else None,
                "attempts": attempt.number if attempt else 0,
                "step": losses[-1]["step"] if losses else None,
                "loss": losses[-1]["value"] if losses else None,
                "checkpoint_step": committed[-1].step if committed else None,
            }
        )
    return out


def run_view(c: Operations, ref: str) -> dict[str, Any]:
    """One run: attempts with their placements and moves, explained events, checkpoints, loss curve, log tail."""
    shown = c.show(ref)
    run_id = shown["run"]["id"]
    pools = {a["number"]: a["pool"] for a in shown["attempts"]}
    placements = {p["attempt"]: p for p in shown["placements"] if p.get("type") == "placed"}
    attempts = []
    for a in shown["attempts"]:
        before = pools.get(a["number"] - 1)
        moved_from = before if before and before != a["pool"] else None
        attempts.append(a | {"placement": placements.get(a["number"]), "moved_from": moved_from})
    events = [e for e in shown["events"] if e["type"] not in HIDDEN_EVENTS]
    losses = c.service.store.metric_samples(run_id, "loss")
    logs = c.logs(run_id)["attempts"]
    for entry in logs:
        entry["tail"] = "\n".join((entry["log"] or "").splitlines()[-LOG_TAIL_LINES:])
    derived = [r for r in c.service.store.list_runs() if r.parent_run == run_id and c.sight.sees(r.team)]
    return {
        "run": shown["run"],
        "lineage": shown["lineage"],
        "attempts": attempts,
        "events": events,
        "checkpoints": shown["checkpoints"],
        "curve": loss_curve(losses),
        "logs": logs,
        "derived": [{"id": r.id, "state": r.state, "stage": r.stage} for r in derived],
    }


def loss_curve(samples: list[dict[str, Any]], width: int = 640, height: int = 220) -> dict[str, Any] | None:
    """An inline SVG's geometry: one polyline per attempt over (step, loss), axes' extremes for labels."""
    points = [(s["step"], s["value"], s.get("attempt")) for s in samples if s.get("step") is not None]
    points = [p for p in points if math.isfinite(p[1])]
    if len(points) < 2:  # a curve needs two points
        return None
    pad = 36
    steps, values = [p[0] for p in points], [p[1] for p in points]
    x0, x1, y0, y1 = min(steps), max(steps), min(values), max(values)

    def xy(step: float, value: float) -> str:
        x = pad + (step - x0) / ((x1 - x0) or 1) * (width - 2 * pad)
        y = height - pad - (value - y0) / ((y1 - y0) or 1) * (height - 2 * pad)
        return f"{x:.1f},{y:.1f}"

    lines: dict[Any, list[str]] = {}
    for step, value, attempt in points:
        lines.setdefault(attempt, []).append(xy(step, value))
    return {
        "width": width,
        "height": height,
        "pad": pad,
        "lines": [{"attempt": a, "points": " ".join(p)} for a, p in lines.items()],
        "step_range": (x0, x1),
        "loss_range": (y0, y1),
        "count": len(points),
    }


def lineage_view(c: Operations) -> dict[str, Any]:
    """Datasets → runs → checkpoints → derived runs, and the edges from a checkpoint to the runs it started
    (of the runs the actor may see)."""
    store = c.service.store
    runs = [r for r in store.list_runs(newest_first=False) if c.sight.sees(r.team)]
    checkpoints = {r.id: [k.as_dict() for k in store.checkpoints(r.id)] for r in runs}
    by_uri_ckpt = {k["uri"]: (rid, k) for rid, ks in checkpoints.items() for k in ks}
    edges = []
    seen = {r.id for r in runs}
    for run in runs:
        if run.parent_run is None or run.parent_run not in seen:  # a parent it may not see is not named
            continue
        resolved = [a.parent_checkpoint for a in store.attempts(run.id) if a.parent_checkpoint]
        uri = resolved[-1] if resolved else None
        found = by_uri_ckpt.get(uri) if uri else None
        step = found[1]["step"] if found else None
        edges.append({"parent": run.parent_run, "step": step, "child": run.id, "uri": uri or run.parent_checkpoint})
    datasets: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for run in runs:
        row = {"id": run.id, "stage": run.stage, "state": run.state, "checkpoints": checkpoints[run.id]}
        row["derived"] = [e for e in edges if e["parent"] == run.id]
        datasets.setdefault((run.dataset_uri, run.dataset_version), []).append(row)
    listed = [{"uri": uri, "version": version, "runs": rows} for (uri, version), rows in datasets.items()]
    return {"datasets": listed, "edges": edges}
