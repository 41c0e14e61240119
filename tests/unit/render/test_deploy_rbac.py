"""`deploy render` grants the agents exactly what the Kubernetes executor's client calls need (derived here from the
executor's code), gives every pod a ServiceAccount (Workload Identity in the team namespaces) and resource requests,
and names an image the repository's Dockerfile builds (checked statically: no image can be built here)."""

from __future__ import annotations

import ast
import inspect
import json
import re
import shlex
import tomllib
from typing import Any

import pytest

from crossrail.control.ops.deploy import (
    CLUSTER_LABEL,
    KUBECONFIG_RULES,
    MULTIKUEUE_RULES,
    WORKLOAD_IDENTITY,
    DeployConfig,
    kubernetes,
)
from crossrail.errors import UsageError
from crossrail.executors import kubernetes as executor
from crossrail.executors.render.kueue import namespaces
from crossrail.spec import Fleet, parse_document, parse_fleet

from .conftest import ROOT, assert_valid
from .test_deploy import IMAGE, parse_cli
from .test_multikueue_executor import FLEET as TWO_CLUSTERS

GSA = "trainer@acme-research.iam.gserviceaccount.com"
CONTROL_GSA = "crossrail@acme-ops.iam.gserviceaccount.com"
Rule = tuple[str, str, str]  # (API group, resource, verb)
VERBS = {"create": "create", "list": "list", "patch": "patch", "delete": "delete", "read": "get", "replace": "update"}
GROUPS = {"_batch": "batch", "_core": ""}


def _client_calls() -> dict[str, list[tuple[str, str]]]:
    """OfficialApi's methods -> the kubernetes client functions each passes to the API: ("_batch",
    "create_namespaced_job"), ("_custom", "delete_namespaced_custom_object"), ..."""
    tree = ast.parse(inspect.getsource(executor.OfficialApi))
    out: dict[str, list[tuple[str, str]]] = {}
    for fn in tree.body[0].body:  # type: ignore[attr-defined]
        if isinstance(fn, ast.FunctionDef):
            out[fn.name] = [
                (node.value.attr, node.attr)
                for node in ast.walk(fn)
                if isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Attribute)
                and isinstance(node.value.value, ast.Name)
                and node.value.value.id == "self"
                and node.value.attr in ("_batch", "_core", "_custom")
            ]
    return out


def _dict_kind(fn: ast.FunctionDef, name: str) -> str | None:
    """The `"kind"` of the dict literal assigned to `name` in `fn`, if it is one."""
    for node in ast.walk(fn):
        named = isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets)
        if named and isinstance(node.value, ast.Dict):  # type: ignore[attr-defined]
            for key, value in zip(node.value.keys, node.value.values, strict=True):  # type: ignore[attr-defined]
                if isinstance(key, ast.Constant) and key.value == "kind" and isinstance(value, ast.Constant):
                    return str(value.value)
    return None


MANAGER, WORKER = frozenset({"manager", "either"}), frozenset({"worker", "either"})
"""Which calls reach a cluster: the manager's (`self.api`) and a worker's (`worker`), and `api`, which is either."""


def _receiver(node: ast.expr) -> str | None:
    """Which cluster a KubeApi the executor calls is: `self.api` the manager, `worker` a worker cluster, `api` or
    `(api or self.api)` either (the worker that admitted the attempt, else the manager); None for anything else."""
    if isinstance(node, ast.Attribute):
        return (
            "manager" if node.attr == "api" and isinstance(node.value, ast.Name) and node.value.id == "self" else None
        )
    if isinstance(node, ast.Name):
        return {"api": "either", "worker": "worker"}.get(node.id)
    if isinstance(node, ast.BoolOp) and any(_receiver(v) for v in node.values):
        return "either"
    return None


def _param_literals(tree: ast.AST, fn: ast.FunctionDef, param: str) -> list[str]:
    """The literal strings every `self.<fn>(...)` call passes for `fn`'s parameter `param`."""
    names = [a.arg for a in fn.args.args]
    if param not in names:
        return []
    index = names.index(param) - 1  # after self
    out = []
    for node in ast.walk(tree):
        call = node if isinstance(node, ast.Call) else None
        if call and isinstance(call.func, ast.Attribute) and call.func.attr == fn.name and len(call.args) > index:
            arg = call.args[index]
            assert isinstance(arg, ast.Constant), f"self.{fn.name} is called with a {param} that is not a literal"
            out.append(str(arg.value))
    return out


def _create_kinds(tree: ast.AST, fn: ast.FunctionDef, first: ast.expr | None) -> list[str]:
    """The kinds a `create(obj)` sends: `obj` (or `obj | more`) a dict literal assigned in `fn`, whose "kind" is a
    literal or a parameter of `fn` (then every literal its callers pass)."""
    if isinstance(first, ast.BinOp):
        first = first.left
    if not isinstance(first, ast.Name):
        return []
    kind = _dict_kind(fn, first.id)
    if kind is not None:
        return [kind]
    param = _dict_kind_name(fn, first.id)
    return _param_literals(tree, fn, param) if param else []


