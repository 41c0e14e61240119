"""`crossrail import`: an existing batch/v1 Job as a hardware-agnostic Experiment, and what was changed.

Image, command, args, config and checkpoint directory are kept as written. What tied the Job to one kind
of hardware (node selectors, tolerations, affinity, accelerator limits, the backend variable) is removed,
and every change is an ImportFinding that says why, so the re-rendered workload's differences are all explained.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import yaml

from crossrail.errors import Problem, ProblemCode, SpecError
from crossrail.executors.render.workload import pinned, with_digest
from crossrail.spec import (
    Experiment,
    Stage,
    default_policy,
    lint_experiment,
    parse_document,
    parse_experiment,
    placeholder,
)

# What the Job does not say about its data: `validate` and `submit` flag it until it is replaced.
DATASET_PLACEHOLDER = placeholder("the dataset URI, e.g. gs://bucket/datasets/sft; the Job names none")

ACCELERATOR_RESOURCES = {"nvidia.com/gpu": "gpu", "amd.com/gpu": "gpu", "google.com/tpu": "tpu"}
DEVICE_ENV = frozenset({"CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "TPU_VISIBLE_CHIPS"})
SET_BY_CROSSRAIL = frozenset({"TRAINING_BACKEND", "EXPERIMENT_ID"})
RUN_CHECKPOINT_DIR = "$(CROSSRAIL_CHECKPOINT_DIR)"
"""How an imported command names its run's own checkpoint directory (expanded per attempt, as Kubernetes does)."""
_CONFIG_FLAGS = ("--config", "--config-file", "--config_file")
_CHECKPOINT_FLAGS = ("--checkpoint-dir", "--checkpoint_dir", "--ckpt-dir", "--ckpt_dir", "--output-dir")
_DATASET_FLAGS = ("--dataset", "--data", "--data-dir", "--data_dir", "--dataset-uri")
_STAGE_WORDS = {
    "pretrain": Stage.PRETRAINING,
    "post-train": Stage.POST_TRAINING,
    "post_train": Stage.POST_TRAINING,
    "posttrain": Stage.POST_TRAINING,
    "finetun": Stage.POST_TRAINING,
    "sft": Stage.POST_TRAINING,
    "reinforcement": Stage.REINFORCEMENT_LEARNING,
    "rl": Stage.REINFORCEMENT_LEARNING,
    "eval": Stage.EVAL,
    "inference": Stage.INFERENCE,
}


@dataclass(frozen=True)
class ImportFinding:
    """One change the import made: the Job field, what became of it (`removed`, `moved`, `kept`) and why."""

    path: str
    action: str
    message: str

    def as_dict(self) -> dict[str, str]:
        return {"path": self.path, "action": self.action, "message": self.message}


# What `crossrail render` adds or changes when the imported experiment is rendered again, on any pool.
RENDERED = [
    ImportFinding("kind", "rendered", "batch/v1 Job for single-host work, a JobSet (one Job per slice) for TPU slices"),
    ImportFinding("metadata.name", "rendered", "<run>-a<attempt>, in the team's namespace from the fleet"),
    ImportFinding(
        "metadata.labels", "rendered", "kueue.x-k8s.io/queue-name (the stage's LocalQueue) and priority-class"
    ),
    ImportFinding(
        "metadata.labels", "rendered", "crossrail.dev/ experiment, run, attempt, stage, team and pool labels"
    ),
    ImportFinding("spec.suspend", "rendered", "submitted suspended: Kueue admits it and unsuspends it"),
    ImportFinding("spec.backoffLimit", "rendered", "0 (JobSet failurePolicy.maxRestarts 0): crossrail owns retries"),
    ImportFinding(
        "spec.template.spec.nodeSelector", "rendered", "the pool's labels, its GKE accelerator and TPU topology"
    ),
    ImportFinding(
        "spec.template.spec.tolerations", "rendered", "the accelerator's taint (nvidia.com/gpu or google.com/tpu)"
    ),
    ImportFinding("spec.template.spec.containers[0].resources", "rendered", "the pool's resource, chips per host"),
    ImportFinding(
        "spec.template.spec.containers[0].env", "rendered", "TRAINING_BACKEND from the pool, CROSSRAIL_* per run"
    ),
    ImportFinding(
        "spec.template.spec.serviceAccountName", "rendered", "the fleet's service account (Workload Identity)"
    ),
    ImportFinding("spec.template.spec.terminationGracePeriodSeconds", "rendered", "the fleet's preemption grace"),
]


