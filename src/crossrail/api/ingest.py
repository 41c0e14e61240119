"""`POST /v1/ingest/{run}/{attempt}`: an attempt's report records over HTTP, each stored once.

The body is `{"incarnation": N, "records": [...]}`: the records of docs/runtime.md, each with `seq`, its number
within the writer's incarnation (1, 2, ...). A restarted writer (a new process under torchrun, say) starts a
new, higher incarnation and numbers from 1 again; records of an older incarnation than one already seen come
from a writer that was replaced and are dropped. Within an incarnation, what was stored is kept in the
attempt's report cursor as `h1:<incarnation>:<contiguous seq>:<ranges stored above it>`, moved in the same
transaction as the records (Store.ingest), so a replayed or reordered batch stores nothing twice.

A batch is refused whole (422, nothing stored) when it is larger than the channel's bounds or its
incarnation is not a time its writer could have started: from the attempt's creation to now, in ms, each end
widened by INCARNATION_SKEW_S (docs/runtime.md#limits). A checkpoint record outside the run's own
checkpoint directory is not indexed; the batch's other records are (control/agent/channel.translate).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import APIRouter, Header, Request
from pydantic import BaseModel, ConfigDict, Field

from crossrail.api.bounds import Count, Name
from crossrail.control.agent import channel
from crossrail.control.agent.secrets import secret_matches
from crossrail.core.api import MAX_INT, api_object
from crossrail.errors import ConflictError, NotFoundError, Problem, ProblemCode, SpecError, UnauthenticatedError
from crossrail.runtime.report import (
    INCARNATION_SKEW_S,
    MAX_BATCH_BYTES,
    MAX_BATCH_RECORDS,
    MAX_RECORD_BYTES,
    parse_line,
)
from crossrail.store import AttemptRecord

CURSOR_PREFIX = "h1"
CURSOR_CHARS = 64  # attempts.report_cursor is a String(64)
RETRIES = 5

router = APIRouter(prefix="/v1")


class Batch(BaseModel):
    model_config = ConfigDict(extra="forbid")

    incarnation: Count = Field(description="The writer's incarnation: higher for a restarted writer.")
    records: list[dict[str, Any]] = Field(description="Report records (docs/runtime.md), each with its `seq`.")


@dataclass(frozen=True)
class Seen:
    """What one incarnation has stored: every seq up to `upto`, and the ranges stored above it."""

    incarnation: int = -1
    upto: int = 0
    ranges: tuple[tuple[int, int], ...] = ()

    def has(self, seq: int) -> bool:
        return seq <= self.upto or any(a <= seq <= b for a, b in self.ranges)

    def add(self, seqs: list[int]) -> Seen:
        spans = sorted([*self.ranges, *((s, s) for s in seqs)])
        merged: list[tuple[int, int]] = []
        upto = self.upto
        for a, b in spans:
            if a <= upto + 1:
                upto = max(upto, b)
            elif merged and a <= merged[-1][1] + 1:
                merged[-1] = (merged[-1][0], max(merged[-1][1], b))
            else:
                merged.append((a, b))
        return Seen(self.incarnation, upto, tuple((a, b) for a, b in merged if b > upto))

    def encode(self) -> str:
        ranges = ",".join(f"{a:x}-{b:x}" for a, b in self.ranges)
        return f"{CURSOR_PREFIX}:{self.incarnation:x}:{self.upto:x}:{ranges}"

    @staticmethod
    def decode(cursor: str | None) -> Seen:
        if not cursor or not cursor.startswith(CURSOR_PREFIX + ":"):
            return Seen()
        _, inc, upto, ranges = cursor.split(":")
        spans = tuple(tuple(int(x, 16) for x in r.split("-")) for r in ranges.split(",") if r)
        return Seen(int(inc, 16), int(upto, 16), spans)  # type: ignore[arg-type]


def _problem(path: str, message: str, fix: str | None = None) -> Problem:
    return Problem(source="request body", path=path, message=message, fix=fix, code=ProblemCode.BAD_VALUE)


def _check(batch: Batch, run: str, attempt: int) -> list[dict[str, Any]]:
    """The records as the file channel's reader would give them; every problem with the batch at once."""
    problems, records = [], []
    seqs: set[int] = set()
    if len(batch.records) > MAX_BATCH_RECORDS:
        message = f"{len(batch.records)} records; a batch holds at most {MAX_BATCH_RECORDS}"
        raise SpecError([_problem("records", message, "post them in smaller batches")])
    total = 0
    for i, r in enumerate(batch.records):
        # Measured as the writer's line: compact JSON without `seq` (runtime/report.py bounds the same).
        size = len(json.dumps({k: v for k, v in r.items() if k != "seq"}, separators=(",", ":")))
        total += size
        if size > MAX_RECORD_BYTES:
            message = f"a record of {size} bytes; a record is at most {MAX_RECORD_BYTES}"
            problems.append(_problem(f"records[{i}]", message, "report a summary; keep large data in files"))
        seq = r.get("seq")
        if not isinstance(seq, int) or isinstance(seq, bool) or not 1 <= seq <= MAX_INT:
            problems.append(_problem(f"records[{i}].seq", f"must be an integer from 1 to {MAX_INT} (got {seq!r})"))
        elif seq in seqs:
            problems.append(_problem(f"records[{i}].seq", f"seq {seq} appears twice in the batch"))
        else:
            seqs.add(seq)
        if r.get("run") != run or r.get("attempt") != attempt:
            problems.append(
                _problem(
                    f"records[{i}]",
                    f"names run {r.get('run')!r} attempt {r.get('attempt')!r}, not {run} attempt {attempt}",
                    "post each attempt's records to its own /v1/ingest/{run}/{attempt}",
                )
            )
        records.append(parse_line(json.dumps(r).encode(), f"record {i}"))
    if total > MAX_BATCH_BYTES:
        message = f"the records hold {total} bytes; a batch holds at most {MAX_BATCH_BYTES}"
        problems.append(_problem("records", message, "post them in smaller batches"))
    if problems:
        raise SpecError(problems)
    return records


