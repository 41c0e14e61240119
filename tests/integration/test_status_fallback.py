"""`status` says when a run in flight was placed on a fallback pool, and why (its attempt's placement reason)."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from crossrail.cli import app
from crossrail.client import Client
from crossrail.control.attempts import new_attempt
from crossrail.core import Event, EventType, ManualClock
from crossrail.scheduling.placement import Placement
from crossrail.scheduling.types import Request


def admit(client: Client, name: str, pool_name: str, kind: str, clock: ManualClock) -> str:
    """A run of pretrain-small admitted on `pool_name`, its `placed` event giving the scheduler's reason for a
    placement of `kind` after 65 s in the queue."""
    run_id = str(
        client.submit(client.workspace.root / "experiments" / "pretrain-small.yaml", sets=[f"metadata.name={name}"])[
            "run"
        ]["id"]
    )
    run = client.service.store.get_run(run_id)
    pool = client.service.fleet.pool(pool_name)
    waited = Request(run_id, run.queue, run.chips, queued_at=clock.now() - 65, prefer="tpu", pool="tpu-v5p")
    reason = Placement([], clock.now(), 60.0).reason(waited, kind)
    placed = {"pool": pool.name, "chips": run.chips, "reason": reason}
    att = new_attempt(
        run, 1, pool, run.chips, report=str(client.workspace.root / "reports" / f"{run_id}.jsonl"), now=clock.now()
    )
    events = [
        Event(EventType.PLACED, clock.now(), run_id, 1, placed),
        Event(EventType.ADMITTED, clock.now(), run_id, 1, {"pool": pool.name}),
    ]
    assert client.service.store.admit(att, events)
    return run_id


def test_status_names_a_run_on_a_fallback_pool_and_why(client: Client, clock: ManualClock, checkout: Path) -> None:
    fell = admit(client, "fell-back", "h100", "fallback", clock)
    kept = admit(client, "on-tpu", "tpu-v5p", "estimated", clock)

    active = {r["id"]: r for r in client.status()["active"]}
    where, why = active[fell]["fallback"].split(": ", 1)
    assert where == "on h100"
    assert "1m05s" in why  # how long it waited for its preferred accelerator
    assert "tpu" in why
    assert active[kept]["fallback"] is None

    shown = CliRunner().invoke(app, ["status", "--home", str(checkout / ".crossrail")], env={"COLUMNS": "200"})
    assert shown.exit_code == 0, shown.output
    assert f"{fell} runs on a fallback pool, on h100: fell back after waiting" in shown.stdout
    assert f"{kept} runs on a fallback pool" not in shown.stdout
