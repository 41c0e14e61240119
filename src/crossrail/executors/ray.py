"""The Ray executor: each attempt a placement group of one bundle per host (or per worker), each a detached Ray actor.

crossrail admits; Ray places. An attempt asks Ray for one bundle per host, each holding the pool's chip
resource (e.g. `{"tpu-v5p": 4}`) and extra resources, with the pool's node labels as bundle label selectors;
several hosts are placed STRICT_SPREAD, so a gang lands whole on distinct nodes or not at all. A
data-parallel run of N workers (`spec.parallelism.data`, chips a multiple of N) is one placement group of N
bundles of chips/N, placed as the pool's `placement_strategy` says (PACK by default), all or nothing; each
worker gets torch's and crossrail's rendezvous variables (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR,
MASTER_PORT, CROSSRAIL_COORDINATOR), worker 0's node coordinating. While Ray has
no room the attempt is `pending`; after the pool's placement timeout its placement group is removed and the
attempt is `unplaced`, so the agent puts the run back in its queue: nothing is ever half-started in Ray.
Once placed, each host runs the command as a subprocess of its Ray worker (crossrail.executors.ray_host).

Everything the agent needs survives it: records live under `state_dir/<run>/<attempt>/` (`request.json`,
`placed.json`, `stop.json`, `status.json`, `forgotten.json` and the logs fetched so far), and the actors and
placement groups are detached and named after the workspace, so a new agent finds them in the crossrail
namespace. Ray is imported lazily; without it a ray pool fails with one line naming `crossrail[ray]`.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import signal
import socket
from collections.abc import Callable, Mapping
from contextlib import suppress
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, cast

from crossrail.core.attempts import AttemptPhase, AttemptStatus, Capabilities, LaunchRequest, StopReason
from crossrail.core.clock import Clock, SystemClock
from crossrail.core.ids import attempt_id
from crossrail.errors import ConflictError, ExecutionError, UsageError
from crossrail.executors.attempt_dirs import FORGOTTEN, AttemptDirs, stop_reason
from crossrail.executors.supervisor import START_FAILED, read_json, write_json_atomic, write_json_once

REQUEST, PLACED, STOP, STATUS = "request.json", "placed.json", "stop.json", "status.json"
LOG_OFFSETS = "log_offsets.json"
RECORDS = (REQUEST, STOP, STATUS, LOG_OFFSETS)  # placed.json and the logs stay: where it ran, what it said
INSTALL = "the ray backend needs Ray; install it with: pip install 'crossrail[ray]'"

LAUNCH_PLACE_WAIT_S = 2.0  # how long launch() waits for Ray to place the attempt before saying `pending`
START_WAIT_S = 10.0  # how long one pass waits for the hosts' actors to start the command (it tries again later)
CALL_TIMEOUT_S = 10.0  # one status or stop call to an actor
CONNECT_TIMEOUT_S = 5.0  # the first TCP connection to the cluster's address
RECORD_WAIT_S = 10.0  # an attempt directory without request.json older than this was an interrupted launch
DEFAULT_LOG_MAX_BYTES = 8 * 2**20  # output an actor keeps for the executor to fetch
RENDEZVOUS_PORTS = (29500, 39500)  # worker 0's torch store port is in this range, JAX's coordinator the next


@dataclass(frozen=True)
class RayPool:
    """What the executor needs of one `backend: ray` pool (the fleet's `ray:` block, defaults filled in)."""

    name: str
    address: str
    chip_resource: str
    chips_per_host: int
    resources: dict[str, float] = field(default_factory=dict)
    label_selector: dict[str, str] = field(default_factory=dict)
    namespace: str = "crossrail"
    placement_timeout_s: float = 60.0
    placement_strategy: str = "PACK"
    """How the bundles of a data-parallel run's workers are placed (Ray's PACK, SPREAD, STRICT_*)."""

    def bundles(self, chips: int, workers: int = 1) -> list[dict[str, float]]:
        """One bundle per worker of chips/workers when the chips split evenly into workers that each fit a
        host; else one bundle per host: its chips as the chip resource. Both with the pool's extra resources."""
        if workers > 1 and chips % workers == 0 and chips // workers <= self.chips_per_host:
            return [{self.chip_resource: float(chips // workers), **self.resources} for _ in range(workers)]
        hosts = max(1, math.ceil(chips / self.chips_per_host))
        per_host = [min(self.chips_per_host, chips - i * self.chips_per_host) for i in range(hosts)]
        return [{self.chip_resource: float(n), **self.resources} for n in per_host]


class RayExecutor(AttemptDirs):
    """Runs attempts on one Ray cluster; satisfies crossrail.control.executor.Executor. One agent per `state_dir`."""

    capabilities = Capabilities(backends=("ray",), sees_processes=True, can_withdraw=False)  # Ray knows its actors

    def __init__(
        self,
        state_dir: Path,
        pools: Callable[[], Mapping[str, RayPool]],
        *,
        log_max_bytes: int = DEFAULT_LOG_MAX_BYTES,
        keep_logs: int = 200,
        clock: Clock | None = None,
    ) -> None:
        self.state_dir = Path(state_dir).absolute()
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.pools = pools
        self._clock = clock or SystemClock()
        self._wall = SystemClock()  # compared with file modification times, which are wall-clock
        self.log_max_bytes = log_max_bytes
        self.keep_logs = keep_logs
        # Names are unique per workspace, so two workspaces can share one Ray cluster.
        self.tag = hashlib.sha256(str(self.state_dir).encode()).hexdigest()[:8]
        self._ray: Any = None
        self._namespace = "crossrail"
        self._handles: dict[str, Any] = {}

    # --- the protocol ------------------------------------------------------------------------------

    def launch(self, request: LaunchRequest) -> AttemptStatus:
        """0. reach Ray, 1. claim the directory, 2. record the request, 3. ask Ray for a placement group,
        4. start its hosts if Ray placed it at once. An unreachable cluster raises, having changed nothing."""
        pool = self._pool(request.pool)
        directory = self._dir(request.run, request.attempt)
        ray = self._connect()
        directory.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.mkdir(directory)
        except FileExistsError:
            return self._known(directory)
        workers = data_parallel(request)
        bundles = pool.bundles(request.chips, workers)
        per_worker = workers > 1 and len(bundles) == workers
        name = self.group_name(request.run, request.attempt)
        record = {
            "request": asdict(request),
            "pool": asdict(pool),
            "bundles": bundles,
            "workers": workers if per_worker else 1,
            "strategy": pool.placement_strategy if per_worker else "PACK" if len(bundles) == 1 else "STRICT_SPREAD",
            "placement_group": name,
            "actors": [f"{name}-h{i}" for i in range(len(bundles))],
            "launched_at": self._clock.now(),
        }
        write_json_atomic(directory / REQUEST, record)
        from ray.util.placement_group import placement_group

        selector = [dict(pool.label_selector)] * len(bundles) if pool.label_selector else None
        try:
            group = placement_group(
                bundles, strategy=record["strategy"], name=name, lifetime="detached", bundle_label_selector=selector
            )
        except (ValueError, TypeError, ray.exceptions.RayError) as exc:  # e.g. a label Ray does not accept
            detail = f"Ray refused the placement group: {_first_line(exc)}; check the pool's ray settings"
            return self._known_end(directory, {"phase": "exited", "exit_code": START_FAILED, "detail": detail})
        with suppress(ray.exceptions.GetTimeoutError):
            group.wait(LAUNCH_PLACE_WAIT_S)
        return self._known(directory)

    def stop(self, run: str, attempt: int, grace_s: float, reason: StopReason) -> None:
        """Record the stop (the first reason wins) and ask every host to SIGTERM its command, SIGKILL after grace."""
        self._check_stop(grace_s, reason)
        directory = self._dir(run, attempt)
        status = self._status(directory) if directory.is_dir() else None
        if status is None or status.phase not in ("pending", "running"):
            return
        write_json_once(directory / STOP, {"reason": reason, "grace_s": grace_s, "requested_at": self._clock.now()})
        if status.phase == "pending":
            self._status(directory)  # settles it: the placement group is removed, nothing started
            return
        record = read_json(directory / REQUEST) or {}
        stop = read_json(directory / STOP) or {}
        ray = self._connect()
        calls = []
        for name in record.get("actors", []):
            handle = self._actor(name)
            if handle is not None:
                calls.append(handle.stop.remote(float(stop.get("grace_s", grace_s)), str(stop.get("reason", reason))))
        for ref in calls:  # a dead host shows in observe(); only delivery is waited for here
            with suppress(ray.exceptions.RayError):
                ray.get(ref, timeout=CALL_TIMEOUT_S)

    def resize(self, run: str, attempt: int, chips: int) -> bool:
        """Ray cannot resize a placement group in place; an elastic run changes size by a new attempt."""
        return False

    def withdraw(self, run: str, attempt: int) -> bool:
        """A placement group Ray has not placed is released by the attempt's own placement timeout instead."""
        return False

    def logs(self, run: str, attempt: int) -> str:
        """The output fetched from the attempt's hosts so far (host 0 first), kept after the attempt ends."""
        directory = self._dir(run, attempt)
        files = sorted(directory.glob("log*.txt"), key=lambda p: _host_of_log(p.name)) if directory.is_dir() else []
        if len(files) <= 1:
            return "".join(p.read_text(errors="replace") for p in files)
        return "".join(f"--- host {_host_of_log(p.name)} ---\n{p.read_text(errors='replace')}" for p in files)

    def forget(self, run: str, attempt: int) -> None:
        """Drop the records of an ended attempt (its logs stay) and release whatever Ray still holds for it."""
        directory = self._dir(run, attempt)
        if not directory.is_dir():
            return
        if not (directory / FORGOTTEN).exists():
            status = self._status(directory)
            if status is not None and status.phase in ("pending", "running"):
                raise ConflictError(
                    f"attempt {attempt_id(run, attempt)} is still {status.phase}; stop it and wait for its end"
                )
            self._release(directory)
            write_json_atomic(directory / FORGOTTEN, {"forgotten_at": self._clock.now()})
        for name in RECORDS:
            (directory / name).unlink(missing_ok=True)
        self._prune()

    def placement(self, run: str, attempt: int) -> list[dict[str, Any]]:
        """Where each host of the attempt ran: node id and node labels, as seen from inside its Ray worker."""
        placed = read_json(self._dir(run, attempt) / PLACED) or {}
        return list(placed.get("hosts", []))

    # --- one attempt's state -----------------------------------------------------------------------

    def _status(self, directory: Path) -> AttemptStatus | None:
        """What the records and Ray say of one attempt; settles what can be settled (placement, ends)."""
        if (directory / FORGOTTEN).exists():
            return None
        ended = self._recorded_end(directory)
        if ended is not None:
            return ended
        record = read_json(directory / REQUEST)
        if record is None:
            if self._wall.now() - directory.stat().st_mtime < RECORD_WAIT_S:
                return self._attempt_status(directory, "pending", detail="launching")
            return self._end(directory, {"phase": "lost", "detail": "never launched: the launch was interrupted"})
        if not (directory / PLACED).exists():
            return self._place(directory, record)
        return self._poll(directory, record)

    def _place(self, directory: Path, record: dict[str, Any]) -> AttemptStatus | None:
        """A placed group gets its hosts started; an unplaced one waits, until its timeout removes it."""
        ray = self._connect()
        from ray.util import placement_group_table
        from ray.util.placement_group import get_placement_group

        stop = read_json(directory / STOP)
        if stop is not None:
            self._release(directory)
            end = {"phase": "exited", "signal": int(signal.SIGTERM), "stopped_by": stop.get("reason")}
            return self._end(directory, {**end, "detail": "stopped before Ray placed it"})
        try:
            group = get_placement_group(record["placement_group"])
        except ValueError:
            self._release(directory)
            return self._end(directory, {"phase": "lost", "detail": "its placement group is gone (interrupted launch)"})
        if placement_group_table(group).get("state") != "CREATED":
            waited_s = self._clock.now() - float(record["launched_at"])
            pool = record["pool"]
            if waited_s < float(pool["placement_timeout_s"]):
                return self._attempt_status(
                    directory, "pending", detail=f"waiting for Ray to place it ({waited_s:.0f} s)"
                )
            self._release(directory)
            return self._end(directory, {"phase": "unplaced", "detail": _unplaced(record, waited_s)})
        return self._start_hosts(ray, directory, record, group)

    def _start_hosts(self, ray: Any, directory: Path, record: dict[str, Any], group: Any) -> AttemptStatus | None:
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        from crossrail.executors.ray_host import AttemptHost

        actor_class = ray.remote(AttemptHost)
        hosts = len(record["bundles"])
        ranks = _rendezvous(ray, group, record) if record.get("workers", 1) > 1 else [{}] * hosts
        handles = []
        for i, (name, bundle) in enumerate(zip(record["actors"], record["bundles"], strict=True)):
            strategy = PlacementGroupSchedulingStrategy(group, placement_group_bundle_index=i)
            custom = {k: v for k, v in bundle.items() if k not in ("CPU", "GPU", "memory")}
            options = {
                "name": name,
                "namespace": self._namespace,
                "lifetime": "detached",
                "get_if_exists": True,
                "max_restarts": 0,
                "num_cpus": bundle.get("CPU", 0),
                "num_gpus": bundle.get("GPU", 0),
                "resources": custom,
                "scheduling_strategy": strategy,
            }
            request = {**record["request"], "env": {**record["request"]["env"], **ranks[i]}}
            handle = actor_class.options(**options).remote(request, i, hosts, self.log_max_bytes)
            self._handles[name] = handle
            handles.append(handle)
        try:
            where = ray.get([h.start.remote() for h in handles], timeout=START_WAIT_S)
        except ray.exceptions.GetTimeoutError:
            return self._attempt_status(directory, "pending", detail="placed; its hosts are starting")
        except ray.exceptions.RayError as exc:
            self._release(directory)
            return self._end(directory, {"phase": "lost", "detail": f"a host could not start: {_first_line(exc)}"})
        write_json_once(directory / PLACED, {"placed_at": self._clock.now(), "hosts": where})
        return self._poll(directory, record)

    def _poll(self, directory: Path, record: dict[str, Any]) -> AttemptStatus | None:
        """Ask every host how it is and fetch its new output; an end of any host ends the attempt."""
        ray = self._connect()
        results: list[dict[str, Any] | str] = []
        for i, name in enumerate(record["actors"]):
            handle = self._actor(name)
            if handle is None:
                results.append(f"its Ray actor {name} is gone")
                continue
            try:
                results.append(ray.get(handle.status.remote(_log_offset(directory, i)), timeout=CALL_TIMEOUT_S))
            except ray.exceptions.GetTimeoutError:
                results.append({"phase": "running", "detail": "not answering"})
            except ray.exceptions.RayError as exc:
                results.append(f"the Ray worker running host {i} died: {_first_line(exc)}")
        for i, result in enumerate(results):
            if isinstance(result, dict) and result.get("log"):
                _append_log(directory, i, result)
        started = [r["started_at"] for r in results if isinstance(r, dict) and r.get("started_at") is not None]
        started_at = min(started) if started else None
        end = _gang_end(results)
        if end is None:
            stop = read_json(directory / STOP)
            detail = f"stopping ({stop.get('reason')}, grace {stop.get('grace_s')} s)" if stop else ""
            return self._attempt_status(directory, "running", started_at=started_at, detail=detail)
        status = self._end(directory, {**end, "started_at": started_at})
        self._release(directory)  # the end is recorded: free the chips now, not when the agent forgets it
        return status

    def _end(self, directory: Path, end: dict[str, Any]) -> AttemptStatus | None:
        end = {"ended_at": self._clock.now(), **end}
        if end.get("stopped_by") is None and end["phase"] == "exited":
            stop = read_json(directory / STOP)
            if stop is not None and (end.get("signal") is not None or end.get("exit_code") not in (None, 0)):
                end["stopped_by"] = stop.get("reason")
        if write_json_once(directory / STATUS, end) and end.get("exit_code") == START_FAILED and end.get("detail"):
            with open(directory / _log_name(0), "ab") as f:  # the command never ran: say why where logs are read
                f.write(f"crossrail: {end.get('detail')}\n".encode())
        return self._recorded_end(directory)

    def _recorded_end(self, directory: Path) -> AttemptStatus | None:
        end = read_json(directory / STATUS)
        if end is None:
            return None
        return self._attempt_status(
            directory,
            cast(AttemptPhase, end["phase"]),
            exit_code=end.get("exit_code"),
            signal=end.get("signal"),
            stopped_by=stop_reason(end.get("stopped_by")),
            started_at=end.get("started_at"),
            ended_at=end.get("ended_at"),
            detail=end.get("detail") or "",
        )

    def _attempt_status(self, directory: Path, phase: AttemptPhase, **fields: Any) -> AttemptStatus:
        fields.setdefault("stopped_by", stop_reason((read_json(directory / STOP) or {}).get("reason")))
        return AttemptStatus(run=directory.parent.name, attempt=int(directory.name), phase=phase, **fields)

    def _known_end(self, directory: Path, end: dict[str, Any]) -> AttemptStatus:
        self._end(directory, end)
        return self._known(directory)

    def _release(self, directory: Path) -> None:
        """Kill the attempt's actors (their commands die with them) and remove its placement group; idempotent."""
        record = read_json(directory / REQUEST)
        if record is None:
            return
        ray = self._connect()
        from ray.util.placement_group import get_placement_group, remove_placement_group

        for name in record.get("actors", []):
            handle = self._actor(name)
            self._handles.pop(name, None)
            if handle is not None:
                with suppress(ray.exceptions.RayError, ValueError):
                    ray.kill(handle, no_restart=True)
        with suppress(ValueError, ray.exceptions.RayError):
            remove_placement_group(get_placement_group(record["placement_group"]))

    # --- Ray ---------------------------------------------------------------------------------------

    def _connect(self) -> Any:
        """Connect this process to the pools' Ray cluster once (all ray pools of a fleet share one)."""
        if self._ray is not None:
            return self._ray
        try:
            import ray
        except ImportError:
            raise ExecutionError(INSTALL) from None
        pools = list(self.pools().values())
        clusters = sorted({(p.address, p.namespace) for p in pools})
        if len(clusters) > 1:
            named = ", ".join(f"{p.name}: {p.address} (namespace {p.namespace})" for p in pools)
            raise UsageError(f"the ray pools name {len(clusters)} clusters ({named}); an agent drives one Ray cluster")
        if not clusters:
            raise UsageError("no pool of the fleet has backend: ray; add one with a `ray: {address: ...}` block")
        address, self._namespace = clusters[0]
        if not ray.is_initialized():
            _check_reachable(address)  # ray.init waits minutes on an address nothing listens at
            os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
            try:
                ray.init(address=address, namespace=self._namespace, log_to_driver=False, logging_level=logging.WARNING)
            except (ConnectionError, RuntimeError, ValueError) as exc:
                raise ExecutionError(f"cannot reach the Ray cluster at {address}: {_first_line(exc)}") from exc
        self._ray = ray
        return ray

    def _actor(self, name: str) -> Any:
        if name not in self._handles:
            ray = self._connect()
            try:
                self._handles[name] = ray.get_actor(name, namespace=self._namespace)
            except ValueError:
                return None
        return self._handles[name]

    def _pool(self, name: str) -> RayPool:
        pools = self.pools()
        if name not in pools:
            raise UsageError(f"pool {name!r} is not a ray pool of the fleet (ray pools: {', '.join(pools) or 'none'})")
        return pools[name]

    def group_name(self, run: str, attempt: int) -> str:
        """The Ray name of the attempt's placement group; its hosts' actors are named `<group name>-h<i>`."""
        return f"crossrail-{self.tag}-{run}-{attempt}"

    # --- directories -------------------------------------------------------------------------------


def data_parallel(request: LaunchRequest) -> int:
    """The attempt's data-parallel workers: the recorded `spec.parallelism.data`, at most its chips (else 1)."""
    try:
        spec = json.loads(request.env.get("CROSSRAIL_SPEC", "{}")).get("spec") or {}
    except (json.JSONDecodeError, AttributeError):
        return 1
    data = (spec.get("parallelism") or {}).get("data")
    return max(1, min(data, request.chips)) if isinstance(data, int) else 1


def _rendezvous(ray: Any, group: Any, record: dict[str, Any]) -> list[dict[str, str]]:
    """Each worker's rendezvous variables: its rank and local rank (among the workers on its node), and worker
    0's node as the address of torch's store and JAX's coordinator, on ports derived from the group's name."""
    from ray.util import placement_group_table

    nodes = placement_group_table(group).get("bundles_to_node_id") or {}
    address = {n["NodeID"]: n["NodeManagerAddress"] for n in ray.nodes() if n.get("Alive")}
    master = address.get(nodes.get(0), "127.0.0.1")
    port = RENDEZVOUS_PORTS[0] + int(hashlib.sha256(record["placement_group"].encode()).hexdigest(), 16) % (
        RENDEZVOUS_PORTS[1] - RENDEZVOUS_PORTS[0]
    )
    workers = len(record["bundles"])
    seen: dict[Any, int] = {}  # node -> the last local rank given there
    out = []
    for rank in range(workers):
        node = nodes.get(rank)
        local = seen[node] = seen.get(node, -1) + 1
        env = {"RANK": rank, "WORLD_SIZE": workers, "LOCAL_RANK": local, "MASTER_ADDR": master, "MASTER_PORT": port}
        out.append({**{k: str(v) for k, v in env.items()}, "CROSSRAIL_COORDINATOR": f"{master}:{port + 1}"})
    return out


def _check_reachable(address: str) -> None:
    """Fail fast, in one line, when nothing accepts connections at a `host:port` or `ray://host:port` address."""
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        return  # "auto" and other forms Ray resolves itself
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=CONNECT_TIMEOUT_S).close()
    except OSError as exc:
        raise ExecutionError(
            f"cannot reach the Ray cluster at {address} ({exc.strerror or exc}); check the ray pools' address"
        ) from None


def _gang_end(results: list[dict[str, Any] | str]) -> dict[str, Any] | None:
    """The attempt's end once any host ended badly or all ended well; None while it runs.

    A host that is gone makes the attempt `lost`; the first host (by index) that failed gives its exit code
    or signal; all hosts exiting 0 is success. The other hosts are ended with the attempt (see _release).
    """
    for result in results:
        if isinstance(result, str):
            return {"phase": "lost", "detail": result}
    ended = [r for r in results if isinstance(r, dict) and r.get("phase") == "exited"]
    for r in ended:
        if r.get("exit_code") != 0:
            keys = ("exit_code", "signal", "stopped_by", "ended_at", "detail")
            return {"phase": "exited", **{k: r.get(k) for k in keys}}
    if len(ended) == len(results):
        return {"phase": "exited", "exit_code": 0, "signal": None, "ended_at": max(r["ended_at"] for r in ended)}
    return None


def _unplaced(record: dict[str, Any], waited_s: float) -> str:
    pool = record["pool"]
    bundles, labels = record["bundles"], pool.get("label_selector") or {}
    on = f" on nodes labelled {labels}" if labels else ""
    return f"Ray could not place {len(bundles)} host(s) of {bundles[0]}{on} ({record['strategy']}) in {waited_s:.0f} s"


def _log_name(host: int) -> str:
    return "log.txt" if host == 0 else f"log.h{host}.txt"


def _host_of_log(name: str) -> int:
    return 0 if name == "log.txt" else int(name.removeprefix("log.h").removesuffix(".txt") or 0)


def _log_offset(directory: Path, host: int) -> int:
    """How much of host `host`'s output (an offset into all it printed) has been fetched."""
    return int((read_json(directory / LOG_OFFSETS) or {}).get(str(host), 0))


def _append_log(directory: Path, host: int, result: dict[str, Any]) -> None:
    with open(directory / _log_name(host), "ab") as f:
        if result.get("log_dropped"):
            f.write(f"[crossrail: {result['log_dropped']} bytes of output were dropped]\n".encode())
        f.write(result["log"])
    offsets = read_json(directory / LOG_OFFSETS) or {}
    write_json_atomic(directory / LOG_OFFSETS, {**offsets, str(host): int(result["log_offset"])})


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
