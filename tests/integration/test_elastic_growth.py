"""An elastic data-parallel run grows live: two torchrun workers, a chip frees up, the agent grows it to three.

A three-chip pool holds a one-chip run that only waits, so the elastic run (2..3 chips, two workers) starts on
the two chips left. Once it trains, the waiting run is cancelled; the next cycle proposes the growth, the agent
asks the local executor to resize, the gang starts a third worker, the workers regroup and resume from the last
checkpoint, and the run finishes on three.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from tests.integration.test_elastic import checkpoint_steps, drive

from crossrail.client import Client

pytest.importorskip("torch")

pytestmark = pytest.mark.slow

FLEET = """\
apiVersion: crossrail/v1
kind: Fleet
metadata: {name: one-pool}
spec:
  pools:
    - {name: gpus, accelerator: gpu, chip_type: h100, chips: 3, chips_per_host: 3, backend: local}
  queues:
    - {name: pretraining, stage: pretraining, quota: {gpus: 3}}
    - {name: eval, stage: eval, quota: {gpus: 1}}
"""
# A checkpoint at step 2, then fourteen steps paced by --step-sleep: the run still trains at two when the third
# worker joins (its agent takes a few seconds to start), and the regrouped workers resume from a checkpoint.
STEPS, EVERY = 16, 2
ARGS = f"[--steps, '{STEPS}', --checkpoint-every-steps, '{EVERY}', --step-sleep, '0.3', --framework, torch"
ARGS += ", --batch, '6']"  # a global batch two and three workers share evenly
GROWS = [
    f"spec.args={ARGS}",
    "spec.resources={chips: 2, max_chips: 3}",
    "spec.parallelism={data: 2, oversubscribe: true}",
    "spec.accelerators={allow: [gpu]}",
    "spec.retries={max: 0}",  # the run must finish in its one attempt
]
WAITS = [
    "metadata.name=holds-a-chip",
    "spec.command=[python, -c, 'import time; time.sleep(600)']",
    "spec.args=[]",
    "spec.resources={chips: 1, duration: 5m}",
    "spec.accelerators={allow: [gpu]}",
]


def test_a_chip_freed_grows_a_two_worker_run_to_three_live_and_it_finishes(checkout: Path, experiments: Path) -> None:
    (checkout / ".crossrail" / "fleet.yaml").write_text(FLEET)
    with Client(cwd=checkout) as client:
        store = client.service.store
        holder = client.submit(experiments / "eval-smoke.yaml", sets=WAITS)["run"]["id"]
        drive(client, lambda: store.get_run(holder).state == "running", timeout_s=60)
        run = client.submit(experiments / "pretrain-small.yaml", sets=GROWS)["run"]["id"]
        drive(client, lambda: bool(checkpoint_steps(client, run)), timeout_s=120)
        [attempt] = client.show(run)["attempts"]
        assert attempt["chips"] == 2  # the chip the other run holds was not to be had

        client.cancel(holder)
        drive(client, lambda: store.get_run(run).state in ("succeeded", "failed"), timeout_s=240)

        assert store.get_run(run).state == "succeeded"
        events = client.events(run)["events"]
        resized = [e["data"] for e in events if e["type"] == "resized"]
        grown = [d for d in resized if d.get("chips") is not None]  # the agent's: the chips the attempt holds
        assert [(d["degree_before"], d["degree_after"], d["chips"]) for d in grown] == [(2, 3, 3)]
        # The workers' own word for it, once they regrouped: the same size, and no other.
        assert {d["degree_after"] for d in resized} == {3}
        added = [e["data"]["data"] for e in events if e["type"] == "reported" and e["data"]["name"] == "workers_added"]
        assert [(a["workers_before"], a["workers_after"]) for a in added] == [(2, 3)]
        [regrouped] = [d for d in resized if d.get("chips") is None]  # trained at two, resumed at three
        assert (regrouped["degree_before"], regrouped["degree_after"]) == (2, 3)
        assert EVERY <= regrouped["step"] < STEPS
        losses = {int(s["step"]): float(s["value"]) for s in store.metric_samples(run, "loss")}
        after = [v for step, v in losses.items() if step > regrouped["step"]]
        assert after
        assert all(math.isfinite(v) for v in losses.values())
        assert max(after) < losses[1]  # the loss carries on from where the two workers left it
        assert max(checkpoint_steps(client, run)) == STEPS
        [attempt] = client.show(run)["attempts"]
        assert (attempt["state"], attempt["exit_code"]) == ("succeeded", 0)

        # Billed at two chips until the agent's resize and at three from then on; the workers' later word
        # (no chips) changes nothing.
        at = {e["type"]: e["ts"] for e in events if e["type"] in ("started", "succeeded")}
        [grew_at] = [e["ts"] for e in events if e["type"] == "resized" and e["data"].get("chips") is not None]
        billed = 2 * (grew_at - at["started"]) + 3 * (at["succeeded"] - grew_at)
        [row] = [r for r in client.usage()["rows"] if r["team"] == "foundation"]
        assert row["chip_hours"] == pytest.approx(billed / 3600)
