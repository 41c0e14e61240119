"""`crossrail deploy render`: crossrail itself on Kubernetes (serve and its agents as Deployments, a Service, probes,
the store URL from a Secret) and on plain hosts (systemd units for serve and for each agent)."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from typing import Any

from crossrail.errors import UsageError

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_IMAGE = re.compile(r"^[^\s:@]+(:[\w][\w.-]{0,127})?(@sha256:[0-9a-f]{64})?$")
HOME = "/var/lib/crossrail/.crossrail"
"""The workspace inside a pod: an emptyDir, with fleet.yaml and policy.yaml mounted from a ConfigMap."""
LABELS = {"app.kubernetes.io/name": "crossrail", "app.kubernetes.io/part-of": "crossrail"}
AGENT_HEALTH = "/healthz"
"""The path of an agent's metrics port open to probes (/metrics needs a token beyond loopback)."""


@dataclass(frozen=True)
class DeployConfig:
    image: str = ""  # Kubernetes only: systemd runs the installed `bin`
    namespace: str = "crossrail"
    serve_replicas: int = 2
    agent_replicas: int = 3
    store_secret: str = "crossrail-store"
    store_secret_key: str = "url"
    lease_s: float = 15.0
    port: int = 8470
    metrics_port: int = 9464
    bin: str = "/opt/crossrail/bin/crossrail"  # systemd: the installed console script
    user: str = "crossrail"  # systemd: the account both units run as

    def check(self, *, image: bool = True) -> DeployConfig:
        """Every problem at once, each with its fix; the config unchanged when it is sound. `image`: it is needed."""
        problems = []
        if image and (not _IMAGE.match(self.image) or (":" not in self.image and "@" not in self.image)):
            problems.append(
                f"--image {self.image!r}: name crossrail's image with a tag or a digest "
                "(e.g. registry.example.com/crossrail@sha256:<64 hex>)"
            )
        for flag, value in (("--namespace", self.namespace), ("--store-secret", self.store_secret)):
            if not _DNS_LABEL.match(value) or len(value) > 63:
                problems.append(f"{flag} {value!r}: must be a DNS-1123 label (lower-case letters, digits and '-')")
        if self.agent_replicas < 2:
            problems.append(f"--agents {self.agent_replicas}: at least 2, so a standby takes over when the leader dies")
        if self.serve_replicas < 1:
            problems.append(f"--serve-replicas {self.serve_replicas}: at least 1")
        if not self.lease_s > 0:
            problems.append(f"--lease-seconds {self.lease_s:g}: must be > 0")
        if problems:
            raise UsageError("cannot render the deployment:\n  " + "\n  ".join(problems))
        return self


# --- Kubernetes ------------------------------------------------------------------------------------


def kubernetes(cfg: DeployConfig, fleet_yaml: str, policy_yaml: str) -> list[dict[str, Any]]:
    """ConfigMap (the workspace's fleet and policy), the serve Deployment and its Service, the agents' Deployment
    and a PodDisruptionBudget that keeps one agent through voluntary disruptions. The store URL comes from the
    Secret `cfg.store_secret` (key `cfg.store_secret_key`), created beforehand (docs/high-availability.md)."""
    cfg.check()
    config_map = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _meta(cfg, "crossrail-workspace", "workspace"),
        "data": {"fleet.yaml": fleet_yaml, "policy.yaml": policy_yaml},
    }
    serve_args = ["serve", "--host", "0.0.0.0", "--port", str(cfg.port)]  # a pod listens on its own IP
    http = _port("http", cfg.port)
    serve = _deployment(
        cfg, "serve", replicas=cfg.serve_replicas, args=serve_args, port=http, probe="/v1/health", via="http"
    )
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _meta(cfg, "crossrail", "serve"),
        "spec": {
            "selector": _selector("serve"),
            "ports": [{"name": "http", "port": cfg.port, "targetPort": "http", "protocol": "TCP"}],
        },
    }
    agent_args = [
        *("agent", "--lease-seconds", f"{cfg.lease_s:g}"),
        *("--metrics-port", str(cfg.metrics_port), "--metrics-host", "0.0.0.0"),
        *("--report-url", f"http://crossrail.{cfg.namespace}.svc:{cfg.port}"),
    ]
    metrics = _port("metrics", cfg.metrics_port)
    agents = _deployment(
        cfg, "agent", replicas=cfg.agent_replicas, args=agent_args, port=metrics, probe=AGENT_HEALTH, via="metrics"
    )
    budget = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": _meta(cfg, "crossrail-agent", "agent"),
        "spec": {"minAvailable": 1, "selector": {"matchLabels": _selector("agent")}},
    }
    return [config_map, serve, service, agents, budget]


