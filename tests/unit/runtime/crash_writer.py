"""A checkpoint writer that dies by SIGKILL at a chosen point of a save; run as a script by the crash tests.

    python crash_writer.py URI sync|async POINT STORAGE_OPTIONS_JSON

Saves step 1 and prints `committed 1`, then saves step 2 and dies at POINT: after-a-tensor-file,
before-fsync, before-commit, before-rename, after-commit. In async mode the save of step 2 runs in the
background while the main thread goes on, as a training loop would.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from typing import Any

import numpy as np

from crossrail.runtime import Checkpointer, stores


def tensors(step: int) -> dict[str, Any]:
    """The same tensors as ckpt_builders.big_tensors_of(step)."""
    rng = np.random.default_rng(step)
    n = 2 << 18
    return {
        "w": rng.standard_normal(n, dtype=np.float32),
        "v": rng.integers(0, 2**62, n // 2),
        "u": np.full(n // 4, step, np.int32),
    }


def die(*args: Any, **kwargs: Any) -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def die_after(cls: type, method: str) -> None:
    real = getattr(cls, method)

    def wrapped(self: Any, *args: Any, **kwargs: Any) -> None:
        real(self, *args, **kwargs)
        die()

    setattr(cls, method, wrapped)


def arm(point: str, draft: type) -> None:
    if point == "after-a-tensor-file":
        die_after(draft, "close_file")
    elif point == "before-fsync":
        os.fsync = die
    elif point == "before-commit":
        draft.commit = die  # type: ignore[attr-defined]
    elif point == "before-rename":
        os.rename = die
    elif point == "after-commit":
        die_after(draft, "commit")
    else:
        raise SystemExit(f"unknown crash point {point!r}")


def main() -> None:
    uri, mode, point, options = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
    ckpt = Checkpointer(uri, shard_bytes=1 << 20, storage_options=options)
    ckpt.save(tensors(1), 1, {"step": 1})
    print("committed 1", flush=True)
    arm(point, stores.ObjectDraft if ckpt.store.object_storage else stores.LocalDraft)
    if mode == "sync":
        ckpt.save(tensors(2), 2, {"step": 2})
        print("committed 2", flush=True)
        return
    ckpt.save_async(tensors(2), 2, {"step": 2})
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        time.sleep(0.001)


if __name__ == "__main__":
    main()