def _check_incarnation(incarnation: int, att: AttemptRecord, now: float) -> None:
    """An incarnation is its writer's start in ms: one before the attempt was created or after now (beyond
    the clock allowance) is no writer of this attempt, and would fence the real one off as `stale`."""
    created = att.created_at if att.created_at is not None else att.started_at
    low = None if created is None else int((created - INCARNATION_SKEW_S) * 1000)
    high = int((now + INCARNATION_SKEW_S) * 1000)
    if (low is not None and incarnation < low) or incarnation > high:
        window = f"from {low} to {high}" if low is not None else f"up to {high}"
        message = f"{incarnation} is not a start time of this attempt's writer (ms since the epoch, {window})"
        fix = "send the writer's start time in milliseconds (the runtime's Reporter does); check its clock"
        raise SpecError([_problem("incarnation", message, fix)])


@router.post("/ingest/{run}/{attempt}", summary="An attempt's report records: metrics, heartbeats, checkpoints")
def ingest(
    run: Name,
    attempt: Count,
    batch: Batch,
    request: Request,
    authorization: Annotated[str | None, Header()] = None,
) -> dict[str, Any]:
    client = request.app.state.client
    token = (authorization or "").removeprefix("Bearer ").strip()
    if not token or not secret_matches(client.workspace.root, run, attempt, token):
        raise UnauthenticatedError(
            f"ingest for {run} attempt {attempt} needs that attempt's secret as `Authorization: Bearer ...`"
            " (the attempt has it in CROSSRAIL_REPORT_SECRET)"
        )
    records = _check(batch, run, attempt)
    store = client.service.store
    if client.service.get(run).id != run:
        raise NotFoundError(f"no run with id {run}; ingest names a run by its id (CROSSRAIL_RUN_ID)")
    for _ in range(RETRIES):
        att = next((a for a in store.attempts(run) if a.number == attempt), None)
        if att is None:
            raise NotFoundError(f"run {run} has no attempt {attempt}")
        if not str(att.report_uri or "").startswith(("http://", "https://")):
            raise ConflictError(
                f"attempt {attempt} of {run} reports to {att.report_uri or 'nowhere'}, not over HTTP; its records"
                " are read from there"
            )
        _check_incarnation(batch.incarnation, att, client.clock.now())
        seen = Seen.decode(att.report_cursor)
        if batch.incarnation < seen.incarnation:
            return _result(run, attempt, 0, len(records), stale=True)
        if batch.incarnation > seen.incarnation:
            seen = Seen(batch.incarnation)
        fresh = [(r, s["seq"]) for r, s in zip(records, batch.records, strict=True) if not seen.has(s["seq"])]
        if not fresh and seen.incarnation == Seen.decode(att.report_cursor).incarnation:
            return _result(run, attempt, 0, len(records))
        after = seen.add([s for _, s in fresh])
        cursor = after.encode()
        if len(cursor) > CURSOR_CHARS:
            raise ConflictError(
                f"attempt {attempt} of {run} has too many gaps in its seq numbers to hold this batch;"
                f" send the batches from seq {seen.upto + 1} first"
            )
        ordered = [r for r, _ in sorted(fresh, key=lambda pair: pair[1])]
        if channel.commit(store, att, ordered, cursor, client.clock.now())[0]:
            return _result(run, attempt, len(fresh), len(records) - len(fresh))
    raise ConflictError(f"attempt {attempt} of {run} kept changing under this batch; send it again")


def _result(run: str, attempt: int, stored: int, duplicates: int, *, stale: bool = False) -> dict[str, Any]:
    return api_object("IngestResult", run=run, attempt=attempt, stored=stored, duplicates=duplicates, stale=stale)
