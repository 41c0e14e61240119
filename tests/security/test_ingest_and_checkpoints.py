"""Ingest and checkpoints: a forged incarnation cannot fence the real writer off, records and batches are
bounded on both channels, an attempt registers only checkpoints under its run's own directory, and a killed
save's temp directory goes at the next save."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fastapi import FastAPI
from tests.security.ingesting import admitted, call

from crossrail.api import create_app
from crossrail.client import Client
from crossrail.control.agent import channel
from crossrail.control.agent.secrets import attempt_secret
from crossrail.core import ManualClock
from crossrail.errors import CrossrailError
from crossrail.runtime import Checkpointer, Reporter
from crossrail.runtime.report import MAX_BATCH_RECORDS, MAX_RECORD_BYTES
from crossrail.runtime.stores import LocalDraft, LocalStore

CLOCK = ManualClock()
CRASH_WRITER = Path(__file__).parents[1] / "unit" / "runtime" / "crash_writer.py"


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("ingest-bounds")
    Client.init(root)
    return root / ".crossrail"


@pytest.fixture(scope="module")
def app(home: Path) -> Iterator[FastAPI]:
    app = create_app(home, clock=CLOCK)
    yield app
    app.state.client.close()


def record(run: str, seq: int, **fields: Any) -> dict[str, Any]:
    base = {"v": 1, "ts": CLOCK.now(), "run": run, "attempt": 1, "type": "metric", "name": "loss", "value": 1.0}
    return base | {"step": seq, "seq": seq} | fields


def stored(home: Path, run: str) -> tuple[list[int], list[str], list[dict[str, Any]]]:
    """Metric steps, checkpoint URIs and the `invalid` reports the store holds for `run`."""
    with Client(home, clock=CLOCK) as c:
        store = c.service.store
        steps = sorted(int(s["step"]) for s in store.metric_samples(run))
        ckpts = [k.uri for k in store.checkpoints(run)]
        invalid = [e.data["data"] for e in store.events(run=run) if e.type == "reported"]
        return steps, ckpts, invalid


def own_dir(home: Path, run: str) -> str:
    with Client(home, clock=CLOCK) as c:
        return str(c.service.store.get_run(run).run_checkpoint_dir)


def test_an_incarnation_of_ten_to_the_forty_is_refused_and_the_real_writer_goes_on(app: FastAPI, home: Path) -> None:
    run = admitted(home, "forged", "http://testserver/v1/ingest/{run}/1", CLOCK)
    auth = {"Authorization": f"Bearer {attempt_secret(home, run, 1)}"}
    url = f"/v1/ingest/{run}/1"
    for forged in (10**40, 2**62, int((CLOCK.now() + 3600) * 1000), 1):  # far future, an hour ahead, 1970
        answer = call(app, "POST", url, headers=auth, json={"incarnation": forged, "records": [record(run, 1)]})
        assert answer.status_code == 422, answer.text
        assert answer.json()["problems"][0]["path"] == "incarnation"
    real = call(
        app, "POST", url, headers=auth, json={"incarnation": int(CLOCK.now() * 1000), "records": [record(run, 2)]}
    )
    assert real.status_code == 200, real.text
    assert real.json()["stale"] is False
    assert stored(home, run)[0] == [2]


def test_a_record_over_64_kib_or_a_batch_over_the_bounds_is_refused_whole(app: FastAPI, home: Path) -> None:
    run = admitted(home, "oversized", "http://testserver/v1/ingest/{run}/1", CLOCK)
    auth = {"Authorization": f"Bearer {attempt_secret(home, run, 1)}"}
    url, incarnation = f"/v1/ingest/{run}/1", int(CLOCK.now() * 1000)
    big = record(run, 2, type="event", name="dump", data={"blob": "x" * (MAX_RECORD_BYTES + 1)})
    del big["value"], big["step"]
    answer = call(app, "POST", url, headers=auth, json={"incarnation": incarnation, "records": [record(run, 1), big]})
    assert answer.status_code == 422, answer.text
    assert [p["path"] for p in answer.json()["problems"]] == ["records[1]"]
    many = [record(run, s) for s in range(1, MAX_BATCH_RECORDS + 2)]
    answer = call(app, "POST", url, headers=auth, json={"incarnation": incarnation, "records": many})
    assert answer.status_code == 422, answer.text
    # 70 records of 60 KiB each: every one within bounds, the batch (4.1 MiB) not.
    heavy = [record(run, s, type="event", name="n", data={"b": "y" * 60_000}) for s in range(1, 71)]
    answer = call(app, "POST", url, headers=auth, json={"incarnation": incarnation, "records": heavy})
    assert answer.status_code == 422, answer.text
    assert stored(home, run) == ([], [], [])


def test_the_runtime_refuses_an_oversized_record_where_it_is_written(tmp_path: Path) -> None:
    with Reporter(str(tmp_path / "r.jsonl"), run="r-1", attempt=1) as reporter:
        with pytest.raises(CrossrailError, match="larger than"):
            reporter.event("dump", blob="x" * MAX_RECORD_BYTES)
        reporter.event("small", blob="x" * 1000)
    assert len((tmp_path / "r.jsonl").read_text().splitlines()) == 1


def test_an_attempt_cannot_register_another_runs_or_a_javascript_checkpoint(app: FastAPI, home: Path) -> None:
    victim = admitted(home, "victim", str(home / "reports" / "{run}" / "1.jsonl"), CLOCK)
    run = admitted(home, "thief", "http://testserver/v1/ingest/{run}/1", CLOCK)
    auth = {"Authorization": f"Bearer {attempt_secret(home, run, 1)}"}
    mine, theirs = own_dir(home, run), own_dir(home, victim)
    foreign = [
        f"{theirs}/step-0000000040",
        "javascript:alert(document.cookie)",
        f"{mine}/../{Path(theirs).name}/step-0000000040",
        mine,  # the directory itself is no checkpoint
    ]
    records = [record(run, 1)]
    records += [record(run, i, type="checkpoint", uri=uri, step=40) for i, uri in enumerate(foreign, 2)]
    records.append(record(run, 9, type="checkpoint", uri=f"{mine}/step-0000000050", step=50))
    body = {"incarnation": int(CLOCK.now() * 1000), "records": [{k: v for k, v in r.items() if not (
        r["type"] == "checkpoint" and k in ("name", "value"))} for r in records]}  # fmt: skip
    answer = call(app, "POST", f"/v1/ingest/{run}/1", headers=auth, json=body)
    assert answer.status_code == 200, answer.text
    steps, ckpts, invalid = stored(home, run)
    assert (steps, ckpts) == ([1], [f"{mine}/step-0000000050"])  # what is its own is kept, the rest is said
    assert len(invalid) == len(foreign)


def test_the_local_report_file_is_held_to_the_same_bounds_and_prefix(home: Path) -> None:
    run = admitted(home, "local-file", str(home / "reports" / "{run}" / "1.jsonl"), CLOCK)
    mine, report = own_dir(home, run), home / "reports" / run / "1.jsonl"
    with Reporter(str(report), run=run, attempt=1, clock=CLOCK.now) as reporter:
        reporter.metric("loss", 2.0, step=1)
        reporter.checkpoint(10, "javascript:alert(1)")
        reporter.checkpoint(20, f"{mine}/step-0000000020")
    huge = json.dumps({"v": 1, "ts": CLOCK.now(), "run": run, "attempt": 1, "type": "event", "name": "dump",
                       "data": {"blob": "z" * 30_000_000}})  # fmt: skip
    with report.open("a") as f:  # written around the runtime, as a hostile command could
        f.write(huge + "\n")
    with Client(home, clock=CLOCK) as c:
        att = c.service.store.attempts(run)[0]
        channel.ingest(c.service.store, att, CLOCK.now())
        events = [e for e in c.service.store.events(run=run) if e.type == "reported"]
    steps, ckpts, invalid = stored(home, run)
    assert (steps, ckpts) == ([1], [f"{mine}/step-0000000020"])
    assert len(invalid) == 2
    assert max(len(json.dumps(e.data)) for e in events) < MAX_RECORD_BYTES  # the 30 MB line is not stored


@pytest.mark.slow
def test_a_killed_saves_tmp_step_directory_is_swept_at_the_next_save(tmp_path: Path) -> None:
    args = [sys.executable, str(CRASH_WRITER), str(tmp_path), "sync", "after-a-tensor-file", "{}"]
    subprocess.run(args, capture_output=True, timeout=60, check=False)
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".tmp-step-")]  # the killed save's draft
    Checkpointer(str(tmp_path)).save({"w": np.zeros(4, np.float32)}, 3)
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".tmp-")] == []


def test_a_live_save_in_this_process_is_not_swept(tmp_path: Path) -> None:
    live = LocalStore(str(tmp_path)).draft("step-0000000007")  # a save in flight, as an async save holds one
    assert isinstance(live, LocalDraft)
    live.write_small("manifest.json", b"{}")
    Checkpointer(str(tmp_path)).save({"w": np.zeros(4, np.float32)}, 3)
    assert Path(live.tmp).is_dir()
    live.abort()


@pytest.mark.parametrize("kind", ["fifo", "dev-zero"])
def test_a_report_file_replaced_by_a_fifo_or_device_does_not_hold_the_agent(home: Path, kind: str) -> None:
    run = admitted(home, f"swapped-{kind}", str(home / "reports" / "{run}" / "1.jsonl"), CLOCK)
    report = home / "reports" / run / "1.jsonl"
    report.parent.mkdir(parents=True, exist_ok=True)
    if kind == "fifo":
        os.mkfifo(report)  # what the attempt's command could put in place of its own report
    else:
        os.symlink("/dev/zero", report)
    done: list[str] = []

    def poll() -> None:
        with Client(home, clock=CLOCK) as c:
            att = c.service.store.attempts(run)[0]
            done.append(str(channel.ingest(c.service.store, att, CLOCK.now()).report_cursor))

    thread = threading.Thread(target=poll, daemon=True)  # a daemon: a stuck read cannot hold the suite
    thread.start()
    thread.join(20)
    assert done, "the agent's read of the report did not return"
    assert stored(home, run) == ([], [], [])
