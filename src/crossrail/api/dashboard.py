"""The dashboard: server-rendered pages under `/ui` over the app's client (docs/dashboard.md).

Each page is a view (a function building plain data from the client and the store) rendered by a Jinja2
template in `api/web/templates`. The pages load only `/ui/static/*` from this server; the one script
(`refresh.js`) reloads the part of a page marked `data-refresh` every few seconds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from fastapi import APIRouter, HTTPException, Request
from fastapi.responses import FileResponse, HTMLResponse, RedirectResponse, Response

from crossrail.api.middleware import request_actor
from crossrail.api.pages import ENV, PAGES, STATIC, WEB, login_page, page_after_login
from crossrail.api.session import CSRF_META, login_cookie, session_csrf
from crossrail.api.teamview import scoped
from crossrail.control.ops.operations import Operations
from crossrail.errors import NotFoundError, UnauthenticatedError, UsageError

HIDDEN_EVENTS = frozenset({"heartbeat", "reported"})
LOG_TAIL_LINES = 40

router = APIRouter(include_in_schema=False)


def _page(request: Request, template: str, title: str, **context: Any) -> HTMLResponse:
    html = ENV.get_template(template).render(
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
    answer = RedirectResponse(page_after_login(after), status_code=303)
    answer.headers.append("set-cookie", login_cookie(secret))
    return answer


@router.get("/ui/static/{name}")
def static(name: str) -> Response:
    if name not in STATIC:
        raise HTTPException(404, f"no static file {name!r}")
    return FileResponse(WEB / "static" / name, media_type=STATIC[name])


@router.get("/ui/runs", response_class=HTMLResponse)
def runs_page(
    request: Request,
    *,
    team: str | None = None,
    stage: str | None = None,
    pool: str | None = None,
    state: str | None = None,
    experiment: str | None = None,
    sweep: str | None = None,
    q: str | None = None,
) -> HTMLResponse:
    c = _client(request)
    options = filter_options(c)
    try:
        given = {"team": team, "stage": stage, "pool": pool, "state": state, "experiment": experiment}
        chosen = RunFilter.of(options, **given, sweep=sweep, q=q)
        runs, scanned = runs_view(c, chosen)
    except UsageError as exc:
        raise HTTPException(400, str(exc)) from None
    except NotFoundError as exc:  # a sweep the actor sees no member of
        raise HTTPException(404, str(exc)) from None
    return _page(
        request,
        "runs.html",
        "Runs",
        runs=runs,
        chosen=chosen,
        scanned=scanned,
        options=options,
    )


@router.get("/ui/runs/{ref}", response_class=HTMLResponse)
def run_page(request: Request, ref: str) -> HTMLResponse:
    try:
        view = run_view(_client(request), ref)
    except NotFoundError as exc:
        raise HTTPException(404, str(exc)) from None
    return _page(request, "run.html", view["run"]["id"], **view)


@router.get("/ui/queues", response_class=HTMLResponse)
def queues_page(request: Request) -> HTMLResponse:
    c = _client(request)
    quotas: dict[str, list[dict[str, Any]]] = {}
    for row in c.fleet_show()["quotas"]:  # the scheduling core's count, as `fleet show` reads it
        quotas.setdefault(row["queue"], []).append(row)
    return _page(request, "queues.html", "Queues", queues=c.queue()["queues"], quotas=quotas, backlog=backlog_view(c))


@router.get("/ui/sweeps/{sweep}", response_class=HTMLResponse)
def sweep_page(request: Request, sweep: str, metric: str = "loss") -> HTMLResponse:
    """A sweep's members ranked by `metric` (`crossrail sweep show`), and the metric against each parameter."""
    try:
        view = sweep_view(_client(request), sweep, metric.strip() or "loss")
    except NotFoundError as exc:
        raise HTTPException(404, str(exc)) from None
    except UsageError as exc:
        raise HTTPException(400, str(exc)) from None
    return _page(request, "sweep.html", f"Sweep {view['sweep']['id']}", **view)


@router.get("/ui/compare", response_class=HTMLResponse)
def compare_page(request: Request, metric: str = "loss") -> HTMLResponse:
    """The curves of the runs ticked on the Runs page (`?run=A&run=B`), one line each, over their steps."""
    c = _client(request)
    refs = [v for k, v in request.query_params.multi_items() if k == "run" and v]
    if not refs:
        raise HTTPException(400, "tick the runs to compare on the Runs page (?run=A&run=B)")
    if len(refs) > COMPARE_MAX:
        raise HTTPException(400, f"{len(refs)} runs ticked; compare at most {COMPARE_MAX} at once")
    try:
        view = compare_view(c, refs, metric.strip() or "loss")
    except NotFoundError as exc:
        raise HTTPException(404, str(exc)) from None
    return _page(request, "compare.html", f"Compare {view['metric']}", **view)


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
    from crossrail.control.reports.report_doc import figures_html

    doc = _report_doc(request, before, after)
    query = f"?{request.url.query}" if request.url.query else ""
    shown = "\n".join(figures_html(doc, "/ui/report/figures/", query))
    return _page(request, "report.html", "Metrics", report=_client(request).report(), figures=shown)


