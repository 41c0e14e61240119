"""The Store: one class over one engine, composed of a part per aggregate.

Each part is a module of its own: runs (runs.py), attempts and what they report (attempts.py), the event log
(events.py), checkpoints (checkpoints.py), metric samples (samples.py), agents and the leader's lease
(leases.py), tokens and audit (access.py) and stored simulations (simulations.py); the engine, its
transactions and the store-wide checks they all stand on are engine.py's.
"""

from __future__ import annotations

from crossrail.store.access import AccessRecords
from crossrail.store.attempts import AttemptRecords
from crossrail.store.checkpoints import CheckpointRecords
from crossrail.store.engine import HEAD_REVISION, Fence, StoreBase
from crossrail.store.events import EventRecords
from crossrail.store.leases import LeaseRecord, LeaseRecords
from crossrail.store.runs import RunRecords
from crossrail.store.samples import SampleRecords
from crossrail.store.simulations import SimulationRecords

__all__ = ["HEAD_REVISION", "Fence", "LeaseRecord", "Store"]


class Store(
    RunRecords,
    AttemptRecords,
    EventRecords,
    CheckpointRecords,
    SampleRecords,
    LeaseRecords,
    AccessRecords,
    SimulationRecords,
    StoreBase,
):
    """State of one workspace (or one shared database): open with `Store.open(url)`."""
