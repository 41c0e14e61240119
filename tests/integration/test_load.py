"""400 submissions from 16 client processes over HTTP, some racing on shared idempotency keys, against a
`crossrail serve` on SQLite and on PostgreSQL: none lost, none duplicated, every replay of a key gets its run."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from crossrail.client import Client

pytestmark = pytest.mark.slow

SUBMISSIONS = 400
CLIENTS = 16
SHARED_KEYS = 20  # every fifth submission reuses one of these, each sent four times from different processes


# One client process: submits its share (every CLIENTS-th submission from its index) and prints one JSON line
# per answer: [index, key, HTTP status, run id, run uid, created].
CLIENT = """
import json, sys
import httpx
url, worker, clients, total, shared, path = sys.argv[1], *map(int, sys.argv[2:6]), sys.argv[6]
document = open(path).read()
with httpx.Client(base_url=url, timeout=60) as http:
    for i in range(worker, total, clients):
        key = f"shared-{(i // 5) % shared}" if i % 5 == 0 else f"own-{i}"
        body = {"document": document, "source": "load.yaml", "sets": [], "idempotencyKey": key}
        r = http.post("/v1/runs", json=body)
        run = r.json().get("run") or {} if r.status_code < 300 else {}
        print(json.dumps([i, key, r.status_code, run.get("id", ""), run.get("uid", ""), r.status_code == 201]))
"""


def submit_all(url: str, document: Path) -> list[list[object]]:
    """Every submission, from CLIENTS processes at once; their answers."""
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-c",
                CLIENT,
                url,
                str(w),
                str(CLIENTS),
                str(SUBMISSIONS),
                str(SHARED_KEYS),
                str(document),
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        for w in range(CLIENTS)
    ]
    answers = []
    for p in procs:
        out, _ = p.communicate(timeout=300)
        assert p.returncode == 0
        answers += [json.loads(line) for line in out.splitlines()]
    return answers


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def served(request: pytest.FixtureRequest, checkout: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """`crossrail serve` on the checkout's workspace (and, for postgres, a fresh database); its URL."""
    if request.param == "postgres":
        monkeypatch.setenv("CROSSRAIL_STORE_URL", request.getfixturevalue("postgres_url"))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "CROSSRAIL_HOME": str(checkout / ".crossrail")}
    cmd = [sys.executable, "-m", "crossrail.cli", "serve", "--port", str(port)]
    log = checkout / "serve.log"
    with log.open("ab") as err:
        proc = subprocess.Popen(cmd, env=env, stdout=err, stderr=err, cwd=checkout)  # `commit: auto` reads this git
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            if httpx.get(f"{url}/v1/health", timeout=2).status_code == 200:
                break
        except httpx.TransportError:
            pass
        assert proc.poll() is None, log.read_text()
        assert time.monotonic() < deadline, log.read_text()
        time.sleep(0.1)
    try:
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_four_hundred_concurrent_submissions_lose_none_duplicate_none_and_replays_get_their_run(
    served: str, checkout: Path
) -> None:
    exp = checkout / ".crossrail" / "experiments" / "eval-smoke.yaml"
    document = checkout / "load.yaml"
    document.write_text(exp.read_text().replace("name: eval-smoke", "name: load", 1))
    assert "name: load" in document.read_text()
    answers = submit_all(served, document)
    assert len(answers) == SUBMISSIONS
    refused = [a for a in answers if a[2] not in (200, 201)]
    assert refused == []  # 0 lost: every submission was answered with its run

    by_key: dict[str, set[tuple[str, str]]] = defaultdict(set)
    created: dict[str, int] = defaultdict(int)
    for _i, key, _status, rid, uid, was_created in answers:
        by_key[str(key)].add((str(rid), str(uid)))
        created[str(key)] += bool(was_created)
    assert all(len(runs) == 1 for runs in by_key.values())  # every replay of a key got the same run
    assert set(created.values()) == {1}  # and exactly one of a key's submissions created it
    expected = SUBMISSIONS - SUBMISSIONS // 5 + SHARED_KEYS

    with Client(cwd=checkout) as c:
        store = c.service.store
        runs = store.list_runs(experiment="load", limit=None)
        assert len(runs) == expected  # 0 duplicated
        assert {r.id for r in runs} == {rid for runs_ in by_key.values() for rid, _ in runs_}
        assert {r.idempotency_key: r.id for r in runs} == {k: next(iter(v))[0] for k, v in by_key.items()}
        submitted = store.events(types=["submitted"])
        assert len(submitted) == expected
        assert sorted(r.n for r in runs) == list(range(1, expected + 1))  # numbers without gaps or repeats
