"""Every metric a placement policy can name, on hand-told event stories with known answers."""

from __future__ import annotations

import json

import pytest

from crossrail.core import EventType
from crossrail.core.metric_names import METRIC_NAMES
from crossrail.errors import UsageError
from crossrail.metrics import METRICS, RunFacts, Selection, compute, fold_runs, parse_selection, table

from .stories import T0, Story, tell

LOSS_TARGET = {"metric": "eval_loss", "op": "<=", "value": 2.0}


def facts(*stories: Story, now: float | None = None) -> list[RunFacts]:
    at = now if now is not None else max(s.now for s in stories) + 10
    return fold_runs(tell(*stories), [x for s in stories for x in s.samples], now=at)


def moved_and_met_on_second_attempt() -> Story:
    """Queued 1 min; 1 h on gpu-a (loss 2.5), preempted; back after 100 s on tpu-a, 1 h (loss 1.9 at 20 min)."""
    s = Story("post-1", stage="post_training", chips=2, target=LOSS_TARGET)
    s.wait(60).start("gpu-a", price=3.0).wait(1800).metric("eval_loss", 2.5).wait(1800).preempt()
    s.wait(40).retry().wait(60).start("tpu-a", price=1.0, chips=4)
    return s.wait(1200).metric("eval_loss", 1.9).wait(2400).succeed()


def test_a_run_moved_between_pools_counts_where_it_last_ran_with_every_attempt_in_its_numbers() -> None:
    (run,) = facts(moved_and_met_on_second_attempt())

    row = table([run]).row(stage="post_training", pool="tpu-a")
    assert row is not None
    assert row.runs == 1
    v = row.values
    assert v["research_cycle_seconds"] == 60 + 3600 + 100 + 3600
    assert v["experiment_queue_seconds"] == 60 + 60  # each attempt's wait in the queue
    assert v["recovery_seconds"] == 100  # preempted -> the next start
    assert v["chip_hours_per_run"] == 2 * 1 + 4 * 1
    assert v["cost_per_effective_run"] == 2 * 3.0 + 4 * 1.0
    assert v["success_rate"] == 1.0
    assert v["eval_loss"] == 1.9  # the last reported


def test_a_target_met_on_the_second_attempt_costs_both_attempts_up_to_the_moment_it_was_met() -> None:
    (run,) = facts(moved_and_met_on_second_attempt())

    v = table([run], by=("chip_type",)).rows[0].values
    assert v["time_to_target_seconds"] == 60 + 3600 + 100 + 1200
    assert v["chip_hours_to_target"] == pytest.approx(2 * 1 + 4 * 1200 / 3600)
    assert v["cost_to_target"] == pytest.approx(2 * 3.0 + 4 * 1200 / 3600 * 1.0)
    assert v["target_met_rate"] == 1.0


def test_a_target_never_met_counts_against_the_rate_once_the_run_ended_and_adds_no_cost_to_target() -> None:
    missed = Story("post-2", stage="post_training", target=LOSS_TARGET).wait(10).start("gpu-a")
    missed.wait(600).metric("eval_loss", 2.4).wait(10).fail()
    running = Story("post-3", stage="post_training", target=LOSS_TARGET).wait(10).start("gpu-a").wait(600)

    v = table(facts(missed, running), by=("stage",)).rows[0].values
    assert v["target_met_rate"] == 0.0  # the running one has not ended: it does not count yet
    assert v["cost_to_target"] is None


def test_a_target_via_eval_is_met_by_an_eval_run_of_one_of_the_runs_checkpoints() -> None:
    train = Story("pre-1", target={**LOSS_TARGET, "via": "eval"}).wait(60).start("tpu-a", chips=8).wait(3600)
    train.metric("eval_loss", 1.5)  # its own samples do not count with via: eval
    train.wait(3600).succeed()
    ev = Story("ev-1", stage="eval", chips=1, at=T0 + 5000, parent_run="pre-1").wait(30).start("gpu-a")
    ev.wait(300).metric("eval_loss", 1.8).wait(10).succeed()

    runs = {r.id: r for r in facts(train, ev)}
    assert runs["pre-1"].target_met_ts == T0 + 5330
    assert runs["pre-1"].chip_hours_to_target == pytest.approx(8 * (5330 - 60) / 3600)


