"""What the command shows of work in flight: progress in `logs`, `logs -f`, `events --follow`, `status --watch`,
and pool, step, loss, last checkpoint and the agent's liveness in `status` and `show`."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from crossrail.cli import app, follow, render
from crossrail.client import Client
from crossrail.control.agent import channel
from crossrail.control.agent.loop import AgentConfig
from crossrail.control.attempts import new_attempt
from crossrail.core import Event, EventType, ManualClock
from crossrail.runtime import Reporter

runner = CliRunner()
BIGRAM = "spec.command=[python, -m, crossrail.workloads.bigram]"
FAST = AgentConfig(poll_s=0.1, fallback_wait_s=0.0, stop_grace_s=5.0, heartbeat_s=1.0)


def test_an_empty_log_says_no_output_on_its_own_line_before_the_next_attempt(
    capsys: pytest.CaptureFixture[str],
) -> None:
    attempt = {"pool": "cpu", "state": "failed", "exit_code": 1, "signal": None}
    obj = {
        "run": "r-1",
        "attempts": [{**attempt, "attempt": 1, "log": ""}, {**attempt, "attempt": 2, "log": "step 1/2  loss 1.0"}],
    }
    render.logs(obj)
    lines = capsys.readouterr().out.splitlines()
    assert lines[1] == "(no output)"
    assert "r-1 attempt 2 on cpu (failed, exit 1)" in lines[2]
    assert lines[3] == "step 1/2  loss 1.0"


def _attempt_reporting(client: Client, experiments: Path) -> tuple[str, Reporter]:
    """A pretraining run admitted and started on the fleet's first pool, with the runtime's file reporter."""
    run_id = str(client.submit(experiments / "pretrain-small.yaml")["run"]["id"])
    store, now = client.service.store, client.clock.now()
    run, pool = store.get_run(run_id), client.service.fleet.pools[0]
    report = client.workspace.root / "reports" / f"{run_id}.jsonl"
    att = new_attempt(run, 1, pool, run.chips, report=str(report), now=now)
    assert store.admit(att, [Event(EventType.ADMITTED, now, run_id, 1, {"pool": pool.name})])
    store.mark_started(run_id, 1, now, [])
    return run_id, Reporter(str(report), run=run_id, attempt=1)


@pytest.mark.slow
def test_status_and_show_give_pool_step_loss_last_checkpoint_and_agent_liveness(
    client: Client, experiments: Path, clock: ManualClock
) -> None:
    run_id, reporter = _attempt_reporting(client, experiments)
    with reporter:
        for step in (1, 2, 3):
            reporter.metrics({"loss": 4.0 / step, "tokens_per_second": 1000.0}, step=step)
        reporter.checkpoint(2, f"{client.service.store.get_run(run_id).run_checkpoint_dir}/step-00000002", tokens=64)
        reporter.metric("steps_per_hour", 10.0, step=3)
    store = client.service.store
    channel.ingest(store, store.attempts(run_id)[0], clock.now())
    store.register_agent(host="h1", pid=42, workspace=None, now=clock.now())

    pool = client.service.fleet.pools[0].name
    (row,) = client.status()["active"]
    assert (row["pool"], row["step"], row["loss"]) == (pool, 3, pytest.approx(4.0 / 3))
    assert row["last_checkpoint"]["step"] == 2
    shown = client.show(run_id)
    assert (shown["run"]["pool"], shown["run"]["step"], shown["run"]["last_checkpoint"]["step"]) == (pool, 3, 2)
    assert shown["agent"]["alive"] is True
    assert client.status()["agent"]["message"] == "agent on h1 pid 42, seen 0s ago"

    clock.advance(120)  # the agent died: its heartbeat row stops moving
    assert client.status()["agent"] == client.show(run_id)["agent"]
    assert client.status()["agent"]["alive"] is False
    assert client.status()["agent"]["message"] == "no agent seen for 2m"

    home = str(client.workspace.root)
    table = runner.invoke(app, ["status", "--home", home])
    assert table.exit_code == 0, table.output
    assert "no agent seen for" in table.output  # the command's own clock is far past the manual one
    assert f"{run_id} " in table.output
    assert " 1.3333 " in table.output
    assert "step 2" in table.output
    detail = runner.invoke(app, ["show", run_id, "--home", home])
    assert f"pool {pool}  step 3  loss 1.3333  last checkpoint step 2" in detail.output


def test_no_agent_ever_is_said_too(client: Client) -> None:
    assert client.status()["agent"] == {"alive": False, "agent": None, "seen_s": None, "message": "no agent running"}


@pytest.mark.slow
def test_a_run_that_reports_no_loss_shows_the_step_of_its_newest_metric(
    client: Client, experiments: Path, clock: ManualClock
) -> None:
    run_id, reporter = _attempt_reporting(client, experiments)
    with reporter:
        reporter.metrics({"eval_loss": 2.0, "eval_pass_rate": 0.5}, step=7)
    channel.ingest(client.service.store, client.service.store.attempts(run_id)[0], clock.now())
    (row,) = client.status()["active"]
    assert (row["step"], row["loss"], row["last_checkpoint"]) == (7, None, None)


@pytest.mark.slow
def test_logs_follow_prints_a_running_attempts_progress_until_it_ends(
    checkout: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with Client(cwd=checkout) as c:  # the agent compares its clock with the processes': the real one
        exp = c.workspace.root / "experiments" / "pretrain-small.yaml"
        sets = [BIGRAM, "spec.args=[--steps, '20', --checkpoint-every-steps, '10', --step-sleep, '0.05']"]
        run_id = str(c.submit(exp, sets=sets)["run"]["id"])
        agent = c.agent(FAST)
        reads: list[str] = []

        def step_agent(_interval: float) -> None:  # between two reads of the log, the agent makes a pass
            reads.append(c.service.store.get_run(run_id).state)
            agent.reconcile()
            time.sleep(0.05)

        follow.follow_logs(c, run_id, None, interval_s=0.05, sleep=step_agent)
        printed = capsys.readouterr().out
    assert "running" in reads  # it printed while the attempt ran, not only after
    assert f"{run_id} attempt 1 on " in printed
    assert "step 1/20  loss " in printed
    assert "step 20/20  loss " in printed
    assert printed.rstrip().endswith(f"{run_id} attempt 1 ended: succeeded, exit 0")


@pytest.mark.slow
def test_events_follow_tails_the_log_by_cursor_until_ctrl_c(
    client: Client, experiments: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    client.submit(experiments / "eval-smoke.yaml")
    after = client.service.store.last_seq()
    polls: list[int] = []

    def more(_interval: float) -> None:  # each poll: one more run submitted; the third poll is Ctrl-C
        polls.append(1)
        if len(polls) == 3:
            raise KeyboardInterrupt
        client.submit(experiments / "eval-smoke.yaml")

    follow.until_interrupted(
        lambda: follow.follow_events(client, None, after, as_json=True, interval_s=0.01, sleep=more)
    )
    events = [json.loads(line) for line in capsys.readouterr().out.splitlines()]  # JSON Lines
    assert [(e["type"], e["run"]) for e in events] == [
        ("submitted", "eval-smoke-2"),
        ("queued", "eval-smoke-2"),
        ("submitted", "eval-smoke-3"),
        ("queued", "eval-smoke-3"),
    ]
    assert [e["seq"] for e in events] == list(range(after + 1, after + 5))  # each once, in order


@pytest.mark.slow
def test_events_follow_prints_one_line_per_event(
    client: Client, experiments: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    client.submit(experiments / "eval-smoke.yaml")

    def stop(_interval: float) -> None:
        raise KeyboardInterrupt

    follow.until_interrupted(lambda: follow.follow_events(client, None, 0, as_json=False, interval_s=0, sleep=stop))
    lines = capsys.readouterr().out.splitlines()
    assert [line.split("  ")[2] for line in lines] == ["submitted", "queued"]
    assert lines[0].startswith("1  ")


@pytest.mark.slow
def test_status_watch_redraws_count_times_and_refuses_json(client: Client) -> None:
    home = str(client.workspace.root)
    watched = runner.invoke(app, ["status", "--watch", "--count", "2", "--interval", "0.05", "--home", home])
    assert watched.exit_code == 0, watched.output
    assert "runs by stage" in watched.output
    refused = runner.invoke(app, ["status", "--watch", "--json", "--home", home])
    assert refused.exit_code == 2
    assert "leave out --json" in refused.output
