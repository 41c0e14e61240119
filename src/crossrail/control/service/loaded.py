"""What a run's attempts really loaded, from the runtime's own reports: lineage states what happened, not what
was asked for.

A run asks for a parent checkpoint (a `parent:` or `resubmit --from-weights`: initialised from its weights;
`resubmit --resume`: continued from it). The runtime reports the checkpoint it loaded (`initialised`, or
`resumed` with `source: parent`), each checkpoint it passed over (`checkpoint_skipped`) and a parent it could
not load (`parent_not_found`). Until an attempt starts, the request is all there is; once one has, a parent
no report confirms is `unverified`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from crossrail.core import Event, EventType
from crossrail.store import AttemptRecord, RunRecord

UNVERIFIED = "unverified"
_STEP = re.compile(r"step-0*(\d+)/?$")


def _reports(events: Sequence[Event], *names: str) -> list[dict[str, Any]]:
    out = []
    for e in events:
        data = e.data.get("data") if str(e.type) == "reported" else None
        if e.data.get("name") in names and isinstance(data, dict):
            out.append({"name": e.data["name"], **data})
    return out


def step_of(uri: str) -> int | None:
    m = _STEP.search(uri)
    return int(m.group(1)) if m else None


def fallback_line(loaded: dict[str, Any], skipped: Sequence[dict[str, Any]]) -> str | None:
    """`resumed from step 80: step 85 failed verification: checksum ...`, when the load passed over newer steps."""
    passed = [s for s in skipped if (step_of(str(s.get("uri", ""))) or 0) > int(loaded.get("step") or 0)]
    if not passed:
        return None
    verb = "resumed" if loaded["name"] == "resumed" else "initialised"
    why = []
    for s in passed:
        reason = str(s.get("reason") or "")
        said = "was deleted" if reason.startswith("deleted:") else f"failed verification: {reason}"
        why.append(f"step {step_of(str(s['uri']))} {said}")
    return f"{verb} from step {loaded.get('step')}: " + "; ".join(why)


def loaded_lineage(run: RunRecord, attempts: Sequence[AttemptRecord], events: Sequence[Event]) -> dict[str, Any]:
    """The lineage keys `show` states from the reports: parent_checkpoint (the URI loaded, `unverified` or None),
    parent_step, initialised_from or resumed_from, what could not be carried, and the fallback line."""
    requested = run.parent_checkpoint
    out: dict[str, Any] = {"parent_checkpoint_requested": requested}
    if run.parent_run is None and requested is None:
        return out
    loads = [r for r in _reports(events, "initialised", "resumed") if r["name"] == "initialised" or r.get("source")]
    started = bool(_reports(events, "started")) or any(a.ended_at is not None for a in attempts)
    missing = _reports(events, "parent_not_found")
    if loads:
        loaded = loads[-1]
        out["parent_checkpoint"], out["parent_step"] = loaded.get("from"), loaded.get("step")
        if loaded["name"] == "resumed":
            out["resumed_from"], out["initialised_from"] = run.resumed_from, None
            out["not_carried"] = list(loaded.get("reset") or [])
        else:
            out["resumed_from"], out["initialised_from"] = None, loaded.get("from")
        out["parent_fallback"] = fallback_line(loaded, _reports(events, "checkpoint_skipped"))
    elif missing:
        out["parent_checkpoint"], out["resumed_from"] = None, None
        out["parent_not_loaded"] = str(missing[-1].get("reason") or "not found")
    elif started:
        out["parent_checkpoint"], out["resumed_from"] = UNVERIFIED, None
    return out


CONTAINERLESS = {"local": "the local executor", "ray": "Ray without a container"}
"""Backends that run the command on a machine as it is: `spec.image` is not what ran."""


def images_ran(events: Sequence[Event]) -> dict[int, str]:
    """Attempt number -> the digest of the image it ran, as its executor saw it start (a Kubernetes pod's resolved
    imageID, on its `started` event); attempts whose executor saw none are absent."""
    return {
        e.attempt: str(e.data["image_digest"])
        for e in events
        if e.type is EventType.STARTED and e.attempt is not None and e.data.get("image_digest")
    }


def environment_lineage(events: Sequence[Event], backends: Sequence[str], pinned: str | None = None) -> dict[str, Any]:
    """`image_used` and `environment`: where the attempts' executors never ran `spec.image`, lineage says so
    and gives what ran instead (the runtime's `environment` report: Python, a digest of the distributions);
    where one did (Kubernetes), `image_ran` is the digest the newest attempt's pod ran, noted when it is not
    the `pinned` one the spec named."""
    reported = _reports(events, "environment")
    out: dict[str, Any] = {"environment": {k: v for k, v in reported[-1].items() if k != "name"} if reported else None}
    without = [CONTAINERLESS[b] for b in dict.fromkeys(backends) if b in CONTAINERLESS]
    if without:
        out["image_used"] = False
        out["image_note"] = f"not used: {' and '.join(without)} ran the command in this machine's environment"
    elif backends:
        out["image_used"] = True
    ran = images_ran(events)
    if ran:
        out["image_ran"] = ran[max(ran)]
        if pinned is not None and out["image_ran"] != pinned:
            out["image_note"] = f"the pod ran {out['image_ran']}, not {pinned} the spec pins"
    return out
