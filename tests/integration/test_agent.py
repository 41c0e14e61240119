"""The reconcile agent with the local executor and real training processes."""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path

import pytest
from tests.conftest import drive as drive_agent

from crossrail.client import Client
from crossrail.control.agent.loop import AgentConfig


@pytest.fixture
def client(checkout: Path) -> Iterator[Client]:
    """The agent compares its clock with times the supervisor and the runtime take: use the real one."""
    with Client(cwd=checkout) as c:
        yield c


FAST = AgentConfig(poll_s=0.1, fallback_wait_s=0.0, stop_grace_s=5.0, heartbeat_s=1.0)
# The agent's behaviour is the subject here, so runs use the light numpy workload (the GPT one has its own tests).
BIGRAM = "spec.command=[python, -m, crossrail.workloads.bigram]"
SHORT = [BIGRAM, "spec.args=[--steps, '30', --checkpoint-every-steps, '10', --step-sleep, '0.01']"]


drive = partial(drive_agent, config=FAST)


def state(client: Client, run: str) -> str:
    return client.service.store.get_run(run).state


def ended(client: Client, run: str) -> Callable[[], bool]:
    return lambda: state(client, run) in ("succeeded", "failed", "cancelled")


def types(client: Client, run: str) -> list[str]:
    return [e["type"] for e in client.events(run)["events"] if e["type"] not in ("heartbeat", "reported")]


def command(client: Client, experiments: Path, code: str, *extra: str) -> str:
    sets = [f"spec.command=[python, -c, {json.dumps(code)}]", "spec.args=[]", "spec.resources.chips=1", *extra]
    return client.submit(experiments / "eval-smoke.yaml", sets=sets)["run"]["id"]


@pytest.mark.slow
def test_a_run_goes_from_queued_to_succeeded_with_its_lineage_and_checkpoints(
    client: Client, experiments: Path
) -> None:
    run = client.submit(experiments / "pretrain-small.yaml", sets=SHORT)["run"]["id"]
    drive(client, ended(client, run))
    assert state(client, run) == "succeeded"
    assert types(client, run)[:5] == ["submitted", "queued", "placed", "admitted", "started"]
    assert types(client, run)[-1] == "succeeded"
    shown = client.show(run)
    (attempt,) = shown["attempts"]
    assert attempt["pool"] == "tpu-v5p"  # pretraining prefers tpu in the article's policy
    assert (attempt["exit_code"], attempt["state"], attempt["chips"]) == (0, "succeeded", 4)
    assert attempt["dataset_version"] == shown["lineage"]["dataset_version"]
    assert attempt["code_commit"] == shown["lineage"]["code_commit"]
    assert [c["step"] for c in shown["checkpoints"]] == [10, 20, 30]
    losses = client.service.store.metric_samples(run, "loss")
    assert losses[-1]["value"] < losses[0]["value"]
    assert client.logs(run)["attempts"][0]["exit_code"] == 0


@pytest.mark.slow
def test_the_policy_places_post_training_on_gpu_and_passes_the_backend(client: Client, experiments: Path) -> None:
    code = "import os; print('backend', os.environ['TRAINING_BACKEND'], os.environ['CROSSRAIL_ATTEMPT'])"
    run = command(client, experiments, code, "spec.stage=post_training")
    drive(client, ended(client, run))
    shown = client.show(run)
    assert shown["attempts"][0]["pool"] == "h100"
    assert "backend gpu 1" in client.logs(run)["attempts"][0]["log"]
    placed = next(e for e in shown["events"] if e["type"] == "placed")
    assert "gpu preferred by the post_training placement policy" in placed["data"]["reason"]


@pytest.mark.parametrize(
    ("code", "extra", "final_state", "attempts"),
    [
        pytest.param("raise SystemExit(3)", [], "failed", 1, id="a-user-error-is-not-retried"),
        pytest.param(
            "raise SystemExit(3)",
            ["spec.retries={max: 1, exit_codes: [3], backoff: {initial: 0s}}"],
            "failed",
            2,
            id="a-listed-exit-code-is-retried-until-retries-run-out",
        ),
        pytest.param(
            "raise SystemExit(75)",
            ["spec.retries={max: 2, backoff: {initial: 0s}}"],
            "failed",
            3,
            id="exit-75-is-retryable",
        ),
        pytest.param(
            "import os, signal; os.kill(os.getpid(), signal.SIGKILL)",
            ["spec.retries={max: 1, backoff: {initial: 0s}}"],
            "failed",
            2,
            id="a-kill-by-another-signal-is-retryable",
        ),
        pytest.param("print('ok')", ["spec.retries={max: 3}"], "succeeded", 1, id="exit-0-succeeds"),
    ],
)
@pytest.mark.slow
def test_the_exit_code_contract(
    client: Client, experiments: Path, code: str, extra: list[str], final_state: str, attempts: int
) -> None:
    run = command(client, experiments, code, *extra)
    drive(client, ended(client, run))
    assert state(client, run) == final_state
    atts = client.show(run)["attempts"]
    assert len(atts) == attempts
    assert [a["number"] for a in atts] == list(range(1, attempts + 1))
    if attempts > 1:
        assert types(client, run).count("retried") == attempts - 1


