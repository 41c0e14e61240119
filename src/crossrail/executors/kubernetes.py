"""The Kubernetes executor: each attempt a Job, JobSet or TrainJob submitted suspended to its Kueue LocalQueue.

Kueue admits (quota, cohorts, preemption); this executor applies, watches and deletes through the
official `kubernetes` client (extra `crossrail[k8s]`, imported only when a client is built) and reads
the Job/JobSet and its Workload with crossrail.executors.kube_status. For re-placement, `withdraw`
deletes an attempt Kueue has not admitted yet and `move` re-renders it for another pool.

With several clusters (the fleet's `clusters:`) the executor submits to the manager cluster, whose Kueue
dispatches the workload through MultiKueue to a worker; the manager's Workload names that worker
(`status.clusterName`, or the MultiKueue admission check's message `... reservation on "<cluster>"`), and the
attempt's object, Workload and pods are read there (its `workers` API, or the cluster's kube context), where
its pods and their exit codes and logs are. Stops and deletions go to the manager, which MultiKueue mirrors. A worker
is reached through its kube context, else as MultiKueue reaches it: the kubeconfig in the manager's Secret
`kueue-system/<clusters[].kubeconfig_secret>`. MultiKueue copies to the worker only the Job/JobSet/TrainJob and its
Workload (Kueue's `SyncJob` of each job adapter, `pkg/controller/jobs/*/..._multikueue_adapter.go`), not what the
pods mount: the executor creates the attempt's report Secret and shipped-config ConfigMap in the team namespace of
every worker itself, and deletes them when the attempt is stopped, withdrawn or forgotten.

The parts of a pipeline admitted together go as one JobSet (`launch_parts`, render/pipeline.py), each part its
own attempt read from its replicated job and pods; it is stopped, and deleted, as one. Parts submitted each as
their own object (as before pipelines were one JobSet) are found by their labels and read as any attempt.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from contextlib import suppress
from typing import Any, Protocol, get_args

from crossrail.core.attempts import AttemptStatus, Capabilities, LaunchRequest, StopReason
from crossrail.core.clock import Clock, SystemClock
from crossrail.core.events import Event
from crossrail.errors import ConflictError, ExecutionError, RetryableError, SpecError, UsageError
from crossrail.executors.kube_status import (
    LABEL_ATTEMPT,
    LABEL_RUN,
    LABEL_RUN_UID,
    STOPPED_BY,
    Observed,
    identity,
    observe,
    observe_part,
    part_attempts,
    run_uid,
    trainer_container,
)
from crossrail.executors.render.kubernetes import (
    CONFIG_MAP_MAX_BYTES,
    JOBSET_API,
    REPORT_SECRET_ENV,
    REPORT_SECRET_KEY,
    config_key,
    config_map_name,
    render_kubernetes,
    report_secret_name,
    shipped_config,
)
from crossrail.executors.render.kueue import KUBECONFIG_KEY, KUEUE_API, KUEUE_NAMESPACE, MULTIKUEUE_CHECK, namespaces
from crossrail.executors.render.pipeline import PART_ENV, PartAttempt, render_part_attempts
from crossrail.executors.render.trainjob import TRAINER_API, TRAINER_GROUP
from crossrail.executors.render.workload import from_launch, object_name
from crossrail.spec import Fleet, Part

KINDS = ("Job", "JobSet", "TrainJob")
WORKER_RETRY_S = 60.0
"""How long a worker whose kubeconfig Secret could not be read is left before it is read again."""
EXTRA = "the Kubernetes executor needs the kubernetes client: pip install 'crossrail[k8s]'"


class KubeApi(Protocol):
    """The few API-server calls the executor makes, on plain dicts (see OfficialApi)."""

    def create(self, obj: dict[str, Any]) -> dict[str, Any]: ...
    def get(self, kind: str, namespace: str, name: str) -> dict[str, Any]: ...
    def list(self, kind: str, namespace: str, selector: str) -> list[dict[str, Any]]: ...
    def patch_annotations(self, kind: str, namespace: str, name: str, annotations: dict[str, str]) -> None: ...
    def delete(self, kind: str, namespace: str, name: str, grace_s: int | None) -> None: ...
    def logs(self, namespace: str, pod: str, container: str) -> str: ...


class NotFound(Exception):
    """The object is not there (HTTP 404)."""


class AlreadyExists(Exception):
    """An object of that name exists (HTTP 409)."""


class KubernetesExecutor:
    """Runs attempts on Kubernetes pools; satisfies crossrail.control.executor.Executor by shape.

    Everything it knows lives in the cluster (labels crossrail.dev/run and crossrail.dev/attempt, the
    annotation crossrail.dev/stopped-by), so a restarted agent sees what the previous one saw.

    Object names are `<run id>-a<n>`, and run ids count up per store, so two stores sharing a namespace name
    their objects alike. The label crossrail.dev/run-uid tells them apart: an object labelled with another
    uid than its run's (`run_uid`, else the uid its launch request carried) is another store's, and is
    neither observed, stopped, forgotten nor adopted by a launch.
    """

    # The kubelet reports every pod's end (no heartbeat timeout is needed to notice one), and Kueue holds
    # workloads it has not admitted, which can be withdrawn untouched.
    capabilities = Capabilities(backends=("kubernetes",), sees_processes=True, can_withdraw=True)

    def __init__(
        self,
        fleet: Fleet,
        *,
        api: KubeApi | None = None,
        clock: Clock | None = None,
        allow_unpinned: bool = False,
        kubeconfig: str | None = None,
        context: str | None = None,
        run_uid: Callable[[str], str | None] | None = None,
        workers: Mapping[str, KubeApi] | None = None,
    ) -> None:
        self.fleet = fleet
        self._workers: dict[str, KubeApi] = dict(workers or {})
        """Worker cluster name -> its API (the manager is `api`); others are reached through their kube context, or
        the kubeconfig Secret MultiKueue reaches them with."""
        self._from_secret: set[str] = set()
        """Workers reached through their kubeconfig Secret: read again after the worker refuses a call."""
        self._unreadable: dict[str, float] = {}
        """Workers whose kubeconfig Secret could not be read, and when (read again after WORKER_RETRY_S)."""
        self._run_uid = run_uid
        """The uid the store gave a run (None: a run made before uids, or one it does not hold)."""
        self._uids: dict[str, str | None] = {}
        """Each run's uid, as its launch request or `run_uid` said."""
        self._api = api
        self._kubeconfig, self._context = kubeconfig, context
        self._clock = clock or SystemClock()
        self.allow_unpinned = allow_unpinned
        self._seen_events: set[tuple[str, int, str, float]] = set()
        self._gone: dict[tuple[str, int], AttemptStatus] = {}

    @property
    def api(self) -> KubeApi:
        if self._api is None:
            self._api = OfficialApi(self._kubeconfig, self._context)
        return self._api

    def worker_api(self, cluster: str) -> KubeApi | None:
        """The API of worker cluster `cluster`: as given, else through its kube context (`clusters[].context`), else
        with the kubeconfig MultiKueue reaches it with (key `kubeconfig` of the manager's Secret
        `kueue-system/<clusters[].kubeconfig_secret>`). None for a cluster the fleet does not name, or whose Secret
        cannot be read now (tried again after WORKER_RETRY_S): the manager's view of it stands."""
        if cluster in self._workers:
            return self._workers[cluster]
        spec = next((c for c in self.fleet.spec.clusters if c.name == cluster), None)
        if spec is None:
            return None
        failed = self._unreadable.get(cluster)
        if failed is not None and self._clock.now() - failed < WORKER_RETRY_S:
            return None
        try:
            if spec.context is not None:
                api = self._workers[cluster] = OfficialApi(self._kubeconfig, spec.context)
                return api
            secret = self.api.get("Secret", KUEUE_NAMESPACE, spec.secret)
            api = OfficialApi(config=_kubeconfig(secret, f"{KUEUE_NAMESPACE}/{spec.secret}"))
        except (NotFound, ExecutionError):
            self._unreadable[cluster] = self._clock.now()
            return None
        self._unreadable.pop(cluster, None)
        self._from_secret.add(cluster)
        self._workers[cluster] = api
        return api

    def _worker_failed(self, cluster: str) -> None:
        """A worker reached through its kubeconfig Secret refused a call: read the Secret again next time (its
        token may have been rotated)."""
        if cluster in self._from_secret:
            self._from_secret.discard(cluster)
            self._workers.pop(cluster, None)

    def render(self, request: LaunchRequest) -> dict[str, Any]:
        """The Job or JobSet `launch` would submit for `request` (pure; nothing is sent)."""
        try:
            pool = self.fleet.pool(request.pool)
        except KeyError as exc:
            raise UsageError(str(exc.args[0])) from None
        return render_kubernetes(from_launch(request, allow_unpinned=self.allow_unpinned), self.fleet, pool)

    def render_parts(self, requests: Sequence[LaunchRequest]) -> dict[str, Any]:
        """The JobSet `launch_parts` would submit for the parts of one pipeline (pure; nothing is sent): each
        request one part's attempt (CROSSRAIL_PART), as many replicas as its chips hold of the part's."""
        parts = []
        for request in requests:
            try:
                pool = self.fleet.pool(request.pool)
            except KeyError as exc:
                raise UsageError(str(exc.args[0])) from None
            name = request.env.get(PART_ENV, "")
            spec = json.loads(request.env.get("CROSSRAIL_SPEC") or "{}").get("spec") or {}
            declared = (spec.get("parts") or {}).get(name)
            if declared is None:
                raise UsageError(f"attempt {request.run}/{request.attempt} is not a part of its run's spec.parts")
            part = Part.model_validate(declared)
            part = part.model_copy(update={"replicas": max(request.chips // part.chips, 1)})
            work = from_launch(request, allow_unpinned=self.allow_unpinned)
            parts.append(PartAttempt(name, part, pool, work))
        return render_part_attempts(parts, self.fleet)

    def launch(self, request: LaunchRequest) -> AttemptStatus:
        """Submit the attempt suspended to its LocalQueue; an attempt already submitted is left as it is.

        An attempt that cannot be rendered for its pool, or that the API server refuses, is `lost` with the
        reason (and stays so in `observe` until forgotten): the agent retries it, avoiding that pool.
        """
        try:
            obj = self.render(request)
        except (SpecError, UsageError) as exc:
            return self._lost(request, f"cannot be rendered for pool {request.pool}: {exc}")
        return self._submit(obj, [request])[0]

    def launch_parts(self, requests: Sequence[LaunchRequest]) -> list[AttemptStatus]:
        """Submit the parts of one pipeline admitted together (one run, each part its own attempt) as one JobSet,
        suspended to the run's LocalQueue, with a replicated job per part (render/pipeline.py); their statuses in
        the order given. Parts that cannot be rendered together are each `lost` with the reason, as in `launch`.
        """
        if not requests:
            return []
        try:
            obj = self.render_parts(requests)
        except (SpecError, UsageError, ValueError) as exc:
            pools = ", ".join(sorted({r.pool for r in requests}))
            return [self._lost(r, f"its pipeline cannot be rendered for pools {pools}: {exc}") for r in requests]
        return self._submit(obj, requests)

    def _submit(self, obj: dict[str, Any], requests: Sequence[LaunchRequest]) -> list[AttemptStatus]:
        """Create `obj` (the object of every request), then each request's report Secret and ConfigMap it owns."""
        uid = requests[0].env.get("CROSSRAIL_RUN_UID") or None
        self._uids[requests[0].run] = uid
        try:
            created: dict[str, Any] | None = self.api.create(obj)
        except AlreadyExists:
            created = None
            self._refuse_anothers(obj, uid)
        except ExecutionError as exc:
            return [self._lost(r, f"the API server refused it: {exc}") for r in requests]
        out = []
        for request in requests:
            secret = request.env.get(REPORT_SECRET_ENV)
            try:
                if secret:
                    self._report_secret(request, obj, created, secret)
            except ExecutionError as exc:
                out.append(self._lost(request, f"the API server refused its report Secret: {exc}"))
                continue
            try:
                self._config_map(request, obj, created)
            except (ExecutionError, SpecError, OSError) as exc:
                out.append(self._lost(request, f"its config could not be shipped as a ConfigMap: {exc}"))
                continue
            found = self._find(request.run, request.attempt)
            if found is None:
                raise RetryableError(f"submitted {obj['kind']} {obj['metadata']['name']} but cannot read it back")
            out.append(found.status)
        return out

    def _refuse_anothers(self, obj: dict[str, Any], uid: str | None) -> None:
        """Raise ConflictError when the object of this name belongs to another run (another store's, sharing the
        namespace): it is never adopted as this attempt."""
        meta = obj["metadata"]
        found = self.api.list(obj["kind"], meta["namespace"], LABEL_RUN)
        there = next((o for o in found if o["metadata"]["name"] == meta["name"]), None)
        if there is None or run_uid(there) == uid:
            return
        theirs = run_uid(there) or "none (a run from before uids)"
        raise ConflictError(
            f"{obj['kind']} {meta['namespace']}/{meta['name']} already exists for another run of that id (run uid "
            f"{theirs}; this run's is {uid or 'none'}): another workspace's store uses this namespace; give each "
            "workspace or team its own namespace (the fleet's spec.kubernetes.namespace and team_namespaces)"
        )

    def _report_secret(
        self, request: LaunchRequest, obj: dict[str, Any], created: dict[str, Any] | None, value: str
    ) -> None:
        """The Secret the pod's CROSSRAIL_REPORT_SECRET refers to, owned by (and deleted with) the attempt's object.

        The object is submitted suspended, so its pods start only after the Secret exists; a relaunch after a
        crash between the two finds the object and makes the Secret it lacks.
        """
        name = report_secret_name(from_launch(request, allow_unpinned=True))
        body = {"type": "Opaque", "stringData": {REPORT_SECRET_KEY: value}}
        secret = {"apiVersion": "v1", "kind": "Secret", "metadata": self._owned(request, obj, created, name), **body}
        with suppress(AlreadyExists):
            self.api.create(secret)
        self._share(request, obj["metadata"]["namespace"], "Secret", name, body)

    def _config_map(self, request: LaunchRequest, obj: dict[str, Any], created: dict[str, Any] | None) -> None:
        """The ConfigMap the pods mount their config from, when it is a file of this machine no volume of the pool
        holds (render.kubernetes.shipped_config): its bytes as read now, owned by (and deleted with) the object."""
        import base64

        from crossrail.spec.loader import read_bounded

        work = from_launch(request, allow_unpinned=True)
        pool = self.fleet.pool(request.pool)
        path = shipped_config(work, pool.kubernetes.volumes if pool.kubernetes is not None else [])
        if path is None:
            return
        raw = read_bounded(path, CONFIG_MAP_MAX_BYTES)
        try:
            data: dict[str, Any] = {"data": {config_key(path): raw.decode("utf-8")}}
        except UnicodeDecodeError:
            data = {"binaryData": {config_key(path): base64.b64encode(raw).decode("ascii")}}
        meta = self._owned(request, obj, created, config_map_name(work))
        config_map = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, **data}
        with suppress(AlreadyExists):
            self.api.create(config_map)
        self._share(request, meta["namespace"], "ConfigMap", meta["name"], data)

    def _share(self, request: LaunchRequest, ns: str, kind: str, name: str, body: dict[str, Any]) -> None:
        """Create `kind` `name` (the attempt's report Secret or ConfigMap, with `body`) in namespace `ns` of every
        worker cluster of a fleet of several: MultiKueue copies only the attempt's object and Workload to the worker
        that admits it, and its pods mount these there. Unowned (no object of the manager's owner uid is on a
        worker), labelled with the attempt, deleted by `_unshare`. The worker of the attempt's pool must take it
        (ExecutionError naming it otherwise: its pods could not start); the others, where the pool's pods cannot
        land, as far as they can be reached."""
        home = self.fleet.pool(request.pool).cluster
        labels = {LABEL_RUN: request.run, LABEL_ATTEMPT: str(request.attempt)}
        uid = self._uids.get(request.run)
        if uid:
            labels[LABEL_RUN_UID] = uid
        for cluster in self.fleet.spec.clusters:
            worker = self.worker_api(cluster.name)
            try:
                if worker is None:
                    raise ExecutionError(
                        "it cannot be reached: give it a kube context (clusters[].context) or let the agent read "
                        f"its kubeconfig Secret {KUEUE_NAMESPACE}/{cluster.secret} on the manager"
                    )
                shared = {
                    "apiVersion": "v1",
                    "kind": kind,
                    "metadata": {"name": name, "namespace": ns, "labels": labels},
                }
                with suppress(AlreadyExists):
                    worker.create(shared | body)
            except ExecutionError as exc:
                if worker is not None:
                    self._worker_failed(cluster.name)
                if cluster.name == home:
                    raise ExecutionError(f"worker cluster {cluster.name}: {exc}") from None

    def _unshare(self, ns: str, run: str, attempts: Sequence[int]) -> None:
        """Delete the workers' copies (`_share`) of the report Secret and ConfigMap of these attempts of `run`; a
        worker that cannot be reached now keeps them (they hold nothing another attempt reads)."""
        for cluster in self.fleet.spec.clusters:
            worker = self.worker_api(cluster.name)
            if worker is None:
                continue
            for attempt in attempts:
                name = object_name(run, attempt)
                try:
                    with suppress(NotFound):
                        worker.delete("Secret", ns, report_secret_name(name), None)
                    with suppress(NotFound):
                        worker.delete("ConfigMap", ns, config_map_name(name), None)
                except ExecutionError:
                    self._worker_failed(cluster.name)
                    break

    def _owned(
        self, request: LaunchRequest, obj: dict[str, Any], created: dict[str, Any] | None, name: str
    ) -> dict[str, Any]:
        """The metadata of an object named `name` the attempt's `obj` owns, so that deleting it deletes that too."""
        meta = obj["metadata"]
        if created is None:
            found = self.api.list(obj["kind"], meta["namespace"], LABEL_RUN)
            created = next((o for o in found if o["metadata"]["name"] == meta["name"]), None)
        if created is None:
            raise RetryableError(f"submitted {obj['kind']} {meta['name']} but cannot read it back")
        owner = {"apiVersion": obj["apiVersion"], "kind": obj["kind"], "name": meta["name"]}
        owner["uid"] = created["metadata"]["uid"]
        labels = {LABEL_RUN: request.run, LABEL_ATTEMPT: str(request.attempt)}
        return {"name": name, "namespace": meta["namespace"], "labels": labels, "ownerReferences": [owner]}

    def _lost(self, request: LaunchRequest, why: str) -> AttemptStatus:
        status = AttemptStatus(request.run, request.attempt, "lost", ended_at=self._clock.now(), detail=why)
        self._gone[(request.run, request.attempt)] = status
        return status

    def observed(self) -> list[Observed]:
        """Every crossrail attempt in the fleet's namespaces, with Kueue's view of it (each part of a pipeline's
        JobSet its own attempt)."""
        out = []
        for ns in namespaces(self.fleet):
            workloads = self.api.list("Workload", ns, "")
            for kind in KINDS:
                for obj in self.api.list(kind, ns, LABEL_RUN):
                    if identity(obj) is not None and self._ours(obj):
                        out += self._observe(ns, obj, workloads)
        return out

    def _observe(self, ns: str, obj: dict[str, Any], workloads: list[dict[str, Any]]) -> list[Observed]:
        """The attempts `obj` holds (one; a pipeline JobSet's, one per part) as Kueue and the kubelet see them: on
        the worker cluster that admitted it, else here."""
        workload = _owned(workloads, obj)
        api = self.api
        there = self._remote(ns, obj, workload)
        if there is not None:
            api, obj = there
            workload = _owned(api.list("Workload", ns, ""), obj)
        ident = identity(obj)
        assert ident is not None  # observed() and _object() pass only labelled objects
        parts = part_attempts(obj)
        if not parts:
            return [observe(obj, workload, self._pods(ns, *ident, api))]
        run = ident[0]
        return [observe_part(obj, part, n, workload, self._pods(ns, run, n, api)) for part, n in parts.items()]

    def _remote(
        self, ns: str, obj: dict[str, Any], workload: dict[str, Any] | None
    ) -> tuple[KubeApi, dict[str, Any]] | None:
        """The worker cluster's API and its copy of `obj`, when MultiKueue dispatched it to a worker crossrail
        reaches and the copy is there; None otherwise (the manager's view stands: MultiKueue syncs its status)."""
        cluster = admitted_cluster(workload)
        api = self.worker_api(cluster) if cluster is not None else None
        ident = identity(obj)
        if api is None or ident is None:
            return None
        try:
            found = api.list(obj["kind"], ns, self._selector(*ident))
        except ExecutionError:  # the worker is unreachable now: its status comes back through the manager
            assert cluster is not None
            self._worker_failed(cluster)
            return None
        return (api, found[0]) if found else None

    def observe(self) -> list[AttemptStatus]:
        seen = {(o.status.run, o.status.attempt): o.status for o in self.observed()}
        for key, status in self._gone.items():  # deleted by stop(), or never created: no object tells its end
            seen.setdefault(key, status)
        return sorted(seen.values(), key=lambda s: (s.run, s.attempt))

    def events(self) -> list[Event]:
        """Kueue transitions (quota reserved, admitted, evicted, finished) not returned before, oldest first."""
        new = []
        for o in self.observed():
            for e in o.events:
                key = (o.status.run, o.status.attempt, str(e.data.get("condition")), e.ts)
                if key not in self._seen_events:
                    self._seen_events.add(key)
                    new.append(e)
        return sorted(new, key=lambda e: e.ts)

    def stop(self, run: str, attempt: int, grace_s: float, reason: StopReason) -> None:
        """Record the reason on the object, then delete it: its pods get SIGTERM and `grace_s` to checkpoint."""
        if grace_s < 0 or reason not in get_args(StopReason):
            raise UsageError(f"stop needs grace_s >= 0 and a stop reason (got {grace_s}, {reason!r})")
        obj = self._object(run, attempt)
        if obj is None:
            return
        kind, ns, name = obj["kind"], obj["metadata"]["namespace"], obj["metadata"]["name"]
        live = [
            o.status.attempt
            for o in self._observe(ns, obj, self.api.list("Workload", ns, ""))
            if o.status.phase in ("pending", "running")
        ]
        if attempt not in live:
            return
        with suppress(NotFound):
            self.api.patch_annotations(kind, ns, name, {STOPPED_BY: reason})
        now = self._clock.now()
        for number in live:  # a pipeline's JobSet stops as one: every part still in it
            detail = f"deleted by crossrail ({reason})"
            if number != attempt:
                detail += f" with its pipeline's JobSet {name}"
            self._gone[(run, number)] = AttemptStatus(
                run, number, "exited", signal=15, stopped_by=reason, ended_at=now, detail=detail
            )
        with suppress(NotFound):
            self.api.delete(kind, ns, name, int(grace_s))
        self._unshare(ns, run, _held(obj))

    def withdraw(self, run: str, attempt: int) -> bool:
        """Delete an attempt Kueue has not given quota yet; False (nothing changed) once it holds quota, or for a
        part of a pipeline's JobSet (its parts are admitted, and placed, together)."""
        found = self._find(run, attempt)
        obj = self._object(run, attempt)
        if found is None or obj is None or not found.pending or part_attempts(obj):
            return False
        with suppress(NotFound):
            self.api.delete(obj["kind"], obj["metadata"]["namespace"], obj["metadata"]["name"], 0)
        self._unshare(obj["metadata"]["namespace"], run, [attempt])
        return True

    def move(self, request: LaunchRequest) -> AttemptStatus:
        """Re-place a pending attempt: withdraw it and submit it rendered for `request.pool` instead."""
        self.render(request)  # refuse a request that cannot render before anything is deleted
        if self._find(request.run, request.attempt) is not None and not self.withdraw(request.run, request.attempt):
            raise ConflictError(f"{request.run}/{request.attempt} already holds quota in Kueue; it cannot be moved")
        return self.launch(request)

    def resize(self, run: str, attempt: int, chips: int) -> bool:
        return False

    def logs(self, run: str, attempt: int) -> str:
        obj = self._object(run, attempt)
        if obj is None:
            return ""
        ns = obj["metadata"]["namespace"]
        api = self.api
        there = self._remote(ns, obj, _owned(self.api.list("Workload", ns, ""), obj))
        if there is not None:  # the pods run on the worker cluster that admitted the workload
            api, obj = there
        parts = []
        for pod in self._pods(ns, run, attempt, api):
            name = pod["metadata"]["name"]
            with suppress(NotFound):
                parts.append(f"==> {name} <==\n" + api.logs(ns, name, trainer_container(pod)))
        return "\n".join(parts)

    def forget(self, run: str, attempt: int) -> None:
        """Delete the ended attempt's object (and its pods) from the cluster; a pipeline's JobSet once none of its
        parts is still waiting or running (a part that succeeded leaves the others running)."""
        self._gone.pop((run, attempt), None)
        obj = self._object(run, attempt)
        if obj is None:
            return
        ns = obj["metadata"]["namespace"]
        if part_attempts(obj):
            others = self._observe(ns, obj, self.api.list("Workload", ns, ""))
            if any(o.status.attempt != attempt and o.status.phase in ("pending", "running") for o in others):
                self._unshare(ns, run, [attempt])
                return
        with suppress(NotFound):
            self.api.delete(obj["kind"], ns, obj["metadata"]["name"], None)
        self._unshare(ns, run, _held(obj))

    def _expected_uid(self, run: str) -> str | None:
        """The uid of this store's run `run`; a uid once known is kept (a run's uid never changes)."""
        if self._uids.get(run) is None and self._run_uid is not None:
            uid = self._run_uid(run)
            if uid is not None:
                self._uids[run] = uid
        return self._uids.get(run)

    def _ours(self, obj: dict[str, Any]) -> bool:
        """Whether `obj` belongs to the run of its run label here: the same uid, when that run has one."""
        ident = identity(obj)
        if ident is None:
            return False
        expected = self._expected_uid(ident[0])
        return expected is None or run_uid(obj) == expected

    def _selector(self, run: str, attempt: int) -> str:
        selector = f"{LABEL_RUN}={run},{LABEL_ATTEMPT}={attempt}"
        uid = self._expected_uid(run)
        return f"{selector},{LABEL_RUN_UID}={uid}" if uid else selector

    def _object(self, run: str, attempt: int) -> dict[str, Any] | None:
        """The object holding attempt `attempt` of `run`: labelled with it, or a pipeline JobSet one of whose
        parts it is."""
        uid = self._expected_uid(run)
        runs = f"{LABEL_RUN}={run},{LABEL_RUN_UID}={uid}" if uid else f"{LABEL_RUN}={run}"
        for ns in namespaces(self.fleet):
            for kind in KINDS:
                for obj in self.api.list(kind, ns, runs):
                    if identity(obj) == (run, attempt) or attempt in part_attempts(obj).values():
                        return obj
        return None

    def _find(self, run: str, attempt: int) -> Observed | None:
        obj = self._object(run, attempt)
        if obj is None:
            return None
        ns = obj["metadata"]["namespace"]
        found = self._observe(ns, obj, self.api.list("Workload", ns, ""))
        return next((o for o in found if o.status.attempt == attempt), None)

    def _pods(self, namespace: str, run: str, attempt: int, api: KubeApi | None = None) -> list[dict[str, Any]]:
        """The pods of attempt `attempt` (a pipeline part's: its replicated job's pods carry its number)."""
        return (api or self.api).list("Pod", namespace, self._selector(run, attempt))


_RESERVED_ON = re.compile(r'reservation on "([^"]+)"')


def admitted_cluster(workload: dict[str, Any] | None) -> str | None:
    """The worker cluster MultiKueue dispatched `workload` to: `status.clusterName`, else the cluster the
    MultiKueue admission check's message names (`The workload got reservation on "<cluster>"`); None before."""
    status = (workload or {}).get("status") or {}
    if status.get("clusterName"):
        return str(status["clusterName"])
    for check in status.get("admissionChecks") or []:
        found = _RESERVED_ON.search(str(check.get("message") or ""))
        if check.get("name") == MULTIKUEUE_CHECK and found:
            return found.group(1)
    return None


def _held(obj: dict[str, Any]) -> list[int]:
    """The attempts `obj` holds: its own, or each part's of a pipeline's JobSet."""
    parts = part_attempts(obj)
    if parts:
        return sorted(parts.values())
    ident = identity(obj)
    return [] if ident is None else [ident[1]]


def _kubeconfig(secret: dict[str, Any], where: str) -> dict[str, Any]:
    """The kubeconfig a MultiKueueCluster's Secret holds (key `kubeconfig`, base64 in `data`), parsed; ExecutionError
    saying what is wrong with it."""
    import base64
    import binascii

    import yaml

    raw = (secret.get("data") or {}).get(KUBECONFIG_KEY)
    try:
        text = base64.b64decode(raw, validate=True).decode("utf-8") if raw else None
        config = yaml.safe_load(text) if text else None
    except (binascii.Error, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise ExecutionError(
            f"the Secret {where} holds no readable kubeconfig under {KUBECONFIG_KEY!r}: {exc}"
        ) from None
    if not isinstance(config, dict):
        raise ExecutionError(f"the Secret {where} holds no kubeconfig under {KUBECONFIG_KEY!r}")
    return config


def _owned(workloads: list[dict[str, Any]], obj: dict[str, Any]) -> dict[str, Any] | None:
    """The Kueue Workload owned by `obj` (Kueue names it after the job and sets an owner reference)."""
    uid = (obj.get("metadata") or {}).get("uid")
    for wl in workloads:
        for ref in (wl.get("metadata") or {}).get("ownerReferences") or []:
            if ref.get("uid") == uid and ref.get("kind") == obj.get("kind"):
                return wl
    return None


_PLURALS = {"JobSet": ("jobset.x-k8s.io", JOBSET_API.split("/")[1], "jobsets")}
_PLURALS["TrainJob"] = (TRAINER_GROUP, TRAINER_API.split("/")[1], "trainjobs")
_PLURALS["Workload"] = ("kueue.x-k8s.io", KUEUE_API.split("/")[1], "workloads")


class OfficialApi:
    """KubeApi over the official `kubernetes` client: kubeconfig (or in-cluster) credentials."""

    def __init__(
        self, kubeconfig: str | None = None, context: str | None = None, *, config: dict[str, Any] | None = None
    ) -> None:
        """Credentials from the kubeconfig file (or in-cluster), or from `config`, a kubeconfig already read (a
        worker's, from its MultiKueue Secret), whose current context it uses."""
        try:
            from kubernetes import client
            from kubernetes import config as kube_config
        except ImportError:
            raise UsageError(EXTRA) from None
        if config is not None:
            own = client.Configuration()
            try:
                kube_config.load_kube_config_from_dict(config, client_configuration=own, persist_config=False)
            except Exception as exc:  # a kubeconfig that names no cluster, user or context it can use
                raise ExecutionError(f"the kubeconfig cannot be used: {exc}") from None
            self._api = client.ApiClient(own)
        else:
            try:
                kube_config.load_kube_config(config_file=kubeconfig, context=context)
            except Exception as exc:  # any failure means: try in-cluster credentials next, unless a context is named
                if context is not None:  # a worker's: in-cluster credentials would be the manager's
                    raise ExecutionError(f"kube context {context} cannot be used: {exc}") from None
                try:
                    kube_config.load_incluster_config()
                except kube_config.ConfigException as exc:
                    raise ExecutionError(f"no Kubernetes credentials: set KUBECONFIG or run in a pod ({exc})") from None
            self._api = client.ApiClient()
        self._client = client
        self._batch = client.BatchV1Api(self._api)
        self._core = client.CoreV1Api(self._api)
        self._custom = client.CustomObjectsApi(self._api)

    def _call(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        from kubernetes.client.exceptions import ApiException

        try:
            return fn(*args, **kwargs)
        except ApiException as exc:
            if exc.status == 404:
                raise NotFound(exc.reason) from None
            if exc.status == 409:
                raise AlreadyExists(exc.reason) from None
            raise ExecutionError(f"Kubernetes API: {exc.status} {exc.reason}: {exc.body}") from None

    def _dict(self, obj: Any) -> dict[str, Any]:
        return dict(self._api.sanitize_for_serialization(obj))

    def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        ns = obj["metadata"]["namespace"]
        if obj["kind"] == "Job":
            created = self._call(self._batch.create_namespaced_job, ns, obj)
        elif obj["kind"] == "Secret":
            created = self._call(self._core.create_namespaced_secret, ns, obj)
        elif obj["kind"] == "ConfigMap":
            created = self._call(self._core.create_namespaced_config_map, ns, obj)
        else:
            group, version, plural = _PLURALS[obj["kind"]]
            created = self._call(self._custom.create_namespaced_custom_object, group, version, ns, plural, obj)
        # The client decodes only the documented 201; a server answering 200 still created the object.
        return self._dict(created) if created is not None else obj

    def get(self, kind: str, namespace: str, name: str) -> dict[str, Any]:
        if kind != "Secret":  # the one object read by name: a worker's kubeconfig
            raise UsageError(f"OfficialApi reads only a Secret by name, not a {kind}")
        return self._dict(self._call(self._core.read_namespaced_secret, name, namespace))

    def list(self, kind: str, namespace: str, selector: str) -> list[dict[str, Any]]:
        if kind == "Job":
            items = self._call(self._batch.list_namespaced_job, namespace, label_selector=selector).items
            return [{**self._dict(i), "apiVersion": "batch/v1", "kind": "Job"} for i in items]
        if kind == "Pod":
            return [
                self._dict(i)
                for i in self._call(self._core.list_namespaced_pod, namespace, label_selector=selector).items
            ]
        group, version, plural = _PLURALS[kind]
        try:
            found = self._call(
                self._custom.list_namespaced_custom_object, group, version, namespace, plural, label_selector=selector
            )
        except NotFound:  # the CRD is not installed: nothing of that kind
            return []
        return [dict(i) for i in found.get("items", [])]

    def patch_annotations(self, kind: str, namespace: str, name: str, annotations: dict[str, str]) -> None:
        body = {"metadata": {"annotations": annotations}}
        if kind == "Job":
            self._call(self._batch.patch_namespaced_job, name, namespace, body)
            return
        group, version, plural = _PLURALS[kind]
        self._call(self._custom.patch_namespaced_custom_object, group, version, namespace, plural, name, body)

    def delete(self, kind: str, namespace: str, name: str, grace_s: int | None) -> None:
        options = {"propagation_policy": "Background", "grace_period_seconds": grace_s}
        if kind == "Job":
            self._call(self._batch.delete_namespaced_job, name, namespace, **options)
            return
        if kind == "Secret":
            self._call(self._core.delete_namespaced_secret, name, namespace, **options)
            return
        if kind == "ConfigMap":
            self._call(self._core.delete_namespaced_config_map, name, namespace, **options)
            return
        group, version, plural = _PLURALS[kind]
        self._call(self._custom.delete_namespaced_custom_object, group, version, namespace, plural, name, **options)

    def logs(self, namespace: str, pod: str, container: str) -> str:
        return str(self._call(self._core.read_namespaced_pod_log, pod, namespace, container=container))
