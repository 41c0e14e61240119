"""Optional per-pool and fleet-wide settings for rendering to Kubernetes (GKE + Kueue), Slurm and SkyPilot.

Every field may be left out: the renderers derive it from the pool's accelerator, chip_type, chips_per_host
and topologies (crossrail.executors.render.hardware). Set a field only where the derivation is wrong for a
cluster, e.g. a GPU model crossrail does not know or a partition named differently from the pool.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from crossrail.spec.common import Items, Name, NonEmpty, SpecModel, raise_items

# The node labels GKE itself puts on its nodes that crossrail selects on; every other selector is the fleet's.
GKE_ACCELERATOR = "cloud.google.com/gke-accelerator"
GKE_TPU_ACCELERATOR = "cloud.google.com/gke-tpu-accelerator"
GKE_TPU_TOPOLOGY = "cloud.google.com/gke-tpu-topology"
GKE_SPOT = "cloud.google.com/gke-spot"
GKE_NODE_POOL = "cloud.google.com/gke-nodepool"
GKE_QUEUED = "cloud.google.com/gke-queued"
"""The taint on the nodes of GKE queued provisioning (flex-start with a ProvisioningRequest)."""
GKE_LABELS = {
    GKE_ACCELERATOR: "kubernetes.gke_accelerator",
    GKE_TPU_ACCELERATOR: "kubernetes.tpu_accelerator",
    GKE_TPU_TOPOLOGY: "topologies",
    GKE_SPOT: "kubernetes.spot",
    GKE_NODE_POOL: "kubernetes.node_pool",
}
"""GKE's label -> the pool field crossrail derives it from."""