def _dict_kind_name(fn: ast.FunctionDef, name: str) -> str | None:
    """The variable a dict literal assigned to `name` in `fn` takes its `"kind"` from, if it is one."""
    for node in ast.walk(fn):
        named = isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets)
        if named and isinstance(node.value, ast.Dict):  # type: ignore[attr-defined]
            for key, value in zip(node.value.keys, node.value.values, strict=True):  # type: ignore[attr-defined]
                if isinstance(key, ast.Constant) and key.value == "kind" and isinstance(value, ast.Name):
                    return value.id
    return None


def _executor_calls(where: frozenset[str] = MANAGER) -> set[tuple[str, str | None]]:
    """(KubeApi method, kind) of every `<api>.<method>(...)` in KubernetesExecutor on a cluster of `where` (see
    _receiver): a literal kind as written, a dict literal's kind for `create`, `None` for `logs`, and otherwise one of
    its workload KINDS (what it renders, lists or was handed back)."""
    tree = ast.parse(inspect.getsource(executor.KubernetesExecutor))
    out: set[tuple[str, str | None]] = set()
    for fn in ast.walk(tree):
        if not isinstance(fn, ast.FunctionDef):
            continue
        for node in ast.walk(fn):
            func = node.func if isinstance(node, ast.Call) else None
            if not (isinstance(func, ast.Attribute) and _receiver(func.value) in where):
                continue
            assert isinstance(node, ast.Call)
            first = node.args[0] if node.args else None
            kinds: list[str | None] = list(executor.KINDS)
            if func.attr == "logs":
                kinds = [None]
            elif isinstance(first, ast.Constant) and isinstance(first.value, str):
                kinds = [first.value]
            elif func.attr == "create" and _create_kinds(tree, fn, first):
                kinds = list(_create_kinds(tree, fn, first))
            out |= {(func.attr, k) for k in kinds}
    return out


def _rule(api: str, call: str, kind: str | None) -> Rule | None:
    """The RBAC rule one client call needs for `kind`; None when the call serves other kinds."""
    verb, resource = re.fullmatch(r"([a-z]+)_namespaced_(\w+)", call).groups()  # type: ignore[union-attr]
    if api == "_custom":
        if kind not in executor._PLURALS:
            return None
        group, _version, plural = executor._PLURALS[kind]
        return group, plural, VERBS[verb]
    singular, *sub = resource.replace("config_map", "configmap").split("_")  # one word: configmaps
    if kind is not None and singular != kind.lower():
        return None
    return GROUPS[api], "/".join([singular + "s", *sub]), VERBS[verb]


def needed_rules(where: frozenset[str] = MANAGER) -> set[Rule]:
    """What the executor's calls on the clusters of `where` need: each (method, kind) it calls, through the client
    calls OfficialApi makes."""
    client = _client_calls()
    out: set[Rule] = set()
    for method, kind in _executor_calls(where):
        rules = {r for api, call in client[method] if (r := _rule(api, call, kind)) is not None}
        assert rules, f"the executor calls {method}({kind}) but OfficialApi makes no client call for it"
        out |= rules
    return out


def granted(role: dict[str, Any]) -> set[Rule]:
    return {
        (g, r, v) for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"] for v in rule["verbs"]
    }


def test_the_derivation_reads_the_executors_calls() -> None:
    """The derivation itself: the calls a reader of kubernetes.py finds there."""
    calls = _executor_calls()
    assert ("create", "Secret") in calls
    assert ("list", "Workload") in calls
    assert ("list", "Pod") in calls
    assert ("logs", None) in calls
    assert {("delete", k) for k in executor.KINDS} <= calls
    needed = needed_rules()
    assert ("", "pods/log", "get") in needed
    assert ("batch", "jobs", "patch") in needed
    assert ("kueue.x-k8s.io", "workloads", "list") in needed
    assert ("kueue.x-k8s.io", "workloads", "create") not in needed  # the executor never creates a Workload


KUBECONFIG_READ = {("", "secrets", "get")}
"""The one manager call not in the agents' ClusterRole: a worker's kubeconfig Secret, read by name in kueue-system."""


