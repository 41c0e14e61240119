"""`crossrail deploy render`: crossrail itself on Kubernetes (serve and its agents as Deployments, a Service, probes,
the store URL from a Secret, ServiceAccounts and the RBAC the agents' Kubernetes calls need, the training pods'
ServiceAccounts in each team namespace, and in a fleet of several clusters the RBAC each worker cluster needs) and on
plain hosts (systemd units for serve and for each agent)."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from typing import Any

from crossrail.errors import UsageError
from crossrail.executors.render.kubernetes import JOBSET_API
from crossrail.executors.render.kueue import KUEUE_API, KUEUE_NAMESPACE, namespaces
from crossrail.executors.render.trainjob import TRAINER_GROUP
from crossrail.spec import Fleet

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_IMAGE = re.compile(r"^[^\s:@]+(:[\w][\w.-]{0,127})?(@sha256:[0-9a-f]{64})?$")
HOME = "/var/lib/crossrail/.crossrail"
"""The workspace inside a pod: an emptyDir, with fleet.yaml and policy.yaml mounted from a ConfigMap."""
LABELS = {"app.kubernetes.io/name": "crossrail", "app.kubernetes.io/part-of": "crossrail"}
AGENT_HEALTH = "/healthz"
"""The path of an agent's metrics port open to probes (/metrics needs a token beyond loopback)."""
UID = 10001
"""The user and group the image runs as (USER in the Dockerfile), named in each pod so runAsNonRoot can check it."""
WORKLOAD_IDENTITY = "iam.gke.io/gcp-service-account"
_GSA = re.compile(r"^[a-z][a-z0-9-]{4,28}[a-z0-9]@[a-z][a-z0-9-]{4,28}[a-z0-9]\.iam\.gserviceaccount\.com$")
_QUANTITY = re.compile(r"^[0-9]+(\.[0-9]+)?(m|Ki|Mi|Gi|Ti|k|M|G|T)?$")

AGENT_RULES: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("", "pods", ("list",)),  # an attempt's pods: is its trainer running, how did it exit
    ("", "pods/log", ("get",)),  # `crossrail logs`
    ("", "secrets", ("create",)),  # an attempt's report secret, owned by (and deleted with) its workload
    ("", "configmaps", ("create",)),  # an attempt's shipped config file, owned by (and deleted with) its workload
    ("batch", "jobs", ("create", "delete", "list", "patch")),
    (JOBSET_API.split("/")[0], "jobsets", ("create", "delete", "list", "patch")),
    (TRAINER_GROUP, "trainjobs", ("create", "delete", "list", "patch")),
    (KUEUE_API.split("/")[0], "workloads", ("list",)),  # Kueue's view of each attempt
)
"""(API group, resource, verbs) the Kubernetes executor's client calls use in the fleet's namespaces: launch
creates, observe lists, stop patches its reason on and deletes, logs reads the pod log. Nothing else: no get or
watch, no cluster-scoped object; tests/unit/render/test_deploy_rbac.py derives the same from the executor's code."""

KUBECONFIG_RULES: tuple[tuple[str, str, tuple[str, ...]], ...] = (("", "secrets", ("get",)),)
"""What the agents read in the manager's kueue-system namespace, each worker cluster named without a kube context:
the kubeconfig Secret MultiKueue reaches it with (granted for those Secrets by name only)."""

WORKER_RULES: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("", "pods", ("list",)),  # the attempt's pods where they run
    ("", "pods/log", ("get",)),  # `crossrail logs`
    ("", "secrets", ("create", "delete")),  # the attempt's report Secret, which MultiKueue does not copy
    ("", "configmaps", ("create", "delete")),  # the attempt's shipped config, likewise
    ("batch", "jobs", ("list",)),  # the worker's copy of the attempt's object, and its status
    (JOBSET_API.split("/")[0], "jobsets", ("list",)),
    (TRAINER_GROUP, "trainjobs", ("list",)),
    (KUEUE_API.split("/")[0], "workloads", ("list",)),  # the worker's Kueue's view of it
)
"""(API group, resource, verbs) the executor's calls use in a worker cluster's team namespaces, where MultiKueue
dispatched an attempt: it reads the copy, its Workload, pods and logs there, and creates (and deletes) what the
pods mount. The test derives the same from the calls on worker APIs."""

