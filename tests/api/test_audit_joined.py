"""Over HTTP, a write's audit row is written in the write's own transaction: one commit per submit; a refused or
failed write leaves a row saying so and none claiming success; a successful one always has its row."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import event
from tests.conftest import in_process

from crossrail.client import Client
from crossrail.core import ManualClock

CLOCK = ManualClock(1_800_000_000.0)


@dataclass
class Server:
    home: Path
    http: httpx.Client
    store: Any  # the app's own store, whose commits are counted
    commits: list[int]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    from crossrail.api import create_app

    root = tmp_path_factory.mktemp("joined")
    Client.init(root)
    home = root / ".crossrail"
    app = create_app(home, clock=CLOCK)
    store = app.state.client.service.store
    commits: list[int] = []
    event.listen(store._engine, "commit", lambda _conn: commits.append(1))
    with in_process(app, timeout=30) as http:
        yield Server(home, http, store, commits)
    app.state.client.close()


def _submit(s: Server, name: str, **extra: Any) -> httpx.Response:
    text = (s.home / "experiments" / "pretrain-small.yaml").read_text()
    body = {"document": text, "source": "exp.yaml", "sets": [f"metadata.name={name}"]} | extra
    return s.http.post("/v1/runs", json=body)


def _rows_since(s: Server, seq: int) -> list[dict[str, Any]]:
    return [r for r in s.store.audit() if r["seq"] > seq]


def _last_seq(s: Server) -> int:
    rows = s.store.audit(limit=1)
    return int(rows[-1]["seq"]) if rows else 0


def test_a_submit_commits_once_with_its_audit_row_naming_the_run(server: Server) -> None:
    seq, before = _last_seq(server), len(server.commits)
    answer = _submit(server, "joined-a", idempotencyKey="ja")
    assert answer.status_code == 201
    assert len(server.commits) - before == 1  # the run, its events and its audit row: one transaction
    run = answer.json()["run"]
    (row,) = _rows_since(server, seq)
    assert (row["action"], row["result"], row["status"]) == ("POST /v1/runs", "ok", 201)
    assert (row["target"], row["run_uid"], row["who"]) == (run["id"], run["uid"], "anonymous")

    again = _submit(server, "joined-a", idempotencyKey="ja")
    assert again.status_code == 200
    (replay,) = _rows_since(server, int(row["seq"]))
    assert (replay["target"], replay["result"], replay["status"]) == (run["id"], "ok", 200)


@pytest.mark.parametrize(
    ("extra", "status"),
    [
        pytest.param({"sets": ["spec.resources.chips=0"]}, 422, id="a spec the service refuses before writing"),
        pytest.param({"idempotencyKey": "taken"}, 409, id="a key reused for another spec, refused inside the write"),
    ],
)
def test_a_refused_submit_leaves_a_row_saying_so_and_no_run(server: Server, extra: dict[str, Any], status: int) -> None:
    assert _submit(server, "keyed", idempotencyKey="taken").status_code in (200, 201)
    seq, runs = _last_seq(server), len(server.store.list_runs())
    answer = _submit(server, "other-spec", **extra)
    assert answer.status_code == status, answer.text
    assert len(server.store.list_runs()) == runs
    rows = _rows_since(server, seq)
    assert [(r["result"], r["status"]) for r in rows] == [("failed", status)]
    assert rows[0]["detail"]


def test_a_change_of_a_run_commits_once_with_its_row(server: Server) -> None:
    run = _submit(server, "joined-c").json()["run"]
    seq, before = _last_seq(server), len(server.commits)
    assert server.http.post(f"/v1/runs/{run['id']}/suspend").status_code == 200
    assert len(server.commits) - before == 1
    (row,) = _rows_since(server, seq)
    assert (row["action"], row["target"], row["run_uid"], row["status"]) == (
        "POST /v1/runs/{ref}/suspend",
        run["id"],
        run["uid"],
        200,
    )