def test_cancelled_runs_cost_but_neither_succeed_nor_fail() -> None:
    ok = Story("pre-1").wait(60).start("tpu-a", price=2.0).wait(3600).succeed()
    stopped = Story("pre-2").wait(60).start("tpu-a", price=2.0).wait(1800).cancel(running=True)
    waiting = Story("pre-3").wait(120).cancel()

    v = table(facts(ok, stopped, waiting), by=("stage",)).rows[0].values
    assert v["success_rate"] == 1.0
    assert v["cost_per_effective_run"] == (8 * 1 * 2.0 + 8 * 0.5 * 2.0) / 1
    assert v["research_cycle_seconds"] == 3660  # only the succeeded run has a result


def test_a_retried_failure_is_a_recovery_and_a_final_failure_lowers_the_success_rate() -> None:
    retried = Story("pre-1").wait(10).start("tpu-a").wait(100).fail(final=False).wait(30).retry().wait(20)
    retried.start("tpu-a").wait(100).succeed()
    lost = Story("pre-2").wait(10).start("tpu-a").wait(100).fail()

    v = table(facts(retried, lost), by=("pool",)).row(pool="tpu-a")
    assert v is not None
    assert v.values["recovery_seconds"] == 50
    assert v.values["success_rate"] == 0.5
    assert v.values["research_cycle_seconds"] == 10 + 100 + 50 + 100


def test_throughput_checkpoint_and_eval_metrics_aggregate_the_runs_reports() -> None:
    a = Story("pre-1").wait(1).start("tpu-a").metric("tokens_per_second", 100).metric("tokens_per_second", 300)
    a.metric("checkpoint_write_seconds", 4).metric("device_busy", 0.4).metric("eval_pass_rate", 0.5)
    a.metric("eval_pass_rate", 0.7).wait(10).succeed()
    b = Story("pre-2").wait(1).start("tpu-a").metric("tokens_per_second", 500).metric("checkpoint_write_seconds", 8)
    b.metric("device_busy", 0.9).metric("eval_pass_rate", 0.9).wait(10).succeed()

    v = table(facts(a, b), by=("pool",)).rows[0].values
    assert v["tokens_per_second"] == 300  # (100 + 300 + 500) / 3 reports
    assert v["checkpoint_write_seconds"] == 6
    assert v["device_busy"] == pytest.approx((0.4 + 0.9) / 2)  # the NVML busy share, a metric of its own
    assert v["eval_pass_rate"] == pytest.approx((0.7 + 0.9) / 2)  # each run's last


def test_steps_per_hour_come_from_heartbeats_across_attempts_when_no_run_reports_them() -> None:
    s = Story("pre-1").wait(1).start("tpu-a").beat(0).wait(1800).beat(100).preempt().wait(5).retry()
    s.start("tpu-a").beat(100).wait(1800).beat(400).succeed()

    assert table(facts(s)).rows[0].values["steps_per_hour"] == 400  # 400 steps over 1 h of beating


def test_rl_metrics_aggregate_hand_built_reports() -> None:
    """samples/s: mean over reports; learner idle: a run's reports summed, mean over runs; lag: mean of reports."""
    a = Story("rl-1", stage="reinforcement_learning").wait(5).start("tpu-a")
    a.metric("samples_per_second", 1000).metric("learner_idle_seconds", 30).metric("policy_lag_steps", 1)
    a.wait(60).metric("samples_per_second", 2000).metric("learner_idle_seconds", 10).metric("policy_lag_steps", 3)
    b = Story("rl-2", stage="reinforcement_learning").wait(5).start("gpu-a")
    b.metric("samples_per_second", 3000).metric("learner_idle_seconds", 80).metric("policy_lag_steps", 2)

    runs = facts(a, b)
    both = table(runs, by=("stage",)).rows[0].values
    assert both["samples_per_second"] == 2000
    assert both["learner_idle_seconds"] == 60  # (30 + 10 + 80) / 2 runs
    assert both["policy_lag_steps"] == 2
    per_pool = table(runs, by=("pool",), metrics=["learner_idle_seconds"])
    assert [(r.key["pool"], r.values["learner_idle_seconds"]) for r in per_pool.rows] == [("gpu-a", 80), ("tpu-a", 40)]


