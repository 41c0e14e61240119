"""The one record every renderer works from: what runs (image, command, env) and who it is (run, attempt, stage).

Built from an Experiment (`crossrail render`, before any run exists) or from the agent's LaunchRequest
(the Kubernetes executor); both carry the same CROSSRAIL_* variables (docs/runtime.md).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from crossrail.core.attempts import LaunchRequest
from crossrail.core.priority import PRIORITIES as PRIORITY_NAMES
from crossrail.core.priority import priority_level
from crossrail.errors import Problem, ProblemCode, SpecError
from crossrail.spec import Experiment

LABEL_PREFIX = "crossrail.dev/"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
PRIORITIES = {name: 10 ** (2 + priority_level(name)) for name in PRIORITY_NAMES}
"""Kueue WorkloadPriorityClass values: low 100, normal 1000, high 10000, critical 100000."""
_DIGEST = re.compile(r"@sha256:[0-9a-f]{64}\Z")
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
_SHA = re.compile(r"(sha256:)?[0-9a-f]{64}")
_LABEL_KEY = re.compile(r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
_LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$")


def object_name(run: str, attempt: int) -> str:
    """The Kubernetes object of attempt `attempt` of `run`: `<run>-a<attempt>`."""
    return f"{run}-a{attempt}"


@dataclass(frozen=True)
class Workload:
    """One attempt of one run, independent of where it goes. `env` holds every CROSSRAIL_* variable."""

    experiment: str
    run: str
    attempt: int
    stage: str
    team: str | None
    priority: str
    image: str
    command: list[str]
    args: list[str]
    env: dict[str, str]
    chips: int
    duration_s: float | None = None
    labels: dict[str, str] = field(default_factory=dict)
    uid: str | None = None  # the run's globally unique id: a label, never part of an object's name
    workers: int = 1
    """Data-parallel worker processes (`spec.parallelism.data`), each holding chips/workers chips."""

    @property
    def object_name(self) -> str:
        """The Kubernetes object's name: `<run>-a<attempt>` (a run id is already a DNS-1123 label)."""
        return object_name(self.run, self.attempt)

    def crossrail_labels(self) -> dict[str, str]:
        labels = {
            f"{LABEL_PREFIX}experiment": self.experiment,
            f"{LABEL_PREFIX}run": self.run,
            f"{LABEL_PREFIX}attempt": str(self.attempt),
            f"{LABEL_PREFIX}stage": self.stage,
        }
        if self.uid:
            labels[f"{LABEL_PREFIX}run-uid"] = self.uid
        if self.team:
            labels[f"{LABEL_PREFIX}team"] = self.team
        return labels


def pinned(image: str) -> bool:
    return bool(_DIGEST.search(image))


def with_digest(image: str, digest: str) -> str:
    """`registry/repo:tag` + `sha256:<hex>` -> `registry/repo@sha256:<hex>`."""
    name = image.split("@", 1)[0]
    colon = name.rfind(":")
    repository = name[:colon] if colon > name.rfind("/") else name
    return f"{repository}@sha256:{digest.removeprefix('sha256:')}"


def pinned_image(image: str, source: str, *, image_digest: str | None, allow_unpinned: bool) -> str:
    """The image by digest; an unpinned image is refused unless a digest is given or it is allowed."""
    if image_digest is not None:
        if not _SHA.fullmatch(image_digest):
            fix = "pass --image-digest sha256:<64 hex>"
            raise SpecError(
                [
                    Problem(
                        source,
                        "spec.image",
                        f"{image_digest!r} is not an image digest",
                        None,
                        fix,
                        code=ProblemCode.BAD_VALUE,
                    )
                ]
            )
        return with_digest(image, image_digest)
    if pinned(image) or allow_unpinned:
        return image
    fix = "pin it (repo@sha256:<64 hex>), pass --image-digest sha256:<64 hex>, or --allow-unpinned to render it as is"
    raise SpecError(
        [Problem(source, "spec.image", f"{image!r} is not pinned by digest", None, fix, code=ProblemCode.PORTABILITY)]
    )


def _label_problems(labels: dict[str, str], source: str, team: str | None = None) -> list[Problem]:
    problems = []
    if team is not None and not _LABEL_VALUE.fullmatch(team):
        fix = "use up to 63 letters, digits, '-', '_' or '.' (it becomes the crossrail.dev/team label)"
        problems.append(
            Problem(
                source,
                "metadata.team",
                f"{team!r} cannot be a Kubernetes label value",
                None,
                fix,
                code=ProblemCode.BAD_VALUE,
            )
        )
    for key, value in labels.items():
        if not _LABEL_KEY.fullmatch(key) or not _LABEL_VALUE.fullmatch(value):
            fix = "use a Kubernetes label: key [prefix/]name, value up to 63 letters, digits, '-', '_', '.'"
            problems.append(
                Problem(
                    source,
                    f"metadata.labels[{key!r}]",
                    f"{key}={value!r} is not a label",
                    None,
                    fix,
                    code=ProblemCode.BAD_VALUE,
                )
            )
    return problems


