"""Writers SIGKILLed in the middle of a save, sync or async: restore always gives the last committed checkpoint."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from crossrail.runtime import Checkpointer

from .ckpt_builders import assert_bit_identical, big_tensors_of

CRASH_WRITER = Path(__file__).with_name("crash_writer.py")

# Saves steps 1, 2, 3, ... until it is killed; prints each step once it is committed.
LOOP_WRITER = textwrap.dedent(
    """
    import sys
    import numpy as np
    from crossrail.runtime import Checkpointer

    root, mode, first = sys.argv[1], sys.argv[2], int(sys.argv[3])
    ckpt = Checkpointer(root, shard_bytes=1 << 20, keep_last=3)

    def tensors(step):
        rng = np.random.default_rng(step)
        n = 2 << 18
        return {"w": rng.standard_normal(n, dtype=np.float32), "v": rng.integers(0, 2**62, n // 2),
                "u": np.full(n // 4, step, np.int32)}

    step, handle = first, None
    while True:
        if mode == "sync":
            ckpt.save(tensors(step), step, {"step": step})
            print("committed", step, flush=True)
        else:
            new = ckpt.save_async(tensors(step), step, {"step": step})
            if handle is not None:
                print("committed", handle.wait().rsplit("-", 1)[1], flush=True)
            handle = new
        step += 1
    """
)


def restored_step(uri: str, options: dict[str, Any] | None = None) -> int:
    """The step restore gives after a kill; checks it bit for bit and that every listed checkpoint verifies."""
    ckpt = Checkpointer(uri, storage_options=options)
    tensors, manifest = ckpt.restore()
    step = int(manifest["step"])
    assert_bit_identical(tensors, big_tensors_of(step))
    for info in ckpt.list():
        assert ckpt.verify(info.step)["step"] == info.step
    return step


def committed_steps(out: bytes) -> list[int]:
    return [int(line.split()[1]) for line in out.decode().splitlines() if line.startswith("committed")]


LOCAL_POINTS = [
    pytest.param("after-a-tensor-file", 1, id="after-a-tensor-file"),
    pytest.param("before-fsync", 1, id="before-fsync"),
    pytest.param("before-commit", 1, id="before-marker-and-rename"),
    pytest.param("before-rename", 1, id="before-rename"),
    pytest.param("after-commit", 2, id="after-rename"),
]


def kill_at(point: str, mode: str, uri: str, options: dict[str, Any] | None = None) -> list[int]:
    args = [sys.executable, str(CRASH_WRITER), uri, mode, point, json.dumps(options or {})]
    done = subprocess.run(args, capture_output=True, timeout=60, check=False)
    assert done.returncode == -signal.SIGKILL, done.stderr.decode()
    return committed_steps(done.stdout)


@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize(("point", "want"), LOCAL_POINTS)
def test_a_writer_killed_inside_a_save_leaves_the_last_commit_in_use(
    tmp_path: Path, point: str, want: int, mode: str
) -> None:
    assert kill_at(point, mode, str(tmp_path)) == [1]
    assert restored_step(str(tmp_path)) == want
    assert [c.step for c in Checkpointer(str(tmp_path)).list()] == list(range(1, want + 1))
    # What the dead writer left does not stand in the way of the next one.
    Checkpointer(str(tmp_path)).save(big_tensors_of(2), 2)
    assert restored_step(str(tmp_path)) == 2


def test_a_writer_killed_while_replacing_a_damaged_step_leaves_the_last_good_one(tmp_path: Path) -> None:
    ckpt = Checkpointer(str(tmp_path), shard_bytes=1 << 20)
    ckpt.save(big_tensors_of(1), 1)
    ckpt.save(big_tensors_of(2), 2)
    (tmp_path / "step-0000000002" / "manifest.json").unlink()
    assert kill_at("before-rename", "sync", str(tmp_path)) == [1]
    assert restored_step(str(tmp_path)) == 1


@pytest.mark.slow
def test_writers_killed_at_random_moments_never_yield_a_torn_or_older_checkpoint(tmp_path: Path) -> None:
    rng = random.Random(20261130)
    first = 1
    for round_ in range(16):  # a new writer each round, into what the last one left
        mode = "sync" if round_ % 2 == 0 else "async"
        args = [sys.executable, "-c", LOOP_WRITER, str(tmp_path), mode, str(first)]
        writer = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        assert writer.stdout is not None
        line = writer.stdout.readline()
        assert line.startswith(b"committed"), writer.stderr.read() if writer.stderr else line
        time.sleep(rng.uniform(0.0, 0.25))
        writer.send_signal(signal.SIGKILL)
        out, _ = writer.communicate(timeout=30)
        assert writer.returncode == -signal.SIGKILL
        last_committed = max(committed_steps(line + out))
        step = restored_step(str(tmp_path))
        # Committed and not yet printed, at most: the step the writer was saving (sync) or the one before (async).
        assert last_committed <= step <= last_committed + (1 if mode == "sync" else 2)
        first = step + 1
    assert not [n for n in os.listdir(tmp_path) if n.startswith("step-") and not _has_manifest(tmp_path / n)]


def _has_manifest(path: Path) -> bool:
    return (path / "manifest.json").is_file()


def test_restored_arrays_are_writable_numpy_arrays(tmp_path: Path) -> None:
    Checkpointer(str(tmp_path)).save(big_tensors_of(1), 1)
    tensors, _ = Checkpointer(str(tmp_path)).restore()
    tensors["w"] += 1
    assert isinstance(tensors["w"], np.ndarray)
