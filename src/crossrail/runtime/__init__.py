"""What training code imports: its context, the reporting channel and crossrail-ckpt/v1 checkpoints.

Imports only the standard library, numpy, safetensors, fsspec, `crossrail.errors` and `crossrail.core`, so a
training image needs nothing else of crossrail's dependencies.
"""

from crossrail.runtime.checkpoint import Checkpointer, CheckpointInfo, load, read_checkpoint, resolve, step_dirname
from crossrail.runtime.context import ContextError, RuntimeContext
from crossrail.runtime.manifest import FORMAT, CheckpointError, CheckpointNotFound, TornCheckpoint
from crossrail.runtime.report import HeartbeatThread, Reporter, read_new
from crossrail.runtime.storage import read_bytes, read_text

__all__ = [
    "FORMAT",
    "CheckpointError",
    "CheckpointInfo",
    "CheckpointNotFound",
    "Checkpointer",
    "ContextError",
    "HeartbeatThread",
    "Reporter",
    "RuntimeContext",
    "TornCheckpoint",
    "load",
    "read_bytes",
    "read_checkpoint",
    "read_new",
    "read_text",
    "resolve",
    "step_dirname",
]
