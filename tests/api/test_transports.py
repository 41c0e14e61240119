"""One Client over three transports: in this process, over HTTP and through the app in process (ASGI); what needs
a workspace of this machine is a usage error over a server, never an AttributeError."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import api_app, asgi_client
from typer.testing import CliRunner

from crossrail.cli.app import app as cli
from crossrail.client import ASGITransport, Client, HTTPTransport, LocalTransport
from crossrail.core import ManualClock
from crossrail.errors import NotFoundError, UsageError

CLOCK = ManualClock(1_800_000_000.0)
NOWHERE = "http://127.0.0.1:9"  # nothing listens: a remote client that never connects


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("transports")
    Client.init(root)
    with Client(root / ".crossrail", clock=CLOCK) as c:
        c.submit(root / ".crossrail" / "experiments" / "pretrain-small.yaml", sets=["metadata.name=one"])
    return root / ".crossrail"


@pytest.fixture(scope="module")
def app(home: Path) -> Iterator[Any]:
    with api_app(home, clock=CLOCK) as app:
        yield app


def test_each_constructor_picks_its_transport(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CROSSRAIL_SERVER", raising=False)
    assert isinstance(Client(home).transport, LocalTransport)
    assert isinstance(Client(server=NOWHERE).transport, HTTPTransport)
    monkeypatch.setenv("CROSSRAIL_SERVER", NOWHERE)
    assert isinstance(Client().transport, HTTPTransport)  # the environment names a server
    assert isinstance(Client(home).transport, LocalTransport)  # a home is always this machine's
    assert isinstance(Client.local().transport, LocalTransport)  # whatever the environment says
    with pytest.warns(DeprecationWarning, match=r"Client.local\(home\)"):
        old = Client(server="")
    assert isinstance(old.transport, LocalTransport)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        Client.local(home).close()


@pytest.mark.parametrize(
    ("use", "what"),
    [
        (lambda c: c.policy, "placement policy"),
        (lambda c: c.load_fleet(), "fleet file"),
        (lambda c: c.fleet, "store"),
        (lambda c: c.service, "store"),
        (lambda c: c.workspace, "directory"),
        (lambda c: c.executor, "executors"),
        (lambda c: c.agent(), "an agent"),
        (lambda c: c.validate(["x.yaml"]), "crossrail validate --offline"),
    ],
    ids=["policy", "load_fleet", "fleet", "service", "workspace", "executor", "agent", "validate"],
)
def test_what_needs_a_workspace_here_is_a_usage_error_over_a_server(use: Any, what: str) -> None:
    with Client(server=NOWHERE) as remote, pytest.raises(UsageError, match=what) as refused:
        use(remote)
    assert not isinstance(refused.value, AttributeError)
    assert remote.has_workspace() is False
    assert remote.is_local is False


def test_a_remote_client_checks_files_alone_offline(home: Path) -> None:
    with Client(server=NOWHERE) as remote:
        result = remote.validate([home / "experiments" / "pretrain-small.yaml"], offline=True)
    assert result["workspace"] is None
    assert any("default policy" in w for w in result["warnings"])


@pytest.mark.parametrize("args", [["readiness"], ["report", "--out", "out"], ["validate", "x.yaml"]])
def test_commands_that_need_the_workspace_refuse_a_server_in_one_line(args: list[str], tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, [*args, "--server", NOWHERE], env={"CROSSRAIL_HOME": str(tmp_path)})
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert "without --server" in result.stderr or "--offline" in result.stderr


@pytest.mark.slow
def test_the_asgi_transport_answers_what_the_workspace_answers(home: Path, app: Any) -> None:
    with asgi_client(app) as remote, Client(home, clock=CLOCK) as local:
        assert isinstance(remote.transport, ASGITransport)
        for read in (
            lambda c: c.show("one"),
            lambda c: c.runs(),
            lambda c: c.queue(limit=0),
            lambda c: c.events("one"),
            lambda c: c.logs("one"),
            lambda c: c.fleet_show(),
            lambda c: c.reservations(),
            lambda c: c.report(),
            lambda c: c.usage(),
            lambda c: c.tokens(),
        ):
            assert read(remote) == read(local)
        with pytest.raises(NotFoundError) as remote_error:
            remote.ckpt_ls("nothing")
        with pytest.raises(NotFoundError) as local_error:
            local.ckpt_ls("nothing")
        assert str(remote_error.value) == str(local_error.value)


@pytest.mark.slow
def test_writes_go_through_any_transport(home: Path, app: Any) -> None:
    exp = home / "experiments" / "pretrain-small.yaml"
    with asgi_client(app) as remote, Client(home, clock=CLOCK) as local:
        made = remote.submit(exp, sets=["metadata.name=two"], idempotency_key="two")
        assert made["created"] is True
        again = local.submit(exp, sets=["metadata.name=two"], idempotency_key="two")
        assert (again["created"], again["run"]["id"]) == (False, made["run"]["id"])
        assert remote.suspend("two")["run"]["state"] == "suspended"
        assert local.resume("two")["run"]["state"] == "queued"
        assert remote.cancel("two")["run"]["state"] == "cancelled"
        assert [e["type"] for e in local.events("two", types=["cancelled"])["events"]] == ["cancelled"]
        pool = local.fleet_show()["pools"][0]["name"]
    with asgi_client(app) as remote:
        remote.drain(pool)
    with Client(home, clock=CLOCK) as local:  # a client reads the fleet file once: a fresh one sees the drain
        assert next(p for p in local.fleet_show()["pools"] if p["name"] == pool)["drained"] is True
    with asgi_client(app) as remote:
        remote.drain(pool, drained=False)
    with Client(home, clock=CLOCK) as local:
        assert next(p for p in local.fleet_show()["pools"] if p["name"] == pool)["drained"] is False
