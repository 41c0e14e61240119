"""Ingest over HTTP: the same events and metrics as the file channel, each record stored once, under the secret."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.conftest import serving

from crossrail.client import Client
from crossrail.control.agent import channel
from crossrail.control.agent.secrets import attempt_secret
from crossrail.control.attempts import new_attempt
from crossrail.core import Event, EventType, ManualClock
from crossrail.runtime.report import Reporter, post_batch

CLOCK = ManualClock()


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("ingest")
    Client.init(root)
    return root / ".crossrail"


@pytest.fixture(scope="module")
def url(home: Path) -> Iterator[str]:
    """A server on a socket: the runtime's HTTP report channel posts to a URL."""
    from crossrail.api import create_app

    with serving(create_app(home, clock=CLOCK)) as url:
        yield url


def _attempt(c: Client, name: str, report: str | None) -> str:
    """A queued run of the workspace's small pretraining experiment, admitted as attempt 1 reporting to `report`."""
    exp = c.workspace.root / "experiments" / "pretrain-small.yaml"
    run_id = str(c.submit(exp, sets=[f"metadata.name={name}"])["run"]["id"])
    run = c.service.store.get_run(run_id)
    pool = c.service.fleet.pools[0]
    report = report or str(c.workspace.root / "reports" / run_id / "1.jsonl")
    att = new_attempt(run, 1, pool, run.chips, report=report.format(run=run_id), now=CLOCK.now())
    assert c.service.store.admit(att, [Event(EventType.ADMITTED, CLOCK.now(), run_id, 1, {"pool": pool.name})])
    return run_id


def _write(reporter: Reporter, checkpoint_dir: str) -> None:
    for step in range(1, 6):
        reporter.metrics({"loss": 4.0 / step, "tokens_per_second": 1000.0 + step}, step=step)
        reporter.heartbeat(step)
    reporter.metric("grad_norm", 0.5, step=6)
    reporter.checkpoint(5, f"{checkpoint_dir}/step-00000005", tokens=5120)
    reporter.event("phase", stage="eval")


def _stored(c: Client, run_id: str) -> dict[str, Any]:
    """What the store holds of the attempt's reports, with the run's id taken out so two runs compare.

    Events come in a canonical order: within one ingest a checkpoint's event follows the batch's others, and
    the two channels cut batches at different records (the agent's poll, the sink's flush)."""
    events = [e.as_dict() for e in c.service.store.events(run=run_id) if e.type not in ("submitted", "queued")]
    samples = c.service.store.metric_samples(run_id)
    body = {
        "events": sorted(({k: v for k, v in e.items() if k != "seq"} for e in events), key=json.dumps),
        "samples": [{k: v for k, v in s.items() if k != "id"} for s in samples],
        "checkpoints": [(k.step, k.uri) for k in c.service.store.checkpoints(run_id)],
    }
    uid = c.service.store.get_run(run_id).uid or "no uid"
    return dict(json.loads(json.dumps(body, default=str).replace(uid, "UID").replace(run_id, "RUN")))


def test_http_reports_store_what_the_file_channel_stores(home: Path, url: str) -> None:
    at = CLOCK.now()

    def clock() -> float:  # one time for every record, so both channels' records carry the same
        return at

    with Client(home, clock=CLOCK) as c:
        by_file = _attempt(c, "by-file", None)
        by_http = _attempt(c, "by-http", url + "/v1/ingest/{run}/1")
        att = next(a for a in c.service.store.attempts(by_file))
        with Reporter(att.report_uri or "", run=by_file, attempt=1, clock=clock) as reporter:
            _write(reporter, c.service.store.get_run(by_file).run_checkpoint_dir)
        channel.ingest(c.service.store, att, CLOCK.now())

        secret = attempt_secret(home, by_http, 1)
        target = f"{url}/v1/ingest/{by_http}/1"
        with Reporter(target, run=by_http, attempt=1, clock=clock, secret=secret, flush_records=4) as reporter:
            _write(reporter, c.service.store.get_run(by_http).run_checkpoint_dir)
        http_att = next(a for a in c.service.store.attempts(by_http))
        assert channel.ingest(c.service.store, http_att, CLOCK.now()) == http_att  # the agent leaves it alone

        file_side, http_side = _stored(c, by_file), _stored(c, by_http)
        assert len(file_side["samples"]) == 11
        assert len(file_side["checkpoints"]) == 1
        assert file_side == http_side


def test_replayed_and_reordered_batches_are_stored_once(home: Path, url: str) -> None:
    with Client(home, clock=CLOCK) as c:
        run_id = _attempt(c, "replayed", url + "/v1/ingest/{run}/1")
        target, secret = f"{url}/v1/ingest/{run_id}/1", attempt_secret(home, run_id, 1)

        def record(seq: int) -> dict[str, Any]:
            return {"v": 1, "ts": 100.0 + seq, "run": run_id, "attempt": 1, "type": "metric", "name": "loss",
                    "value": 1.0 / seq, "step": seq, "seq": seq}  # fmt: skip

        first, second, third = [record(s) for s in (1, 2, 3)], [record(s) for s in (4, 5)], [record(6)]
        one, two = int(CLOCK.now() * 1000), int(CLOCK.now() * 1000) + 1  # writers' start times in ms
        assert post_batch(target, secret, one, third)["stored"] == 1  # ahead of the others
        assert post_batch(target, secret, one, second)["stored"] == 2
        assert post_batch(target, secret, one, second)["duplicates"] == 2
        assert post_batch(target, secret, one, first)["stored"] == 3
        assert post_batch(target, secret, one, [*first, *third])["duplicates"] == 4
        steps = [s["step"] for s in c.service.store.metric_samples(run_id)]
        assert sorted(steps) == [1, 2, 3, 4, 5, 6]

        # A restarted writer numbers from 1 again under a higher incarnation; the replaced one is fenced off.
        restarted = [{**record(1), "step": 7, "ts": 200.0}]
        assert post_batch(target, secret, two, restarted)["stored"] == 1
        assert post_batch(target, secret, one, [record(7)])["stale"] is True
        assert sorted(s["step"] for s in c.service.store.metric_samples(run_id)) == [1, 2, 3, 4, 5, 6, 7]


