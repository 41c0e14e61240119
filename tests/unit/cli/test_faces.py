"""The command's shared face: its version, one error wrapper, one way to print crossrail/v1 objects."""

from __future__ import annotations

import json
from importlib.metadata import version
from pathlib import Path

import pytest
from typer.testing import CliRunner

from crossrail.cli import app
from crossrail.client import Client

runner = CliRunner()


def test_version_prints_the_installed_package_version() -> None:
    done = runner.invoke(app, ["--version"])
    assert done.exit_code == 0, done.output
    assert done.output == f"crossrail {version('crossrail')}\n"


@pytest.mark.slow
def test_store_check_json_is_a_crossrail_v1_object_like_every_other_command(client: Client) -> None:
    client.status()  # opens the store
    done = runner.invoke(app, ["store", "check", "--json", "--home", str(client.workspace.root)])
    assert done.exit_code == 0, done.output
    obj = json.loads(done.output)
    assert list(obj)[:2] == ["apiVersion", "kind"]
    assert (obj["apiVersion"], obj["kind"]) == ("crossrail/v1", "StoreCheck")


@pytest.mark.slow
def test_an_error_is_one_line_and_its_exit_code_whatever_the_command(tmp_path: Path) -> None:
    for args in (["show", "nope"], ["store", "check"], ["place", "nope.yaml"]):
        done = runner.invoke(app, [*args, "--home", str(tmp_path)])
        assert done.exit_code == 1, (args, done.output)
        assert done.output.startswith("crossrail: "), (args, done.output)
        assert "Traceback" not in done.output


@pytest.mark.slow
def test_server_sends_the_command_to_that_server_and_the_agent_stays_local(
    checkout: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    down = "http://127.0.0.1:9"  # the discard port: nothing answers
    sent = runner.invoke(app, ["status", "--server", down])
    assert sent.exit_code != 0
    assert sent.output.startswith("crossrail: "), sent.output
    assert "127.0.0.1:9" in sent.output
    monkeypatch.chdir(checkout)
    monkeypatch.setenv("CROSSRAIL_SERVER", down)
    assert runner.invoke(app, ["status"]).exit_code != 0  # the environment names the server too
    agent = runner.invoke(app, ["agent", "--until-idle", "--poll", "0.05"])
    assert agent.exit_code == 0, agent.output  # it runs beside the workspace's store, whatever the environment says
    assert f"crossrail agent on {checkout / '.crossrail'}" in " ".join(agent.output.split())


@pytest.mark.slow
def test_server_before_the_command_reads_as_server_after_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CROSSRAIL_SERVER", "")  # restored afterwards: the global option sets it for the process
    monkeypatch.delenv("CROSSRAIL_SERVER")
    down = "http://127.0.0.1:9"
    before = runner.invoke(app, ["--server", down, "status"])
    after = runner.invoke(app, ["status", "--server", down])
    assert before.exit_code == after.exit_code != 0
    assert before.output == after.output
    assert "cannot reach the crossrail server at http://127.0.0.1:9" in " ".join(before.output.split())
