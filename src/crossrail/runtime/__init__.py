"""What training code imports: its context, the reporting channel and crossrail-ckpt/v1 checkpoints.

Imports only the standard library, numpy, safetensors, fsspec, xxhash, `crossrail.errors` and `crossrail.core`,
so a training image needs nothing else of crossrail's dependencies.
"""

from crossrail.runtime.asyncsave import SaveHandle
from crossrail.runtime.checkpoint import (
    Checkpointer,
    CheckpointInfo,
    check,
    load,
    read_checkpoint,
    read_manifest,
    resolve,
    restore_from,
)
from crossrail.runtime.context import ContextError, RuntimeContext
from crossrail.runtime.manifest import (
    FORMAT,
    CheckpointError,
    CheckpointNotFound,
    InvalidCheckpoint,
    NewerFormat,
    TornCheckpoint,
    data_position,
)
from crossrail.runtime.ownership import ForeignCheckpoint
from crossrail.runtime.report import HeartbeatThread, Reporter, read_new
from crossrail.runtime.storage import read_bytes, read_text
from crossrail.runtime.stores import step_dirname

__all__ = [
    "FORMAT",
    "CheckpointError",
    "CheckpointInfo",
    "CheckpointNotFound",
    "Checkpointer",
    "ContextError",
    "ForeignCheckpoint",
    "HeartbeatThread",
    "InvalidCheckpoint",
    "NewerFormat",
    "Reporter",
    "RuntimeContext",
    "SaveHandle",
    "TornCheckpoint",
    "check",
    "data_position",
    "load",
    "read_bytes",
    "read_checkpoint",
    "read_manifest",
    "read_new",
    "read_text",
    "resolve",
    "restore_from",
    "step_dirname",
]
