"""Portability lint: what an experiment must state so it runs on any pool, each finding with its fix."""

from __future__ import annotations

import re
from typing import Any

from crossrail.errors import Problem, ProblemCode
from crossrail.spec.loader import Document
from crossrail.spec.paths import Path, format_path
from crossrail.spec.policy import PlacementPolicy
from crossrail.spec.problems import sort_problems

OBJECT_STORAGE_SCHEMES = frozenset({"gs", "gcs", "s3", "az", "abfs", "abfss", "r2", "oss", "cos"})
HARD_CODED = "hard-coded"

_DIGEST = re.compile(r"@sha256:[0-9a-f]{64}\Z")
_VERSIONED = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*/v[0-9]+")
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]+)://")
_RESOURCE_NAMES = {"nvidia.com/gpu": "gpu", "amd.com/gpu": "gpu", "google.com/tpu": "tpu"}
_PLACEMENT_KEYS = frozenset({"nodeSelector", "node_selector", "tolerations", "affinity"})
_DEVICE_ENV = frozenset(
    {"CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES"}
)
_NODE_LABEL = re.compile(r"cloud\.google\.com/gke-(accelerator|tpu-.+)")
_PLACEHOLDER = re.compile(r"<(to fill in: [^<>\n]+)>")


def placeholder(what: str) -> str:
    """A value written where the source did not say (`crossrail import`); every check flags it until replaced."""
    return f"<to fill in: {what}>"


_ACCELERATOR_VALUE = re.compile(r"nvidia|amd|tpu|gpu", re.IGNORECASE)


def lint_experiment(doc: Document, policy: PlacementPolicy) -> list[Problem]:
    """Portability findings for an Experiment document under `policy`; schema errors are not repeated here."""
    lint = _Lint(doc)
    required = policy.portability_requirements
    if required.container_image == "pinned-by-digest":
        lint.image()
    if required.dataset_uri_scheme == "object-storage":
        lint.uris(frozenset(s.lower() for s in required.local_uri_schemes))
    if required.checkpoint_format == "versioned":
        lint.checkpoint_format()
    if required.experiment_metadata == "required":
        lint.metadata()
    lint.hardware(doc.data, ())
    lint.placeholders(doc.data, ())
    return sort_problems(lint.findings)


def _get(data: Any, *path: str) -> Any:
    for key in path:
        if not isinstance(data, dict):
            return None
        data = data.get(key)
    return data


def _repository(image: str) -> str:
    """`registry/team/trainer:latest` -> `registry/team/trainer`."""
    name = image.split("@", 1)[0]
    colon = name.rfind(":")
    return name[:colon] if colon > name.rfind("/") else name


