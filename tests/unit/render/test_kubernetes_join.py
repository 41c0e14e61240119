"""The pods of a multi-host or multi-slice JobSet start: each pod's rendered env, resolved as the kubelet would
(values, the downward API's completion index and job index, the report Secret), is fed to the real runtime;
the one substitution is the coordinator's host, mapped to 127.0.0.1. For 1 and 2 slices every pod joins JAX
through crossrail.workloads.parallel.join, each in its own process; for 4 slices rank and coordinator are
checked for every pod."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from typing import Any

import pytest

from crossrail.executors.render.kubernetes import COMPLETION_INDEX, JOB_INDEX_LABEL, render_kubernetes
from crossrail.executors.render.workload import from_experiment
from crossrail.runtime import RuntimeContext
from crossrail.spec import Fleet, parse_document, parse_fleet

from .builders import experiment

FLEET = """
apiVersion: crossrail/v1
kind: Fleet
metadata: {name: slices}
spec:
  pools:
    - {name: v6e, accelerator: tpu, chip_type: tpu-v6e, chips: 256, chips_per_host: 4, backend: kubernetes,
       topologies: [2x4, 4x4]}
  queues:
    - {name: q, stage: pretraining, quota: {v6e: 256}}
"""
WORKER = """
import json
import numpy as np
from crossrail.runtime import RuntimeContext
from crossrail.workloads.parallel import join
ctx = RuntimeContext.from_env()
join("jax", ctx)
import jax
from jax.experimental import multihost_utils
ranks = np.asarray(multihost_utils.process_allgather(np.array([ctx.rank]))).ravel()
print(json.dumps({"rank": ctx.rank, "index": jax.process_index(), "count": jax.process_count(),
                  "ranks": sorted(int(r) for r in ranks)}), flush=True)
jax.distributed.shutdown()
"""


@pytest.fixture(scope="module")
def fleet() -> Fleet:
    return parse_fleet(parse_document(FLEET, "fleet.yaml"))


def _pods(obj: dict[str, Any]) -> list[tuple[int, int, dict[str, Any]]]:
    """(slice, host, pod template) for every pod the JobSet makes."""
    (job,) = obj["spec"]["replicatedJobs"]
    inner = job["template"]["spec"]
    return [(s, h, inner["template"]) for s in range(job["replicas"]) for h in range(inner["parallelism"])]


def _env(pod: dict[str, Any], slice_id: int, host: int) -> dict[str, str]:
    """The container's env as the kubelet gives it to pod `host` of Job `slice_id`."""
    known = {
        f"metadata.annotations['{COMPLETION_INDEX}']": str(host),
        f"metadata.labels['{JOB_INDEX_LABEL}']": str(slice_id),
    }
    env = {}
    for entry in pod["spec"]["containers"][0]["env"]:
        if "value" in entry:
            env[entry["name"]] = entry["value"]
        elif "fieldRef" in entry["valueFrom"]:
            env[entry["name"]] = known[entry["valueFrom"]["fieldRef"]["fieldPath"]]
        else:  # the report Secret's value
            env[entry["name"]] = "s3cret"
    return env


def _local(env: dict[str, str], port: int) -> dict[str, str]:
    """The one substitution: the coordinator's host (slice 0's first pod) is this machine."""
    host = env["CROSSRAIL_COORDINATOR"].rsplit(":", 1)[0]
    swap = {f"{host}:8476": f"127.0.0.1:{port}", host: "127.0.0.1"}
    out = {}
    for name, value in env.items():
        text = value
        for old, new in swap.items():
            text = text.replace(old, new)
        out[name] = text
    return out


def _render(fleet: Fleet, chips: int) -> dict[str, Any]:
    return render_kubernetes(
        from_experiment(experiment("pretraining", chips), source="e.yaml"), fleet, fleet.pool("v6e")
    )


@pytest.mark.parametrize(
    ("topologies", "chips", "slices", "hosts"),
    [("[2x4, 4x4]", 8, 1, 2), ("[2x4, 4x4]", 16, 1, 4), ("[2x4]", 16, 2, 2), ("[2x4, 4x4]", 64, 4, 4)],
)
def test_every_pod_knows_its_rank_the_world_and_one_coordinator(
    topologies: str, chips: int, slices: int, hosts: int
) -> None:
    fleet = parse_fleet(parse_document(FLEET.replace("[2x4, 4x4]", topologies), "f.yaml"))
    obj = _render(fleet, chips)
    pods = _pods(obj)
    assert len(pods) == slices * hosts
    contexts = [RuntimeContext.from_env(_env(pod, s, h)) for s, h, pod in pods]
    assert [c.rank for c in contexts] == list(range(slices * hosts))
    assert {c.world_size for c in contexts} == {slices * hosts}
    (coordinator,) = {c.coordinator for c in contexts}
    assert coordinator == f"{obj['metadata']['name']}-slice-0-0.{obj['metadata']['name']}:8476"
    env = _env(pods[0][2], 0, 0)
    if slices > 1:
        assert env["MEGASCALE_NUM_SLICES"] == str(slices)
        assert env["MEGASCALE_COORDINATOR_ADDRESS"] == coordinator.rsplit(":", 1)[0]
    assert env["JAX_COORDINATOR_ADDRESS"] == coordinator


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.slow  # a JAX process per pod
@pytest.mark.parametrize(("chips", "slices"), [(8, 1), (16, 2)], ids=["one-slice-of-2-hosts", "two-slices-of-2-hosts"])
def test_the_pods_fed_their_env_join_jax(chips: int, slices: int) -> None:
    fleet = parse_fleet(parse_document(FLEET.replace("[2x4, 4x4]", "[2x4]"), "f.yaml"))
    obj = _render(fleet, chips)
    pods = _pods(obj)
    assert (len({s for s, _, _ in pods}), len(pods)) == (slices, 2 * slices)
    port = _free_port()
    base = {k: v for k, v in os.environ.items() if not k.startswith(("CROSSRAIL_", "JAX_", "MEGASCALE_"))}
    base |= {"JAX_PLATFORMS": "cpu"}  # this machine has no TPU
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WORKER],
            env={**base, **_local(_env(pod, s, h), port)},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for s, h, pod in pods
    ]
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err[-2000:]
        results.append(json.loads(out.strip().splitlines()[-1]))
    world = len(pods)
    assert [r["rank"] for r in results] == list(range(world))
    assert all(r["index"] == r["rank"] and r["count"] == world for r in results)
    assert all(r["ranks"] == list(range(world)) for r in results)


def test_without_the_coordinator_a_slice_host_cannot_join(fleet: Fleet) -> None:
    """What multi-slice pods got before: JAX's variables but not crossrail's coordinator."""
    from crossrail.errors import CrossrailError
    from crossrail.workloads.parallel import join

    obj = _render(fleet, 32)
    s, h, pod = _pods(obj)[-1]
    env = _env(pod, s, h)
    del env["CROSSRAIL_COORDINATOR"]
    with pytest.raises(CrossrailError, match="CROSSRAIL_COORDINATOR is not set"):
        join("jax", RuntimeContext.from_env(env))
