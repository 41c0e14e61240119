"""The crossrail-ckpt/v1 manifest: its fields, its checks, checksums, and the commit marker's content."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from typing import Any

import numpy as np
import xxhash

# The checkpoint errors are crossrail.errors' (its drawn tree); the runtime's modules import them from here too.
from crossrail.errors import CheckpointError as CheckpointError  # noqa: PLC0414
from crossrail.errors import CheckpointNotFound as CheckpointNotFound  # noqa: PLC0414
from crossrail.errors import InvalidCheckpoint as InvalidCheckpoint  # noqa: PLC0414
from crossrail.errors import NewerFormat as NewerFormat  # noqa: PLC0414
from crossrail.errors import TornCheckpoint as TornCheckpoint  # noqa: PLC0414

FORMAT = "crossrail-ckpt/v1"
FORMAT_MAJOR = 1
MANIFEST_FILE = "manifest.json"
MARKER_FILE = "COMMITTED"
MODEL_FILE = "model.safetensors"
LINEAGE_KEYS = (
    "run",
    "run_uid",
    "experiment",
    "spec_digest",
    "attempt",
    "parent",
    "dataset_version",
    "code_commit",
    "hardware",
    "framework",
)
HARDWARE_KEYS = ("pool", "chip_type", "accelerator")
XXH3 = "xxh3-64"
_FORMAT = re.compile(r"^crossrail-ckpt/v(\d+)(?:\.\d+)*$")
_CHECKSUM = re.compile(r"^(?:xxh3-64:[0-9a-f]{16}|sha256:[0-9a-f]{64})$")

# safetensors dtype codes of the numpy dtypes a checkpoint holds; numpy has no bfloat16 or float8.
DTYPE_CODES = {
    "float64": "F64",
    "float32": "F32",
    "float16": "F16",
    "int64": "I64",
    "int32": "I32",
    "int16": "I16",
    "int8": "I8",
    "uint64": "U64",
    "uint32": "U32",
    "uint16": "U16",
    "uint8": "U8",
    "bool": "BOOL",
}
NUMPY_DTYPES = {code: np.dtype(name).newbyteorder("<") for name, code in DTYPE_CODES.items()}


def checksum(data: Any) -> str:
    """The manifest checksum of raw bytes (anything with the buffer protocol): `xxh3-64:<16 hex>`."""
    return f"{XXH3}:{xxhash.xxh3_64_hexdigest(data)}"


def hasher(expected: str) -> Any:
    """An incremental hasher for the algorithm `expected` names (`xxh3-64:` or, from the first cut, `sha256:`)."""
    return xxhash.xxh3_64() if expected.startswith(f"{XXH3}:") else hashlib.sha256()


def digest(expected: str, h: Any) -> str:
    """The finished checksum of hasher `h`, in the form `expected` has."""
    return f"{expected.split(':', 1)[0]}:{h.hexdigest()}"


def marker_content(manifest_bytes: bytes) -> bytes:
    """What the commit marker holds: the checksum of the manifest it commits."""
    return (checksum(manifest_bytes) + "\n").encode()


def lineage_block(given: Mapping[str, Any]) -> dict[str, Any]:
    """The manifest's lineage: every standard key present (null when unknown), extra keys kept."""
    given_hardware = given.get("hardware")
    hardware: dict[str, Any] = given_hardware if isinstance(given_hardware, dict) else {}
    block = {key: given.get(key) for key in LINEAGE_KEYS}
    block["hardware"] = {key: hardware.get(key) for key in HARDWARE_KEYS} | hardware
    return block | {k: v for k, v in given.items() if k not in block}


def parse_manifest(where: str, data: bytes, marker: bytes | None) -> dict[str, Any]:
    """The checked manifest of the checkpoint at `where`, from its bytes and its commit marker (if any).

    TornCheckpoint when it is unparsable, malformed or not the one the marker commits; NewerFormat when
    its major format is newer than this reader's.
    """
    try:
        manifest = json.loads(data)
    except ValueError as exc:
        raise TornCheckpoint(f"{MANIFEST_FILE} cannot be parsed ({exc})") from exc
    if not isinstance(manifest, dict):
        raise TornCheckpoint(f"{MANIFEST_FILE} is not a JSON object")
    check_format(where, manifest.get("format"))
    if marker is not None and marker.strip() != marker_content(data).strip():
        raise TornCheckpoint(f"{MARKER_FILE} does not match {MANIFEST_FILE}: the manifest changed after the commit")
    problems = _problems(manifest)
    if problems:
        raise TornCheckpoint(f"{MANIFEST_FILE} is malformed: " + "; ".join(problems))
    return manifest


