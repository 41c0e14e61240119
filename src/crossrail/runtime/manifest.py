"""The crossrail-ckpt/v1 manifest: its fields, its checks, and the verification of tensor bytes against it."""

from __future__ import annotations

import hashlib
import json
import os
import re
import struct
from collections.abc import Mapping
from typing import Any

import numpy.typing as npt

from crossrail.errors import CrossrailError

FORMAT = "crossrail-ckpt/v1"
FORMAT_MAJOR = 1
MANIFEST_FILE = "manifest.json"
MODEL_FILE = "model.safetensors"
LINEAGE_KEYS = ("run", "attempt", "parent", "dataset_version", "code_commit", "hardware", "framework")
HARDWARE_KEYS = ("pool", "chip_type", "accelerator")
_FORMAT = re.compile(r"^crossrail-ckpt/v(\d+)(?:\.\d+)*$")
_CHECKSUM = re.compile(r"^sha256:[0-9a-f]{64}$")
_HEADER_MAX = 100 * 1024 * 1024  # the safetensors limit on the JSON header


class CheckpointError(CrossrailError):
    """A checkpoint cannot be written, found or read; the message names the problem and what to use instead."""


class CheckpointNotFound(CheckpointError):
    """No checkpoint, or no valid one, where one was asked for."""


class TornCheckpoint(CheckpointError):
    """A checkpoint that is incomplete or damaged: no manifest, a missing file, a checksum mismatch, ..."""


def checksum(array: npt.NDArray[Any]) -> str:
    """sha256 of a C-contiguous little-endian array's raw bytes, as written in the manifest."""
    return "sha256:" + hashlib.sha256(array.data).hexdigest()


def lineage_block(given: Mapping[str, Any]) -> dict[str, Any]:
    """The manifest's lineage: every standard key present (null when unknown), extra keys kept."""
    given_hardware = given.get("hardware")
    hardware: dict[str, Any] = given_hardware if isinstance(given_hardware, dict) else {}
    block = {key: given.get(key) for key in LINEAGE_KEYS}
    block["hardware"] = {key: hardware.get(key) for key in HARDWARE_KEYS} | hardware
    return block | {k: v for k, v in given.items() if k not in block}


def read_manifest(path: str) -> dict[str, Any]:
    """The checked manifest of the checkpoint directory `path`.

    TornCheckpoint when it is missing, unparsable or malformed; CheckpointError when its format is newer.
    """
    try:
        with open(os.path.join(path, MANIFEST_FILE), "rb") as f:
            manifest = json.loads(f.read())
    except FileNotFoundError as exc:
        raise TornCheckpoint(f"no {MANIFEST_FILE} (the save did not finish)") from exc
    except (OSError, ValueError) as exc:
        raise TornCheckpoint(f"{MANIFEST_FILE} cannot be parsed ({exc})") from exc
    if not isinstance(manifest, dict):
        raise TornCheckpoint(f"{MANIFEST_FILE} is not a JSON object")
    _check_format(path, manifest.get("format"))
    problems = _problems(manifest)
    if problems:
        raise TornCheckpoint(f"{MANIFEST_FILE} is malformed: " + "; ".join(problems))
    return manifest


def _check_format(path: str, fmt: Any) -> None:
    m = _FORMAT.match(fmt) if isinstance(fmt, str) else None
    if m is None:
        raise TornCheckpoint(f"{MANIFEST_FILE} format is {fmt!r}, not {FORMAT}")
    if int(m.group(1)) > FORMAT_MAJOR:
        raise CheckpointError(
            f"the checkpoint at {path} is {fmt}, newer than this reader ({FORMAT}); "
            "upgrade crossrail in the training image to read it"
        )


def _problems(manifest: dict[str, Any]) -> list[str]:
    problems = []
    if not _is_int(manifest.get("step")) or manifest["step"] < 0:
        problems.append(f"step must be a whole number >= 0 (got {manifest.get('step')!r})")
    for key in ("state", "lineage"):
        if not isinstance(manifest.get(key), dict):
            problems.append(f"{key} must be an object")
    tensors = manifest.get("tensors")
    if not isinstance(tensors, list) or not tensors:
        return [*problems, "tensors must be a non-empty list"]
    for i, entry in enumerate(tensors):
        problems += [f"tensors[{i}].{p}" for p in _entry_problems(entry)]
    return problems