_KUEUE = KUEUE_API.split("/")[0]
_OBJECT = ("create", "delete", "get", "list", "watch")
MULTIKUEUE_RULES: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("batch", "jobs", _OBJECT),
    ("batch", "jobs/status", ("get",)),
    (JOBSET_API.split("/")[0], "jobsets", _OBJECT),
    (JOBSET_API.split("/")[0], "jobsets/status", ("get",)),
    (TRAINER_GROUP, "trainjobs", _OBJECT),
    (TRAINER_GROUP, "trainjobs/status", ("get",)),
    (_KUEUE, "workloads", (*_OBJECT, "update", "patch")),
    (_KUEUE, "workloads/status", ("get", "patch", "update")),
    (_KUEUE, "clusterqueues", ("get", "list", "watch")),
    (_KUEUE, "localqueues", ("get", "list", "watch")),
)
"""What the MultiKueue controller of the manager does in a worker, as the user of the kubeconfig its
MultiKueueCluster names, for the kinds crossrail submits: Kueue's own role for that user
(site/static/v0.19/examples/multikueue/create-multikueue-kubeconfig.sh at the Kueue commit in schemas/crds/SOURCES.md),
less the kinds crossrail never submits. Its job adapters get, create and delete the copy and read its status
(pkg/controller/jobs/{job,jobset,trainjob}/*_multikueue_adapter.go SyncJob, DeleteRemoteObject); it creates and
watches Workloads and caches ClusterQueues and LocalQueues cluster-wide
(pkg/controller/admissionchecks/multikueue/multikueuecluster.go), so the role is bound cluster-wide."""
MULTIKUEUE_ACCOUNT = "crossrail-multikueue"
CLUSTER_LABEL = "crossrail.dev/cluster"
"""On each object that belongs in a worker cluster rather than the manager: the cluster's name."""


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
    workload_identity: tuple[str, ...] = ()
    """`GSA` (every namespace) or `NAMESPACE=GSA`: the Google service account each namespace's ServiceAccounts are
    bound to through GKE Workload Identity; `NAMESPACE` is crossrail's own or one the fleet submits to."""
    serve_requests: tuple[tuple[str, str], ...] = (("cpu", "250m"), ("memory", "512Mi"))
    agent_requests: tuple[tuple[str, str], ...] = (("cpu", "500m"), ("memory", "1Gi"))
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
        problems += self._identity_problems() + self._request_problems()
        if problems:
            raise UsageError("cannot render the deployment:\n  " + "\n  ".join(problems))
        return self

    def _identity_problems(self) -> list[str]:
        problems, seen = [], set()
        for item in self.workload_identity:
            ns, _, gsa = item.rpartition("=")
            key = ns or "*"
            if not _GSA.match(gsa):
                problems.append(
                    f"--workload-identity {item!r}: name a Google service account, "
                    "NAME@PROJECT.iam.gserviceaccount.com, optionally after NAMESPACE="
                )
            elif ns and (not _DNS_LABEL.match(ns) or len(ns) > 63):
                problems.append(f"--workload-identity {item!r}: {ns!r} is not a namespace (a DNS-1123 label)")
            elif key in seen:
                problems.append(
                    f"--workload-identity {item!r}: {'every namespace' if key == '*' else ns} is given twice"
                )
            seen.add(key)
        return problems

    def _request_problems(self) -> list[str]:
        problems = []
        for flag, requests in (("--serve-requests", self.serve_requests), ("--agent-requests", self.agent_requests)):
            for name, value in requests:
                if name not in ("cpu", "memory") or not _QUANTITY.match(value):
                    problems.append(
                        f"{flag} {name}={value}: give cpu=<quantity> and memory=<quantity> (e.g. cpu=500m,memory=1Gi)"
                    )
        return problems

    def gcp_service_account(self, namespace: str) -> str | None:
        """The Google service account bound to `namespace`'s ServiceAccounts (its own, else every namespace's)."""
        pairs = dict(item.rpartition("=")[::2] for item in self.workload_identity)
        return pairs.get(namespace) or pairs.get("")


def parse_requests(flag: str, text: str) -> tuple[tuple[str, str], ...]:
    """`cpu=500m,memory=1Gi` as pairs; a part without `=` is a UsageError naming the flag."""
    out = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        name, eq, value = part.partition("=")
        if not eq:
            raise UsageError(f"{flag} {text!r}: give cpu=<quantity>,memory=<quantity> (e.g. cpu=500m,memory=1Gi)")
        out.append((name.strip(), value.strip()))
    return tuple(out)


# --- Kubernetes ------------------------------------------------------------------------------------