@router.get("/ui/report/figures/{name}.png")
def report_figure(request: Request, name: str, before: str | None = None, after: str | None = None) -> Response:
    """A figure of the report page, drawn by the same code as `crossrail report --out` (control/reports/figures.py)."""
    doc = _report_doc(request, before, after)
    fig = next((f for f in doc.figures if f.name == name), None)
    if fig is None or fig.png is None:
        raise HTTPException(404, f"no figure {name!r}" if fig is None else f"{name} is not drawn: {fig.note}")
    return Response(fig.png, media_type="image/png", headers={"Cache-Control": "no-store"})


REPORT_CACHE_S = 30.0
"""A page and its figures are drawn from one report, reused this long (drawing costs about a second)."""


def _report_doc(request: Request, before: str | None, after: str | None) -> Any:
    from crossrail.control.reports import report_doc
    from crossrail.control.reports.facts import stored_sim_runs

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

RUNS_SHOWN = 200
"""The Runs page lists the newest this many runs that pass its filters."""
RUNS_SCANNED = 5000
"""Filters the store cannot apply (pool, search) look through the newest this many runs of the others."""
COMPARE_MAX = 12


@dataclass(frozen=True)
class RunFilter:
    """What the Runs page's filters ask for (None: any). `q` searches run ids and experiment names; `sweep`
    keeps the members of that sweep (`crossrail sweep show`)."""

    team: str | None = None
    stage: str | None = None
    pool: str | None = None
    state: str | None = None
    experiment: str | None = None
    sweep: str | None = None
    q: str | None = None

    @classmethod
    def of(cls, allowed: dict[str, list[str]], **given: str | None) -> RunFilter:
        """The filters given (blank ones dropped), each one `allowed` lists a value of being one of those, every
        bad value gathered into one UsageError that says which values would do."""
        kept = {k: v.strip() for k, v in given.items() if v is not None and v.strip()}
        problems = [
            f"{key} {kept[key]!r} is not one of {', '.join(values) or '(none)'}"
            for key, values in allowed.items()
            if key in kept and kept[key] not in values
        ]
        if problems:
            raise UsageError("; ".join(problems))
        return cls(**kept)

    @property
    def active(self) -> bool:
        return any(v is not None for v in vars(self).values())

    def matches(self, row: dict[str, Any]) -> bool:
        """Whether a run's row (its summary, pool and sweep) passes every filter."""
        for key in ("team", "stage", "pool", "state", "experiment", "sweep"):
            wanted = getattr(self, key)
            if wanted is not None and row.get(key) != wanted:
                return False
        needle = (self.q or "").lower()
        return not needle or needle in row["id"].lower() or needle in str(row.get("experiment", "")).lower()


def filter_options(c: Operations) -> dict[str, list[str]]:
    """The values the Runs page's filters offer: the teams the actor sees (of the fleet and the store), stages,
    states and the fleet's pools."""
    from crossrail.core import RUN_STATES
    from crossrail.spec import Stage

    named = set(c.service.fleet.spec.teams) | set(c.service.store.team_names())
    return {
        "team": sorted(t for t in named if c.sight.sees(t)),
        "stage": [str(s) for s in Stage],
        "state": [str(s) for s in RUN_STATES],
        "pool": list(c.service.fleet.pool_names),
    }


def sweep_of(run: Any) -> str | None:
    """The sweep a run is a member of (its label, as `sweep submit` writes it), or None."""
    from crossrail.control.ops.sweeps import SWEEP_LABEL

    labels = ((run.spec or {}).get("metadata") or {}).get("labels") or {}
    found = labels.get(SWEEP_LABEL)
    return found if isinstance(found, str) else None