def _entry_problems(entry: Any) -> list[str]:
    if not isinstance(entry, dict):
        return ["must be an object"]
    checks = {
        "name": isinstance(entry.get("name"), str),
        "dtype": isinstance(entry.get("dtype"), str),
        "shape": isinstance(entry.get("shape"), list) and all(_is_int(n) and n >= 0 for n in entry["shape"]),
        "file": isinstance(entry.get("file"), str) and entry["file"] == os.path.basename(entry["file"]) != "",
        "offset": _is_int(entry.get("offset")) and entry["offset"] >= 0,
        "length": _is_int(entry.get("length")) and entry["length"] >= 0,
        "checksum": isinstance(entry.get("checksum"), str) and bool(_CHECKSUM.match(entry["checksum"])),
    }
    return [f"{key} is missing or malformed (got {entry.get(key)!r})" for key, ok in checks.items() if not ok]


def safetensors_layout(path: str) -> dict[str, dict[str, Any]]:
    """Each tensor's dtype, shape, and offset and length within the data section of a safetensors file."""
    with open(path, "rb") as f:
        (size,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(size))
    return {name: _layout(h) for name, h in header.items() if name != "__metadata__"}


def _layout(h: dict[str, Any]) -> dict[str, Any]:
    begin, end = h["data_offsets"]
    return {"dtype": h["dtype"], "shape": list(h["shape"]), "offset": begin, "length": end - begin}


def verify_tensors(path: str, manifest: dict[str, Any]) -> dict[str, bytes]:
    """Check every tensor file of a checkpoint against its manifest; returns each file's bytes by name."""
    by_file: dict[str, list[dict[str, Any]]] = {}
    for entry in manifest["tensors"]:
        by_file.setdefault(entry["file"], []).append(entry)
    return {name: _verify_file(os.path.join(path, name), entries) for name, entries in by_file.items()}


def _verify_file(path: str, entries: list[dict[str, Any]]) -> bytes:
    name = os.path.basename(path)
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError as exc:
        raise TornCheckpoint(f"{name} is missing") from exc
    header, start = _header(name, data)
    listed = {e["name"] for e in entries}
    if listed != header.keys():
        extra, lacking = sorted(header.keys() - listed), sorted(listed - header.keys())
        raise TornCheckpoint(f"{name} does not hold the manifest's tensors (unlisted {extra}, missing {lacking})")
    view = memoryview(data)
    for e in entries:
        if _layout(header[e["name"]]) != {k: e[k] for k in ("dtype", "shape", "offset", "length")}:
            raise TornCheckpoint(f"tensor {e['name']}: {name} disagrees with the manifest on dtype, shape or place")
        begin = start + e["offset"]
        if begin + e["length"] > len(data):
            raise TornCheckpoint(f"{name} is truncated (tensor {e['name']} ends past the end of the file)")
        if "sha256:" + hashlib.sha256(view[begin : begin + e["length"]]).hexdigest() != e["checksum"]:
            raise TornCheckpoint(f"tensor {e['name']}: checksum mismatch in {name}")
    return data


def _header(name: str, data: bytes) -> tuple[dict[str, Any], int]:
    """The safetensors header (tensor entries only) and where the data section starts."""
    if len(data) < 8:
        raise TornCheckpoint(f"{name} is truncated ({len(data)} bytes)")
    (size,) = struct.unpack("<Q", data[:8])
    if size > _HEADER_MAX or 8 + size > len(data):
        raise TornCheckpoint(f"{name} is truncated or not safetensors (header of {size} bytes)")
    try:
        header = json.loads(data[8 : 8 + size])
        entries = {k: v for k, v in header.items() if k != "__metadata__"}
        for h in entries.values():
            _layout(h)
    except (ValueError, AttributeError, KeyError, TypeError) as exc:
        raise TornCheckpoint(f"{name} has an unreadable safetensors header ({exc})") from exc
    return entries, 8 + size


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)
