"""Every run gets a uid beside its readable id: shown, in its submitted event, accepted wherever a run is named."""

from __future__ import annotations

from pathlib import Path

import pytest

from crossrail.client import Client
from crossrail.core import is_uid
from crossrail.core.ids import uid_time


def test_a_submitted_run_has_a_uid_from_the_clock_in_show_and_its_submitted_event(
    client: Client, experiments: Path
) -> None:
    out = client.submit(experiments / "eval-smoke.yaml")
    uid = out["run"]["uid"]
    assert is_uid(uid)
    assert uid_time(uid) == round(client.service.clock.now(), 3)  # the injected clock, not the wall clock
    assert out["run"]["id"] == "eval-smoke-1"  # the readable id stays the handle
    shown = client.show("eval-smoke-1")
    assert shown["run"]["uid"] == uid
    assert shown["lineage"]["run_checkpoint_dir"].endswith(f"/eval-smoke-1-{uid}")
    submitted = client.events("eval-smoke-1")["events"][0]
    assert (submitted["type"], submitted["data"]["uid"]) == ("submitted", uid)
    assert [r["uid"] for r in client.status()["active"]] == [uid]


def test_every_command_that_names_a_run_takes_its_uid(client: Client, experiments: Path) -> None:
    uid = client.submit(experiments / "eval-smoke.yaml")["run"]["uid"]
    client.submit(experiments / "eval-smoke.yaml")  # eval-smoke-2: the experiment's name now means this one
    assert client.show(uid)["run"]["id"] == "eval-smoke-1"
    assert client.events(uid)["events"][0]["data"]["uid"] == uid
    assert client.cancel(uid)["run"]["state"] == "cancelled"
    again = client.resubmit(uid)["run"]
    assert (again["id"], again["state"]) == ("eval-smoke-3", "queued")
    assert is_uid(again["uid"])
    assert again["uid"] not in (uid, client.show("eval-smoke-2")["run"]["uid"])  # a new run, a new uid


def test_the_same_idempotency_key_returns_the_run_with_its_first_uid(client: Client, experiments: Path) -> None:
    first = client.submit(experiments / "eval-smoke.yaml", idempotency_key="k")["run"]["uid"]
    again = client.submit(experiments / "eval-smoke.yaml", idempotency_key="k")
    assert (again["created"], again["run"]["uid"]) == (False, first)


def test_the_uid_is_in_the_launch_environment_and_the_workload_labels_never_its_name(
    client: Client, experiments: Path
) -> None:
    from crossrail.control.attempts import launch_request, new_attempt
    from crossrail.executors.render.workload import from_launch

    run = client.service.get(client.submit(experiments / "eval-smoke.yaml")["run"]["id"])
    fleet = client.service.fleet
    pool = fleet.spec.pools[0]
    att = new_attempt(run, 1, pool, run.chips, report=None, now=client.service.clock.now())
    request = launch_request(run, att, parent_checkpoint=None, heartbeat_s=1.0)
    assert request.env["CROSSRAIL_RUN_UID"] == run.uid
    assert request.env["CROSSRAIL_CHECKPOINT_DIR"] == f"{run.checkpoint_dir}/{run.id}-{run.uid}"
    work = from_launch(request, allow_unpinned=True)
    labels = work.crossrail_labels()  # what every rendered object and pod is labelled with
    assert (labels["crossrail.dev/run-uid"], labels["crossrail.dev/run"]) == (run.uid, run.id)
    assert work.object_name == f"{run.id}-a1"  # object names stay short DNS labels, without the uid


def test_an_imported_checkpoint_argument_names_each_runs_own_directory(client: Client, experiments: Path) -> None:
    from crossrail.control.attempts import launch_request, new_attempt

    sets = ["spec.args=[--checkpoint-dir, $(CROSSRAIL_CHECKPOINT_DIR), --keep, $(HOME)]"]
    runs = [client.service.get(client.submit(experiments / "eval-smoke.yaml", sets=sets)["run"]["id"]) for _ in "ab"]
    pool = client.service.fleet.spec.pools[0]
    commands = [
        launch_request(r, new_attempt(r, 1, pool, 1, report=None, now=0.0), parent_checkpoint=None, heartbeat_s=1.0)
        for r in runs
    ]
    dirs = [c.command[-3] for c in commands]
    assert dirs == [c.env["CROSSRAIL_CHECKPOINT_DIR"] for c in commands]
    assert dirs[0] != dirs[1]  # never one directory every run of it writes
    assert commands[0].command[-1] == "$(HOME)"  # only crossrail's own variables are expanded


def test_a_legacy_run_without_a_uid_still_shows_and_keeps_its_old_checkpoint_directory(
    client: Client, experiments: Path
) -> None:
    from sqlalchemy import update

    from crossrail.control.attempts import launch_request, new_attempt
    from crossrail.store import schema

    rid = client.submit(experiments / "eval-smoke.yaml")["run"]["id"]
    with client.service.store._write() as conn:  # what migration 0005 leaves on a run created before it
        conn.execute(update(schema.runs).values(uid=None))
    shown = client.show(rid)
    assert shown["run"]["uid"] is None
    assert shown["lineage"]["run_checkpoint_dir"].endswith(f"/checkpoints/eval-smoke/{rid}")
    assert [e["type"] for e in client.events(rid)["events"]][:2] == ["submitted", "queued"]
    run = client.service.get(rid)
    att = new_attempt(run, 1, client.service.fleet.spec.pools[0], 1, report=None, now=client.service.clock.now())
    env = launch_request(run, att, parent_checkpoint=None, heartbeat_s=1.0).env
    assert env["CROSSRAIL_RUN_UID"] == ""  # the runtime checks nothing for it, as before uids
    assert env["CROSSRAIL_CHECKPOINT_DIR"] == f"{run.checkpoint_dir}/{rid}"


@pytest.mark.slow
def test_crossrail_show_takes_a_uid_and_prints_it_beside_the_run_id(client: Client, experiments: Path) -> None:
    from typer.testing import CliRunner

    from crossrail.cli import app

    uid = client.submit(experiments / "eval-smoke.yaml")["run"]["uid"]
    result = CliRunner().invoke(app, ["show", uid, "--home", str(client.workspace.root)])
    assert result.exit_code == 0, result.output
    assert f"eval-smoke-1  uid {uid}  queued" in result.output