def check_format(where: str, fmt: Any) -> None:
    m = _FORMAT.match(fmt) if isinstance(fmt, str) else None
    if m is None:
        raise TornCheckpoint(f"{MANIFEST_FILE} format is {fmt!r}, not {FORMAT}")
    if int(m.group(1)) > FORMAT_MAJOR:
        raise NewerFormat(
            f"the checkpoint at {where} is {fmt}, newer than this reader ({FORMAT}); "
            "upgrade crossrail in the training image to read it"
        )


def _problems(manifest: dict[str, Any]) -> list[str]:
    problems = []
    if not _is_int(manifest.get("step")) or manifest["step"] < 0:
        problems.append(f"step must be a whole number >= 0 (got {manifest.get('step')!r})")
    tokens = manifest.get("tokens")
    if tokens is not None and (not _is_int(tokens) or tokens < 0):
        problems.append(f"tokens must be a whole number >= 0 or null (got {tokens!r})")
    for key in ("state", "lineage"):
        if not isinstance(manifest.get(key), dict):
            problems.append(f"{key} must be an object")
    tensors = manifest.get("tensors")
    if not isinstance(tensors, list) or not tensors:
        return [*problems, "tensors must be a non-empty list"]
    for i, entry in enumerate(tensors):
        problems += [f"tensors[{i}].{p}" for p in _entry_problems(entry)]
    names = [e["name"] for e in tensors if isinstance(e, dict) and isinstance(e.get("name"), str)]
    problems += [f"tensor {n!r} is listed twice" for n in sorted({n for n in names if names.count(n) > 1})]
    return problems


def _entry_problems(entry: Any) -> list[str]:
    if not isinstance(entry, dict):
        return ["must be an object"]
    checks = {
        "name": isinstance(entry.get("name"), str) and entry["name"] != "",
        "dtype": isinstance(entry.get("dtype"), str),
        "shape": isinstance(entry.get("shape"), list) and all(_is_int(n) and n >= 0 for n in entry["shape"]),
        "file": isinstance(entry.get("file"), str),
        "offset": _is_int(entry.get("offset")) and entry["offset"] >= 0,
        "length": _is_int(entry.get("length")) and entry["length"] >= 0,
        "checksum": isinstance(entry.get("checksum"), str) and bool(_CHECKSUM.match(entry["checksum"])),
    }
    problems = [f"{key} is missing or malformed (got {entry.get(key)!r})" for key, ok in checks.items() if not ok]
    if checks["file"] and not is_plain_name(entry["file"]):
        problems.append(
            f"file {entry['file']!r} is not a plain file name inside the checkpoint directory; "
            "a path with '/', '\\' or '..' would escape it"
        )
    if checks["dtype"] and checks["shape"] and checks["length"] and entry["dtype"] in NUMPY_DTYPES:
        want = NUMPY_DTYPES[entry["dtype"]].itemsize * int(np.prod(entry["shape"], dtype=np.int64))
        if want != entry["length"]:
            problems.append(f"length is {entry['length']} but {entry['dtype']} {entry['shape']} takes {want} bytes")
    return problems


def is_plain_name(name: str) -> bool:
    """A file name that stays inside the directory it is joined to."""
    return name not in {"", ".", ".."} and not any(c in name for c in "/\\\0")


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def data_position(manifest: Mapping[str, Any]) -> tuple[int | None, int]:
    """(global sample cursor, data-parallel degree) of a checkpoint, from `state.data`.

    The cursor is the samples the run had drawn when it was written, all workers together: degree-free, so a
    run written at degree N resumes at degree M from it. Manifests written before the cursor existed give
    `position * batch` when they say both, else None; before the degree existed, 1.
    """
    state = manifest.get("state")
    data = state.get("data") if isinstance(state, Mapping) else None
    if not isinstance(data, Mapping):
        return None, 1
    given, degree, position, batch = (data.get(k) for k in ("samples", "degree", "position", "batch"))
    samples: int | None = None
    if isinstance(given, int) and _is_int(given):
        samples = given
    elif isinstance(position, int) and isinstance(batch, int) and _is_int(position) and _is_int(batch):
        samples = position * batch
    return samples, degree if isinstance(degree, int) and _is_int(degree) and degree > 0 else 1