@dataclass(frozen=True)
class Imported:
    experiment: Experiment
    document: dict[str, Any]
    findings: list[ImportFinding]

    def yaml(self) -> str:
        return yaml.safe_dump(self.document, sort_keys=False, allow_unicode=True)


def _flag(args: list[str], flags: tuple[str, ...]) -> tuple[str, int] | None:
    """The value of the first of `flags` in `args` (`--flag value` or `--flag=value`) and its index."""
    for i, arg in enumerate(args):
        for flag in flags:
            if arg == flag and i + 1 < len(args):
                return args[i + 1], i + 1
            if arg.startswith(flag + "="):
                return arg.split("=", 1)[1], i
    return None


def _stage(labels: dict[str, str], given: str | None, findings: list[ImportFinding]) -> str:
    if given is not None:
        findings.append(ImportFinding("metadata.labels", "kept", f"stage {given} given on the command line"))
        return given
    for key, value in labels.items():
        if "stage" in key.lower():
            for word, stage in _STAGE_WORDS.items():
                if word in value.lower():
                    findings.append(
                        ImportFinding(f"metadata.labels[{key!r}]", "kept", f"{value!r} read as stage {stage}")
                    )
                    return str(stage)
    findings.append(ImportFinding("metadata.labels", "kept", "no stage label; the experiment stage is `experiment`"))
    return str(Stage.EXPERIMENT)


class _Import:
    def __init__(self, job: dict[str, Any], source: str) -> None:
        self.job, self.source = job, source
        self.findings: list[ImportFinding] = []
        self.problems: list[Problem] = []

    def note(self, path: str, action: str, message: str) -> None:
        self.findings.append(ImportFinding(path, action, message))

    def fail(self, path: str, message: str, fix: str | None) -> None:
        self.problems.append(Problem(self.source, path, message, None, fix, code=ProblemCode.UNSUPPORTED))


def import_job(
    job: Any,
    source: str,
    *,
    dataset: str | None = None,
    stage: str | None = None,
    team: str | None = None,
    owner: str | None = None,
    code_repo: str | None = None,
    image_digest: str | None = None,
) -> Imported:
    """The Experiment a batch/v1 Job describes; SpecError naming every problem when it cannot be made."""
    imp = _Import(job if isinstance(job, dict) else {}, source)
    if not isinstance(job, dict) or job.get("apiVersion") != "batch/v1" or job.get("kind") != "Job":
        kind = f"{job.get('apiVersion')}/{job.get('kind')}" if isinstance(job, dict) else type(job).__name__
        raise SpecError(
            [
                Problem(
                    source,
                    "kind",
                    f"{kind} is not a batch/v1 Job",
                    None,
                    "import a Kubernetes Job",
                    code=ProblemCode.UNSUPPORTED,
                )
            ]
        )
    pod = ((job.get("spec") or {}).get("template") or {}).get("spec") or {}
    containers = pod.get("containers") or []
    if not containers:
        raise SpecError(
            [
                Problem(
                    source, "spec.template.spec.containers", "no container", None, None, code=ProblemCode.MISSING_FIELD
                )
            ]
        )
    doc = _document(imp, job, pod, containers, dataset=dataset, stage=stage, team=team, image_digest=image_digest)
    if imp.problems:
        raise SpecError(imp.problems)
    if owner:
        doc["metadata"]["owner"] = owner
    if code_repo:
        doc["spec"]["code"] = {"repo": code_repo, "commit": "auto"}
    imp.findings += RENDERED
    text = yaml.safe_dump(doc, sort_keys=False, allow_unicode=True)
    parsed = parse_document(text, f"{source} (imported)")
    experiment = parse_experiment(parsed)
    # What the strict article policy would still refuse at submit, as things to do (nothing is guessed).
    for problem in lint_experiment(parsed, default_policy()):
        imp.note(problem.path, "to do", problem.message + (f"; {problem.fix}" if problem.fix else ""))
    return Imported(experiment, doc, imp.findings)


