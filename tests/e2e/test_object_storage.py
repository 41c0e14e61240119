"""Checkpoints on real S3 and GCS emulators (moto, fake-gcs-server) over HTTP on loopback."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from crossrail.cli.ckpt import ckpt_app
from crossrail.runtime import Checkpointer, TornCheckpoint
from crossrail.runtime.stores import open_store

pytestmark = [
    pytest.mark.slow,
    # aiohttp (under gcsfs) warns when it sends a body over 1 MiB from bytes; the upload is right all the same.
    pytest.mark.filterwarnings("ignore:Sending a large body directly with raw bytes:ResourceWarning"),
]

CRASH_WRITER = Path(__file__).parents[1] / "unit" / "runtime" / "crash_writer.py"
_spec = importlib.util.spec_from_file_location("crash_writer", CRASH_WRITER)
assert _spec is not None
assert _spec.loader is not None
crash_writer = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(crash_writer)
Bucket = tuple[str, dict[str, Any]]


def state_of(step: int) -> dict[str, npt.NDArray[Any]]:
    """Sharded at 1 MiB: three files, and several dtypes."""
    return crash_writer.tensors(step) | {"scale": np.array(step / 3), "mask": np.array([True, False])}


def files_of(ckpt: Checkpointer, step: int) -> dict[str, bytes]:
    """Every file of a checkpoint, by name, read straight from its storage."""
    store = ckpt.store
    name = f"step-{step:010d}"
    if not store.object_storage:
        return {p.name: p.read_bytes() for p in Path(store.path(name)).iterdir()}
    fs = store.fs  # type: ignore[attr-defined]
    fs.invalidate_cache()
    return {path.rsplit("/", 1)[1]: fs.cat_file(path) for path in fs.find(store.path(name))}


def same_bits(got: dict[str, npt.NDArray[Any]], want: dict[str, npt.NDArray[Any]]) -> bool:
    return list(got) == list(want) and all(
        got[k].dtype == want[k].dtype and got[k].shape == want[k].shape and got[k].tobytes() == want[k].tobytes()
        for k in want
    )


def test_the_same_state_on_local_disk_gcs_and_s3_restores_bit_identical(
    tmp_path: Path, s3_bucket: Bucket, gcs_bucket: Bucket
) -> None:
    targets = [
        (tmp_path.as_uri(), {}),
        (f"{gcs_bucket[0]}/run-1", gcs_bucket[1]),
        (f"{s3_bucket[0]}/run-1", s3_bucket[1]),
    ]
    stored = []
    for uri, options in targets:
        ckpt = Checkpointer(uri, storage_options=options, shard_bytes=1 << 20, clock=lambda: 1767225600.0)
        ckpt.save(state_of(4), 4, {"data": {"position": 4}}, tokens=4096)
        ckpt.save_async(state_of(5), 5, {"data": {"position": 5}}, tokens=5120).wait()
        reader = Checkpointer(uri, storage_options=options)
        assert [c.step for c in reader.list()] == [4, 5]
        tensors, manifest = reader.restore()
        assert same_bits(tensors, state_of(5))
        assert (manifest["step"], manifest["tokens"]) == (5, 5120)
        assert same_bits(reader.restore(4)[0], state_of(4))
        stored.append(files_of(reader, 5))
    assert sorted(stored[0]) == [
        "COMMITTED",
        "manifest.json",
        "model-00001-of-00003.safetensors",
        "model-00002-of-00003.safetensors",
        "model-00003-of-00003.safetensors",
    ]
    assert stored[0] == stored[1] == stored[2]  # byte for byte the same checkpoint on each backend


@pytest.mark.parametrize(
    ("point", "mode", "want"),
    [
        pytest.param("after-a-tensor-file", "sync", 1, id="after-a-tensor-file"),
        pytest.param("before-commit", "sync", 1, id="before-the-marker"),
        pytest.param("before-commit", "async", 1, id="async-before-the-marker"),
        pytest.param("after-commit", "sync", 2, id="after-the-marker"),
    ],
)
def test_an_s3_writer_killed_before_its_marker_leaves_a_prefix_readers_do_not_see(
    s3_bucket: Bucket, point: str, mode: str, want: int
) -> None:
    uri, options = f"{s3_bucket[0]}/run-1", s3_bucket[1]
    args = [sys.executable, str(CRASH_WRITER), uri, mode, point, json.dumps(options)]
    done = subprocess.run(args, capture_output=True, timeout=120, check=False)
    assert done.returncode == -signal.SIGKILL, done.stderr.decode()
    ckpt = Checkpointer(uri, storage_options=options)
    left = files_of(ckpt, 2)
    assert ("COMMITTED" in left) == (want == 2)
    assert any(name.endswith(".safetensors") for name in left)  # the dead writer's files are there
    skipped: list[str] = []
    tensors, manifest = ckpt.restore(on_skip=lambda uri, why: skipped.append(uri))
    assert manifest["step"] == want
    assert skipped == []
    assert same_bits(tensors, crash_writer.tensors(want))
    assert [c.step for c in ckpt.list()] == list(range(1, want + 1))
    ckpt.save(crash_writer.tensors(2), 2)  # the next writer writes over the leftovers
    assert same_bits(Checkpointer(uri, storage_options=options).restore()[0], crash_writer.tensors(2))


def test_a_flipped_byte_on_gcs_is_skipped_with_an_event_and_verify_names_it(gcs_bucket: Bucket) -> None:
    uri, options = f"{gcs_bucket[0]}/run-1", gcs_bucket[1]
    ckpt = Checkpointer(uri, storage_options=options)
    ckpt.save(state_of(1), 1)
    ckpt.save(state_of(2), 2)
    fs = open_store(uri, options).fs  # type: ignore[attr-defined]
    path = f"{gcs_bucket[0].removeprefix('gs://')}/run-1/step-0000000002/model.safetensors"
    data = bytearray(fs.cat_file(path))
    data[-100] ^= 0x01
    fs.pipe_file(path, bytes(data))
    skipped: list[tuple[str, str]] = []
    tensors, manifest = Checkpointer(uri, storage_options=options).restore(on_skip=lambda u, w: skipped.append((u, w)))
    assert manifest["step"] == 1
    assert same_bits(tensors, state_of(1))
    assert [u for u, _ in skipped] == [f"{uri}/step-0000000002"]
    assert "checksum mismatch in model.safetensors" in skipped[0][1]
    with pytest.raises(TornCheckpoint, match="checksum mismatch"):
        ckpt.restore(2)
    from typer.testing import CliRunner

    flags = [arg for key, value in options.items() for arg in ("-o", f"{key}={value}")]
    result = CliRunner().invoke(ckpt_app, ["verify", "--all", "--json", *flags, uri])
    assert result.exit_code == 1, result.output
    report = json.loads(result.output)
    assert [r["ok"] for r in report["results"]] == [True, False]
    assert "tensor u: checksum mismatch in model.safetensors" in report["results"][1]["problem"]


def test_endpoints_come_from_the_environment(s3_bucket: Bucket, gcs_bucket: Bucket) -> None:
    # S3: fsspec reads FSSPEC_S3_ENDPOINT_URL when it is imported, so a fresh process shows it.
    script = (
        "import json, sys, numpy as np\n"
        "from crossrail.runtime import Checkpointer\n"
        "c = Checkpointer(sys.argv[1], storage_options=json.loads(sys.argv[2]))\n"
        "c.save({'w': np.arange(4.0)}, 7)\n"
        "print(c.restore()[1]['step'])\n"
    )
    env = {**os.environ, "FSSPEC_S3_ENDPOINT_URL": s3_bucket[1]["endpoint_url"]}
    done = subprocess.run(
        [sys.executable, "-c", script, f"{s3_bucket[0]}/env-run", "{}"],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "7"
    assert [c.step for c in Checkpointer(f"{s3_bucket[0]}/env-run", storage_options=s3_bucket[1]).list()] == [7]
    # GCS: gcsfs reads STORAGE_EMULATOR_HOST each time it makes a filesystem. In a fresh process without
    # GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT, the runtime turns gcsfs's layout probe off before importing it;
    # left on (with credentials, here anonymous ones), each call would stall on the emulator for 20-90 s
    # and this would run into its timeout.
    env = {k: v for k, v in os.environ.items() if k != "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT"}
    env["STORAGE_EMULATOR_HOST"] = gcs_bucket[1]["endpoint_url"]
    script += "import os; print(os.environ['GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT'])\n"
    args = [sys.executable, "-c", script, f"{gcs_bucket[0]}/env-run", '{"token": "anon"}']
    done = subprocess.run(args, env=env, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["7", "false"]
    assert [c.step for c in Checkpointer(f"{gcs_bucket[0]}/env-run", storage_options=gcs_bucket[1]).list()] == [7]


def test_prune_on_s3_keeps_the_newest_valid_and_removes_the_rest(s3_bucket: Bucket) -> None:
    uri, options = f"{s3_bucket[0]}/run-1", s3_bucket[1]
    ckpt = Checkpointer(uri, storage_options=options, keep_last=2)
    for step in (1, 2, 3, 4):
        ckpt.save_async(state_of(step), step)
    ckpt.close()
    assert [c.step for c in Checkpointer(uri, storage_options=options).list()] == [3, 4]
    fs = open_store(uri, options).fs  # type: ignore[attr-defined]
    fs.invalidate_cache()
    assert sorted(p.rsplit("/", 1)[1] for p in fs.ls(f"{s3_bucket[0].removeprefix('s3://')}/run-1")) == [
        "step-0000000003",
        "step-0000000004",
    ]