def from_experiment(
    exp: Experiment,
    *,
    source: str,
    run: str | None = None,
    attempt: int = 1,
    report: str | None = None,
    image_digest: str | None = None,
    allow_unpinned: bool = False,
) -> Workload:
    """The workload of an experiment's attempt (default: the first attempt of run `<name>-1`)."""
    image = pinned_image(exp.spec.image, source, image_digest=image_digest, allow_unpinned=allow_unpinned)
    labels = dict(exp.metadata.labels)
    problems = _label_problems(labels, source, exp.metadata.team)
    if problems:
        raise SpecError(problems)
    run = run or f"{exp.name}-1"
    if not _DNS_LABEL.fullmatch(run):
        fix = "use lower-case letters, digits and '-' (a run id such as posttrain-042-3)"
        raise SpecError(
            [Problem(source, "--run", f"{run!r} cannot name Kubernetes objects", None, fix, code=ProblemCode.BAD_VALUE)]
        )
    ckpt = f"{exp.spec.checkpoint.dir.rstrip('/')}/{run}"
    resolved = {**exp.model_dump(mode="json", by_alias=True), "run": run, "attempt": attempt}
    resolved["spec"]["image"] = image
    env = {
        **exp.spec.env,
        "EXPERIMENT_ID": exp.name,
        "CROSSRAIL_RUN_ID": run,
        "CROSSRAIL_ATTEMPT": str(attempt),
        "CROSSRAIL_CHECKPOINT_DIR": ckpt,
        "CROSSRAIL_CONFIG": exp.spec.config or "",
        "CROSSRAIL_DATASET": exp.spec.dataset.uri,
        "CROSSRAIL_REPORT": report or f"{ckpt}/reports/attempt-{attempt}",
        "CROSSRAIL_SPEC": json.dumps(resolved, sort_keys=True),
    }
    return Workload(
        experiment=exp.name,
        run=run,
        attempt=attempt,
        stage=str(exp.spec.stage),
        team=exp.metadata.team,
        priority=exp.spec.priority,
        image=image,
        command=list(exp.spec.command),
        args=list(exp.spec.args),
        env=env,
        chips=exp.spec.resources.chips,
        duration_s=exp.spec.resources.duration_s,
        labels=labels,
        workers=exp.spec.parallelism.data,
    )


def from_launch(request: LaunchRequest, *, allow_unpinned: bool = False) -> Workload:
    """The workload of an agent's launch request; its resolved experiment rides in CROSSRAIL_SPEC."""
    source = f"run {request.run}"
    try:
        resolved: dict[str, Any] = json.loads(request.env.get("CROSSRAIL_SPEC", "{}"))
    except json.JSONDecodeError as exc:
        raise SpecError(
            [Problem(source, "env.CROSSRAIL_SPEC", f"is not JSON: {exc}", None, None, code=ProblemCode.BAD_VALUE)]
        ) from None
    spec = resolved.get("spec") or {}
    metadata = resolved.get("metadata") or {}
    image = str(spec.get("image") or "")
    image = pinned_image(image, source, image_digest=None, allow_unpinned=allow_unpinned)
    resources = spec.get("resources") or {}
    labels = {str(k): str(v) for k, v in (metadata.get("labels") or {}).items()}
    team = metadata.get("team")
    problems = _label_problems(labels, source, team)
    if problems:
        raise SpecError(problems)
    return Workload(
        experiment=request.env.get("EXPERIMENT_ID") or str(metadata.get("name") or request.run),
        run=request.run,
        attempt=request.attempt,
        stage=str(spec.get("stage") or "experiment"),
        team=team,
        priority=str(spec.get("priority") or "normal"),
        image=image,
        command=list(request.command),
        args=[],
        env=dict(request.env),
        chips=request.chips,
        duration_s=resources.get("duration"),
        labels=labels,
        uid=request.env.get("CROSSRAIL_RUN_UID") or None,
        workers=_workers(spec, request.chips),
    )


def _workers(spec: dict[str, Any], chips: int) -> int:
    """The recorded `spec.parallelism.data`, never more than the attempt's chips (an elastic run shrunk)."""
    data = (spec.get("parallelism") or {}).get("data")
    return max(1, min(int(data), chips)) if isinstance(data, int) else 1