def _document(
    imp: _Import,
    job: dict[str, Any],
    pod: dict[str, Any],
    containers: list[dict[str, Any]],
    *,
    dataset: str | None,
    stage: str | None,
    team: str | None,
    image_digest: str | None,
) -> dict[str, Any]:
    meta = job.get("metadata") or {}
    c = containers[0]
    cpath = "spec.template.spec.containers[0]"
    if len(containers) > 1:
        imp.note("spec.template.spec.containers", "removed", "only the first container is the trainer; others dropped")
    backend = next((str(e.get("value")) for e in c.get("env") or [] if e.get("name") == "TRAINING_BACKEND"), None)
    env = _env(imp, c, cpath)
    name = env.pop("EXPERIMENT_ID", None) or str(meta.get("name") or "")
    imp.note("metadata.name", "removed", f"Job name {meta.get('name')!r}: crossrail names objects <run>-a<attempt>")
    labels = {str(k): str(v) for k, v in (meta.get("labels") or {}).items()}
    spec: dict[str, Any] = {"stage": _stage(labels, stage, imp.findings), "image": _image(imp, c, cpath, image_digest)}
    spec["command"] = [str(x) for x in c.get("command") or []]
    if not spec["command"]:
        imp.fail(f"{cpath}.command", "no command", "write the entrypoint in command:, crossrail does not read images")
    args = [str(x) for x in c.get("args") or []]
    if args:
        spec["args"] = args
    config = _flag(args, _CONFIG_FLAGS)
    if config:
        spec["config"] = config[0]
        imp.note(f"{cpath}.args[{config[1]}]", "kept", f"config {config[0]} (the argument stays as written)")
    spec["dataset"] = {"uri": _dataset(imp, args, dataset)}
    spec["checkpoint"] = {"dir": _checkpoint(imp, args, cpath), "format": _format(spec["command"], args)}
    if args:
        spec["args"] = args  # the checkpoint argument now names the run's own directory
    spec["resources"] = _resources(imp, job, c, cpath)
    _intent(imp, spec, pod, backend, c.get("resources") or {})
    spec.update(_retries(imp, job))
    if env:
        spec["env"] = env
    _scheduling(imp, job, pod)
    for key in ("volumeMounts", "ports", "securityContext", "workingDir"):
        if key in c:
            imp.note(
                f"{cpath}.{key}", "removed", "cluster-specific container setting; not part of a portable experiment"
            )
    metadata: dict[str, Any] = {"name": name}
    if team or meta.get("namespace") not in (None, "default"):
        metadata["team"] = team or meta["namespace"]
        imp.note("metadata.namespace", "moved", f"team {metadata['team']}: the fleet maps teams to namespaces")
    if labels:
        metadata["labels"] = labels
    return {"apiVersion": "crossrail/v1", "kind": "Experiment", "metadata": metadata, "spec": spec}


