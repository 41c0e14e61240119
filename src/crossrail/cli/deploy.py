"""`crossrail deploy render`: manifests and units that run crossrail itself (docs/high-availability.md,
docs/kubernetes.md#running-crossrail-on-kubernetes)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

import typer

from crossrail.cli.common import Home, guard

deploy_app = typer.Typer(help="Run crossrail itself: Kubernetes manifests and systemd units.", no_args_is_help=True)


@deploy_app.command("render")
def render_command(
    *,
    image: Annotated[str, typer.Option("--image", help="crossrail's image, with a tag or a digest (Kubernetes).")] = "",
    target: Annotated[
        Literal["kubernetes", "systemd"], typer.Option("--target", help="kubernetes (YAML) or systemd (units).")
    ] = "kubernetes",
    namespace: Annotated[str, typer.Option("--namespace", help="Namespace of every object.")] = "crossrail",
    agents: Annotated[int, typer.Option("--agents", help="Agent replicas (>= 2: one leads, the rest stand by).")] = 3,
    serve_replicas: Annotated[int, typer.Option("--serve-replicas", help="API server replicas.")] = 2,
    store_secret: Annotated[
        str, typer.Option("--store-secret", help="Secret whose key `url` holds the PostgreSQL URL.")
    ] = "crossrail-store",
    lease_seconds: Annotated[float, typer.Option("--lease-seconds", help="The leader's lease.")] = 15.0,
    workload_identity: Annotated[
        list[str] | None,
        typer.Option(
            "--workload-identity",
            help="[NAMESPACE=]GSA: bind the ServiceAccounts of NAMESPACE (or of every namespace) to this Google "
            "service account through GKE Workload Identity. Repeatable.",
        ),
    ] = None,
    serve_requests: Annotated[
        str, typer.Option("--serve-requests", help="The serve container's resource requests.")
    ] = "cpu=250m,memory=512Mi",
    agent_requests: Annotated[
        str, typer.Option("--agent-requests", help="An agent container's resource requests.")
    ] = "cpu=500m,memory=1Gi",
    out: Annotated[
        Path | None, typer.Option("--out", help="Write the files into this directory instead of printing them.")
    ] = None,
    home: Home = None,
) -> None:
    """Kubernetes: ServiceAccounts, the agents' ClusterRole bound in each namespace the fleet submits to, the
    training pods' ServiceAccounts there, a ConfigMap with the workspace's fleet and policy, Deployments for serve
    and the agents with /v1/health and /healthz probes and resource requests, a Service and a
    PodDisruptionBudget. systemd: crossrail-serve.service and crossrail-agent@.service."""

    def go() -> None:
        from crossrail.control.ops import deploy, workspace
        from crossrail.spec import load_fleet

        cfg = deploy.DeployConfig(
            image=image,
            namespace=namespace,
            serve_replicas=serve_replicas,
            agent_replicas=agents,
            store_secret=store_secret,
            lease_s=lease_seconds,
            workload_identity=tuple(workload_identity or ()),
            serve_requests=deploy.parse_requests("--serve-requests", serve_requests),
            agent_requests=deploy.parse_requests("--agent-requests", agent_requests),
        )
        if target == "systemd":
            files = deploy.systemd(cfg)
        else:
            ws = workspace.find(home).check()
            fleet_yaml = ws.fleet_path.read_text()
            fleet = load_fleet(ws.fleet_path)
            objs = deploy.kubernetes(cfg, fleet, fleet_yaml, ws.policy_path.read_text())
            files = {"crossrail.yaml": deploy.dump_yaml(objs)}
        if out is None:
            for name, text in files.items():
                typer.echo(f"# {name}\n{text}" if len(files) > 1 else text.rstrip("\n"))
            return
        out.mkdir(parents=True, exist_ok=True)
        for name, text in files.items():
            (out / name).write_text(text)
            typer.echo(f"wrote {out / name}")

    guard(go)
