"""Submit and run state changes through the client: lineage, idempotency, overrides, nothing partial."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event
from tests.unit.runtime.ckpt_builders import saved

from crossrail.client import Client
from crossrail.core import Event, EventType, ManualClock
from crossrail.core.access import Sight
from crossrail.errors import ConflictError, NotFoundError, PlacementError, ProblemCode, SpecError

IMAGE_DIGEST = "sha256:3f1c5e0a9b7d2c4e6f8a1b3c5d7e9f0a2b4c6d8e0f1a3b5c7d9e1f2a4b6c8d0e"


def nothing_written(client: Client) -> bool:
    return client.service.store.list_runs() == [] and client.service.store.last_seq() == 0


def test_submit_records_the_full_lineage(client: Client, experiments: Path, checkout: Path) -> None:
    head = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=checkout, capture_output=True, text=True, check=True
    ).stdout.strip()
    out = client.submit(experiments / "pretrain-small.yaml")
    assert out["apiVersion"] == "crossrail/v1"
    assert out["created"] is True
    assert out["run"]["id"] == "pretrain-small-1"
    assert out["run"]["state"] == "queued"
    lin = client.show("pretrain-small")["lineage"]
    assert lin["code_commit"] == head
    assert lin["dataset_version"].startswith("sha256:")
    assert len(lin["dataset_version"]) == 71
    assert lin["config_digest"].startswith("sha256:")
    assert lin["image_digest"] == IMAGE_DIGEST
    uid = client.show("pretrain-small")["run"]["uid"]
    assert lin["run_checkpoint_dir"].endswith(f"/checkpoints/pretrain-small/pretrain-small-1-{uid}")
    recorded = client.show("pretrain-small-1")["spec"]["spec"]
    assert recorded["code"]["commit"] == head  # "auto" is resolved in the recorded spec
    assert recorded["dataset"]["version"] == lin["dataset_version"]


def test_an_explicit_dataset_version_is_kept(client: Client, experiments: Path) -> None:
    client.submit(experiments / "eval-smoke.yaml")
    assert client.show("eval-smoke")["lineage"]["dataset_version"] == "heldout-v1"


def test_the_same_file_twice_with_an_idempotency_key_creates_one_run(client: Client, experiments: Path) -> None:
    a = client.submit(experiments / "eval-smoke.yaml", idempotency_key="k1")
    b = client.submit(experiments / "eval-smoke.yaml", idempotency_key="k1")
    c = client.submit(experiments / "eval-smoke.yaml")
    assert (a["created"], b["created"], c["created"]) == (True, False, True)
    assert a["run"]["id"] == b["run"]["id"] == "eval-smoke-1"
    assert c["run"]["id"] == "eval-smoke-2"
    assert [e["type"] for e in client.events("eval-smoke-1")["events"]] == ["submitted", "queued"]


@pytest.mark.slow
def test_an_idempotency_key_reused_with_a_changed_spec_is_refused(client: Client, experiments: Path) -> None:
    client.submit(experiments / "eval-smoke.yaml", idempotency_key="k1")
    with pytest.raises(ConflictError, match="different spec"):
        client.submit(experiments / "eval-smoke.yaml", sets=["spec.resources.chips=2"], idempotency_key="k1")
    assert len(client.service.store.list_runs()) == 1


@pytest.mark.slow
def test_set_overrides_land_in_the_recorded_spec(client: Client, experiments: Path) -> None:
    out = client.submit(experiments / "eval-smoke.yaml", sets=["spec.resources.chips=2", "spec.env.SEED=7"])
    assert out["run"]["chips"] == 2
    spec = client.show(out["run"]["id"])["spec"]["spec"]
    assert spec["resources"]["chips"] == 2
    assert spec["env"]["SEED"] == "7"


@pytest.mark.parametrize(
    ("sets", "match"),
    [
        pytest.param(["spec.resources.chips=0"], "chips", id="an-override-that-breaks-the-schema"),
        pytest.param(["spec.image=trainer:latest"], "digest", id="an-override-that-breaks-the-lint"),
        pytest.param(["no-equals-sign"], "no-equals-sign", id="a-malformed-override"),
    ],
)
@pytest.mark.slow
def test_bad_overrides_are_refused_and_write_nothing(
    client: Client, experiments: Path, sets: list[str], match: str
) -> None:
    with pytest.raises(SpecError, match=match):
        client.submit(experiments / "eval-smoke.yaml", sets=sets)
    assert nothing_written(client)


def test_a_request_no_pool_could_ever_hold_is_rejected_with_each_pools_reason(
    client: Client, experiments: Path
) -> None:
    with pytest.raises(PlacementError) as err:
        client.submit(experiments / "eval-smoke.yaml", sets=["spec.resources.chips=64"])
    assert "tpu-v5p: needs 64 chips; the pool has 8" in str(err.value)
    assert "h100: needs 64 chips; the pool has 8" in str(err.value)
    assert nothing_written(client)


def test_more_workers_than_the_local_host_has_cores_is_refused_unless_oversubscribed(
    client: Client, experiments: Path
) -> None:
    client.service.host_cores = 2
    four = ["spec.resources.chips=4", "spec.parallelism={data: 4}"]
    with pytest.raises(SpecError) as err:
        client.submit(experiments / "eval-smoke.yaml", sets=four)
    [problem] = err.value.problems
    assert (problem.path, problem.message) == (
        "spec.parallelism.data",
        "asks for 4 worker processes but this host has 2 cores",
    )
    assert problem.fix == "lower parallelism.data to at most 2, or set parallelism.oversubscribe: true"
    assert nothing_written(client)

    out = client.submit(
        experiments / "eval-smoke.yaml", sets=[four[0], "spec.parallelism={data: 4, oversubscribe: true}"]
    )
    assert client.show(out["run"]["id"])["spec"]["spec"]["parallelism"] == {"data": 4, "oversubscribe": True}


def test_a_tpu_only_request_of_a_shape_no_slice_has_is_rejected(client: Client, experiments: Path) -> None:
    with pytest.raises(PlacementError, match="no allowed slice shape has 3 chips"):
        client.submit(
            experiments / "eval-smoke.yaml",
            sets=["spec.resources.chips=3", "spec.accelerators={allow: [tpu]}"],
        )
    assert nothing_written(client)


def test_a_missing_dataset_is_refused_naming_the_uri(client: Client, experiments: Path, checkout: Path) -> None:
    (checkout / ".crossrail" / "data" / "corpus.txt").unlink()
    with pytest.raises(SpecError, match=r"corpus.txt does not exist") as refused:
        client.submit(experiments / "pretrain-small.yaml")
    assert [p.code for p in refused.value.problems] == [ProblemCode.NOT_FOUND]
    assert nothing_written(client)


def test_commit_auto_outside_a_git_checkout_records_no_commit_with_a_warning(
    tmp_path: Path, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path.parent))
    Client.init(tmp_path)
    with Client(cwd=tmp_path, clock=clock) as c:
        out = c.submit(tmp_path / ".crossrail" / "experiments" / "pretrain-small.yaml")
        assert out["created"] is True
        assert [w for w in out["warnings"] if "not a git checkout: the run records no commit" in w]
        assert c.show("pretrain-small")["lineage"]["code_commit"] is None
        assert c.show("pretrain-small")["spec"]["spec"]["code"]["commit"] is None


def test_commit_auto_outside_a_git_checkout_is_refused_when_the_policy_requires_a_commit(
    tmp_path: Path, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path.parent))
    Client.init(tmp_path)
    policy = tmp_path / ".crossrail" / "policy.yaml"
    policy.write_text(policy.read_text() + "  code_commit: required\n")
    with Client(cwd=tmp_path, clock=clock) as c:
        with pytest.raises(SpecError, match=r"spec.code.commit \(line 15\): is 'auto' but .* not a git checkout"):
            c.submit(tmp_path / ".crossrail" / "experiments" / "pretrain-small.yaml")
        assert nothing_written(c)


def test_commit_auto_in_a_checkout_without_a_commit_says_so(
    tmp_path: Path, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path.parent))
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    Client.init(tmp_path)
    with Client(cwd=tmp_path, clock=clock) as c:
        out = c.submit(tmp_path / ".crossrail" / "experiments" / "pretrain-small.yaml")
    assert [w for w in out["warnings"] if "is a git checkout with no commit yet" in w]


def test_a_dirty_checkout_is_submitted_with_a_warning(client: Client, experiments: Path, checkout: Path) -> None:
    (checkout / "train.py").write_text("print('changed')\n")
    out = client.submit(experiments / "eval-smoke.yaml")
    assert any("uncommitted changes" in w for w in out["warnings"])


def test_a_parent_must_exist_and_is_resolved_to_a_run_id(client: Client, experiments: Path) -> None:
    with pytest.raises(SpecError, match="no run or experiment named 'pretrain-small'"):
        client.submit(experiments / "posttrain-042.yaml")
    assert nothing_written(client)
    client.submit(experiments / "pretrain-small.yaml")
    client.submit(experiments / "posttrain-042.yaml")
    lin = client.show("posttrain-042")["lineage"]
    assert (lin["parent_run"], lin["parent_checkpoint"]) == ("pretrain-small-1", "latest")


def test_a_batch_with_one_bad_document_creates_nothing(client: Client, experiments: Path, tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text((experiments / "eval-smoke.yaml").read_text().replace("chips: 1", "chips: -1"))
    with pytest.raises(SpecError):
        client.submit_many([experiments / "eval-smoke.yaml", bad])
    assert nothing_written(client)


def test_cancel_suspend_resume_follow_the_run_state_machine(client: Client, experiments: Path) -> None:
    client.submit(experiments / "eval-smoke.yaml")
    assert client.suspend("eval-smoke")["run"]["state"] == "suspended"
    assert client.resume("eval-smoke")["run"]["state"] == "queued"
    assert client.cancel("eval-smoke")["run"]["state"] == "cancelled"
    seq = client.service.store.last_seq()
    for action in (client.cancel, client.suspend, client.resume):
        with pytest.raises(ConflictError, match="eval-smoke-1 is cancelled"):
            action("eval-smoke")
    assert client.service.store.last_seq() == seq  # refused changes add no event
    types = [e["type"] for e in client.events("eval-smoke")["events"]]
    assert types == ["submitted", "queued", "suspended", "resumed", "queued", "cancelled"]


def test_an_unknown_run_is_not_found(client: Client) -> None:
    with pytest.raises(NotFoundError, match="no run or experiment named 'ghost'"):
        client.show("ghost")


def test_a_misspelt_run_gets_a_did_you_mean_only_of_runs_the_caller_sees(client: Client, experiments: Path) -> None:
    client.submit(experiments / "pretrain-small.yaml")  # team foundation
    service = client.service
    with pytest.raises(
        NotFoundError, match="no run or experiment named 'pretrain-smal'; did you mean 'pretrain-small'"
    ):
        client.show("pretrain-smal")
    with pytest.raises(NotFoundError, match="did you mean 'pretrain-small'"):
        service.get("pretrain-smal", Sight(frozenset({"foundation"})))
    # to another team the run does not exist: the same words as a name nothing is close to
    with pytest.raises(NotFoundError) as hidden:
        service.get("pretrain-smal", Sight(frozenset({"evals"})))
    with pytest.raises(NotFoundError) as nothing:
        service.get("zzzz", Sight(frozenset({"evals"})))
    assert "pretrain" not in str(hidden.value).replace("'pretrain-smal'", "")
    assert str(hidden.value).replace("pretrain-smal", "zzzz") == str(nothing.value)


def test_a_fleet_in_euros_prices_every_placement_candidate_in_euros(
    client: Client, experiments: Path, checkout: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from crossrail.cli.place import render_placement

    fleet_yaml = checkout / ".crossrail" / "fleet.yaml"
    fleet_yaml.write_text(fleet_yaml.read_text().replace("\nspec:\n", "\nspec:\n  currency: EUR\n", 1))
    placed = client.place(experiments / "pretrain-small.yaml")
    assert placed["currency"] == "EUR"
    render_placement(placed, explain=True)
    table = capsys.readouterr().out
    assert "€" in table
    assert "$" not in table  # the reason's terms too ("… result in 20m …, €5.60")
    assert "€" in placed["reason"]


def test_resubmit_resume_starts_from_the_latest_committed_checkpoint(
    client: Client, experiments: Path, tmp_path: Path
) -> None:
    client.submit(experiments / "pretrain-small.yaml", sets=["spec.resources.chips=2"])
    with pytest.raises(ConflictError, match="no checkpoint that verifies"):
        client.resubmit("pretrain-small", resume=True)
    store = client.service.store
    uri = saved(tmp_path / "ck", 50).list()[-1].uri
    store.add_checkpoint(
        run="pretrain-small-1", attempt=1, step=50, uri=uri, fmt="crossrail-ckpt/v1", parent_id=None, ts=1.0
    )
    out = client.resubmit("pretrain-small", resume=True)
    assert out["run"]["id"] == "pretrain-small-2"
    assert out["run"]["chips"] == 2
    lin = out["lineage"]
    assert (lin["resumed_from"], lin["parent_run"], lin["parent_checkpoint"]) == (
        "pretrain-small-1",
        "pretrain-small-1",
        uri,
    )
    assert client.show("pretrain-small-2")["spec"] == client.show("pretrain-small-1")["spec"]


def test_queue_orders_by_priority_then_wait(client: Client, experiments: Path, clock: ManualClock) -> None:
    client.submit(experiments / "eval-smoke.yaml")  # low
    clock.advance(10)
    client.submit(experiments / "eval-smoke.yaml", sets=["spec.priority=critical"])
    clock.advance(10)
    client.submit(experiments / "eval-smoke.yaml", sets=["spec.priority=low"])
    eval_q = next(q for q in client.queue()["queues"] if q["name"] == "eval")
    assert [p["id"] for p in eval_q["pending"]] == ["eval-smoke-2", "eval-smoke-1", "eval-smoke-3"]
    assert [p["waiting_s"] for p in eval_q["pending"]] == [10.0, 20.0, 0.0]


@pytest.mark.parametrize("limit", [0, 2])
def test_a_run_leaving_the_queue_between_its_two_reads_is_left_out_of_the_view(
    client: Client, experiments: Path, clock: ManualClock, monkeypatch: pytest.MonkeyPatch, limit: int
) -> None:
    for _ in range(3):
        client.submit(experiments / "eval-smoke.yaml")
        clock.advance(1)
    store = client.service.store
    first_read = store.queued_keys

    def then_one_leaves() -> list[Any]:  # the first read, then a state change before the second read
        keys = first_read()
        client.cancel("eval-smoke-1")
        return keys

    monkeypatch.setattr(store, "queued_keys", then_one_leaves)
    eval_q = next(q for q in client.queue(limit=limit)["queues"] if q["name"] == "eval")
    assert [(p["id"], p["position"]) for p in eval_q["pending"]] == [("eval-smoke-2", 1), ("eval-smoke-3", 2)][
        : limit - 1 if limit else None
    ]
    assert eval_q["pending_total"] == 2


def test_queue_reads_each_parent_once_however_many_children_wait_for_it(client: Client, experiments: Path) -> None:
    statements: list[str] = []  # what queue() asks the store's database
    event.listen(client.service.store._engine, "before_cursor_execute", lambda *a: statements.append(a[2]))

    def queue_reads(children: int) -> tuple[dict[str, Any], int]:
        for _ in range(children):
            client.submit(experiments / "posttrain-042.yaml")
        statements.clear()
        pending = {p["id"]: p for q in client.queue()["queues"] for p in q["pending"]}
        return pending, len(statements)

    client.submit(experiments / "pretrain-small.yaml")
    client.submit(experiments / "posttrain-042.yaml")
    grandchild = ["spec.parent.run=posttrain-042", "spec.parent.checkpoint=latest"]
    client.submit(experiments / "eval-smoke.yaml", sets=grandchild)
    _, one = queue_reads(0)
    pending, many = queue_reads(20)

    assert many == one  # not one more read per child
    parent = pending["pretrain-small-1"]
    assert pending["posttrain-042-7"]["waiting_for_parent"] == {
        "run": "pretrain-small-1",
        "state": "queued",
        "estimated_start_in_s": parent["estimated_start_in_s"],
        "waiting_for_parent": None,
    }
    assert pending["eval-smoke-1"]["waiting_for_parent"] == {  # its parent waits for its own parent
        "run": "posttrain-042-1",
        "state": "queued",
        "estimated_start_in_s": None,
        "waiting_for_parent": "pretrain-small-1",
    }


def test_status_counts_runs_by_stage_and_state(client: Client, experiments: Path) -> None:
    client.submit(experiments / "pretrain-small.yaml")
    client.submit(experiments / "eval-smoke.yaml")
    client.cancel("eval-smoke")
    st = client.status()
    rows = {r["stage"]: r for r in st["stages"]}
    assert (rows["pretraining"]["queued"], rows["eval"]["cancelled"]) == (1, 1)
    assert [r["id"] for r in st["active"]] == ["pretrain-small-1"]


def test_report_is_computed_from_the_event_log(client: Client, experiments: Path, clock: ManualClock) -> None:
    client.submit(experiments / "eval-smoke.yaml")
    clock.advance(60)
    store = client.service.store
    start = {"pool": "h100", "accelerator": "gpu", "chip_type": "h100", "chips": 1, "cost_per_chip_hour": 3.0}
    store.append_events(
        [
            Event(EventType.STARTED, clock.now(), "eval-smoke-1", 1, start),
            Event(EventType.SUCCEEDED, clock.now() + 3600, "eval-smoke-1", 1, {"pool": "h100"}),
        ]
    )
    rep = client.report()
    group = next(g for g in rep["groups"] if g["pool"] == "h100")
    assert group["stage"] == "eval"
    assert group["succeeded"] == 1
    assert group["queue_time"]["p50"] == 60.0
    assert group["cost_per_effective_run"] == pytest.approx(3.0)