class _Lint:
    def __init__(self, doc: Document) -> None:
        self.doc = doc
        self.findings: list[Problem] = []

    def add(self, path: Path, message: str, fix: str, code: ProblemCode = ProblemCode.PORTABILITY) -> None:
        line = self.doc.line_of(path)
        self.findings.append(Problem(self.doc.source, format_path(path), message, line, fix, code=code))

    def hard_coded(self, path: Path, what: str, fix: str) -> None:
        self.add(path, f"{HARD_CODED} {what}", fix, ProblemCode.HARD_CODED)

    def image(self) -> None:
        image = _get(self.doc.data, "spec", "image")
        if isinstance(image, str) and image and not _DIGEST.search(image):
            self.add(
                ("spec", "image"),
                f"{image!r} is not pinned by digest",
                f"use {_repository(image)}@sha256:<64 hex> (find it with `crane digest {image}` "
                f"or `docker buildx imagetools inspect {image}`)",
            )

    def uris(self, local_schemes: frozenset[str]) -> None:
        for path in (("spec", "dataset", "uri"), ("spec", "checkpoint", "dir"), ("spec", "config")):
            uri = _get(self.doc.data, *path)
            if not isinstance(uri, str) or not uri or _PLACEHOLDER.fullmatch(uri.strip()):
                continue
            m = _SCHEME.match(uri)
            scheme = m.group(1).lower() if m else "file"
            if scheme in OBJECT_STORAGE_SCHEMES or scheme in local_schemes:
                continue
            what = "is a local path" if scheme == "file" else f"uses {scheme}://, not object storage"
            self.add(
                path,
                f"{uri!r} {what}; a run placed on another pool cannot read it",
                "use object storage such as gs://bucket/path or s3://bucket/path, or allow it with "
                f"portability_requirements.local_uri_schemes: [{scheme}] in the placement policy",
            )

    def checkpoint_format(self) -> None:
        fmt = _get(self.doc.data, "spec", "checkpoint", "format")
        if fmt == "unknown":  # `crossrail import` of a trainer it knows nothing about
            self.add(
                ("spec", "checkpoint", "format"),
                "checkpoint format unknown: crossrail cannot tell what the trainer writes or verify it",
                "save checkpoints with crossrail.runtime and write crossrail-ckpt/v1, or name the trainer's own "
                "versioned format, <name>/v<N>",
            )
        elif isinstance(fmt, str) and not _VERSIONED.fullmatch(fmt):
            self.add(
                ("spec", "checkpoint", "format"),
                f"checkpoint format {fmt!r} is not versioned",
                "name a versioned format, <name>/v<N>, such as crossrail-ckpt/v1",
            )

    def metadata(self) -> None:
        why = "the placement policy requires experiment metadata (experiment_metadata: required)"
        for key, example in (("team", "<team>"), ("owner", "<owner>")):
            if not _get(self.doc.data, "metadata", key):
                self.add(("metadata", key), f"missing metadata.{key}", f"add `{key}: {example}`; {why}")
        if not _get(self.doc.data, "spec", "code", "repo"):
            self.add(
                ("spec", "code", "repo"),
                "missing spec.code.repo",
                f"add `code: {{repo: https://github.com/<org>/<repo>, commit: auto}}`; {why}",
            )

    # A placeholder (written by `crossrail import`) is never a value, whatever the policy says.
    def placeholders(self, value: Any, path: Path) -> None:
        if isinstance(value, dict):
            for key, item in value.items():
                self.placeholders(item, (*path, key))
        elif isinstance(value, list):
            for i, item in enumerate(value):
                self.placeholders(item, (*path, i))
        elif isinstance(value, str) and "<" in value and (m := _PLACEHOLDER.fullmatch(value.strip())):
            self.add(path, f"is a placeholder, not a value ({m.group(1)})", "replace it with the real value")

    # Hard-coded hardware is never portable, whatever the policy says.
    def hardware(self, value: Any, path: Path) -> None:
        if isinstance(value, dict):
            for key, item in value.items():
                if not self.hardware_key(key, item, (*path, key)):
                    self.hardware(item, (*path, key))
        elif isinstance(value, list):
            for i, item in enumerate(value):
                self.hardware(item, (*path, i))
        elif isinstance(value, str):
            self.resource_name(value, path)

    def hardware_key(self, key: str, value: Any, path: Path) -> bool:
        if self.resource_name(key, path, value):
            return True
        if key in _PLACEMENT_KEYS:
            self.hard_coded(
                path,
                f"node placement ({key})",
                "describe the need with spec.resources and spec.accelerators; crossrail writes node "
                "selectors, tolerations and affinity from the pool it places on",
            )
        elif _NODE_LABEL.fullmatch(key) or (
            key == "accelerator" and isinstance(value, str) and _ACCELERATOR_VALUE.search(value)
        ):
            self.hard_coded(
                path,
                f"node label {key}: {value}",
                "state a preference with spec.accelerators.prefer; crossrail selects nodes from the pool it places on",
            )
        elif path[:2] == ("spec", "env") and len(path) == 3:
            return self.env(key, path)
        else:
            return False
        return True

    def env(self, key: str, path: Path) -> bool:
        if key in _DEVICE_ENV:
            what = f"device visibility ({key})"
            fix = "remove it; crossrail sets the visible devices for the chips it assigns"
        elif key.startswith("TPU_"):
            what = f"TPU runtime setting ({key})"
            fix = "remove it; crossrail sets TPU runtime variables for the slice it places on"
        elif key == "TRAINING_BACKEND":
            what = "TRAINING_BACKEND"
            fix = (
                "remove it and state a preference with spec.accelerators.prefer; crossrail sets "
                "TRAINING_BACKEND from the placement"
            )
        else:
            return False
        self.hard_coded(path, what, fix)
        return True

    def resource_name(self, text: str, path: Path, value: Any = None) -> bool:
        if "/" not in text:  # every resource name has one: most keys and values are looked at no further
            return False
        for name, kind in _RESOURCE_NAMES.items():
            if name in text:
                chips = value if isinstance(value, int) and not isinstance(value, bool) else None
                if chips is None:
                    chips = _get(self.doc.data, "spec", "resources", "chips")
                shown = chips if isinstance(chips, int) and not isinstance(chips, bool) and chips > 0 else "<n>"
                self.hard_coded(
                    path,
                    f"{name}",
                    f"request chips with spec.resources.chips: {shown} and a preference with "
                    f"spec.accelerators.prefer: {kind}; crossrail sets the resource name from the pool "
                    "it places on",
                )
                return True
        return False
