"""An in-memory stand-in for the few API-server calls KubernetesExecutor makes (its KubeApi seam).

It stores objects as the API server would (uid, namespace, labels) and filters by label selector; tests
play Kueue's and the kubelet's part by adding Workload and Pod objects and status to it.
"""

from __future__ import annotations

import copy
import itertools
from typing import Any

from crossrail.executors.kubernetes import AlreadyExists, NotFound


class ApiServer:
    def __init__(self) -> None:
        self.objects: dict[tuple[str, str, str], dict[str, Any]] = {}
        self.deleted: list[tuple[str, str, str, int | None]] = []
        self.pod_logs: dict[str, str] = {}
        self._uids = itertools.count(1)

    def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        key = (obj["kind"], obj["metadata"]["namespace"], obj["metadata"]["name"])
        if key in self.objects:
            raise AlreadyExists(f"{key} exists")
        stored = copy.deepcopy(obj)
        stored["metadata"]["uid"] = f"uid-{next(self._uids)}"
        self.objects[key] = stored
        return copy.deepcopy(stored)

    def add(self, obj: dict[str, Any]) -> dict[str, Any]:
        """What a controller (Kueue, the Job controller, the kubelet) creates."""
        return self.create(obj)

    def get(self, kind: str, namespace: str, name: str) -> dict[str, Any]:
        """The stored object itself (tests change its status in place); NotFound when there is none."""
        if (kind, namespace, name) not in self.objects:
            raise NotFound(name)
        return self.objects[(kind, namespace, name)]

    def list(self, kind: str, namespace: str, selector: str) -> list[dict[str, Any]]:
        wanted = [s for s in selector.split(",") if s]
        out = []
        for (k, ns, _), obj in sorted(self.objects.items()):
            labels = obj["metadata"].get("labels") or {}
            if k == kind and ns == namespace and all(_matches(labels, s) for s in wanted):
                out.append(copy.deepcopy(obj))
        return out

    def patch_annotations(self, kind: str, namespace: str, name: str, annotations: dict[str, str]) -> None:
        if (kind, namespace, name) not in self.objects:
            raise NotFound(name)
        self.objects[(kind, namespace, name)]["metadata"].setdefault("annotations", {}).update(annotations)

    def delete(self, kind: str, namespace: str, name: str, grace_s: int | None) -> None:
        if self.objects.pop((kind, namespace, name), None) is None:
            raise NotFound(name)
        self.deleted.append((kind, namespace, name, grace_s))

    def logs(self, namespace: str, pod: str, container: str) -> str:
        if pod not in self.pod_logs:
            raise NotFound(pod)
        return self.pod_logs[pod]


def _matches(labels: dict[str, str], term: str) -> bool:
    if "=" in term:
        key, value = term.split("=", 1)
        return labels.get(key) == value
    return term in labels
