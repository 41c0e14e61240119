"""`crossrail deploy render`: crossrail itself on Kubernetes (validated like every other manifest, each container's
arguments parsed by the real CLI) and as systemd units (parsed as INI files; no systemd runs here)."""

from __future__ import annotations

import configparser
import shlex
from pathlib import Path
from typing import Any

import pytest
import typer
import yaml
from typer.testing import CliRunner

from crossrail.cli import app
from crossrail.client import Client
from crossrail.control.ops.deploy import AGENT_HEALTH, DeployConfig, kubernetes, systemd
from crossrail.errors import UsageError
from crossrail.spec import Fleet

from .conftest import assert_valid

IMAGE = "registry.example.com/crossrail@sha256:" + "a" * 64
runner = CliRunner()


def parse_cli(args: list[str]) -> Any:
    """Parse `crossrail <args>` as the real CLI would (an unknown option or a bad value raises), running nothing."""
    root: Any = typer.main.get_command(app)
    command = root.get_command(root.context_class(root), args[0])
    assert command is not None, args[0]
    return command.make_context(args[0], args[1:])  # type: ignore[no-any-return]


def by_kind(objs: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(o["kind"], o["metadata"]["name"]): o for o in objs}


@pytest.mark.slow
def test_kubernetes_objects_validate_and_run_two_or_more_agents_beside_serve_with_the_store_from_a_secret(
    gke_fleet: Fleet,
) -> None:
    objs = by_kind(kubernetes(DeployConfig(IMAGE, agent_replicas=3), gke_fleet, "fleet: x\n", "policy: y\n"))
    for obj in objs.values():
        assert_valid(obj)
    serve, agents = objs["Deployment", "crossrail-serve"], objs["Deployment", "crossrail-agent"]
    assert agents["spec"]["replicas"] == 3
    for deployment in (serve, agents):
        (container,) = deployment["spec"]["template"]["spec"]["containers"]
        env = {e["name"]: e for e in container["env"]}
        assert env["CROSSRAIL_STORE_URL"]["valueFrom"] == {"secretKeyRef": {"name": "crossrail-store", "key": "url"}}
        assert container["image"] == IMAGE
        parse_cli(container["args"])
        probe_port = container["livenessProbe"]["httpGet"]["port"]
        assert probe_port in {p["name"] for p in container["ports"]}
    (serve_container,) = serve["spec"]["template"]["spec"]["containers"]
    assert serve_container["readinessProbe"]["httpGet"]["path"] == "/v1/health"
    (agent_container,) = agents["spec"]["template"]["spec"]["containers"]
    assert parse_cli(agent_container["args"]).params["lease_seconds"] == 15.0
    # the agent's metrics need a token beyond loopback; its probes take the open health path
    assert agent_container["livenessProbe"]["httpGet"]["path"] == AGENT_HEALTH
    service = objs["Service", "crossrail"]
    labels = serve["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= labels.items()
    assert objs["ConfigMap", "crossrail-workspace"]["data"] == {
        "fleet.yaml": "fleet: x\n",
        "policy.yaml": "policy: y\n",
    }
    assert objs["PodDisruptionBudget", "crossrail-agent"]["spec"]["minAvailable"] == 1


def test_systemd_units_parse_and_their_commands_are_ones_the_cli_takes() -> None:
    units = systemd(DeployConfig(lease_s=5))
    assert set(units) == {"crossrail-serve.service", "crossrail-agent@.service"}
    for name, text in units.items():
        ini = configparser.ConfigParser(interpolation=None, strict=True)
        ini.optionxform = str  # type: ignore[assignment,method-assign]  # systemd keys are case-sensitive
        ini.read_string(text, source=name)
        assert ini.sections() == ["Unit", "Service", "Install"]
        service = ini["Service"]
        assert service["EnvironmentFile"] == "/etc/crossrail/store.env"
        binary, *args = shlex.split(service["ExecStart"])
        assert binary.endswith("/crossrail")
        ctx = parse_cli(args)
        if name.startswith("crossrail-agent"):
            assert ctx.params["lease_seconds"] == 5.0
            assert service["KillMode"] == "process"  # attempts outlive a restarted agent, which re-adopts them
            assert service["Restart"] == "always"
        assert ini["Install"]["WantedBy"] == "multi-user.target"


def test_bad_settings_are_refused_together_each_with_its_fix(gke_fleet: Fleet) -> None:
    with pytest.raises(UsageError) as caught:
        kubernetes(DeployConfig("latest", namespace="Research_Team", agent_replicas=1), gke_fleet, "", "")
    message = str(caught.value)
    assert "--image 'latest': name crossrail's image with a tag or a digest" in message
    assert "--namespace 'Research_Team': must be a DNS-1123 label" in message
    assert "--agents 1: at least 2, so a standby takes over" in message


@pytest.mark.slow
def test_deploy_render_writes_the_workspace_fleet_into_the_config_map_and_refuses_bad_input_writing_nothing(
    checkout: Path, tmp_path: Path
) -> None:
    home = str(checkout / ".crossrail")
    out = tmp_path / "deploy"
    refused = runner.invoke(app, ["deploy", "render", "--home", home, "--image", "x", "--out", str(out)])
    assert refused.exit_code == 2, refused.output
    assert "name crossrail's image with a tag or a digest" in refused.output
    assert not out.exists()
    bad = ["--agent-requests", "cpu", "--workload-identity", "someone@gmail.com"]
    refused = runner.invoke(app, ["deploy", "render", "--home", home, "--image", IMAGE, *bad, "--out", str(out)])
    assert refused.exit_code == 2, refused.output
    assert "--agent-requests 'cpu': give cpu=<quantity>,memory=<quantity>" in refused.output
    assert not out.exists()
    done = runner.invoke(app, ["deploy", "render", "--home", home, "--image", IMAGE, "--out", str(out)])
    assert done.exit_code == 0, done.output
    objs = by_kind(list(yaml.safe_load_all((out / "crossrail.yaml").read_text())))
    fleet = objs["ConfigMap", "crossrail-workspace"]["data"]["fleet.yaml"]
    assert fleet == (checkout / ".crossrail" / "fleet.yaml").read_text()
    units = runner.invoke(app, ["deploy", "render", "--target", "systemd", "--out", str(out)])
    assert units.exit_code == 0, units.output
    assert (out / "crossrail-agent@.service").read_text() == systemd(DeployConfig())["crossrail-agent@.service"]
    with Client(cwd=checkout) as c:  # rendering wrote nothing to the workspace's store
        assert c.service.store.counts() == {"runs": 0, "events": 0}
