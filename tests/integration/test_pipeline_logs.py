"""`logs RUN --part NAME`: one part of a pipeline run, its attempts' logs headed by the part's name; an unknown
part is refused naming the run's parts, and --part on a run without parts says so."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.conftest import api_app, asgi_client, drive
from typer.testing import CliRunner

from crossrail.cli import app
from crossrail.client import Client
from crossrail.control.agent.loop import AgentConfig
from crossrail.errors import NotFoundError, UsageError

# The reward part says hello and leaves a mark; the learner says hello once the mark is there, then ends the run.
PART = """import os, pathlib, time
part, mark = os.environ["CROSSRAIL_PART"], pathlib.Path(os.environ["MARK"])
print("hello from", part, flush=True)
if part == "reward":
    mark.touch()
while part == "learner" and not mark.exists():
    time.sleep(0.05)
"""
PIPELINE = """\
apiVersion: crossrail/v1
kind: Experiment
metadata: {name: two-parts, team: alignment, owner: ada@example.com}
spec:
  stage: reinforcement_learning
  image: python@sha256:9f2c4e6a8b0d1f3e5a7c9b1d3f5e7a9c0b2d4f6e8a1c3e5b7d9f0a2c4e6b8d0f
  code: {repo: https://github.com/acme/trainer, commit: auto}
  command: [PYTHON, -c, SCRIPT]
  dataset: {uri: DATA, version: v1}
  checkpoint: {dir: CKPT, format: crossrail-ckpt/v1}
  resources: {chips: 2}
  env: {MARK: MARKFILE}
  parts:
    reward: {chips: 1, prefer: gpu}
    learner: {chips: 1, prefer: gpu}
"""
FAST = AgentConfig(poll_s=0.1, fallback_wait_s=0.0, stop_grace_s=5.0, heartbeat_s=1.0)


@pytest.fixture
def client(checkout: Path) -> Iterator[Client]:
    with Client(cwd=checkout) as c:  # the real clock: the supervisor takes real times
        yield c


@pytest.mark.slow
def test_logs_of_one_part_and_the_parts_named_for_an_unknown_one(
    client: Client, checkout: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "data").mkdir()
    text = PIPELINE.replace("PYTHON", sys.executable).replace("SCRIPT", json.dumps(PART))
    text = text.replace("DATA", str(tmp_path / "data")).replace("CKPT", str(tmp_path / "ckpt"))
    path = tmp_path / "two-parts.yaml"
    path.write_text(text.replace("MARKFILE", str(tmp_path / "mark")))
    run = client.submit(path)["run"]["id"]
    drive(client, lambda: client.show(run)["run"]["state"] == "succeeded", config=FAST)

    reward = client.logs(run, part="reward")["attempts"]
    assert [a["part"] for a in reward] == ["reward"]
    assert "hello from reward" in reward[0]["log"]
    assert "hello from learner" not in reward[0]["log"]
    assert {a["part"] for a in client.logs(run)["attempts"]} == {"reward", "learner"}
    with pytest.raises(NotFoundError, match="did you mean 'learner'") as caught:
        client.logs(run, part="lerner")
    assert "its parts: learner, reward" in str(caught.value)

    monkeypatch.chdir(checkout)
    shown = CliRunner().invoke(app, ["logs", run, "--part", "learner"], env={"COLUMNS": "200"})
    assert shown.exit_code == 0, shown.output
    assert "part learner on" in shown.stdout  # the rule above its log names the part
    assert "hello from learner" in shown.stdout
    assert "hello from reward" not in shown.stdout


@pytest.mark.slow
def test_part_on_a_run_without_parts_says_it_is_not_a_pipeline_here_and_over_the_api(
    client: Client, checkout: Path, experiments: Path
) -> None:
    run = client.submit(experiments / "eval-smoke.yaml")["run"]["id"]

    with pytest.raises(UsageError, match="not a pipeline"):
        client.logs(run, part="learner")
    with api_app(checkout / ".crossrail") as app, pytest.raises(UsageError, match="not a pipeline"):
        asgi_client(app).logs(run, part="learner")