def _env(imp: _Import, c: dict[str, Any], cpath: str) -> dict[str, str]:
    env: dict[str, str] = {}
    for i, item in enumerate(c.get("env") or []):
        var, where = str(item.get("name")), f"{cpath}.env[{i}]"
        if var == "TRAINING_BACKEND":
            why = f"backend variable ({item.get('value')!r}): crossrail sets it from the pool each attempt lands on"
            imp.note(where, "removed", why)
        elif var == "EXPERIMENT_ID":
            env[var] = str(item.get("value"))
            imp.note(where, "moved", f"experiment name {item.get('value')!r}; crossrail sets EXPERIMENT_ID from it")
        elif var in DEVICE_ENV:
            imp.note(where, "removed", f"{var} pins devices; the runtime sees the chips the pool gives it")
        elif "valueFrom" in item:
            imp.note(where, "removed", f"{var} comes from the cluster (valueFrom); use the service account's access")
        else:
            env[var] = str(item.get("value", ""))
    return env


def _image(imp: _Import, c: dict[str, Any], cpath: str, digest: str | None) -> str:
    image = str(c.get("image") or "")
    if not image:
        imp.fail(f"{cpath}.image", "no image", "a Job's container names its image")
    elif digest is not None:
        imp.note(f"{cpath}.image", "kept", f"{image!r} pinned to the given digest")
        return with_digest(image, digest)
    elif not pinned(image):
        why = f"{image!r} is not pinned by digest: rendering refuses it unless given --image-digest or --allow-unpinned"
        imp.note(f"{cpath}.image", "kept", why)
    return image


def _dataset(imp: _Import, args: list[str], given: str | None) -> str:
    if given is not None:
        imp.note("spec.dataset", "kept", f"dataset {given} given on the command line")
        return given
    found = _flag(args, _DATASET_FLAGS)
    if found:
        return found[0]
    return DATASET_PLACEHOLDER  # the lint below lists it as a thing to do; --dataset URI fills it instead


def _checkpoint(imp: _Import, args: list[str], cpath: str) -> str:
    found = _flag(args, _CHECKPOINT_FLAGS)
    if found is None:
        imp.fail(f"{cpath}.args", "no checkpoint directory argument (--checkpoint-dir)", "add --checkpoint-dir URI")
        return ""
    # The Job's directory is shared by every run of it: the argument names each run's own instead.
    args[found[1]] = RUN_CHECKPOINT_DIR
    why = f"checkpoint dir {found[0]} becomes spec.checkpoint.dir; the argument is {RUN_CHECKPOINT_DIR}, <dir>/<run>"
    imp.note(f"{cpath}.args[{found[1]}]", "moved", why)
    return found[0]


def _format(command: list[str], args: list[str]) -> str:
    """crossrail-ckpt/v1 for a crossrail workload; `unknown` for a trainer crossrail knows nothing about (the
    lint below lists it as a thing to do, saying what to add)."""
    return "crossrail-ckpt/v1" if any("crossrail.workloads" in part for part in command + args) else "unknown"


def _intent(
    imp: _Import, spec: dict[str, Any], pod: dict[str, Any], backend: str | None, resources: dict[str, Any]
) -> None:
    """The accelerator the Job was written for, as a preference (never a pin), and a TPU slice's chips:
    from its accelerator resources, its nodeSelector and its TRAINING_BACKEND, in that order."""
    limits = {**(resources.get("requests") or {}), **(resources.get("limits") or {})}
    seen = [(f"resource {n}", ACCELERATOR_RESOURCES[n]) for n in limits if n in ACCELERATOR_RESOURCES]
    selector = {str(k): str(v) for k, v in (pod.get("nodeSelector") or {}).items()}
    seen += [(f"nodeSelector {k}={v}", kind) for k, v in selector.items() if (kind := _kind(f"{k}={v}"))]
    if backend in ("tpu", "gpu", "cpu"):
        seen.append((f"TRAINING_BACKEND={backend}", backend))
    topology = selector.get("cloud.google.com/gke-tpu-topology")
    if topology and all(p.isdigit() for p in topology.split("x")):
        chips = math.prod(int(p) for p in topology.split("x"))
        if chips > spec["resources"]["chips"]:
            spec["resources"]["chips"] = chips
            imp.note("spec.resources.chips", "moved", f"TPU topology {topology}: {chips} chips")
    if seen and "accelerators" not in spec:
        said, kind = seen[0]
        spec["accelerators"] = {"prefer": kind}
        imp.note("spec.accelerators.prefer", "moved", f"{said}: the Job was written for {kind}; kept as a preference")


