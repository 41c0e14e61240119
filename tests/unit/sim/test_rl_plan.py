"""Sizing the sampler:learner ratio for a large fleet, and the steady state the simulator confirms."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from typer.testing import CliRunner

from crossrail.cli import app
from crossrail.errors import CrossrailError
from crossrail.sim.rl import RLSimulation
from crossrail.sim.rl_plan import parse_fleet_chips, parse_stages, plan_ratios, recommend, steady_state

from .test_rl import RATES, one_sampler, rl_fleet

STAGES = parse_stages(["sampler=tpu-v5e:4:4", "reward=epyc:1:100", "learner=h100:8:8"])
FLEET = parse_fleet_chips("tpu-v5e=4096,h100=1024,epyc=512")
runner = CliRunner()


def test_the_recommendation_feeds_every_learner_with_the_fewest_samplers() -> None:
    rows = plan_ratios(STAGES, FLEET, lag=2, most=12)
    best = recommend(rows)

    assert best is not None
    assert (best.samplers, best.reward_workers, best.pipelines) == (4, 1, 128)  # h100 holds 128 learners
    assert best.samples_per_second == pytest.approx(128 * 64)
    assert best.learner_idle == pytest.approx(0.0)
    assert rows[0].learner_idle == pytest.approx(0.75)
    assert rows[11].pipelines == 4096 // 48  # twelve samplers per learner: the TPUs run out first


def test_synchronous_pipelines_take_turns_so_more_samplers_still_pay() -> None:
    best = recommend(plan_ratios(STAGES, FLEET, lag=0, most=12))

    assert best is not None
    assert (best.samplers, best.reward_workers) == (8, 2)  # the most the TPUs allow for all 128 learners
    assert best.learner_idle == pytest.approx(1 / 3)  # the learner waits for each batch to be made
    assert best.samples_per_second < 0.7 * 128 * 64


@pytest.mark.parametrize(("samplers", "lag"), [(1, 2), (2, 2), (4, 2), (1, 0), (4, 0)])
def test_the_steady_state_is_what_the_simulator_measures(samplers: int, lag: int) -> None:
    rate, idle = steady_state(STAGES, samplers, 1, lag)
    base = one_sampler(lag)
    pipeline = replace(base, parts={**base.parts, "sampler": replace(base.parts["sampler"], replicas=samplers)})

    sim = RLSimulation(rl_fleet(), pipeline, RATES, controller=False).run(600.0)

    assert sim.samples_per_second == pytest.approx(rate, rel=0.08)
    assert sim.learner_idle_fraction == pytest.approx(idle, abs=0.06)


@pytest.mark.parametrize(
    ("items", "message"),
    [
        pytest.param(["sampler=tpu:4:4", "reward=cpu:1:9"], "no learner given", id="missing-stage"),
        pytest.param(["sampler=tpu:four:4", "reward=cpu:1:9", "learner=h100:8:8"], "write PART=", id="not-a-number"),
        pytest.param(["critic=tpu:4:4", "reward=cpu:1:9", "learner=h100:8:8"], "unknown part 'critic'", id="unknown"),
        pytest.param(["sampler=tpu:0:4", "reward=cpu:1:9", "learner=h100:8:8"], "must be > 0", id="zero-chips"),
    ],
)
def test_bad_stage_rates_are_refused_with_the_format(items: list[str], message: str) -> None:
    with pytest.raises(CrossrailError, match=message):
        parse_stages(items)


def test_a_fleet_without_a_stages_chip_type_is_refused() -> None:
    with pytest.raises(CrossrailError, match="--rl-fleet has no epyc"):
        plan_ratios(STAGES, parse_fleet_chips("tpu-v5e=64,h100=64"), lag=2)


RL_ARGS = ["plan", "--rl", "sampler=tpu-v5e:4:4", "--rl", "reward=epyc:1:100", "--rl", "learner=h100:8:8"]


def test_plan_rl_prints_each_ratio_and_recommends_one() -> None:
    out = runner.invoke(app, [*RL_ARGS, "--rl-fleet", "tpu-v5e=4096,h100=1024,epyc=512", "--most", "6"])

    assert out.exit_code == 0, out.output
    assert "recommended: 4 sampler replicas and 1 reward workers per learner, 128 pipelines" in out.stdout


def test_plan_rl_in_json_and_a_fleet_too_small_for_one_pipeline() -> None:
    out = runner.invoke(app, [*RL_ARGS, "--rl-fleet", "tpu-v5e=4096,h100=1024,epyc=512", "--lag", "0", "--json"])
    data = json.loads(out.stdout)

    assert out.exit_code == 0, out.output
    assert (data["best"], data["max_policy_lag_steps"], len(data["ratios"])) == (8, 0, 16)

    small = runner.invoke(app, [*RL_ARGS, "--rl-fleet", "tpu-v5e=4,h100=4,epyc=1"])
    assert small.exit_code == 1
    assert "no ratio fits one pipeline on this fleet" in small.stdout


def test_plan_without_rl_still_needs_its_workload_options() -> None:
    out = runner.invoke(app, ["plan", "--pools", "h100:8:8:3.0"])

    assert out.exit_code != 0
    assert "plan needs --workload, --grid, --target" in out.output