def test_ingest_refuses_without_the_attempts_secret_and_changes_nothing(home: Path, url: str) -> None:
    with Client(home, clock=CLOCK) as c:
        run_id = _attempt(c, "guarded", url + "/v1/ingest/{run}/1")
        other = _attempt(c, "other", url + "/v1/ingest/{run}/1")
        rec = {"v": 1, "ts": 1.0, "run": run_id, "attempt": 1, "type": "heartbeat", "step": 1, "seq": 1}
        before = len(c.service.store.events())
        for headers in (
            {},
            {"Authorization": "Bearer wrong"},
            {"Authorization": f"Bearer {attempt_secret(home, other, 1)}"},
        ):
            answer = httpx.post(
                f"{url}/v1/ingest/{run_id}/1", json={"incarnation": 1, "records": [rec]}, headers=headers
            )
            assert answer.status_code == 401
            assert answer.json()["error"] == "UnauthenticatedError"  # the one 401 error, as the client raises it
            assert "CROSSRAIL_REPORT_SECRET" in answer.json()["message"]
        good = {"Authorization": f"Bearer {attempt_secret(home, run_id, 1)}"}
        bad = httpx.post(
            f"{url}/v1/ingest/{run_id}/1",
            json={"incarnation": 1, "records": [{**rec, "seq": 0}, {**rec, "run": other}]},
            headers=good,
        )
        assert bad.status_code == 422
        assert [p["path"] for p in bad.json()["problems"]] == ["records[0].seq", "records[1]"]
        assert len(c.service.store.events()) == before
        assert c.service.store.attempts(run_id)[0].report_cursor is None


def test_an_agent_with_a_report_url_sends_kubernetes_attempts_there_with_their_secret(home: Path, url: str) -> None:
    from crossrail.control.attempts import launch_request, report_uri

    with Client(home, clock=CLOCK) as c:
        run_id = _attempt(c, "routed", None)
        run, att = c.service.store.get_run(run_id), c.service.store.attempts(run_id)[0]
        reports_dir = c.workspace.root / "reports"
        assert report_uri(run, 2, "kubernetes", reports_dir, server=url + "/") == f"{url}/v1/ingest/{run_id}/2"
        assert report_uri(run, 2, "local", reports_dir, server=url) == str(reports_dir / run_id / "2.jsonl")
        secret = attempt_secret(c.workspace.root, run_id, 1)
        launched = launch_request(run, att, parent_checkpoint=None, heartbeat_s=10, report_secret=secret)
        assert launched.env["CROSSRAIL_REPORT_SECRET"] == secret
        assert "CROSSRAIL_REPORT_SECRET" not in launch_request(run, att, parent_checkpoint=None, heartbeat_s=10).env


def test_a_nan_metric_is_an_event_and_infinities_are_samples_on_both_channels(home: Path, url: str) -> None:
    with Client(home, clock=CLOCK) as c:
        by_file, by_http = _attempt(c, "nan-file", None), _attempt(c, "nan-http", url + "/v1/ingest/{run}/1")
        att = c.service.store.attempts(by_file)[0]
        with Reporter(att.report_uri or "", run=by_file, attempt=1) as reporter:
            reporter.metrics({"loss": float("nan"), "grad_norm": float("inf")}, step=3)
        channel.ingest(c.service.store, att, CLOCK.now())  # stored once, not refused by the database
        secret = attempt_secret(home, by_http, 1)
        with Reporter(
            f"{url}/v1/ingest/{by_http}/1", run=by_http, attempt=1, secret=secret, clock=CLOCK.now
        ) as reporter:
            reporter.metrics({"loss": float("nan"), "grad_norm": float("inf")}, step=3)
        for run_id in (by_file, by_http):
            samples = c.service.store.metric_samples(run_id)
            assert [(s["name"], s["value"]) for s in samples] == [("grad_norm", float("inf"))]
            (nan,) = [e for e in c.service.store.events(run=run_id) if e.type == "reported"]
            assert nan.data == {"name": "nan_metric", "data": {"metric": "loss", "step": 3, "value": "nan"}}


@pytest.mark.slow
def test_a_writer_posts_what_it_buffered_in_batches_within_the_servers_bounds(home: Path, url: str) -> None:
    with Client(home, clock=CLOCK) as c:
        run_id = _attempt(c, "split", url + "/v1/ingest/{run}/1")
        secret = attempt_secret(home, run_id, 1)
        target = f"{url}/v1/ingest/{run_id}/1"
        big = 10**6  # nothing flushes by count or time: only the bounds (1,000 records, 4 MiB) cut batches
        with Reporter(
            target, run=run_id, attempt=1, secret=secret, clock=CLOCK.now, flush_records=big, flush_s=big
        ) as r:
            for step in range(1, 2502):
                r.metric("loss", 1.0, step=step)
            for i in range(80):  # 80 records of 60 kB: 4.8 MB
                r.event("blob", i=i, data="y" * 60_000)
        assert len(c.service.store.metric_samples(run_id)) == 2501
        assert len([e for e in c.service.store.events(run=run_id) if e.type == "reported"]) == 80
