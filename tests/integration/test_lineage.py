"""Lineage that resolves: a `latest` parent named at launch, the store following retention, parents that leave
nothing to start from, and resumes that pass over damaged checkpoints. Real agent, real (numpy) training runs."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from tests.integration.test_agent import BIGRAM, drive
from tests.unit.runtime.ckpt_builders import DAMAGE
from typer.testing import CliRunner

from crossrail.cli import app
from crossrail.cli.ckpt import ckpt_app
from crossrail.client import Client
from crossrail.control import parents
from crossrail.errors import ConflictError, SpecError

FIVE = [BIGRAM, "spec.args=[--steps, '50', --checkpoint-every-steps, '10']", "spec.resources.chips=1"]
CHILD = [BIGRAM, "spec.args=[--steps, '2', --checkpoint-every-steps, '1']", "spec.resources={chips: 1}"]
runner = CliRunner()


@pytest.fixture
def client(checkout: Path) -> Iterator[Client]:
    """The agent compares its clock with times the runtime takes: the real one."""
    with Client(cwd=checkout) as c:
        yield c


def ended(client: Client, *runs: str) -> Callable[[], bool]:
    store = client.service.store
    return lambda: all(store.get_run(r).state in ("succeeded", "failed", "cancelled") for r in runs)


def child_of(client: Client, experiments: Path, parent: str, checkpoint: str = "latest", *extra: str) -> str:
    sets = [*CHILD, f"spec.parent={{run: {parent}, checkpoint: {checkpoint}}}", *extra]
    return str(client.submit(experiments / "posttrain-042.yaml", sets=sets)["run"]["id"])


def cli(client: Client, *args: str) -> tuple[int, str]:
    result = runner.invoke(app, [*args, "--home", str(client.workspace.root)])
    return result.exit_code, result.output


@pytest.mark.slow
def test_latest_is_resolved_at_launch_and_recorded_on_the_attempt_the_first_checkpoint_and_show(
    client: Client, experiments: Path
) -> None:
    pre = client.submit(experiments / "pretrain-small.yaml", sets=FIVE)["run"]["id"]  # keep_last: 3
    post = child_of(client, experiments, pre)
    assert client.show(post)["lineage"]["parent_checkpoint"] == "latest"  # still queued: nothing to name yet
    drive(client, ended(client, pre, post))
    store = client.service.store
    assert store.get_run(post).state == "succeeded"
    newest = store.checkpoints(pre)[-1]
    assert newest.step == 50
    assert store.attempts(post)[0].parent_checkpoint == newest.uri
    assert store.checkpoints(post)[0].parent_id == newest.id
    shown = client.show(post)
    assert shown["lineage"]["parent_checkpoint"] == newest.uri
    assert shown["lineage"]["parent_checkpoint_requested"] == "latest"
    assert newest.uri in cli(client, "show", post)[1]

    # Retention kept the newest three; the store says which steps are gone, and a child cannot name one.
    states = {c["step"]: c["state"] for c in client.show(pre)["checkpoints"]}
    assert states == {10: "deleted", 20: "deleted", 30: "committed", 40: "committed", 50: "committed"}
    table = cli(client, "show", pre)[1]
    assert table.count("deleted") >= 2
    with pytest.raises(SpecError) as refused:
        child_of(client, experiments, pre, "20")
    message = refused.value.render()
    assert "step 20 of run" in message
    assert "deleted by retention" in message
    assert "usable steps: 30, 40, 50" in message


def test_a_parent_that_ended_without_a_checkpoint_is_refused_at_submit(client: Client, experiments: Path) -> None:
    pre = client.submit(experiments / "pretrain-small.yaml", sets=FIVE)["run"]["id"]
    client.cancel(pre)
    with pytest.raises(SpecError, match=f"parent run {pre} ended cancelled without a usable checkpoint"):
        child_of(client, experiments, pre)
    assert [r.id for r in client.service.store.list_runs()] == [pre]  # the refusal wrote nothing


def test_a_waiting_child_whose_parent_fails_without_a_checkpoint_ends_failed_with_the_reason_everywhere(
    client: Client, experiments: Path
) -> None:
    crash = [
        "spec.command=[python, -c, 'raise SystemExit(3)']",
        "spec.args=[]",
        "spec.resources.chips=1",
        "spec.retries={max: 0}",
    ]
    pre = client.submit(experiments / "pretrain-small.yaml", sets=crash)["run"]["id"]
    post = child_of(client, experiments, pre)
    drive(client, ended(client, pre, post))
    store = client.service.store
    assert (store.get_run(pre).state, store.get_run(post).state) == ("failed", "failed")
    reason = f"parent run {pre} ended failed without a usable checkpoint"
    assert client.show(post)["run"]["reason"] == reason
    assert reason in cli(client, "show", post)[1]
    code, out = cli(client, "logs", post)
    assert code == 0
    assert f"{post} is failed and has no attempt: {reason}" in out
    assert [r["reason"] for r in client.status()["recently_failed"] if r["id"] == post] == [reason]
    assert reason in cli(client, "status")[1]


@pytest.mark.slow
def test_damage_in_the_newest_of_five_checkpoints_resumes_from_the_newest_good_one(
    client: Client, experiments: Path
) -> None:
    keep = "spec.checkpoint.keep_last=5"
    parents = {damage: client.submit(experiments / "pretrain-small.yaml", sets=[*FIVE, keep])["run"]["id"]
               for damage in DAMAGE}  # fmt: skip
    drive(client, ended(client, *parents.values()))
    store = client.service.store
    home = str(client.workspace.root)
    uri = {}
    for damage, parent in parents.items():
        ckpts = store.checkpoints(parent)
        assert [c.step for c in ckpts] == [10, 20, 30, 40, 50]
        uri[parent] = {c.step: c.uri for c in ckpts}
        DAMAGE[damage](Path(client.service.get(parent).run_checkpoint_dir.removeprefix("file://")), 50)
        result = runner.invoke(ckpt_app, ["verify", "--home", home, parent])
        assert result.exit_code == 1
        assert result.output.startswith(f"FAILED  step 50 {uri[parent][50]}")

    # An explicit step the cheap check refuses is refused at submit, with the usable steps.
    for damage in ("truncated-tensor", "deleted-manifest"):
        with pytest.raises(SpecError, match=r"step 50 of run .* is damaged .*\(usable steps: 10, 20, 30, 40\)"):
            child_of(client, experiments, parents[damage], "50")

    children = {parent: child_of(client, experiments, parent) for parent in parents.values()}
    # An evaluation of the flipped step, named explicitly: the cheap check passes it, the restore does not.
    # (by pretraining's own team: the fleet shares foundation's checkpoints with alignment, not with evals)
    evaluation = [BIGRAM, "spec.args=[--eval]", f"spec.parent={{run: {parents['flipped-byte']}, checkpoint: 50}}"]
    evaluation.append("metadata.team=foundation")
    evaluated = client.submit(experiments / "eval-smoke.yaml", sets=evaluation)["run"]["id"]
    drive(client, ended(client, *children.values(), evaluated))
    assert store.get_run(evaluated).state == "succeeded"
    reports = {e.data["name"]: e.data["data"] for e in store.events(run=evaluated, types=["reported"])}
    assert reports["checkpoint_skipped"]["uri"] == uri[parents["flipped-byte"]][50]
    assert (reports["evaluated"]["uri"], reports["evaluated"]["step"]) == (uri[parents["flipped-byte"]][40], 40)
    for parent, child in children.items():
        assert store.get_run(child).state == "succeeded"
        started = [
            e.data["data"] for e in store.events(run=child, types=["reported"]) if e.data["name"] == "initialised"
        ]
        assert [s["from"] for s in started] == [uri[parent][40]]
        assert store.attempts(child)[0].parent_checkpoint == uri[parent][40]
        assert store.checkpoints(child)[0].parent_id == store.checkpoints(parent)[3].id  # step 40

    # The flipped byte passed the cheap check; the runtime found it at restore, fell back and said so.
    flipped = children[parents["flipped-byte"]]
    skipped = [e.data["data"]["uri"] for e in store.events(run=flipped, types=["reported"])
               if e.data["name"] == "checkpoint_skipped"]  # fmt: skip
    assert skipped == [uri[parents["flipped-byte"]][50]]
    assert [c.state for c in store.checkpoints(parents["flipped-byte"])][-1] == "damaged"

    # A resume takes the newest checkpoint that verifies as well.
    for parent in parents.values():
        resumed = client.resubmit(parent, resume=True)["run"]["id"]
        assert store.get_run(resumed).parent_checkpoint == uri[parent][40]


def test_a_resume_with_no_checkpoint_that_verifies_is_refused(client: Client, experiments: Path) -> None:
    pre = client.submit(experiments / "pretrain-small.yaml", sets=FIVE)["run"]["id"]
    client.cancel(pre)
    with pytest.raises(ConflictError, match="no checkpoint that verifies to resume from"):
        client.resubmit(pre, resume=True)


def test_a_child_cancelled_as_its_parent_ends_with_nothing_usable_stays_cancelled(
    client: Client, experiments: Path
) -> None:
    pre = client.submit(experiments / "pretrain-small.yaml", sets=FIVE)["run"]["id"]
    post = child_of(client, experiments, pre)
    store = client.service.store
    seen_queued = store.get_run(post)  # what an agent pass read before the cancel landed
    client.cancel(pre)
    client.cancel(post)
    assert parents.resolve(store, seen_queued, client.clock.now()) is False  # as the agent's admission asks
    assert store.get_run(post).state == "cancelled"
    assert [e.type for e in store.events(run=post)][-1] == "cancelled"
