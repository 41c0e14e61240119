"""On Gavel's 15-job trace and its 2 V100 + 4 K80 cluster, heterogeneity-aware policies finish jobs sooner.

Reproduce the table: `.venv/bin/pytest -q -p no:randomly -s tests/unit/scheduling/test_gavel_replay.py`.
"""

from __future__ import annotations

import pytest

from crossrail.scheduling.policies import AGNOSTIC_FORM

from .gavel_replay import Replay, replay

PAIRS = sorted(AGNOSTIC_FORM.items())


@pytest.fixture(scope="module")
def results() -> dict[str, Replay]:
    names = [name for pair in PAIRS for name in pair] + ["min_jct_hetero"]
    done = {name: replay(name) for name in names}
    print("\npolicy                      avg JCT (h)  moves  rounds")
    for name, got in done.items():
        print(f"{name:26s}  {got.average_jct_s / 3600:10.2f}  {got.moves:5d}  {got.rounds:6d}")
    for hetero, agnostic in PAIRS:
        ratio = done[agnostic].average_jct_s / done[hetero].average_jct_s
        print(f"{hetero} lowers average JCT {ratio:.2f}x against {agnostic}")
    return done


@pytest.mark.parametrize(("hetero", "agnostic"), PAIRS, ids=[f"{h}-beats-{a}" for h, a in PAIRS])
def test_the_hetero_policy_lowers_average_jct_against_its_agnostic_form(
    results: dict[str, Replay], hetero: str, agnostic: str
) -> None:
    fast, slow = results[hetero].average_jct_s, results[agnostic].average_jct_s
    assert fast < 0.9 * slow, f"{hetero} {fast / 3600:.2f} h vs {agnostic} {slow / 3600:.2f} h"


def test_every_job_finishes_and_shortest_time_left_first_has_the_lowest_average(results: dict[str, Replay]) -> None:
    assert all(len(r.jct_s) == 15 and min(r.jct_s.values()) > 0 for r in results.values())
    best = min(results.values(), key=lambda r: r.average_jct_s)
    assert best.policy == "min_jct_hetero"


def test_hetero_still_wins_when_moves_cost_two_minutes() -> None:
    for hetero, agnostic in PAIRS:
        fast, slow = replay(hetero, restore_s=120.0), replay(agnostic, restore_s=120.0)
        assert fast.average_jct_s < slow.average_jct_s, hetero


def test_the_replay_is_deterministic(results: dict[str, Replay]) -> None:
    assert replay("max_min_fairness_hetero") == results["max_min_fairness_hetero"]