def test_groups_by_team_window_framework_and_precision_and_selections_pick_runs() -> None:
    early = Story("pre-1", team="vision").wait(60).start("tpu-a").runtime("jax", "bf16").wait(60).succeed()
    late = Story("pre-2", team="speech", at=T0 + 86_400).wait(60).start("gpu-a").runtime("torch", "fp32")
    late.wait(120).succeed()
    runs = facts(early, late)

    by_day = table(runs, by=("team", "window", "framework", "precision"), window_s=86_400, metrics=["success_rate"])
    assert [tuple(r.key.values()) for r in by_day.rows] == [
        ("speech", "2026-01-02T00:00:00Z", "torch", "fp32"),
        ("vision", "2026-01-01T00:00:00Z", "jax", "bf16"),
    ]
    picked = parse_selection("team=speech,since=2026-01-02,until=2026-01-03").pick(runs)
    assert [r.id for r in picked] == ["pre-2"]
    assert Selection(since=T0 + 1).pick(runs) == [runs[1]]


def test_the_table_agrees_with_the_stage_pool_report_on_cost_of_the_same_log() -> None:
    stories = [moved_and_met_on_second_attempt(), Story("pre-9").wait(5).start("tpu-a").wait(900).cancel(running=True)]
    now = max(s.now for s in stories) + 10
    report = compute(tell(*stories), now=now)
    runs = facts(*stories, now=now)
    assert sum(r.cost for r in runs) == pytest.approx(report.totals.cost)
    assert sum(r.chip_hours for r in runs) == pytest.approx(report.totals.chip_hours)


def test_run_facts_survive_a_json_round_trip() -> None:
    runs = facts(moved_and_met_on_second_attempt())
    again = [RunFacts.from_dict(json.loads(json.dumps(r.as_dict()))) for r in runs]
    assert again == runs


def test_every_metric_name_a_policy_can_name_is_computed_and_no_other() -> None:
    assert METRICS.keys() == METRIC_NAMES.keys()


@pytest.mark.parametrize(
    ("text", "says"),
    [
        pytest.param("stage=eval,pol=x", "unknown key 'pol'", id="unknown-key"),
        pytest.param("since=yesterday", "since='yesterday' is not a date", id="bad-date"),
        pytest.param("stage", "'stage' is not KEY=VALUE", id="no-value"),
    ],
)
def test_a_bad_selection_names_what_is_wrong(text: str, says: str) -> None:
    with pytest.raises(UsageError, match=says):
        parse_selection(text)


def test_an_unknown_metric_or_dimension_is_refused() -> None:
    with pytest.raises(UsageError, match=r"unknown dimension 'colour'.*; unknown metric 'tokens'"):
        table([], by=("colour",), metrics=["tokens"])


def test_the_gpt_trainers_started_report_names_framework_and_precision_too() -> None:
    s = Story("pre-1").wait(5).start("tpu-a")
    s.emit(EventType.REPORTED, attempt=1, name="started", data={"framework": "jax", "dtype": "bf16", "params": 10})
    (run,) = facts(s.wait(60).succeed())

    assert (run.dimension("framework"), run.dimension("precision")) == ("jax", "bf16")


def test_rl_backlog_length_and_age_are_metrics_by_name() -> None:
    s = Story("rl-1", stage="reinforcement_learning").wait(1).start("tpu-a")
    s.metric("backlog_samples_length", 40).metric("backlog_samples_length", 20).metric("backlog_scored_age_seconds", 3)
    s.wait(10).succeed()

    v = table(facts(s), by=("stage",), metrics=["backlog_samples_length", "backlog_scored_age_seconds"]).rows[0]
    assert (v.values["backlog_samples_length"], v.values["backlog_scored_age_seconds"]) == (30, 3)
