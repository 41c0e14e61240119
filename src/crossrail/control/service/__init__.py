"""The service behind the client and the CLI: submit, state changes and the read models over the store.

Every operation checks all of its input before it writes, so a rejected request leaves nothing behind,
and every write is one store transaction that records its events with it. `Service` is composed of its parts:
`preflight` (submit's checks), `submit`, `commands` (resubmit, cancel, suspend, resume) and `queries` (the read
models), over `base` (the store, fleet, policy and clock they share).
"""

from __future__ import annotations

from crossrail.control.service.base import ACTIVE_STATES
from crossrail.control.service.commands import Commands
from crossrail.control.service.preflight import Preflight
from crossrail.control.service.queries import Queries, lineage_of, summary
from crossrail.control.service.submit import SubmitResult

__all__ = ["ACTIVE_STATES", "Preflight", "Service", "SubmitResult", "lineage_of", "summary"]


class Service(Commands, Queries):
    """One workspace's control plane, in process."""
