"""The state store: experiments, runs, attempts, the append-only event log, checkpoints and metric samples."""

from crossrail.store.records import AttemptRecord, CheckpointRecord, NewRun, RunRecord
from crossrail.store.repository import HEAD_REVISION, Fence, LeaseRecord, Store

__all__ = ["HEAD_REVISION", "AttemptRecord", "CheckpointRecord", "Fence", "LeaseRecord", "NewRun", "RunRecord", "Store"]