def test_the_agents_role_grants_exactly_the_verbs_the_executors_client_calls_need(matrix_fleet: Fleet) -> None:
    objs = kubernetes(DeployConfig(IMAGE), matrix_fleet, "", "")
    (role,) = [o for o in objs if o["kind"] == "ClusterRole"]
    assert granted(role) == needed_rules() - KUBECONFIG_READ
    assert {(g, r, v) for g, r, vs in KUBECONFIG_RULES for v in vs} == KUBECONFIG_READ
    assert not [o for o in objs if o["kind"] in ("ClusterRoleBinding", "Role")]  # granted per namespace only
    bindings = [o for o in objs if o["kind"] == "RoleBinding"]
    assert sorted(b["metadata"]["namespace"] for b in bindings) == namespaces(matrix_fleet)
    for binding in bindings:
        assert binding["roleRef"]["name"] == role["metadata"]["name"]
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "crossrail-agent", "namespace": "crossrail"}]


def test_every_object_validates_and_every_pod_has_an_account_requests_and_a_user(matrix_fleet: Fleet) -> None:
    cfg = DeployConfig(IMAGE, workload_identity=(CONTROL_GSA, f"align={GSA}"))
    objs = kubernetes(cfg, matrix_fleet, "fleet: x\n", "policy: y\n")
    for obj in objs:
        assert_valid(obj)
    accounts = {(o["metadata"]["namespace"], o["metadata"]["name"]): o for o in objs if o["kind"] == "ServiceAccount"}
    for deployment in (o for o in objs if o["kind"] == "Deployment"):
        pod = deployment["spec"]["template"]["spec"]
        assert ("crossrail", pod["serviceAccountName"]) in accounts
        (container,) = pod["containers"]
        assert set(container["resources"]["requests"]) == {"cpu", "memory"}
        assert container["securityContext"]["runAsUser"] == 10001  # the Dockerfile's USER, numeric for runAsNonRoot
    assert accounts["crossrail", "crossrail-serve"]["automountServiceAccountToken"] is False
    assert accounts["crossrail", "crossrail-agent"]["automountServiceAccountToken"] is True
    # the training pods' accounts (the fleet's and the spot pool's) in every namespace the fleet submits to
    for ns in namespaces(matrix_fleet):
        for name in ("trainer-wi", "spot-trainer"):
            account = accounts[ns, name]
            assert account["automountServiceAccountToken"] is False
            expected = GSA if ns == "align" else CONTROL_GSA
            assert account["metadata"]["annotations"] == {WORKLOAD_IDENTITY: expected}


def test_a_fleet_without_kubernetes_pools_grants_the_agents_nothing(matrix_fleet: Fleet) -> None:
    local = matrix_fleet.model_copy(
        update={
            "spec": matrix_fleet.spec.model_copy(
                update={"pools": [p for p in matrix_fleet.pools if p.backend != "kubernetes"]}
            )
        }
    )
    objs = kubernetes(DeployConfig(IMAGE), local, "", "")
    kinds = [o["kind"] for o in objs]
    assert "ClusterRole" not in kinds
    assert "RoleBinding" not in kinds
    agent = next(o for o in objs if o["kind"] == "ServiceAccount" and o["metadata"]["name"] == "crossrail-agent")
    assert agent["automountServiceAccountToken"] is False


@pytest.mark.parametrize(
    ("identity", "says"),
    [
        pytest.param(("trainer@gmail.com",), "name a Google service account", id="not a GCP service account"),
        pytest.param((GSA, CONTROL_GSA), "every namespace is given twice", id="two defaults"),
        pytest.param((f"Align_Team={GSA}",), "is not a namespace", id="a namespace that cannot be one"),
        pytest.param((f"nowhere={GSA}",), "no namespace nowhere here", id="a namespace the fleet does not use"),
    ],
)
def test_a_bad_workload_identity_is_refused_with_its_fix(
    matrix_fleet: Fleet, identity: tuple[str, ...], says: str
) -> None:
    with pytest.raises(UsageError, match=says):
        kubernetes(DeployConfig(IMAGE, workload_identity=identity), matrix_fleet, "", "")


def test_bad_resource_requests_are_refused() -> None:
    with pytest.raises(UsageError, match="--agent-requests cpu=lots"):
        DeployConfig(IMAGE, agent_requests=(("cpu", "lots"),)).check()


def dockerfile() -> list[tuple[str, str]]:
    """(instruction, arguments) of the repository's Dockerfile, continuation lines joined, comments dropped."""
    text = re.sub(r"\\\n", " ", (ROOT / "Dockerfile").read_text())
    lines = [line.strip() for line in text.splitlines() if line.strip() and not line.strip().startswith("#")]
    return [(line.split(None, 1)[0].upper(), line.split(None, 1)[1]) for line in lines]


