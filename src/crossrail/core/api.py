"""The version every crossrail/v1 document and API object carries: the one constant both faces speak."""

from __future__ import annotations

from typing import Any

API_VERSION = "crossrail/v1"
MAX_INT = 2**63 - 1
"""The largest integer a command or request may pass: the store's integers are signed 64-bit, so a larger one
would overflow its query (the CLI's options and the API's parameters are bounded by it)."""
QUEUE_PAGE = 100
"""Pending runs a queue listing shows per queue unless asked for another page (Kueue's pending-workloads view
pages too): the CLI, the Python client and `GET /v1/queue` share it."""


def api_object(kind: str, **fields: Any) -> dict[str, Any]:
    """A crossrail/v1 object: `apiVersion`, `kind`, then `fields` in their order."""
    return {"apiVersion": API_VERSION, "kind": kind, **fields}
