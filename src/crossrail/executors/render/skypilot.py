"""A SkyPilot task for one attempt: `resources.accelerators` such as `H100:8` or `tpu-v5p-8`, and
`job_recovery` that follows crossrail's exit-code contract (75 and spec.retries.exit_codes recover)."""

from __future__ import annotations

import json
import shlex
from typing import Any

from crossrail.executors.render.hardware import layout, skypilot_accelerator, tpu_generation
from crossrail.executors.render.workload import Workload
from crossrail.spec import Fleet, Pool

EX_TEMPFAIL = 75


def _retries(work: Workload) -> tuple[int, list[int]]:
    """(max restarts, exit codes that recover) from the resolved experiment in CROSSRAIL_SPEC."""
    spec = json.loads(work.env.get("CROSSRAIL_SPEC", "{}")).get("spec") or {}
    retries = spec.get("retries") or {}
    codes = sorted({EX_TEMPFAIL, *(c for c in retries.get("exit_codes", []) if 0 <= c <= 255)})
    return int(retries.get("max", 0)), codes


def render_skypilot(work: Workload, fleet: Fleet, pool: Pool) -> dict[str, Any]:
    """The task as a dict; write it with yaml.safe_dump for `sky jobs launch task.yaml`."""
    lay = layout(fleet, pool, work.chips)
    restarts, codes = _retries(work)
    resources: dict[str, Any] = {
        "accelerators": skypilot_accelerator(fleet, pool, lay),
        "job_recovery": {
            "strategy": "EAGER_NEXT_REGION",
            "max_restarts_on_errors": restarts,
            "recover_on_exit_codes": codes,
        },
        "labels": {k.replace("crossrail.dev/", "crossrail-"): v for k, v in work.crossrail_labels().items()},
    }
    sky = pool.skypilot
    cloud = sky.cloud if sky and sky.cloud else ("gcp" if pool.accelerator == "tpu" else None)
    if cloud:
        resources["infra"] = cloud + (f"/{sky.region}" if sky and sky.region else "")
    if pool.accelerator == "tpu":
        resources["accelerator_args"] = {"runtime_version": tpu_generation(fleet, pool).runtime_version}
    else:  # GPU nodes run the image; TPU VMs run the command on the host image
        resources["image_id"] = f"docker:{work.image}"
    env = {**work.env, "TRAINING_BACKEND": str(pool.accelerator)}
    if pool.accelerator == "tpu":
        env["CROSSRAIL_IMAGE"] = work.image
    # A TPU slice is one SkyPilot node however many hosts it has; GPUs are one node per host.
    nodes = lay.slices if pool.accelerator == "tpu" else lay.pods
    return {
        "name": work.object_name,
        "num_nodes": nodes,
        "resources": resources,
        "envs": dict(sorted(env.items())),
        "run": "exec " + " ".join(shlex.quote(p) for p in [*work.command, *work.args]) + "\n",
    }
