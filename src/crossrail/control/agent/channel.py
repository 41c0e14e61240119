"""The report channel read by the agent: runtime records -> events, metric samples, checkpoints, heartbeats."""

from __future__ import annotations

import math
import posixpath
from dataclasses import replace
from typing import Any

from crossrail.core import Event, EventType
from crossrail.runtime.report import read_new
from crossrail.runtime.storage import local_path
from crossrail.store import AttemptRecord, Store

READS_PER_PASS = 16
"""Batches (each at most MAX_BATCH_BYTES) one pass indexes of one attempt: a backlog drains over passes."""


def ingest(store: Store, att: AttemptRecord, now: float) -> AttemptRecord:
    """Index whatever the attempt wrote since its cursor; the attempt with its new cursor and heartbeat."""
    if not att.report_uri or att.report_uri.startswith(("http://", "https://")):
        return att  # nothing to read, or records the API server stores as they are posted (crossrail.api.ingest)
    for _ in range(READS_PER_PASS):
        records, cursor = read_new(att.report_uri, att.report_cursor)
        if not records and cursor == att.report_cursor:
            return att
        _, beat = commit(store, att, records, cursor, now)
        att = replace(att, report_cursor=cursor, last_heartbeat=beat or att.last_heartbeat)
    return att


def own_checkpoint(uri: str, checkpoint_dir: str) -> bool:
    """Whether `uri` names an entry under the run's checkpoint directory (not the directory itself).

    Both sides are normalized (`file://` or a plain path, `..` folded), so neither another run's directory
    nor a `javascript:` URI passes; a relative directory matches where the writer's working directory put it."""
    mine, theirs = _location(checkpoint_dir), _location(uri)
    if mine is None or theirs is None or mine[0] != theirs[0]:
        return False
    base, path = mine[1].rstrip("/"), theirs[1]
    if base.startswith("/") or not path.startswith("/"):
        return path.startswith(base + "/")
    return f"/{base}/" in path  # a relative dir, under the writer's working directory


def _location(uri: str) -> tuple[str, str] | None:
    """(scheme, normalized path) of a checkpoint location; `file` for a local path. None for an empty one."""
    path = local_path(uri)
    if path is not None:
        scheme = "file"
    else:
        scheme, _, path = uri.partition("://")
    path = posixpath.normpath(path) if path else ""
    return (scheme.lower(), path) if path and path != "." else None


def translate(
    att: AttemptRecord, records: list[dict[str, Any]], now: float, *, checkpoint_dir: str
) -> tuple[list[Event], list[dict[str, Any]], list[dict[str, Any]], float | None]:
    """Runtime records -> events, metric samples and checkpoints to index, plus the last heartbeat time.

    A checkpoint outside the run's `checkpoint_dir` is not indexed (another run's, or no checkpoint at all):
    it becomes an `invalid` report, and the batch's other records are kept."""
    events: list[Event] = []
    samples: list[dict[str, Any]] = []
    ckpts: list[dict[str, Any]] = []
    beat: float | None = None
    for r in records:
        ts = float(r.get("ts") or now)
        kind = r.get("type")
        if kind == "metric" and math.isnan(float(r["value"])):
            # A NaN (a diverged loss) has no place in a numeric column (SQLite stores it as NULL): it is an event.
            data = {"metric": str(r["name"]), "step": r.get("step"), "value": "nan"}
            events.append(Event(EventType.REPORTED, ts, att.run_id, att.number, {"name": "nan_metric", "data": data}))
        elif kind == "metric":
            samples.append(
                {
                    "run_id": att.run_id,
                    "attempt": att.number,
                    "ts": ts,
                    "step": r.get("step"),
                    "name": str(r["name"]),
                    "value": float(r["value"]),
                }
            )
        elif kind == "heartbeat":
            beat = max(beat or ts, ts)
            events.append(Event(EventType.HEARTBEAT, ts, att.run_id, att.number, {"step": r.get("step")}))
        elif kind == "checkpoint" and not own_checkpoint(str(r["uri"]), checkpoint_dir):
            reason = f"checkpoint of step {r['step']} is not under the run's checkpoint directory; not indexed"
            data = {"reason": reason, "line": str(r["uri"])[:200]}
            events.append(Event(EventType.REPORTED, now, att.run_id, att.number, {"name": "invalid", "data": data}))
        elif kind == "checkpoint":
            beat = max(beat or ts, ts)
            ckpts.append({"step": int(r["step"]), "uri": str(r["uri"]), "ts": ts})
        elif kind == "event" and r.get("name") == "resized" and _is_resize(r.get("data")):
            # The runtime's word for a degree change becomes the control plane's `resized` event (docs/events.md).
            data = r["data"]
            keys = ("degree_before", "degree_after", "reason", "part", "step")
            events.append(Event(EventType.RESIZED, ts, att.run_id, att.number, {k: data.get(k) for k in keys}))
        elif kind == "event":
            events.append(
                Event(
                    EventType.REPORTED, ts, att.run_id, att.number, {"name": r.get("name"), "data": r.get("data") or {}}
                )
            )
        else:
            line = str(r.get("line", ""))[:200]
            events.append(
                Event(
                    EventType.REPORTED,
                    now,
                    att.run_id,
                    att.number,
                    {"name": "invalid", "data": {"reason": r.get("reason"), "line": line}},
                )
            )
    return events, samples, ckpts, beat


def _is_resize(data: Any) -> bool:
    """A resize record names its old and new degree as whole numbers > 0; anything else stays `reported`."""
    if not isinstance(data, dict):
        return False
    degrees = [data.get("degree_before"), data.get("degree_after")]
    return all(isinstance(d, int) and not isinstance(d, bool) and d > 0 for d in degrees)


def commit(
    store: Store, att: AttemptRecord, records: list[dict[str, Any]], cursor: str, now: float
) -> tuple[bool, float | None]:
    """Store `records` of attempt `att` and move its report cursor to `cursor`, in one transaction (both report
    channels, the file the agent reads and the API's ingest, come here): whether the cursor was still the
    attempt's, and the heartbeat the records carry."""
    own = store.get_run(att.run_id).run_checkpoint_dir
    events, samples, ckpts, beat = translate(att, records, now, checkpoint_dir=own)
    stored = store.ingest(
        att.run_id,
        att.number,
        old_cursor=att.report_cursor,
        new_cursor=cursor,
        events=events,
        samples=samples,
        checkpoints=ckpts,
        heartbeat=beat,
    )
    return bool(stored), beat
