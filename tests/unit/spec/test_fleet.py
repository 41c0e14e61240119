"""The Fleet schema: pools and queues, cross-references checked, helpers the scheduler relies on."""

from __future__ import annotations

import pytest

from crossrail.errors import SpecError
from crossrail.spec import Accelerator, Fleet, Stage, parse_fleet

from .builders import FLEET_YAML, doc, edited


def fleet() -> Fleet:
    return parse_fleet(doc(FLEET_YAML, "fleet.yaml"))


def fleet_problems(text: str) -> list[tuple[str, int | None, str, str | None]]:
    with pytest.raises(SpecError) as caught:
        parse_fleet(doc(text, "fleet.yaml"))
    return [(p.path, p.line, p.message, p.fix) for p in caught.value.problems]


def test_the_example_fleet_parses_with_defaults() -> None:
    parsed = fleet()

    tpu, gpu = parsed.pools
    assert tpu.accelerator is Accelerator.TPU
    assert tpu.topology_shapes == [(2, 2, 1), (2, 2, 2), (2, 2, 4)]
    assert tpu.topology_chips() == [4, 8, 16]
    assert tpu.hosts == 4
    assert gpu.topologies == []
    assert (gpu.relative_speed, gpu.backend, gpu.cost_per_chip_hour) == (1.0, "local", 3.0)


def test_pool_lookup_names_the_pools_when_missing() -> None:
    parsed = fleet()

    assert parsed.pool("h100-local").chips == 8
    with pytest.raises(KeyError, match="pools are tpu-v5p-local, h100-local"):
        parsed.pool("h100")


@pytest.mark.parametrize(
    ("stage", "team", "queue"),
    [
        pytest.param(Stage.POST_TRAINING, "alignment", "post-training-alignment", id="team-queue-first"),
        pytest.param(Stage.POST_TRAINING, "safety", "post-training", id="other-team-uses-stage-queue"),
        pytest.param("post_training", None, "post-training", id="no-team"),
        pytest.param(Stage.PRETRAINING, "alignment", "pretraining", id="stage-without-team-queues"),
        pytest.param(Stage.EVAL, None, None, id="stage-without-a-queue"),
    ],
)
def test_queue_for_prefers_the_team_queue(stage: Stage | str, team: str | None, queue: str | None) -> None:
    found = fleet().queue_for(stage, team)

    assert (found.name if found else None) == queue


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        pytest.param(
            "quota: {tpu-v5p-local: 16, h100-local: 8}",
            "quota: {tpu-v5p-locl: 16, h100-local: 8}",
            (
                "spec.queues[0].quota.tpu-v5p-locl",
                25,
                "unknown pool 'tpu-v5p-locl'",
                "did you mean 'tpu-v5p-local'?",
            ),
            id="quota-on-a-misspelt-pool",
        ),
        pytest.param(
            "chips_per_host: 4",
            "chips_per_host: 3",
            (
                "spec.pools[0].chips_per_host",
                10,
                "3 does not divide chips (16)",
                "make chips a whole number of hosts times chips_per_host",
            ),
            id="chips-per-host-does-not-divide",
        ),
        pytest.param(
            "topologies: [2x2x1, 2x2x2, 2x2x4]",
            "topologies: [2x2x1, 4x4x4]",
            (
                "spec.pools[0].topologies[1]",
                11,
                "4x4x4 needs 64 chips; the pool has 16",
                "remove the shape or raise chips",
            ),
            id="slice-larger-than-the-pool",
        ),
        pytest.param(
            "topologies: [2x2x1, 2x2x2, 2x2x4]",
            "topologies: [2x2x1, 2by2]",
            (
                "spec.pools[0].topologies[1]",
                11,
                "'2by2' is not a slice topology; write chips per dimension, e.g. 2x2x1 or 4x4",
                None,
            ),
            id="unreadable-topology",
        ),
        pytest.param(
            "  queues:",
            "    - {name: h100-local, accelerator: gpu, chip_type: h100, chips: 8, chips_per_host: 8}\n  queues:",
            ("spec.pools[2].name", 22, "pool name 'h100-local' is used twice", "give each pool its own name"),
            id="duplicate-pool-name",
        ),
        pytest.param(
            "    - name: post-training\n      stage: post_training",
            "    - name: post-training\n      stage: pretraining",
            (
                "spec.queues[1].stage",
                28,
                "queue 'post-training' repeats stage pretraining with no team (see queues[0])",
                "give one queue per stage and team, or set a team",
            ),
            id="two-queues-for-one-stage-and-team",
        ),
        pytest.param(
            "accelerator: gpu",
            "accelerator: gpus",
            ("spec.pools[1].accelerator", 17, "'gpus' is not one of tpu, gpu, cpu", "did you mean 'gpu'?"),
            id="misspelt-accelerator",
        ),
        pytest.param(
            "relative_speed: 1.0",
            "relative_speed: 0",
            ("spec.pools[0].relative_speed", 13, "must be > 0.0 (got 0)", None),
            id="zero-speed",
        ),
        pytest.param(
            "      backend: local\n",
            "      backend: ray\n      ray: {address: 'head:6379'}\n      slowdown: 2\n",
            (
                "spec.pools[0].slowdown",
                17,
                "slowdown on a pool whose backend is ray",
                "remove `slowdown` (only the local executor emulates a slower pool), or set `backend: local`",
            ),
            id="slowdown-off-local",
        ),
        pytest.param(
            "      backend: local\n",
            "      backend: local\n      slowdown: 0.5\n",
            ("spec.pools[0].slowdown", 16, "must be >= 1.0 (got 0.5)", None),
            id="slowdown-below-one",
        ),
    ],
)
def test_fleet_mistakes_are_named(old: str, new: str, expected: tuple[str, int, str, str | None]) -> None:
    assert fleet_problems(edited(FLEET_YAML, old, new)) == [expected]


