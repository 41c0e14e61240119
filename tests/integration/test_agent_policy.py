"""The fleet's scheduling policy orders admission in the live agent: `las` serves the least-served run first."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from tests.integration.test_agent import FAST, command, state

from crossrail.client import Client
from crossrail.control.attempts import new_attempt
from crossrail.core import EndReason

# The eval queue may hold 4 chips of the GPU pool (init's fleet): two 4-chip runs cannot both start.
EVAL_QUOTA = ["spec.accelerators={allow: [gpu]}", "spec.resources.chips=4"]


def set_policy(checkout: Path, policy: str) -> None:
    fleet = checkout / ".crossrail" / "fleet.yaml"
    text = fleet.read_text()
    assert "\nspec:\n" in text
    fleet.write_text(text.replace("\nspec:\n", f"\nspec:\n  scheduling:\n    policy: {policy}\n", 1))


def served_before(client: Client, run: str, chip_s: float) -> None:
    """Record that `run` already held 2 GPU chips once (an attempt preempted after chip_s / 2 seconds)."""
    store = client.service.store
    t0 = time.time() - 3600
    attempt = new_attempt(store.get_run(run), 1, client.service.fleet.pool("h100"), 2, report=None, now=t0)
    assert store.admit(attempt, []) is not None
    assert store.mark_started(run, 1, t0, [])
    assert store.end_attempt(
        run,
        1,
        state="preempted",
        ended_at=t0 + chip_s / 2,
        exit_code=75,
        signal=None,
        stopped_by="preempted",
        end_reason=EndReason.PREEMPTED,
        reason="preempted with a checkpoint",
        run_state="queued",
        events=[],
    )


@pytest.mark.parametrize(
    ("policy", "first"),
    [("las", "newcomer"), ("priority", "veteran")],
    ids=["las-serves-the-least-served-first", "priority-keeps-arrival-order"],
)
def test_the_fleet_policy_decides_which_of_two_waiting_runs_gets_the_pool(
    checkout: Path, experiments: Path, policy: str, first: str
) -> None:
    set_policy(checkout, policy)
    with Client(cwd=checkout) as client:
        code = "import time; time.sleep(30)"
        veteran = command(client, experiments, code, *EVAL_QUOTA)
        served_before(client, veteran, chip_s=2 * 600)
        newcomer = command(client, experiments, code, *EVAL_QUOTA)
        assert client.service.store.attained_chip_s([veteran, newcomer], time.time()) == {veteran: 1200.0}

        agent = client.agent(FAST)
        try:
            agent.reconcile()
            runs = {"veteran": veteran, "newcomer": newcomer}
            admitted = {name for name, run in runs.items() if state(client, run) != "queued"}
            assert admitted == {first}
        finally:
            for run in (veteran, newcomer):
                client.cancel(run)
            for _ in range(50):
                agent.reconcile()
                if all(state(client, r) == "cancelled" for r in (veteran, newcomer)):
                    break
                time.sleep(0.1)