# A Kubernetes label value: at most 63 characters, alphanumerics with - _ . inside.
_LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$")
_GRES = re.compile(r"^[A-Za-z0-9_.-]+(:[A-Za-z0-9_.-]+)*$")
_LABEL_KEY = re.compile(r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
_MOUNT_PATH = re.compile(r"^/[^:]*[^/:]$")


def _label_value(value: str | None) -> str | None:
    if value is not None and not _LABEL_VALUE.fullmatch(value):
        raise ValueError(f"{value!r} is not a Kubernetes label value; use up to 63 letters, digits, '-', '_', '.'")
    return value


class GcsFuse(SpecModel):
    """A Cloud Storage bucket mounted by the GKE GCS FUSE CSI driver (an ephemeral inline volume)."""

    bucket: NonEmpty
    mount_options: list[NonEmpty] = Field(default_factory=list)
    """Passed to gcsfuse, e.g. [implicit-dirs]."""


class KubernetesVolume(SpecModel):
    """A volume the pool's pods mount at `mount_path`: a GCS FUSE bucket (`gcsfuse`) or a PVC (`claim`)."""

    name: Name
    mount_path: NonEmpty
    gcsfuse: GcsFuse | None = None
    claim: Name | None = None
    """The PersistentVolumeClaim's name, in the namespace the work runs in."""
    read_only: bool = False

    @field_validator("mount_path")
    @classmethod
    def _path(cls, value: str) -> str:
        if not _MOUNT_PATH.fullmatch(value):
            raise ValueError(f"{value!r} is not a mount path; write an absolute path without a trailing '/'")
        return value

    @model_validator(mode="after")
    def _one_source(self) -> KubernetesVolume:
        if (self.gcsfuse is None) == (self.claim is None):
            fix = "give either `gcsfuse: {bucket: <bucket>}` or `claim: <pvc name>`"
            raise_items([((), f"volume {self.name!r} needs exactly one source", fix)])
        return self


class KubernetesPool(SpecModel):
    """How a pool's nodes are selected on GKE, which Kueue ResourceFlavor stands for it, and its volumes."""

    gke_accelerator: NonEmpty | None = None
    """GPU pools: the `cloud.google.com/gke-accelerator` value (default from chip_type, e.g. nvidia-h100-80gb)."""
    tpu_accelerator: NonEmpty | None = None
    """TPU pools: the `cloud.google.com/gke-tpu-accelerator` value (default from chip_type, e.g. tpu-v5p-slice)."""
    flavor: Name | None = None
    """The Kueue ResourceFlavor name (default: the pool's name)."""
    service_account: Name | None = None
    """The Kubernetes service account its pods run as (default: the fleet's)."""
    spot: bool = False
    """Spot/preemptible nodes: selects `cloud.google.com/gke-spot: "true"` and tolerates its taint."""
    node_pool: NonEmpty | None = None
    """Selects one GKE node pool (`cloud.google.com/gke-nodepool`)."""
    node_selector: dict[str, str] = Field(default_factory=dict)
    """Node labels beyond GKE's own that the cluster's nodes carry, e.g. {accelerator: nvidia-gpu}."""
    gke: bool = True
    """False for a cluster whose nodes are not GKE's: pods then select `node_selector` alone (no GKE labels)."""
    volumes: list[KubernetesVolume] = Field(default_factory=list)
    """Mounted into every pod of the pool: checkpoint and report paths outside object storage must be on one."""
    topology: Literal["required", "preferred"] | None = None
    """GPU pools on GKE: Kueue's topology-aware scheduling for gang jobs (several hosts). `required` admits one
    only when all its hosts fit in one GKE node pool, `preferred` packs them there when it can. The pool's flavor
    becomes topology-aware and every pod set on it asks for a topology; TPU pools always are, others never."""

    @field_validator("gke_accelerator", "tpu_accelerator", "node_pool")
    @classmethod
    def _values(cls, value: str | None) -> str | None:
        return _label_value(value)

    @field_validator("node_selector")
    @classmethod
    def _selector(cls, value: dict[str, str]) -> dict[str, str]:
        for key, label in value.items():
            if key in GKE_LABELS:
                field = GKE_LABELS[key]
                raise ValueError(f"{key} is GKE's own label; crossrail derives it (set the pool's {field} instead)")
            if not _LABEL_KEY.fullmatch(key):
                raise ValueError(f"{key!r} is not a Kubernetes label key; write [prefix/]name")
            _label_value(label)
        return value

    @model_validator(mode="after")
    def _volumes(self) -> KubernetesPool:
        items: Items = []
        names: dict[str, int] = {}
        paths: dict[str, int] = {}
        for i, volume in enumerate(self.volumes):
            for seen, key, what in ((names, volume.name, "name"), (paths, volume.mount_path, "mount_path")):
                first = seen.setdefault(key, i)
                if first != i:
                    message = f"{what} {key!r} is volumes[{first}]'s too"
                    items.append((("volumes", i, what), message, f"give each volume its own {what}"))
            if volume.gcsfuse is not None and self.service_account is None:
                message = f"volume {volume.name!r} mounts a bucket through GCS FUSE, which needs Workload Identity"
                fix = (
                    "set kubernetes.service_account to the Kubernetes service account bound (Workload Identity) "
                    "to a Google service account that may use the bucket"
                )
                items.append((("service_account",), message, fix))
        raise_items(items)
        return self


class SlurmPool(SpecModel):
    """The Slurm partition a pool is and its generic resource (default `gpu:<chip>:<chips per host>`)."""

    partition: NonEmpty | None = None
    gres: NonEmpty | None = None
    account: NonEmpty | None = None

    @field_validator("gres")
    @classmethod
    def _gres(cls, value: str | None) -> str | None:
        if value is not None and not _GRES.fullmatch(value):
            raise ValueError(f"{value!r} is not a Slurm gres; write e.g. gpu:h100:8")
        return value


class SkyPilotPool(SpecModel):
    """SkyPilot's name for the pool's accelerator (default from chip_type: `H100`, `tpu-v5p`) and its cloud."""

    accelerator: NonEmpty | None = None
    cloud: NonEmpty | None = None
    region: NonEmpty | None = None


class KubernetesFleet(SpecModel):
    """Fleet-wide Kubernetes settings: namespaces, the pods' service account and LocalQueue names.

    A team's work goes to `team_namespaces[team]`, else to a namespace named after the team when the fleet
    has a queue of that team, else to `namespace`. Each namespace holds a LocalQueue per queue that serves
    it, named `<local_queue_prefix><queue name>`.
    """

    namespace: Name = "default"
    team_namespaces: dict[str, Name] = Field(default_factory=dict)
    service_account: Name = "crossrail-trainer"
    local_queue_prefix: str = ""
    kubernetes_version: str = "1.33"

    @field_validator("kubernetes_version")
    @classmethod
    def _version(cls, value: str) -> str:
        if not re.fullmatch(r"1\.\d{2}", value):
            raise ValueError(f"{value!r} is not a Kubernetes minor version; write e.g. 1.33")
        return value

    @field_validator("local_queue_prefix")
    @classmethod
    def _prefix(cls, value: str) -> str:
        if value and not re.fullmatch(r"[a-z0-9]([-a-z0-9]*[-a-z0-9])?", value):
            raise ValueError(f"{value!r} cannot start a Kubernetes name; use lower-case letters, digits and '-'")
        return value


def target_items(accelerator: Any, kubernetes: KubernetesPool | None) -> Items:
    """A GPU pool names a GKE GPU accelerator, a TPU pool a TPU one; never the other kind's field."""
    items: Items = []
    if kubernetes is None:
        return items
    if accelerator != "tpu" and kubernetes.tpu_accelerator is not None:
        fix = "remove it, or set gke_accelerator for a GPU pool"
        items.append((("kubernetes", "tpu_accelerator"), f"only a TPU pool has one (this pool is {accelerator})", fix))
    if accelerator == "tpu" and not kubernetes.gke:
        fix = "remove `gke: false`: crossrail schedules TPU slices by GKE's TPU labels"
        items.append((("kubernetes", "gke"), "a TPU pool runs on GKE", fix))
    if kubernetes.topology is not None and (accelerator != "gpu" or not kubernetes.gke):
        why = "a TPU pool always is" if accelerator == "tpu" else f"this pool is {accelerator}"
        if accelerator == "gpu":
            why = "its nodes are not GKE's (`gke: false`), whose node-pool labels the topology's levels are"
        fix = "remove it: only a GPU pool on GKE opts in to topology-aware scheduling"
        items.append((("kubernetes", "topology"), f"topology-aware scheduling is opted into by GPU pools ({why})", fix))
    if accelerator != "gpu" and kubernetes.gke_accelerator is not None:
        fix = "remove it, or set tpu_accelerator for a TPU pool"
        items.append((("kubernetes", "gke_accelerator"), f"only a GPU pool has one (this pool is {accelerator})", fix))
    return items