@pytest.mark.slow
def test_a_retry_moves_to_the_other_pool_and_resumes_from_the_latest_checkpoint(
    client: Client, experiments: Path
) -> None:
    slow = [
        BIGRAM,
        "spec.args=[--steps, '200', --checkpoint-every-steps, '10', --step-sleep, '0.05']",
        "spec.resources.chips=4",
        "spec.retries={max: 2, backoff: {initial: 0s}}",
    ]
    run = client.submit(experiments / "pretrain-small.yaml", sets=slow)["run"]["id"]
    store = client.service.store
    drive(client, lambda: bool(store.checkpoints(run)) and state(client, run) == "running")
    first = store.attempts(run)[0]
    child = json.loads((client.workspace.root / "attempts" / run / "1" / "child.json").read_text())
    os.killpg(int(child["pid"]), signal.SIGKILL)
    drive(client, ended(client, run), timeout_s=120)
    atts = store.attempts(run)
    assert state(client, run) == "succeeded"
    assert [a.pool for a in atts] == [first.pool, "h100"]
    resumed = [e for e in store.events(run=run, types=["reported"]) if e.data["name"] == "resumed"]
    assert resumed, "the second attempt reports where it resumed"
    step = resumed[-1].data["data"]["step"]
    assert step >= 10  # from a committed checkpoint, not from zero
    assert step in [c.step for c in store.checkpoints(run) if c.attempt == 1]
    failed = next(e for e in store.events(run=run, types=["failed"]))
    assert failed.data["final"] is False
    assert "signal 9" in failed.data["reason"]


@pytest.mark.slow
def test_cancel_stops_a_running_attempt(client: Client, experiments: Path) -> None:
    run = command(client, experiments, "import time; time.sleep(60)")
    drive(client, lambda: state(client, run) == "running")
    client.cancel(run)
    drive(client, lambda: client.service.store.active_attempts() == [])
    (att,) = client.service.store.attempts(run)
    assert (att.state, att.stopped_by) == ("cancelled", "cancelled")
    assert state(client, run) == "cancelled"