def test_the_dockerfile_pins_its_base_installs_from_the_constraints_and_runs_a_crossrail_command() -> None:
    """Static: no image can be built on these machines (no registry), so the file is read, not built."""
    steps = dockerfile()
    (base,) = [args for op, args in steps if op == "FROM"]
    assert re.fullmatch(r"python:3\.11[\w.-]*@sha256:[0-9a-f]{64}", base), base
    installs = [args for op, args in steps if op == "RUN" and "pip install" in args and "-c " in args]
    assert installs, "no pip install -c constraints.txt"
    for command in (c for i in installs for c in i.split("&&") if "-c " in c):
        words = shlex.split(command)
        assert words[words.index("-c") + 1].endswith("constraints.txt")
        assert (ROOT / "constraints.txt").exists()
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    (entry,) = [
        shlex.split(args.replace("[", "").replace("]", "").replace(",", " "))
        for op, args in steps
        if op == "ENTRYPOINT"
    ]
    assert entry == ["crossrail"]
    assert "crossrail" in project["scripts"]
    (cmd,) = [args for op, args in steps if op == "CMD"]
    parse_cli(json.loads(cmd))  # the default command, a JSON array, parses as the real CLI parses it
    (user,) = [args for op, args in steps if op == "USER"]
    assert user.split(":")[0] == "10001"
    extras = re.search(r"\[([\w,]+)\]'", " ".join(installs))
    assert extras is not None
    assert set(extras.group(1).split(",")) <= set(project["optional-dependencies"])
    assert {"api", "k8s", "postgres"} <= set(extras.group(1).split(","))


def test_each_worker_cluster_gets_what_the_executor_and_multikueue_do_there() -> None:
    """MultiKueue: the agents read each worker as the executor's calls on worker APIs need (derived, as for the
    manager), in every team namespace; the manager's MultiKueue gets Kueue's role for the kinds crossrail submits;
    the agents read the kubeconfig Secret of a worker without a kube context, by name, on the manager."""
    fleet = parse_fleet(parse_document(TWO_CLUSTERS, "two-regions.yaml"))
    objs = kubernetes(DeployConfig(IMAGE, workload_identity=(CONTROL_GSA,)), fleet, "", "")
    for obj in objs:
        assert_valid(obj)
    manager = [o for o in objs if CLUSTER_LABEL not in o["metadata"]["labels"]]
    (agent_role,) = [o for o in manager if o["kind"] == "ClusterRole"]
    (kubeconfigs,) = [o for o in manager if o["kind"] == "Role"]
    assert kubeconfigs["metadata"]["namespace"] == "kueue-system"
    assert [r["resourceNames"] for r in kubeconfigs["rules"]] == [["eu-west-kubeconfig"]]  # us-east has a context
    assert granted(agent_role) | granted(kubeconfigs) == needed_rules()

    worker_calls = needed_rules(WORKER)
    assert ("", "secrets", "create") in worker_calls  # what MultiKueue does not copy, the executor creates there
    assert ("", "configmaps", "delete") in worker_calls
    assert ("batch", "jobs", "create") not in worker_calls  # MultiKueue creates the copy, not crossrail
    for cluster in ("us-east", "eu-west"):
        there = {
            (o["kind"], o["metadata"]["name"]): o for o in objs if o["metadata"]["labels"].get(CLUSTER_LABEL) == cluster
        }
        assert granted(there["ClusterRole", "crossrail-agent-worker"]) == worker_calls
        multikueue = granted(there["ClusterRole", "crossrail-multikueue"])
        for kind in executor.KINDS:  # Kueue's job adapters get, create and delete the copy; its status is read
            group, plural = ("batch", "jobs") if kind == "Job" else executor._PLURALS[kind][::2]
            assert {(group, plural, v) for v in ("create", "delete", "get", "list", "watch")} <= multikueue
            assert (group, f"{plural}/status", "get") in multikueue
        assert ("kueue.x-k8s.io", "workloads/status", "patch") in multikueue
        assert granted(there["ClusterRole", "crossrail-multikueue"]) == {
            (g, r, v) for g, r, vs in MULTIKUEUE_RULES for v in vs
        }
        (binding,) = [o for o in there.values() if o["kind"] == "ClusterRoleBinding"]
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": "crossrail-multikueue", "namespace": "kueue-system"}
        ]
        assert there["Secret", "crossrail-multikueue-token"]["type"] == "kubernetes.io/service-account-token"
        bindings = [o for o in there.values() if o["kind"] == "RoleBinding"]
        assert sorted(b["metadata"]["namespace"] for b in bindings) == namespaces(fleet)
        (subjects,) = {json.dumps(b["subjects"]) for b in bindings}
        if cluster == "eu-west":  # no context: the executor uses MultiKueue's kubeconfig
            assert json.loads(subjects) == binding["subjects"]
        else:  # through a context, as the agents' Google service account (GKE names it by its email)
            assert json.loads(subjects) == [
                {"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": CONTROL_GSA}
            ]

    single = kubernetes(
        DeployConfig(IMAGE), fleet.model_copy(update={"spec": fleet.spec.model_copy(update={"clusters": []})}), "", ""
    )
    assert not [o for o in single if CLUSTER_LABEL in o["metadata"]["labels"] or o["kind"] == "Role"]