def runs_view(
    c: Operations, chosen: RunFilter | None = None, limit: int = RUNS_SHOWN
) -> tuple[list[dict[str, Any]], int]:
    """The newest runs the actor sees (its team's and those shared with it; an admin's: every team's) that pass
    `chosen`, with their pool, sweep, step, the step they train to and when they get there, latest loss, cost
    so far and last committed checkpoint; and how many runs the filters looked through when the store could
    not apply them all (0 when it could). The store picks the newest of the actor's teams, so other teams' runs
    never crowd them out; a sweep's members are those `sweep show` lists."""
    from crossrail.control.service import summary
    from crossrail.control.service.progress import run_costs, run_finish

    chosen = chosen or RunFilter()
    store, now = c.service.store, c.clock.now()
    if chosen.sweep is not None:
        members = [m["run"] for m in c.sweep_show(chosen.sweep)["members"]]
        runs = sorted(store.runs_by_id(members).values(), key=lambda r: (r.created_at, r.id), reverse=True)
        scanned = 0
    else:
        later = chosen.pool is not None or chosen.q is not None  # filters the store cannot apply
        teams = c.sight.teams if chosen.team is None else {chosen.team}  # a team offered is one the actor sees
        runs = store.list_runs(
            limit=RUNS_SCANNED if later else limit,
            teams=teams,
            stage=chosen.stage,
            states=None if chosen.state is None else [chosen.state],
            experiment=chosen.experiment,
        )
        scanned = len(runs) if later else 0
    last = store.last_attempts(r.id for r in runs)
    rows = []
    for run in runs:
        attempt = last.get(run.id)
        row = summary(run, now) | {
            "pool": attempt.pool if attempt else None,
            "attempts": attempt.number if attempt else 0,
            "sweep": sweep_of(run),
        }
        if c.sight.sees(run.team) and chosen.matches(row):
            rows.append((run, row))
        if len(rows) == limit:
            break
    shown = [run for run, _ in rows]
    finish, costs = run_finish(store, shown, now), run_costs(store, shown, now)
    out = []
    for run, row in rows:
        losses = store.metric_samples(run.id, "loss")
        committed = [k for k in store.checkpoints(run.id) if k.state == "committed"]
        out.append(
            row
            | {
                "step": losses[-1]["step"] if losses else None,
                "loss": losses[-1]["value"] if losses else None,
                "checkpoint_step": committed[-1].step if committed else None,
                "cost": costs.get(run.id),
                **finish.get(run.id, {"steps_total": None, "eta_s": None}),
            }
        )
    return out, scanned


def sweep_view(c: Operations, sweep: str, metric: str) -> dict[str, Any]:
    """`sweep show` of the sweep as the actor sees it, with one chart per parameter: each member's `metric`
    against its value of that parameter (numbers on a scale, other values side by side in grid order)."""
    shown = c.sweep_show(sweep, metric=metric)
    charts = []
    for name in shown["parameters"]:
        points = [(m["params"].get(name), m["metric"], m["run"]) for m in shown["members"] if name in m["params"]]
        charts.append({"parameter": name, "chart": scatter_chart(points)})
    return {"sweep": shown, "charts": charts}


def compare_view(c: Operations, refs: list[str], metric: str) -> dict[str, Any]:
    """The `metric` curves of the runs `refs` name (each one the actor sees; NotFoundError otherwise), one line
    per run over its steps: where a retry redid steps, the value reported last for a step stands."""
    series: dict[str, list[tuple[float, float]]] = {}
    runs = []
    for ref in dict.fromkeys(refs):
        run = c.seen(ref)
        by_step: dict[int, float] = {}
        for s in c.service.store.metric_samples(run.id, metric):
            if s.get("step") is not None and math.isfinite(s["value"]):
                by_step[int(s["step"])] = float(s["value"])
        series[run.id] = sorted(by_step.items())
        last = series[run.id][-1] if series[run.id] else None
        runs.append({"id": run.id, "state": run.state, "samples": len(by_step), "last": last})
    chart = lines_chart(series, width=900, height=360)
    return {"metric": metric, "runs": runs, "chart": chart, "refs": list(series)}


def backlog_view(c: Operations) -> list[dict[str, Any]]:
    """The RL pipelines running now that the actor sees, each queue's backlog as the learner last reported it
    (the samples `crossrail_rl_backlog_*` serves: length and age of the oldest item) and its length over time."""
    from crossrail.metrics.registry import BACKLOG

    store = c.service.store
    ids = sorted({a.run_id for a in store.active_attempts()})
    runs = [r for r in store.runs_by_id(ids).values() if c.sight.sees(r.team)]
    latest = {name: store.latest_samples([r.id for r in runs], name) for name in BACKLOG}
    out = []
    for run in sorted(runs, key=lambda r: r.id):
        queues = []
        for queue in ("samples", "scored"):
            length = latest[f"backlog_{queue}_length"].get(run.id)
            if length is None:
                continue
            age = latest[f"backlog_{queue}_age_seconds"].get(run.id)
            history = [
                (float(s["ts"]), float(s["value"])) for s in store.metric_samples(run.id, f"backlog_{queue}_length")
            ]
            queues.append(
                {
                    "queue": queue,
                    "length": length["value"],
                    "age_s": None if age is None else age["value"],
                    "spark": lines_chart({queue: history}, width=220, height=44, pad=4),
                }
            )
        if queues:
            out.append({"run": run.id, "team": run.team, "queues": queues})
    return out


