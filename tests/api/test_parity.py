"""`crossrail --server URL ... --json` prints what the local CLI prints, on the demo workspace."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.api.conftest import PENDING
from tests.conftest import serving
from typer.testing import CliRunner

from crossrail.cli.app import app
from crossrail.core import SystemClock

FROZEN = 1_800_000_000.0  # ages, waits and estimated starts are computed at one instant on both sides


@pytest.fixture
def frozen(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(SystemClock, "now", lambda self: FROZEN)


@pytest.fixture
def served(demo_copy: Path, frozen: None) -> Iterator[tuple[Path, str]]:
    """The demo copy and a server over it, on the same (frozen) clock as the local CLI: `--server` over a socket,
    as a user runs it."""
    from crossrail.api import create_app

    with serving(create_app(demo_copy / ".crossrail")) as url:
        yield demo_copy, url


def _cli(root: Path, *args: str, server: str | None = None) -> tuple[int, Any, str]:
    where = ["--server", server] if server else ["--home", str(root / ".crossrail")]
    result = CliRunner().invoke(app, [*args, *where], env={"CROSSRAIL_SERVER": "", "COLUMNS": "200"})
    out = json.loads(result.stdout) if result.exit_code == 0 and "--json" in args else result.stdout
    return result.exit_code, out, result.stderr


def demo_root(copy: Path) -> Path:
    """The workspace the copy was made of: its experiment files name its paths."""
    text = (copy / ".crossrail" / "experiments" / "pretrain-small.yaml").read_text()
    named = next(line for line in text.splitlines() if line.strip().startswith("config:"))
    return Path(named.split("file://", 1)[1].split("/.crossrail/", 1)[0])


def test_server_and_workspace_print_the_same_json(served: tuple[Path, str]) -> None:
    root, url = served
    reads = [("show", "pretrain-small-1"), ("show", PENDING), ("queue",), ("report",), ("status",)]
    reads.append(("events", "--run", "pretrain-small-1"))
    for read in reads:
        args = (*read, "--json")
        local, remote = _cli(root, *args), _cli(root, *args, server=url)
        assert local[0] == 0, local
        assert remote == local, args
    # The copy's experiment names the files of the workspace it was copied from; a request may name only the
    # serving workspace's own configs/, data/ and checkpoints/ (docs/auth.md), so it names the copy's.
    original = root / ".crossrail" / "experiments" / "pretrain-small.yaml"
    copied = root / ".crossrail" / "experiments" / "pretrain-here.yaml"
    copied.write_text(original.read_text().replace(str(demo_root(root)), str(root)))
    exp = str(copied)
    submit = ("submit", exp, "--set", "metadata.name=parity", "--idempotency-key", "parity-1", "--json")
    first = _cli(root, *submit, server=url)
    assert first[0] == 0
    assert first[1]["created"] is True
    assert _cli(root, *submit) == _cli(root, *submit, server=url)  # the same key's replay, both ways
    assert _cli(root, *submit)[1]["run"] == first[1]["run"]


def test_server_and_workspace_refuse_with_the_same_lines(served: tuple[Path, str]) -> None:
    root, url = served
    bad = root / "bad.yaml"
    bad.write_text("apiVersion: crossrail/v1\nkind: Experiment\nmetadata:\n  name: bad\nspec:\n  stage: nope\n")
    for args in (("submit", str(bad), "--json"), ("show", "no-such-run", "--json"), ("cancel", "no-such-run")):
        local, remote = _cli(root, *args), _cli(root, *args, server=url)
        assert local[0] == 1, local
        assert remote == local, args
    gone = _cli(root, "show", PENDING, "--json", server="http://127.0.0.1:9")
    assert gone[0] == 1
    assert "cannot reach the crossrail server at http://127.0.0.1:9" in gone[2]


def test_following_an_ended_runs_logs_streams_them_then_ends(demo_server: str) -> None:
    import httpx

    whole = httpx.get(f"{demo_server}/v1/runs/pretrain-small-1/logs").json()
    events: list[tuple[str, Any]] = []
    with httpx.stream("GET", f"{demo_server}/v1/runs/pretrain-small-1/logs", params={"follow": 1}, timeout=30) as s:
        name = ""
        for line in s.iter_lines():
            if line.startswith("event: "):
                name = line[7:]
            elif line.startswith("data: "):
                events.append((name, json.loads(line[6:])))
    *logs, (last, end) = events
    assert (last, end["state"]) == ("end", "succeeded")
    streamed = {}
    for name, data in logs:
        assert name == "log"
        streamed[data["attempt"]] = streamed.get(data["attempt"], "") + data["text"]
    assert streamed == {a["attempt"]: a["log"] for a in whole["attempts"] if a["log"]}
    assert len(streamed) == 2  # the killed attempt's log and its retry's


def test_checkpoint_endpoints_answer_what_ckpt_prints(demo_workspace: Path, demo_server: str) -> None:
    import httpx

    run = "pretrain-small-1"
    pairs = [
        (("ckpt", "ls", run), ("GET", f"/v1/runs/{run}/checkpoints")),
        (("ckpt", "show", run), ("GET", f"/v1/runs/{run}/checkpoints/latest")),
        (("ckpt", "verify", run, "--all"), ("POST", f"/v1/runs/{run}/checkpoints/verify?all=1")),
    ]
    for args, (method, path) in pairs:
        code, local, err = _cli(demo_workspace, *args, "--json")
        assert code == 0, err
        answer = httpx.request(method, demo_server + path, timeout=60)
        assert answer.status_code == 200
        assert answer.json() == local, args
    assert local["results"]
    missing = httpx.get(f"{demo_server}/v1/runs/{run}/checkpoints/999999")
    assert missing.status_code == 404
    assert "no checkpoint at step 999999" in missing.json()["message"]