def kubernetes(cfg: DeployConfig, fleet: Fleet, fleet_yaml: str, policy_yaml: str) -> list[dict[str, Any]]:
    """ServiceAccounts for serve and the agents, the agents' ClusterRole and a RoleBinding in each namespace the
    fleet submits to, the training pods' ServiceAccounts there, a ConfigMap (the workspace's fleet and policy), the
    serve Deployment and its Service, the agents' Deployment and a PodDisruptionBudget that keeps one agent through
    voluntary disruptions. The store URL comes from the Secret `cfg.store_secret` (key `cfg.store_secret_key`),
    created beforehand; the team namespaces come from `fleet render --target kueue` (docs/high-availability.md).

    A fleet of several clusters adds the agents' read of the kubeconfig Secrets of workers without a kube context
    (kubeconfig_rbac), and each worker's RBAC (worker_rbac), labelled `crossrail.dev/cluster: <worker>`: apply
    those to that worker (`kubectl apply -l crossrail.dev/cluster=<worker>`) and the rest to the manager
    (`-l '!crossrail.dev/cluster'`)."""
    cfg.check()
    targets = namespaces(fleet) if any(p.backend == "kubernetes" for p in fleet.pools) else []
    unknown = sorted(
        {ns for ns, _, _ in (i.rpartition("=") for i in cfg.workload_identity) if ns} - {cfg.namespace, *targets}
    )
    if unknown:
        known = ", ".join([cfg.namespace, *targets])
        raise UsageError(
            f"cannot render the deployment:\n  --workload-identity: no namespace {', '.join(unknown)} here "
            f"(crossrail's and the fleet's: {known})"
        )
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
    accounts = [
        # serve makes no Kubernetes call: its pods get no API token
        _service_account(cfg, "crossrail-serve", cfg.namespace, "serve", token=False),
        _service_account(cfg, "crossrail-agent", cfg.namespace, "agent", token=bool(targets)),
    ]
    return [
        *accounts,
        *rbac(cfg, targets),
        *kubeconfig_rbac(cfg, fleet, targets),
        *pod_accounts(cfg, fleet, targets),
        config_map,
        serve,
        service,
        agents,
        budget,
        *(obj for cluster in fleet.spec.clusters if targets for obj in worker_rbac(cfg, fleet, cluster.name, targets)),
    ]


def rbac(cfg: DeployConfig, targets: list[str]) -> list[dict[str, Any]]:
    """The ClusterRole `crossrail-agent` (AGENT_RULES) granted in each of `targets` by a RoleBinding, so the agents
    act in the fleet's namespaces only; nothing when the fleet has no Kubernetes pool."""
    if not targets:
        return []
    rules = [{"apiGroups": [g], "resources": [r], "verbs": list(v)} for g, r, v in AGENT_RULES]
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": "crossrail-agent", "labels": {**LABELS, "app.kubernetes.io/component": "agent"}},
        "rules": rules,
    }
    subject = {"kind": "ServiceAccount", "name": "crossrail-agent", "namespace": cfg.namespace}
    bindings = [
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": _meta(cfg, "crossrail-agent", "agent") | {"namespace": ns},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "crossrail-agent"},
            "subjects": [subject],
        }
        for ns in targets
    ]
    return [role, *bindings]


def kubeconfig_rbac(cfg: DeployConfig, fleet: Fleet, targets: list[str]) -> list[dict[str, Any]]:
    """A Role in the manager's kueue-system namespace letting the agents read, by name, the kubeconfig Secret of each
    worker cluster the fleet names without a kube context (the executor reaches those as MultiKueue does), and its
    RoleBinding; nothing when every worker has a context."""
    secrets = [c.secret for c in fleet.spec.clusters if c.context is None]
    if not targets or not secrets:
        return []
    name = "crossrail-agent-kubeconfigs"
    rules = [
        {"apiGroups": [g], "resources": [r], "verbs": list(v), "resourceNames": sorted(secrets)}
        for g, r, v in KUBECONFIG_RULES
    ]
    meta = _meta(cfg, name, "agent") | {"namespace": KUEUE_NAMESPACE}
    role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": meta, "rules": rules}
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": dict(meta),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": "crossrail-agent", "namespace": cfg.namespace}],
    }
    return [role, binding]


