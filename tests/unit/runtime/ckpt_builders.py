"""Builders for checkpoint tests: tensors that say which step wrote them, damage, and snapshots of a directory."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import xxhash

from crossrail.runtime import Checkpointer, step_dirname

Arrays = dict[str, npt.NDArray[Any]]


def tensors_of(step: int) -> Arrays:
    """Tensors of several dtypes whose bits depend on the step that wrote them."""
    rng = np.random.default_rng(step)
    return {
        "embed.weight": rng.standard_normal((8, 4), dtype=np.float32),
        "layers.0.bias": rng.integers(-(2**40), 2**40, 5),
        "scale": np.array(step / 2, np.float64),
        "mask": np.array([True, False, step % 2 == 0]),
        "half": rng.standard_normal(6).astype(np.float16).reshape(2, 3),
        "empty": np.zeros((0, 3), np.int8),
    }


def big_tensors_of(step: int, mib: int = 2) -> Arrays:
    """A few MiB spread over three tensors, for sharded and crash tests."""
    rng = np.random.default_rng(step)
    n = mib << 18
    return {
        "w": rng.standard_normal(n, dtype=np.float32),
        "v": rng.integers(0, 2**62, n // 2),
        "u": np.full(n // 4, step, np.int32),
    }


def assert_bit_identical(got: Mapping[str, npt.NDArray[Any]], want: Mapping[str, npt.NDArray[Any]]) -> None:
    assert list(got) == list(want)
    for name, w in want.items():
        assert got[name].dtype == w.dtype.newbyteorder("<"), name
        assert got[name].shape == w.shape, name
        assert got[name].tobytes() == np.ascontiguousarray(w, w.dtype.newbyteorder("<")).tobytes(), name


def step_dir(root: Path, step: int) -> Path:
    return root / step_dirname(step)


def saved(root: Path, *steps: int, keep_last: int | None = None, **kwargs: Any) -> Checkpointer:
    ckpt = Checkpointer(str(root), keep_last=keep_last, **kwargs)
    for s in steps:
        ckpt.save(tensors_of(s), s, {"data": {"position": s * 10}}, tokens=s * 64)
    return ckpt


def rewrite_manifest(root: Path, step: int, change: Callable[[dict[str, Any]], dict[str, Any]]) -> None:
    """Change a committed manifest and write the marker that commits it, as a writer of that manifest would."""
    path = step_dir(root, step) / "manifest.json"
    data = (json.dumps(change(json.loads(path.read_text())), indent=2) + "\n").encode()
    path.write_bytes(data)
    (step_dir(root, step) / "COMMITTED").write_text(f"xxh3-64:{xxhash.xxh3_64_hexdigest(data)}\n")


def flip_a_data_byte(root: Path, step: int, file: str = "model.safetensors") -> None:
    path = step_dir(root, step) / file
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))


def truncate_a_tensor_file(root: Path, step: int, file: str = "model.safetensors") -> None:
    path = step_dir(root, step) / file
    path.write_bytes(path.read_bytes()[:-16])


def delete_manifest(root: Path, step: int) -> None:
    """The manifest is lost; the commit marker and the tensors stay."""
    (step_dir(root, step) / "manifest.json").unlink()


DAMAGE: dict[str, Callable[[Path, int], None]] = {
    "flipped-byte": flip_a_data_byte,
    "truncated-tensor": truncate_a_tensor_file,
    "deleted-manifest": delete_manifest,
}
"""The three ways a committed checkpoint is found damaged in the tests, by name."""


def tree(root: Path) -> dict[str, str]:
    """Every file under `root` (and its parent's other entries) with a digest of its content."""
    return {
        str(p.relative_to(root.parent)): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
        for p in sorted(root.parent.rglob("*"))
    }


def first_cut_checkpoint(root: Path, step: int) -> Arrays:
    """A checkpoint as the first cut of crossrail-ckpt/v1 wrote it: sha256 checksums, no marker, no tokens."""
    import safetensors.numpy

    tensors = {"embed.weight": np.arange(12, dtype=np.float32).reshape(3, 4) + step, "b": np.arange(3)}
    directory = step_dir(root, step)
    directory.mkdir(parents=True)
    safetensors.numpy.save_file(tensors, str(directory / "model.safetensors"))
    data = (directory / "model.safetensors").read_bytes()
    start = 8 + int.from_bytes(data[:8], "little")
    header = json.loads(data[8:start])
    entries = []
    for name in tensors:
        begin, end = header[name]["data_offsets"]
        digest = hashlib.sha256(data[start + begin : start + end]).hexdigest()
        entries.append(
            {"name": name, "dtype": header[name]["dtype"], "shape": header[name]["shape"], "file": "model.safetensors",
             "offset": begin, "length": end - begin, "checksum": f"sha256:{digest}"}
        )  # fmt: skip
    lineage = dict.fromkeys(("run", "attempt", "parent", "dataset_version", "code_commit", "framework"))
    lineage["hardware"] = {"pool": None, "chip_type": None, "accelerator": None}
    manifest = {"format": "crossrail-ckpt/v1", "step": step, "created_at": 1.0, "tensors": entries,
                "state": {"model": {"kind": "bigram"}}, "lineage": lineage}  # fmt: skip
    (directory / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    return tensors
