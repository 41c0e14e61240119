"""A config file of this machine reaches a Kubernetes pod as the attempt's ConfigMap: mounted read-only and named
by CROSSRAIL_CONFIG in the pod, made by the executor from the file's bytes and owned by the attempt's Job."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from crossrail.core.clock import ManualClock
from crossrail.executors.kubernetes import KubernetesExecutor
from crossrail.executors.render.kubernetes import CONFIG_MAP_MAX_BYTES, CONFIG_MOUNT
from crossrail.spec import Fleet

from .apiserver import ApiServer
from .conftest import assert_valid
from .test_kubernetes_executor import request


@pytest.fixture
def api() -> ApiServer:
    return ApiServer()


@pytest.fixture
def executor(gke_fleet: Fleet, api: ApiServer) -> KubernetesExecutor:
    return KubernetesExecutor(gke_fleet, api=api, clock=ManualClock(1000.0))


def _pod(job: dict[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    spec = job["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    return spec, {e["name"]: e.get("value", "") for e in container["env"]}


def _config_maps(api: ApiServer) -> list[dict[str, Any]]:
    return [o for (kind, _, _), o in api.objects.items() if kind == "ConfigMap"]


def test_a_config_file_here_is_shipped_as_a_configmap_the_job_owns(
    executor: KubernetesExecutor, api: ApiServer, tmp_path: Path
) -> None:
    config = tmp_path / "exp 42.yaml"
    config.write_text("model: {n_layer: 4}\nlr: 3.0e-4\n")
    launch = request()
    launch.env["CROSSRAIL_CONFIG"] = f"file://{config}"

    assert executor.launch(launch).phase == "pending"
    assert executor.launch(launch).phase == "pending"  # a relaunch makes nothing twice

    (job,) = api.list("Job", "default", "")
    assert_valid(job)
    spec, env = _pod(job)
    assert env["CROSSRAIL_CONFIG"] == f"file://{CONFIG_MOUNT}/exp_42.yaml"
    assert {"name": "crossrail-config", "mountPath": CONFIG_MOUNT, "readOnly": True} in spec["containers"][0][
        "volumeMounts"
    ]
    (shipped,) = _config_maps(api)
    assert {"name": "crossrail-config", "configMap": {"name": shipped["metadata"]["name"]}} in spec["volumes"]
    assert shipped["data"] == {"exp_42.yaml": config.read_text()}
    (owner,) = shipped["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["uid"]) == ("Job", job["metadata"]["name"], job["metadata"]["uid"])


def test_a_config_on_object_storage_ships_nothing(executor: KubernetesExecutor, api: ApiServer) -> None:
    assert executor.launch(request()).phase == "pending"

    (job,) = api.list("Job", "default", "")
    _, env = _pod(job)
    assert env["CROSSRAIL_CONFIG"] == "gs://acme-models/configs/posttrain-042.yaml"
    assert _config_maps(api) == []


def test_a_config_too_large_for_a_configmap_loses_the_attempt_with_the_reason(
    executor: KubernetesExecutor, api: ApiServer, tmp_path: Path
) -> None:
    config = tmp_path / "huge.yaml"
    config.write_text("x" * (CONFIG_MAP_MAX_BYTES + 1))
    launch = request()
    launch.env["CROSSRAIL_CONFIG"] = str(config)

    status = executor.launch(launch)

    assert status.phase == "lost"
    assert "ConfigMap" in status.detail
    assert f"larger than {CONFIG_MAP_MAX_BYTES} bytes" in status.detail
    assert _config_maps(api) == []