def _meta(cfg: DeployConfig, name: str, component: str) -> dict[str, Any]:
    return {"name": name, "namespace": cfg.namespace, "labels": {**LABELS, "app.kubernetes.io/component": component}}


def _selector(component: str) -> dict[str, str]:
    return {"app.kubernetes.io/name": "crossrail", "app.kubernetes.io/component": component}


def _port(name: str, port: int) -> dict[str, Any]:
    return {"name": name, "containerPort": port, "protocol": "TCP"}


def _deployment(
    cfg: DeployConfig, component: str, *, replicas: int, args: list[str], port: dict[str, Any], probe: str, via: str
) -> dict[str, Any]:
    http = {"path": probe, "port": via}
    container = {
        "name": component,
        "image": cfg.image,
        "command": ["crossrail"],
        "args": args,
        "env": [
            {"name": "CROSSRAIL_HOME", "value": HOME},
            {
                "name": "CROSSRAIL_STORE_URL",
                "valueFrom": {"secretKeyRef": {"name": cfg.store_secret, "key": cfg.store_secret_key}},
            },
        ],
        "ports": [port],
        "readinessProbe": {"httpGet": http, "periodSeconds": 5, "failureThreshold": 3},
        "livenessProbe": {"httpGet": http, "initialDelaySeconds": 10, "periodSeconds": 10, "failureThreshold": 6},
        "volumeMounts": [
            {"name": "home", "mountPath": HOME},
            *({"name": "workspace", "mountPath": f"{HOME}/{f}", "subPath": f} for f in ("fleet.yaml", "policy.yaml")),
        ],
        "securityContext": {"allowPrivilegeEscalation": False, "runAsNonRoot": True},
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _meta(cfg, f"crossrail-{component}", component),
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": _selector(component)},
            "template": {
                "metadata": {"labels": {**LABELS, "app.kubernetes.io/component": component}},
                "spec": {
                    # an agent stops after the pass in hand on SIGTERM and hands its lease on at once
                    "terminationGracePeriodSeconds": 30,
                    "containers": [container],
                    "volumes": [
                        {"name": "home", "emptyDir": {}},
                        {"name": "workspace", "configMap": {"name": "crossrail-workspace"}},
                    ],
                },
            },
        },
    }


def dump_yaml(objs: list[dict[str, Any]]) -> str:
    """The objects as one YAML stream; a multi-line string (a file in the ConfigMap) as a literal block."""
    import yaml

    class Dumper(yaml.SafeDumper):
        def ignore_aliases(self, data: Any) -> bool:  # every probe written out, no &id001 anchors
            return True

    def text(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
        style = "|" if "\n" in value else None
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)

    Dumper.add_representer(str, text)
    return yaml.dump_all(objs, Dumper=Dumper, sort_keys=False)


# --- systemd ---------------------------------------------------------------------------------------


def systemd(cfg: DeployConfig) -> dict[str, str]:
    """`crossrail-serve.service` and the template `crossrail-agent@.service` (enable @1, @2, ... on one host or
    several): the store URL from `/etc/crossrail/store.env` (mode 0600: the host's Secret)."""
    cfg.check(image=False)
    serve = [cfg.bin, "serve", "--host", "127.0.0.1", "--port", str(cfg.port)]
    agent = [cfg.bin, "agent", "--lease-seconds", f"{cfg.lease_s:g}"]
    return {
        "crossrail-serve.service": _unit(cfg, "crossrail API server", serve, restart="on-failure", kill_mode=None),
        # KillMode=process: a restarted agent re-adopts the attempts it launched, so they must outlive it
        "crossrail-agent@.service": _unit(cfg, "crossrail agent %i", agent, restart="always", kill_mode="process"),
    }


def _unit(cfg: DeployConfig, what: str, cmd: list[str], *, restart: str, kill_mode: str | None) -> str:
    lines = [
        "[Unit]",
        f"Description={what}",
        "After=network-online.target postgresql.service",
        "Wants=network-online.target",
        "",
        "[Service]",
        "Type=simple",
        f"User={cfg.user}",
        f"Group={cfg.user}",
        "Environment=CROSSRAIL_HOME=/var/lib/crossrail/.crossrail",
        "EnvironmentFile=/etc/crossrail/store.env",
        f"ExecStart={shlex.join(cmd)}",
        f"Restart={restart}",
        "RestartSec=2",
        "TimeoutStopSec=30",
        *([f"KillMode={kill_mode}"] if kill_mode else []),
        "NoNewPrivileges=yes",
        "",
        "[Install]",
        "WantedBy=multi-user.target",
        "",
    ]
    return "\n".join(lines)