def _kind(text: str) -> str | None:
    lowered = text.lower()
    if "tpu" in lowered:
        return "tpu"
    if any(w in lowered for w in ("nvidia", "gpu", "h100", "a100", "l4")):
        return "gpu"
    return None


def _resources(imp: _Import, job: dict[str, Any], c: dict[str, Any], cpath: str) -> dict[str, Any]:
    res = c.get("resources") or {}
    chips = 0
    for kind in ("limits", "requests"):
        for name, amount in (res.get(kind) or {}).items():
            where = f"{cpath}.resources.{kind}[{name!r}]"
            if name in ACCELERATOR_RESOURCES:
                chips = max(chips, int(str(amount)))
                why = f"{amount} {name}: becomes spec.resources.chips; the pool decides the resource name"
                imp.note(where, "moved", why)
            else:
                imp.note(where, "removed", f"{name}: {amount}: node sizing belongs to the pool, not the experiment")
    parallelism = int((job.get("spec") or {}).get("parallelism") or 1)
    if parallelism > 1:
        imp.note("spec.parallelism", "moved", f"{parallelism} pods: chips count every pod's")
    if chips == 0:
        imp.note(f"{cpath}.resources", "kept", "no accelerator requested: the experiment asks for 1 chip")
    out: dict[str, Any] = {"chips": max(chips, 1) * parallelism}
    deadline = (job.get("spec") or {}).get("activeDeadlineSeconds")
    if deadline:
        out["duration"] = int(deadline)
        imp.note("spec.activeDeadlineSeconds", "moved", f"{deadline} s: becomes spec.resources.duration")
    return out


def _retries(imp: _Import, job: dict[str, Any]) -> dict[str, Any]:
    limit = (job.get("spec") or {}).get("backoffLimit")
    if limit is None:
        return {}
    why = f"backoffLimit {limit}: crossrail owns retries (so a retry may move hardware); rendered Jobs get 0"
    imp.note("spec.backoffLimit", "moved", why)
    return {"retries": {"max": int(limit)}}


def _scheduling(imp: _Import, job: dict[str, Any], pod: dict[str, Any]) -> None:
    base = "spec.template.spec"
    for key, value in (pod.get("nodeSelector") or {}).items():
        imp.note(f"{base}.nodeSelector[{key!r}]", "removed", f"{key}={value} pins hardware; the pool decides nodes")
    for key in ("tolerations", "affinity", "nodeName", "priorityClassName", "schedulerName", "runtimeClassName"):
        if key in pod:
            imp.note(f"{base}.{key}", "removed", "scheduling constraint; crossrail renders the pool's own")
    if "serviceAccountName" in pod:
        imp.note(f"{base}.serviceAccountName", "removed", "the fleet names the service account (Workload Identity)")
    if pod.get("volumes"):
        imp.note(f"{base}.volumes", "removed", "volumes tie the job to one cluster; data and checkpoints are URIs")
    if pod.get("restartPolicy") not in (None, "Never"):
        imp.note(f"{base}.restartPolicy", "removed", "restarts in place hide failures; crossrail retries attempts")
    labels = ((job.get("spec") or {}).get("template") or {}).get("metadata", {}).get("labels") or {}
    if labels:
        imp.note("spec.template.metadata.labels", "removed", "pod labels are rendered from metadata.labels")
    for key in ("suspend", "completions", "ttlSecondsAfterFinished", "podFailurePolicy", "completionMode"):
        if key in (job.get("spec") or {}):
            imp.note(f"spec.{key}", "removed", "Job mechanics; the renderer writes its own")
    for key in (job.get("metadata") or {}).get("annotations") or {}:
        imp.note(f"metadata.annotations[{key!r}]", "removed", "annotations are cluster-specific")