def worker_rbac(cfg: DeployConfig, fleet: Fleet, cluster: str, targets: list[str]) -> list[dict[str, Any]]:
    """What worker cluster `cluster` needs, each object labelled `crossrail.dev/cluster: <cluster>`:

    - for the manager's MultiKueue, the ServiceAccount `crossrail-multikueue` in kueue-system, a token Secret for it
      (build the kubeconfig of the manager's Secret `<kubeconfig_secret>` from it, as Kueue's
      create-multikueue-kubeconfig.sh does) and the ClusterRole MULTIKUEUE_RULES bound to it cluster-wide;
    - for the agents, the ClusterRole `crossrail-agent-worker` (WORKER_RULES) bound in each team namespace to whom
      the executor acts as there: the MultiKueue ServiceAccount for a worker without a kube context (the executor
      uses that kubeconfig), else the Google service account `--workload-identity` gives crossrail's namespace (GKE
      names it by its email); with neither, bind the role to your context's user yourself (docs/kubernetes.md)."""
    spec = next(c for c in fleet.spec.clusters if c.name == cluster)
    rbac_api = "rbac.authorization.k8s.io/v1"

    def meta(name: str, component: str, namespace: str | None = None) -> dict[str, Any]:
        out = _meta(cfg, name, component)
        out["labels"] = {**out["labels"], CLUSTER_LABEL: cluster}
        if namespace is None:
            del out["namespace"]
        else:
            out["namespace"] = namespace
        return out

    def rules(table: tuple[tuple[str, str, tuple[str, ...]], ...]) -> list[dict[str, Any]]:
        return [{"apiGroups": [g], "resources": [r], "verbs": list(v)} for g, r, v in table]

    multikueue = {"kind": "ServiceAccount", "name": MULTIKUEUE_ACCOUNT, "namespace": KUEUE_NAMESPACE}
    token = {"kubernetes.io/service-account.name": MULTIKUEUE_ACCOUNT}
    out: list[dict[str, Any]] = [
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": meta(MULTIKUEUE_ACCOUNT, "multikueue", KUEUE_NAMESPACE),
        },
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": meta(f"{MULTIKUEUE_ACCOUNT}-token", "multikueue", KUEUE_NAMESPACE) | {"annotations": token},
            "type": "kubernetes.io/service-account-token",
        },
        {
            "apiVersion": rbac_api,
            "kind": "ClusterRole",
            "metadata": meta(MULTIKUEUE_ACCOUNT, "multikueue"),
            "rules": rules(MULTIKUEUE_RULES),
        },
        {
            "apiVersion": rbac_api,
            "kind": "ClusterRoleBinding",
            "metadata": meta(MULTIKUEUE_ACCOUNT, "multikueue"),
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": MULTIKUEUE_ACCOUNT},
            "subjects": [multikueue],
        },
        {
            "apiVersion": rbac_api,
            "kind": "ClusterRole",
            "metadata": meta("crossrail-agent-worker", "agent"),
            "rules": rules(WORKER_RULES),
        },
    ]
    gsa = cfg.gcp_service_account(cfg.namespace)
    if spec.context is None:
        subjects = [multikueue]
    elif gsa:
        subjects = [{"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": gsa}]
    else:
        return out
    out += [
        {
            "apiVersion": rbac_api,
            "kind": "RoleBinding",
            "metadata": meta("crossrail-agent", "agent", ns),
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "crossrail-agent-worker",
            },
            "subjects": subjects,
        }
        for ns in targets
    ]
    return out


def pod_accounts(cfg: DeployConfig, fleet: Fleet, targets: list[str]) -> list[dict[str, Any]]:
    """The ServiceAccounts training pods run as (the fleet's `kubernetes.service_account` and each Kubernetes pool's)
    in each namespace the fleet submits to, bound to a Google service account where `--workload-identity` names one.
    Pods get no API token: training code makes no Kubernetes call."""
    names = {fleet.spec.kubernetes.service_account}
    for pool in fleet.pools:
        if pool.backend == "kubernetes" and pool.kubernetes is not None and pool.kubernetes.service_account:
            names.add(pool.kubernetes.service_account)
    names.discard("default")  # every namespace has it; crossrail does not own it
    return [_service_account(cfg, name, ns, "trainer", token=False) for ns in targets for name in sorted(names)]


def _service_account(cfg: DeployConfig, name: str, namespace: str, component: str, *, token: bool) -> dict[str, Any]:
    meta = _meta(cfg, name, component) | {"namespace": namespace}
    gsa = cfg.gcp_service_account(namespace)
    if gsa:
        meta["annotations"] = {WORKLOAD_IDENTITY: gsa}
    return {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta, "automountServiceAccountToken": token}


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
        "resources": {"requests": dict(cfg.agent_requests if component == "agent" else cfg.serve_requests)},
        "securityContext": {"allowPrivilegeEscalation": False, "runAsNonRoot": True, "runAsUser": UID},
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
                    "serviceAccountName": f"crossrail-{component}",
                    "securityContext": {"runAsGroup": UID, "fsGroup": UID},
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