def test_fleet_wide_checks_still_run_when_a_pool_is_invalid() -> None:
    text = edited(edited(FLEET_YAML, "accelerator: tpu", "accelerator: tpux"), "chips_per_host: 4", "chips_per_host: 5")
    text = edited(text, "{h100-local: 8}", "{h100: 8}")

    paths = [path for path, _, _, _ in fleet_problems(text)]

    assert paths == ["spec.pools[0].accelerator", "spec.pools[0].chips_per_host", "spec.queues[1].quota.h100"]


SHARED_TEAM_QUEUE = ("      team: alignment\n", "      teams: [alignment, safety]\n")


def test_team_is_shorthand_for_a_one_team_list() -> None:
    queue = next(q for q in fleet().queues if q.name == "post-training-alignment")
    assert queue.teams == ["alignment"]
    assert next(q for q in fleet().queues if q.name == "post-training").teams == []


@pytest.mark.parametrize(
    ("team", "queue"),
    [
        pytest.param("alignment", "post-training-alignment", id="first-listed-team"),
        pytest.param("safety", "post-training-alignment", id="second-listed-team"),
        pytest.param("evals", "post-training", id="unlisted-team-uses-the-stage-queue"),
    ],
)
def test_a_queue_admits_every_team_it_lists(team: str, queue: str) -> None:
    shared = parse_fleet(doc(edited(FLEET_YAML, *SHARED_TEAM_QUEUE), "fleet.yaml"))
    found = shared.queue_for(Stage.POST_TRAINING, team)
    assert found is not None
    assert found.name == queue


@pytest.mark.parametrize(
    ("new", "expected"),
    [
        pytest.param(
            "      team: safety\n      teams: [alignment]\n",
            ("spec.queues[2].team", "team 'safety' is not among teams ['alignment']"),
            id="team-outside-teams",
        ),
        pytest.param(
            "      teams: [alignment, alignment]\n",
            ("spec.queues[2].teams", "teams ['alignment', 'alignment'] names a team twice"),
            id="team-listed-twice",
        ),
    ],
)
def test_a_queues_team_list_is_checked(new: str, expected: tuple[str, str]) -> None:
    problems = fleet_problems(edited(FLEET_YAML, "      team: alignment\n", new))
    assert [(path, message) for path, _, message, _ in problems] == [expected]


def test_two_queues_of_a_stage_may_not_both_list_a_team() -> None:
    text = edited(FLEET_YAML, *SHARED_TEAM_QUEUE)
    text += "    - name: post-training-safety\n      stage: post_training\n      teams: [safety]\n"
    problems = fleet_problems(text)
    assert [(p, m) for p, _, m, _ in problems] == [
        (
            "spec.queues[3].stage",
            "queue 'post-training-safety' repeats stage post_training with team safety (see queues[2])",
        )
    ]


def test_a_team_a_queue_lists_may_have_a_budget() -> None:
    text = edited(FLEET_YAML, *SHARED_TEAM_QUEUE) + "  budgets:\n    - {team: safety, amount: 100}\n"
    assert parse_fleet(doc(text, "fleet.yaml")).spec.teams == ["alignment", "safety"]
