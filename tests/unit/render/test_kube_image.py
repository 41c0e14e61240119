"""The image digest an attempt's pod ran, read from the kubelet's resolved imageID of its training container."""

from __future__ import annotations

from typing import Any

import pytest

from crossrail.executors.kube_status import observe

from .test_kube_status import load

DIGEST = "sha256:" + "0123456789abcdef" * 4


def running_with(image_id: str, container: str = "trainer") -> dict[str, Any]:
    obj, workload, (pod,) = load("admitted-running")
    (status,) = pod["status"]["containerStatuses"]
    status |= {"name": container, "imageID": image_id}
    return {"obj": obj, "workload": workload, "pods": [pod]}


@pytest.mark.parametrize(
    ("image_id", "container", "digest"),
    [
        pytest.param(f"docker-pullable://us-docker.pkg.dev/acme/train/sft@{DIGEST}", "trainer", DIGEST, id="docker"),
        pytest.param(f"us-docker.pkg.dev/acme/train/sft@{DIGEST}", "node", DIGEST, id="containerd-trainjob-node"),
        pytest.param("", "trainer", None, id="not-pulled-yet"),
        pytest.param("sha256:abc", "trainer", None, id="not-a-digest"),
        pytest.param(f"registry/sidecar@{DIGEST}", "sidecar", None, id="another-container"),
    ],
)
def test_the_digest_a_pod_ran_is_its_training_containers_image_id(
    image_id: str, container: str, digest: str | None
) -> None:
    seen = observe(**running_with(image_id, container))

    assert seen.status.image_digest == digest
