"""A SkyPilot task for one attempt: `resources.accelerators` such as `H100:8` or `tpu-v5p-8`,
`job_recovery` that follows crossrail's exit-code contract (75 and spec.retries.exit_codes recover), and
the run's code on the VM: `workdir` is the experiment's repository at its commit (or the directory
`sky launch` runs in when the experiment names no repository), and `setup` installs what it needs, so the
command runs as written from the workdir."""

from __future__ import annotations

import json
import re
import shlex
from typing import Any

from crossrail.executors.render.hardware import layout, skypilot_accelerator, tpu_generation
from crossrail.executors.render.workload import Workload
from crossrail.spec import Fleet, Pool

EX_TEMPFAIL = 75
_COMMIT = re.compile(r"[0-9a-f]{7,40}")
SETUP = """set -euo pipefail
# The workdir holds the run's code; install its dependencies, and the code itself when it is a package.
if [ -f requirements.txt ]; then python -m pip install -r requirements.txt; fi
if [ -f pyproject.toml ] || [ -f setup.py ]; then python -m pip install -e .; fi
"""


def _workdir(work: Workload) -> str | dict[str, str]:
    """SkyPilot's git workdir for the experiment's code (`ref` only when the commit is known), else `.`."""
    code = (json.loads(work.env.get("CROSSRAIL_SPEC", "{}")).get("spec") or {}).get("code") or {}
    repo, commit = code.get("repo"), str(code.get("commit") or "")
    if not repo:
        return "."
    return {"url": str(repo), "ref": commit} if _COMMIT.fullmatch(commit) else {"url": str(repo)}


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
        "workdir": _workdir(work),
        "setup": SETUP,
        "envs": dict(sorted(env.items())),
        "run": "exec " + " ".join(shlex.quote(p) for p in [*work.command, *work.args]) + "\n",
    }
