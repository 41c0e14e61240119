"""The `/v1` endpoints: each one is an operation of `crossrail.control.ops.operations.Operations` as the request's actor
does it, answering the object `--json` prints (and the request `crossrail.client.Client` sends for it)."""

from __future__ import annotations

import asyncio
import json
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field

from crossrail.api.bounds import MAX_ITEMS, Count, Document, Name, Positive, Text
from crossrail.api.route_access import submitted_status
from crossrail.api.teamview import note_run, scoped
from crossrail.control.ops.operations import Operations
from crossrail.core.api import MAX_INT, QUEUE_PAGE
from crossrail.errors import UsageError

TERMINAL = frozenset({"succeeded", "failed", "cancelled"})
FOLLOW_POLL_S = 0.25
KEEPALIVE_S = 15.0  # a following stream with nothing new sends a comment this often, so proxies keep it open
DEFAULT_PAGE = 100
MAX_PAGE = 1000
NAME_MAX = 255  # bytes of a file name on common file systems: a longer source's name is not used for the file

router = APIRouter(prefix="/v1")


class Body(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class SubmitBody(Body):
    document: Document | dict[str, Any] = Field(description="The Experiment: YAML or JSON text, or the object itself.")
    source: Text = Field("request body", description="Where the document came from, named in its problems.")
    sets: list[Text] = Field(
        default_factory=list, max_length=MAX_ITEMS, description="Overrides, as `--set`: spec.resources.chips=4."
    )
    idempotency_key: Name | None = Field(None, alias="idempotencyKey")


class PlaceBody(Body):
    document: Document | dict[str, Any]
    source: Text = "request body"
    sets: list[Text] = Field(default_factory=list, max_length=MAX_ITEMS)


class ResubmitBody(Body):
    resume: bool = False
    from_weights: bool = Field(False, alias="fromWeights")
    idempotency_key: Name | None = Field(None, alias="idempotencyKey")


class FleetBody(Body):
    document: Document | dict[str, Any] = Field(description="The Fleet: YAML or JSON text, or the object itself.")
    source: Text = "request body"


class ReserveBody(Body):
    pool: Name
    chips: Positive
    start: Text
    duration: Text
    team: Name | None = None
    name: Name | None = None


def client(request: Request) -> Operations:
    """The workspace's operations as the request's actor may use them (crossrail.control.ops.operations)."""
    return scoped(request)


def writing(request: Request) -> Any:
    """The app's write lock: the service's submit and fleet writes run one at a time in this process."""
    return request.app.state.write_lock


def _text(document: str | dict[str, Any]) -> str:
    return document if isinstance(document, str) else json.dumps(document)


# ---- runs ----------------------------------------------------------------------------------------------


@router.post("/runs", response_model=dict[str, Any], summary="Submit an experiment as a new run")
def submit(body: SubmitBody, request: Request) -> JSONResponse:
    with writing(request):
        result = client(request).submit_text(
            _text(body.document), source=body.source, sets=body.sets, idempotency_key=body.idempotency_key
        )
    note_run(request, result)
    # Already plain JSON: sent as it is, since FastAPI's validating re-encoding of it costs a tenth of a submit.
    return JSONResponse(result, status_code=submitted_status(result["created"]))


@router.get("/runs", summary="List runs, newest first, with filters and a cursor")
def list_runs(
    request: Request,
    *,
    state: Annotated[list[Name] | None, Query(max_length=MAX_ITEMS)] = None,
    stage: Name | None = None,
    team: Name | None = None,
    experiment: Name | None = None,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = DEFAULT_PAGE,
    cursor: Name | None = None,
) -> dict[str, Any]:
    return client(request).runs(states=state, stage=stage, team=team, experiment=experiment, limit=limit, cursor=cursor)


@router.get("/runs/{ref}", summary="A run with its lineage, attempts, checkpoints and events")
def show(ref: Name, request: Request) -> dict[str, Any]:
    return client(request).show(ref)


@router.post("/runs/{ref}/cancel", summary="Cancel a run")
def cancel(ref: Name, request: Request) -> dict[str, Any]:
    with writing(request):
        return client(request).cancel(ref)


@router.post("/runs/{ref}/suspend", summary="Take a run out of its queue until resumed")
def suspend(ref: Name, request: Request) -> dict[str, Any]:
    with writing(request):
        return client(request).suspend(ref)


@router.post("/runs/{ref}/resume", summary="Put a suspended run back in its queue")
def resume(ref: Name, request: Request) -> dict[str, Any]:
    with writing(request):
        return client(request).resume(ref)


@router.post("/runs/{ref}/resubmit", response_model=dict[str, Any], summary="Queue a new run of a run's recorded spec")
def resubmit(ref: Name, request: Request, body: ResubmitBody | None = None) -> JSONResponse:
    body = body or ResubmitBody()
    with writing(request):
        result = client(request).resubmit(
            ref, resume=body.resume, from_weights=body.from_weights, idempotency_key=body.idempotency_key
        )
    note_run(request, result)
    return JSONResponse(result, status_code=submitted_status(result["created"]))


@router.get("/runs/{ref}/logs", summary="A run's attempt logs; follow=1 streams them as server-sent events")
async def logs(
    ref: Name, request: Request, attempt: Count | None = None, part: Name | None = None, follow: bool = False
) -> Any:
    c = client(request)
    first = await run_in_threadpool(c.logs, ref, attempt, part)
    if not follow:
        return first
    return _sse(_follow_logs(request, c, first, attempt, part))


async def _follow_logs(
    request: Request, c: Operations, first: dict[str, Any], attempt: int | None, part: str | None
) -> AsyncIterator[tuple[str, dict[str, Any]]]:
    sent: dict[int, int] = {}
    current = first
    while True:
        for a in current["attempts"]:
            text = a["log"] or ""
            new = text[sent.get(a["attempt"], 0) :]
            if new:
                sent[a["attempt"]] = len(text)
                yield "log", {"run": current["run"], "attempt": a["attempt"], "text": new}
        if current["state"] in TERMINAL:
            yield "end", {"run": current["run"], "state": current["state"], "reason": current["reason"]}
            return
        if await _gone(request):
            return
        current = await run_in_threadpool(c.logs, current["run"], attempt, part)


# ---- queue, events, report, place ----------------------------------------------------------------------


@router.get("/status", summary="Runs per stage and state, and the active runs")
def status(request: Request) -> dict[str, Any]:
    return client(request).status()


@router.get("/queue", response_model=dict[str, Any], summary="Pending runs per queue, in order, with estimated starts")
def queue(
    request: Request,
    *,
    limit: Annotated[int, Query(ge=0, le=MAX_INT, description="runs shown per queue; 0: every one")] = QUEUE_PAGE,
    offset: Annotated[int, Query(ge=0, le=MAX_INT, description="runs skipped at the head of each queue")] = 0,
) -> JSONResponse:
    # Already plain JSON: sent as it is, since FastAPI's value-by-value re-encoding of a queue of 10,000 pending
    # runs costs as much as planning it.
    return JSONResponse(client(request).queue(limit=limit, offset=offset))


@router.get("/events", summary="The event log after a cursor; follow=1 streams new events as server-sent events")
async def events(
    request: Request,
    *,
    run: Name | None = None,
    type: Annotated[list[Name] | None, Query(max_length=MAX_ITEMS)] = None,
    after: Count = 0,
    limit: Annotated[int | None, Query(ge=1, le=10_000)] = None,
    follow: bool = False,
) -> Any:
    c = client(request)
    page = await run_in_threadpool(lambda: c.events(run, after_seq=after, limit=limit, types=type))
    if not follow:
        return page
    return _sse(_follow_events(request, c, page, after, run=run, types=type))


async def _follow_events(
    request: Request, c: Operations, page: dict[str, Any], after: int, *, run: str | None, types: list[str] | None
) -> AsyncIterator[tuple[str, dict[str, Any]]]:
    while True:
        for e in page["events"]:
            after = max(after, int(e["seq"]))
            yield "event", e
        if await _gone(request):
            return
        page = await run_in_threadpool(c.events, run, after_seq=after, limit=1000, types=types)


@router.get("/report", summary="Research-cycle metrics per stage and pool, from the event log")
def report(request: Request) -> dict[str, Any]:
    return client(request).report()


@router.post("/place", summary="Where an experiment would be placed now, and why (nothing is written)")
def place(body: PlaceBody, request: Request) -> dict[str, Any]:
    with writing(request):
        return client(request).place_text(_text(body.document), source=body.source, sets=body.sets)


@router.get("/agents", summary="Agents that registered on the store, and whether each is alive")
def agents(request: Request) -> dict[str, Any]:
    return client(request).agents()


# ---- sweeps and scaling fits ---------------------------------------------------------------------------


class SweepBody(Body):
    document: Document | dict[str, Any] = Field(description="The Experiment: YAML or JSON text, or the object itself.")
    source: Text = Field("request body", description="Where the document came from, named in its problems.")
    grid: list[Text] = Field(
        min_length=1, max_length=MAX_ITEMS, description="Gridded keys, as `--grid`: spec.resources.chips=1,2,4."
    )
    sets: list[Text] = Field(default_factory=list, max_length=MAX_ITEMS, description="Overrides of every point.")
    random: Positive | None = Field(None, description="Draw this many points of the grid without replacement.")
    seed: Count = Field(0, description="The seed of the draw: the same seed draws the same points.")


@router.post("/sweeps", response_model=dict[str, Any], summary="Submit one run per point of a grid (a sweep)")
def sweep_submit(body: SweepBody, request: Request) -> JSONResponse:
    with writing(request):
        result = client(request).sweep_submit(
            _text(body.document),
            source=body.source,
            grid=body.grid,
            sets=body.sets,
            random=body.random,
            seed=body.seed,
        )
    return JSONResponse(result, status_code=submitted_status(result["created"]))


@router.get("/sweeps/{sweep}", summary="A sweep's members, ranked by a reported metric")
def sweep_show(sweep: Name, request: Request, metric: Name = "loss", better: Name | None = None) -> dict[str, Any]:
    return client(request).sweep_show(sweep, metric=metric, better=better)


@router.post("/sweeps/{sweep}/cancel", summary="Cancel every member of a sweep that has not ended")
def sweep_cancel(sweep: Name, request: Request) -> dict[str, Any]:
    with writing(request):
        return client(request).sweep_cancel(sweep)


@router.get("/sweeps/{sweep}/fit", summary="Amdahl and power-law fits of a sweep's throughput, per pool")
def fit(
    sweep: Name,
    request: Request,
    *,
    x: Name = "spec.resources.chips",
    y: Name = "tokens_per_second",
    target_tokens: Annotated[float | None, Query(gt=0, allow_inf_nan=False)] = None,
    at: Annotated[list[Positive] | None, Query(max_length=MAX_ITEMS)] = None,
) -> dict[str, Any]:
    return client(request).fit(sweep, x=x, y=y, target_tokens=target_tokens, at=at)


# ---- checkpoints ---------------------------------------------------------------------------------------


@router.get("/runs/{ref}/checkpoints", summary="A run's committed checkpoints, each verified unless verify=0")
def checkpoints(ref: Name, request: Request, verify: bool = True) -> dict[str, Any]:
    return client(request).ckpt_ls(ref, verify=verify)


@router.get("/runs/{ref}/checkpoints/{step}", summary="A checkpoint's manifest (step, or `latest`)")
def checkpoint(ref: Name, step: Name, request: Request) -> dict[str, Any]:
    return client(request).ckpt_show(ref, step=_step(step))


@router.post("/runs/{ref}/checkpoints/verify", summary="Check every tensor of the newest (or every) checkpoint")
def verify(ref: Name, request: Request, all: bool = False) -> dict[str, Any]:
    return client(request).ckpt_verify(ref, every=all)


def _step(step: str) -> int | None:
    if step == "latest":
        return None
    # ASCII digits only: str.isdigit accepts `²`, which int() refuses.
    if not (step.isascii() and step.isdigit()) or int(step) > MAX_INT:
        raise UsageError(f"checkpoint step {step!r} is neither a number nor `latest`; pass e.g. 100 or latest")
    return int(step)


# ---- fleet ---------------------------------------------------------------------------------------------


@router.get("/fleet", summary="Pools, usage, drains and reservations")
def fleet(request: Request) -> dict[str, Any]:
    return client(request).fleet_show()


@router.put("/fleet", summary="Replace the fleet with a Fleet document")
def fleet_apply(body: FleetBody, request: Request) -> dict[str, Any]:
    name = Path(body.source).name
    if name in ("", ".", "..") or body.source == "request body" or len(name.encode()) > NAME_MAX:
        name = "fleet.yaml"
    with tempfile.TemporaryDirectory(prefix="crossrail-fleet-") as tmp:
        path = Path(tmp) / name
        path.write_text(_text(body.document), encoding="utf-8")
        with writing(request):
            return client(request).fleet_apply(path)


@router.post("/fleet/pools/{pool}/drain", summary="Drain a pool: nothing new is placed on it")
def drain(pool: Name, request: Request) -> dict[str, Any]:
    with writing(request):
        return client(request).drain(pool)


@router.post("/fleet/pools/{pool}/undrain", summary="Undo a drain")
def undrain(pool: Name, request: Request) -> dict[str, Any]:
    with writing(request):
        return client(request).drain(pool, drained=False)


@router.get("/fleet/reservations", summary="The fleet's reservations")
def reservations(request: Request) -> dict[str, Any]:
    return client(request).reservations()


@router.post("/fleet/reservations", summary="Reserve chips of a pool for a time window")
def reserve(body: ReserveBody, request: Request) -> dict[str, Any]:
    with writing(request):
        return client(request).reserve(
            body.pool, chips=body.chips, start=body.start, duration=body.duration, team=body.team, name=body.name
        )


# ---- identity, tokens, audit ---------------------------------------------------------------------------


class TokenBody(Body):
    team: Name
    role: Name
    user: Name | None = None
    expires: Text | None = Field(None, description="How long it is valid, e.g. 30d; never expires when left out.")


@router.get("/usage", summary="Chip-hours and cost per team, stage and pool (a non-admin: its own team)")
def usage(request: Request, since: Text | None = None, team: Name | None = None) -> dict[str, Any]:
    return client(request).usage(since=since, team=team)


@router.get("/whoami", summary="Who the request's token is: user, team, role")
def whoami(request: Request) -> dict[str, Any]:
    return client(request).whoami()


@router.get("/audit", summary="The audit log: every write and every refused request (admins)")
def audit(
    request: Request,
    since: Text | None = None,
    team: Name | None = None,
    limit: Annotated[int | None, Query(ge=1, le=100_000)] = None,
) -> dict[str, Any]:
    return client(request).audit(since=since, team=team, limit=limit)


@router.get("/tokens", summary="Every token, without secrets (admins)")
def tokens(request: Request) -> dict[str, Any]:
    return client(request).tokens()


@router.post("/tokens", summary="A new token; its secret is in the answer, this once (admins)", status_code=201)
def token_create(body: TokenBody, request: Request) -> dict[str, Any]:
    return client(request).token_create(team=body.team, role=body.role, user=body.user, expires=body.expires)


@router.post("/tokens/{token_id}/revoke", summary="Refuse a token from now on (admins)")
def token_revoke(token_id: Name, request: Request) -> dict[str, Any]:
    return client(request).token_revoke(token_id)


@router.post("/tokens/{token_id}/rotate", summary="A new secret for a token; the old one is refused (admins)")
def token_rotate(token_id: Name, request: Request) -> dict[str, Any]:
    return client(request).token_rotate(token_id)


# ---- server-sent events --------------------------------------------------------------------------------


def _sse(items: AsyncIterator[tuple[str, dict[str, Any]]]) -> StreamingResponse:
    """Server-sent events: a comment at once (the stream is open), each item, a keep-alive comment when quiet."""

    async def encode() -> AsyncIterator[bytes]:
        yield b": following\n\n"
        pending: asyncio.Future[tuple[str, dict[str, Any]]] | None = None
        try:
            while True:
                pending = pending or asyncio.ensure_future(anext(items))
                done, _ = await asyncio.wait({pending}, timeout=KEEPALIVE_S)
                if not done:
                    yield b": keep-alive\n\n"
                    continue
                try:
                    name, data = pending.result()
                except StopAsyncIteration:
                    return
                pending = None
                ident = f"id: {data['seq']}\n" if name == "event" else ""
                yield f"{ident}event: {name}\ndata: {json.dumps(data, default=str)}\n\n".encode()
        finally:
            if pending is not None:
                pending.cancel()

    return StreamingResponse(encode(), media_type="text/event-stream", headers={"Cache-Control": "no-store"})


async def _gone(request: Request) -> bool:
    """Wait one poll interval; whether the client went away, or the server is stopping, meanwhile."""
    await asyncio.sleep(FOLLOW_POLL_S)
    state = request.app.state
    return bool(await request.is_disconnected()) or bool(state.stopping) or bool(state.stop_requested())