@pytest.mark.slow
def test_a_restarted_agent_says_which_attempts_it_re_adopted_and_which_ended_unwatched(
    client: Client, experiments: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from crossrail.cli.render import AgentTicks

    long = command(client, experiments, "import time; time.sleep(60)")
    short = command(client, experiments, "import time; time.sleep(1)")
    drive(client, lambda: {state(client, long), state(client, short)} == {"running"})
    time.sleep(2)  # the short one ends while no agent watches
    ticks = AgentTicks(client.service.store)
    ticks(client.agent(FAST).reconcile())  # a new agent's first pass
    out = capsys.readouterr().out
    assert f"re-adopted 1 attempt: {long} attempt 1 on " in out
    assert f"ended while no agent watched: {short} attempt 1" in out
    client.cancel(long)
    drive(client, lambda: client.service.store.active_attempts() == [])


@pytest.mark.slow
def test_suspend_stops_the_attempt_and_resume_runs_it_again(client: Client, experiments: Path) -> None:
    run = command(client, experiments, "import time; time.sleep(60)")
    drive(client, lambda: state(client, run) == "running")
    client.suspend(run)
    drive(client, lambda: client.service.store.active_attempts() == [])
    assert state(client, run) == "suspended"
    client.resume(run)
    drive(client, lambda: state(client, run) == "running")
    assert [a.state for a in client.service.store.attempts(run)] == ["suspended", "running"]
    client.cancel(run)
    drive(client, lambda: client.service.store.active_attempts() == [])


@pytest.mark.slow
def test_post_training_waits_for_its_parent_and_starts_from_its_checkpoint(client: Client, experiments: Path) -> None:
    pre = client.submit(experiments / "pretrain-small.yaml", sets=SHORT)["run"]["id"]
    post = client.submit(experiments / "posttrain-042.yaml", sets=SHORT)["run"]["id"]
    drive(client, ended(client, post), timeout_s=120)
    store = client.service.store
    assert state(client, pre) == state(client, post) == "succeeded"
    assert store.attempts(post)[0].created_at >= store.attempts(pre)[0].ended_at  # type: ignore[operator]
    started_from = [e for e in store.events(run=post, types=["reported"]) if e.data["name"] == "initialised"]
    assert started_from
    assert started_from[0].data["data"]["from"].endswith("step-0000000030")


@pytest.mark.slow
def test_a_torn_latest_checkpoint_is_skipped_and_the_retry_resumes_from_the_previous_one(
    client: Client, experiments: Path
) -> None:
    slow = [
        BIGRAM,
        "spec.args=[--steps, '200', --checkpoint-every-steps, '10', --step-sleep, '0.05']",
        "spec.resources.chips=4",
        "spec.retries={max: 1, backoff: {initial: 0s}}",
    ]
    run = client.submit(experiments / "pretrain-small.yaml", sets=slow)["run"]["id"]
    store = client.service.store
    drive(client, lambda: len(store.checkpoints(run)) >= 2 and state(client, run) == "running")
    child = json.loads((client.workspace.root / "attempts" / run / "1" / "child.json").read_text())
    os.killpg(int(child["pid"]), signal.SIGKILL)
    ckpt_dir = Path(store.checkpoints(run)[0].uri.removeprefix("file://")).parent
    committed = sorted(ckpt_dir.glob("step-*"))
    newest, previous = committed[-1], committed[-2]
    data = bytearray((newest / "model.safetensors").read_bytes())
    data[len(data) // 2] ^= 0xFF  # a damaged block in the middle of the tensor data
    (newest / "model.safetensors").write_bytes(bytes(data))
    (ckpt_dir / ".tmp-step-999-x").mkdir()  # and a write that never committed
    drive(client, ended(client, run), timeout_s=120)
    assert state(client, run) == "succeeded"
    reported = {e.data["name"]: e.data["data"] for e in store.events(run=run, types=["reported"]) if e.attempt == 2}
    assert reported["checkpoint_skipped"]["uri"].endswith(newest.name)
    assert reported["resumed"]["from"].endswith(previous.name)
    assert reported["resumed"]["step"] == int(previous.name.removeprefix("step-"))
    marked = {c.step: c.skipped_reason for c in store.checkpoints(run)}
    assert marked[int(newest.name.removeprefix("step-"))]  # the store no longer offers it as a parent
    assert marked[int(previous.name.removeprefix("step-"))] is None
    assert int(newest.name.removeprefix("step-")) not in {c.step for c in store.checkpoints(run, usable=True)}


@pytest.mark.slow
def test_a_critical_run_preempts_a_low_priority_one_which_checkpoints_and_resumes(
    client: Client, experiments: Path
) -> None:
    slow = "spec.args=[--steps, '400', --checkpoint-every-steps, '10', --step-sleep, '0.05']"
    low = client.submit(
        experiments / "pretrain-small.yaml",
        sets=[
            BIGRAM,
            slow,
            "metadata.name=low-prio",
            "spec.stage=eval",
            "spec.resources.chips=4",  # the whole of the eval queue's h100 quota
            "spec.priority=low",
            "spec.accelerators={allow: [gpu]}",
            "spec.resources.duration=1h",
        ],
    )["run"]["id"]
    store = client.service.store
    drive(client, lambda: bool(store.checkpoints(low)) and state(client, low) == "running")
    high = command(
        client,
        experiments,
        "print('urgent')",
        "spec.priority=critical",
        "spec.resources.chips=2",
        "spec.accelerators={allow: [gpu]}",
    )
    drive(client, ended(client, high), timeout_s=120)
    assert state(client, high) == "succeeded"
    first = store.attempts(low)[0]
    assert (first.state, first.stopped_by, first.exit_code) == ("preempted", "preempted", 75)
    preempted = next(e for e in store.events(run=low, types=["preempted"]))
    assert preempted.data["final"] is False

    def resumed() -> list[dict[str, object]]:
        return [e.data["data"] for e in store.events(run=low, types=["reported"]) if e.data["name"] == "resumed"]

    drive(client, lambda: bool(resumed()))  # requeued without spending a retry, then admitted again
    assert resumed()[0]["step"] >= 10  # from the checkpoint written in its grace period or before
    assert store.attempts(low)[1].number == 2
    client.cancel(low)
    drive(client, lambda: store.active_attempts() == [])