def run_view(c: Operations, ref: str) -> dict[str, Any]:
    """One run: its progress, ETA and cost, attempts with their placements and moves (a fallback pool its current
    attempt took, as `status` says it), explained events, checkpoints, loss curve, log tail."""
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
    from crossrail.control.service.fallbacks import fallbacks
    from crossrail.control.service.progress import run_costs, run_finish

    store, record, now = c.service.store, c.service.get(run_id), c.clock.now()
    finish = run_finish(store, [record], now).get(run_id, {"steps_total": None, "eta_s": None})
    extra = {"cost": run_costs(store, [record], now).get(run_id), "fallback": fallbacks(store, [record]).get(run_id)}
    return {
        "run": shown["run"] | finish | extra,
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
    series: dict[Any, list[tuple[float, float]]] = {}
    for s in samples:
        if s.get("step") is not None:
            series.setdefault(s.get("attempt"), []).append((s["step"], s["value"]))
    chart = lines_chart(series, width=width, height=height)
    if chart is None:
        return None
    lines = [{"attempt": line["label"], "points": line["points"]} for line in chart["lines"]]
    return chart | {"lines": lines, "step_range": chart["x_range"], "loss_range": chart["y_range"]}


def lines_chart(
    series: dict[Any, list[tuple[float, float]]], *, width: int = 640, height: int = 220, pad: int = 36
) -> dict[str, Any] | None:
    """An inline SVG's geometry for lines on shared axes: one polyline per series over its finite (x, y) points,
    and the axes' extremes for labels; None with fewer than two points in all (nothing to draw a line through)."""
    kept = {k: [(x, y) for x, y in pts if math.isfinite(x) and math.isfinite(y)] for k, pts in series.items()}
    every = [p for pts in kept.values() for p in pts]
    if len(every) < 2:
        return None
    xs, ys = [p[0] for p in every], [p[1] for p in every]
    x0, x1, y0, y1 = min(xs), max(xs), min(ys), max(ys)

    def xy(x: float, y: float) -> str:
        left = pad + (x - x0) / ((x1 - x0) or 1) * (width - 2 * pad)
        top = height - pad - (y - y0) / ((y1 - y0) or 1) * (height - 2 * pad)
        return f"{left:.1f},{top:.1f}"

    lines = [  # `index`: the series' place among all given, so a colour keyed on it matches a legend of all
        {"label": label, "index": i, "points": " ".join(xy(x, y) for x, y in pts), "count": len(pts)}
        for i, (label, pts) in enumerate(kept.items(), 1)
        if pts
    ]
    return {
        "width": width,
        "height": height,
        "pad": pad,
        "lines": lines,
        "x_range": (x0, x1),
        "y_range": (y0, y1),
        "count": len(every),
    }


def scatter_chart(
    points: list[tuple[Any, float | None, str]], *, width: int = 420, height: int = 240, pad: int = 40
) -> dict[str, Any] | None:
    """An inline SVG's geometry for (x, y, label) points: numeric x on a linear scale, any other x values as
    evenly spaced ticks in the order first seen; points without a finite y are left out. None when none is left."""
    kept = [(x, float(y), label) for x, y, label in points if isinstance(y, int | float) and math.isfinite(y)]
    if not kept:
        return None
    numeric = all(isinstance(x, int | float) and not isinstance(x, bool) for x, _, _ in kept)
    ticks = [] if numeric else list(dict.fromkeys(str(x) for x, _, _ in kept))
    xs = [float(x) if numeric else float(ticks.index(str(x))) for x, _, _ in kept]
    ys = [y for _, y, _ in kept]
    x0, x1, y0, y1 = min(xs), max(xs), min(ys), max(ys)
    if not numeric:
        x0, x1 = x0 - 0.5, x1 + 0.5  # categories sit inside the axis, not on its ends

    def left(x: float) -> float:
        return round(pad + (x - x0) / ((x1 - x0) or 1) * (width - 2 * pad), 1) if x1 > x0 else width / 2

    def top(y: float) -> float:
        return round(height - pad - (y - y0) / ((y1 - y0) or 1) * (height - 2 * pad), 1) if y1 > y0 else height / 2

    dots = [
        {"x": left(x), "y": top(y), "label": label, "value": y, "at": raw}
        for (raw, y, label), x in zip(kept, xs, strict=True)
    ]
    return {
        "width": width,
        "height": height,
        "pad": pad,
        "dots": dots,
        "ticks": [{"x": left(float(i)), "text": t} for i, t in enumerate(ticks)],
        "x_range": None if ticks else (min(xs), max(xs)),
        "y_range": (y0, y1),
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
