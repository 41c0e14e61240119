"""Optional per-pool and fleet-wide settings for rendering to Kubernetes (GKE + Kueue), Slurm and SkyPilot.

Every field may be left out: the renderers derive it from the pool's accelerator, chip_type, chips_per_host
and topologies (crossrail.executors.render.hardware). Set a field only where the derivation is wrong for a
cluster, e.g. a GPU model crossrail does not know or a partition named differently from the pool.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import Field, field_validator

from crossrail.spec.common import Items, Name, NonEmpty, SpecModel

# A Kubernetes label value: at most 63 characters, alphanumerics with - _ . inside.
_LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$")
_GRES = re.compile(r"^[A-Za-z0-9_.-]+(:[A-Za-z0-9_.-]+)*$")


def _label_value(value: str | None) -> str | None:
    if value is not None and not _LABEL_VALUE.fullmatch(value):
        raise ValueError(f"{value!r} is not a Kubernetes label value; use up to 63 letters, digits, '-', '_', '.'")
    return value


class KubernetesPool(SpecModel):
    """How a pool's nodes are selected on GKE and which Kueue ResourceFlavor stands for it."""

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

    @field_validator("gke_accelerator", "tpu_accelerator")
    @classmethod
    def _values(cls, value: str | None) -> str | None:
        return _label_value(value)


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
    if accelerator != "gpu" and kubernetes.gke_accelerator is not None:
        fix = "remove it, or set tpu_accelerator for a TPU pool"
        items.append((("kubernetes", "gke_accelerator"), f"only a GPU pool has one (this pool is {accelerator})", fix))
    return items
