"""Tasks, verifiers and the file queue the stages share."""

from __future__ import annotations

from pathlib import Path

import pytest

from crossrail.core.clock import ManualClock
from crossrail.errors import CrossrailError
from crossrail.workloads.gpt_data import Record
from crossrail.workloads.rl.queues import FileQueue
from crossrail.workloads.rl.task import digits, exact, task_named, verifier_named


@pytest.mark.parametrize("name", ["addition", "reversal"])
def test_the_heldout_split_never_meets_training(name: str) -> None:
    task = task_named(name)
    train, heldout = task.split(heldout=False), task.split(heldout=True)
    assert not {r.prompt for r in train} & {r.prompt for r in heldout}
    assert 0.05 < len(heldout) / len(task.problems) < 0.15
    assert {len(r.prefix()) for r in task.problems} == {task.prompt_bytes()}  # one width: no padding


@pytest.mark.parametrize(
    ("completion", "exact_reward", "digits_reward"),
    [
        pytest.param(b"dcba\n", 1.0, 1.0, id="right answer"),
        pytest.param(b"dcba", 1.0, 1.0, id="right answer cut before its newline"),
        pytest.param(b"dcbb\n", 0.0, 0.375, id="three of four bytes in place earn partial credit"),
        pytest.param(b"\n", 0.0, 0.0, id="empty answer"),
    ],
)
def test_verifiers_score_a_completion(completion: bytes, exact_reward: float, digits_reward: float) -> None:
    problem = Record("abcd", "dcba")
    assert exact(problem, completion) == exact_reward
    assert digits(problem, completion) == digits_reward


def test_unknown_task_or_verifier_names_the_choices() -> None:
    with pytest.raises(CrossrailError, match="choose one of addition, reversal"):
        task_named("sorting")
    with pytest.raises(CrossrailError, match="choose one of exact, digits"):
        verifier_named("fuzzy")


def test_two_claimers_never_get_one_item_and_a_replacement_requeues_its_predecessors(tmp_path: Path) -> None:
    clock = ManualClock()
    queue = FileQueue(tmp_path / "q", clock)
    for n in range(5):
        queue.put(version=n % 2, item_id=f"s0.{n}", item={"n": n})
    first = queue.claim("reward0", 3)
    second = queue.claim("reward1", 3)
    assert [i["version"] for _, i in first] == [0, 0, 0]  # lowest version first
    assert {i["id"] for _, i in first}.isdisjoint(i["id"] for _, i in second)
    assert len(first) + len(second) == 5
    queue.done(first[0][0])
    assert queue.requeue("reward0") == 2  # reward0 crashed holding two
    assert sorted(i["n"] for _, i in queue.claim("reward0", 10)) == sorted(i["n"] for _, i in first[1:])


def test_backlog_reports_length_and_the_oldest_items_age(tmp_path: Path) -> None:
    clock = ManualClock()
    queue = FileQueue(tmp_path / "q", clock)
    assert queue.backlog().length == 0
    queue.put(0, "a", {})
    queue.put(1, "b", {})
    clock.advance(1e9)  # the file's mtime is real time; the queue's clock is far past it
    backlog = queue.backlog()
    assert backlog.length == 2
    assert backlog.age_s > 1e8
