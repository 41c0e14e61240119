"""The agent with pools on a real local Ray cluster: a TPU-like host and a GPU-like host, labelled as such.

The cluster is started once for the module (ray.cluster_utils.Cluster, in a temporary directory) and shut
down at the end; nothing else on the machine is touched. Runs use the light numpy workload.
"""

from __future__ import annotations

import gc
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.conftest import drive as drive_agent

from crossrail.client import Client
from crossrail.control.agent.loop import AgentConfig

# Each test uses a real Ray cluster. Ray's client drops sockets and child-process handles to the garbage collector;
# under the suite's "error" filter their ResourceWarnings surface as unraisable exceptions in whichever test the
# collector happens to run, so they are ignored here and collected before the module ends (see ray_cluster).
pytestmark = [
    pytest.mark.ray,
    pytest.mark.slow,
    pytest.mark.filterwarnings("ignore::ResourceWarning"),
    pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
]

TPU_LABELS = {"accelerator": "tpu-v5p"}
GPU_LABELS = {"accelerator": "nvidia-gpu"}
FAST = AgentConfig(poll_s=0.1, fallback_wait_s=0.0, stop_grace_s=5.0, heartbeat_s=1.0)
BIGRAM = "spec.command=[python, -m, crossrail.workloads.bigram]"
SHORT = [BIGRAM, "spec.args=[--steps, '30', --checkpoint-every-steps, '10', --step-sleep, '0.01']"]
SLOW = [BIGRAM, "spec.args=[--steps, '120', --checkpoint-every-steps, '10', --step-sleep, '0.05']"]


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[Any]:
    """One TPU-like node (the head: 4 chips of `tpu-v5p`) and one GPU-like node (8 of `h100`)."""
    ray = pytest.importorskip("ray")
    from ray.cluster_utils import Cluster

    temp = tempfile.mkdtemp(prefix="crx", dir="/tmp")  # short: Ray's socket paths must fit in 107 bytes
    os.makedirs(os.path.join(temp, "ray"))
    saved = {k: os.environ.get(k) for k in ("RAY_TMPDIR", "RAY_USAGE_STATS_ENABLED")}
    # Ray writes the address of its newest cluster under RAY_TMPDIR: keep it out of the shared /tmp/ray.
    os.environ.update(RAY_TMPDIR=temp, RAY_USAGE_STATS_ENABLED="0")
    head = {"num_cpus": 1, "resources": {"tpu-v5p": 4}, "labels": TPU_LABELS, "temp_dir": temp}
    cluster = Cluster(initialize_head=True, head_node_args={**head, "include_dashboard": False})
    try:
        cluster.add_node(num_cpus=1, resources={"h100": 8}, labels=GPU_LABELS)
        cluster.wait_for_nodes()
        yield cluster
    finally:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ResourceWarning)
            ray.shutdown()
            cluster.shutdown()
            gc.collect()  # Ray's dropped handles warn now, under this filter, not in a later module's test
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        shutil.rmtree(temp, ignore_errors=True)


@pytest.fixture
def client(checkout: Path, ray_cluster: Any) -> Iterator[Client]:
    """A workspace whose two pools run on the Ray cluster (placement timeout 3 s)."""
    with Client(cwd=checkout) as c:
        path = c.workspace.fleet_path
        fleet = yaml.safe_load(path.read_text())
        for pool in fleet["spec"]["pools"]:
            pool["backend"] = "ray"
            pool["ray"] = {"address": ray_cluster.address, "placement_timeout": "3s"}
        path.write_text(yaml.safe_dump(fleet, sort_keys=False))
        yield c


def drive(client: Client, until: Callable[[], bool], timeout_s: float = 60.0) -> None:
    drive_agent(client, until, timeout_s, config=FAST, story=lambda: _story(client))


def _story(client: Client) -> str:
    store = client.service.store
    runs = {r.id: r.state for r in store.list_runs()}
    tail = [f"{e.run} {e.type} {e.data.get('reason', '')}" for e in store.events()[-12:]]
    return f"runs {runs}; last events: " + " | ".join(tail)


def state(client: Client, run: str) -> str:
    return client.service.store.get_run(run).state  # type: ignore[no-any-return]


def succeeded(client: Client, *runs: str) -> Callable[[], bool]:
    return lambda: all(state(client, r) == "succeeded" for r in runs)


def ray_executor(client: Client) -> Any:
    return client.executor.executor("ray")


def node_labels(ray_cluster: Any) -> dict[str, dict[str, str]]:
    import ray

    return {n["NodeID"]: n.get("Labels", {}) for n in ray.nodes() if n["Alive"]}


@pytest.mark.slow
def test_the_demo_experiments_run_through_ray_and_land_on_the_nodes_labelled_for_their_pools(
    client: Client, experiments: Path, ray_cluster: Any
) -> None:
    # Pretraining may only use TPUs here, so one run surely belongs on the TPU-labelled node.
    pre = client.submit(experiments / "pretrain-small.yaml", sets=[*SHORT, "spec.accelerators={allow: [tpu]}"])
    pre = pre["run"]["id"]
    # The cluster has one TPU-like host, the fleet two: an 8-chip run fits only the GPU-like node.
    post = client.submit(experiments / "posttrain-042.yaml", sets=[*SHORT, "spec.accelerators={allow: [gpu]}"])
    post = post["run"]["id"]
    evals = client.submit(experiments / "eval-smoke.yaml", sets=SHORT)["run"]["id"]
    drive(client, succeeded(client, pre, post, evals), timeout_s=120)

    store, executor, labels = client.service.store, ray_executor(client), node_labels(ray_cluster)
    for run in (pre, post, evals):
        (attempt,) = store.attempts(run)
        (host,) = executor.placement(run, 1)  # recorded by the attempt's Ray worker, on the node it ran on
        pool = client.fleet.pool(attempt.pool)
        assert host["labels"]["accelerator"] == pool.node_labels["accelerator"]
        assert labels[host["node_id"]]["accelerator"] == pool.node_labels["accelerator"]
        assert [c.step for c in store.checkpoints(run)] == [10, 20, 30]  # the report channel worked from Ray
    assert store.attempts(pre)[0].pool == "tpu-v5p"
    assert ray_executor(client).placement(pre, 1)[0]["node_id"] == ray_cluster.head_node.node_id


@pytest.mark.slow
def test_one_agent_runs_a_ray_pool_and_a_local_pool_side_by_side(
    client: Client, checkout: Path, experiments: Path, ray_cluster: Any
) -> None:
    path = client.workspace.fleet_path
    fleet = yaml.safe_load(path.read_text())
    h100 = fleet["spec"]["pools"][1]
    h100["backend"] = "local"
    del h100["ray"]
    path.write_text(yaml.safe_dump(fleet, sort_keys=False))
    code = "import os; print('node', os.environ.get('CROSSRAIL_RAY_NODE_ID', 'none'))"
    sets = [f'spec.command=[python, -c, "{code}"]', "spec.args=[]"]
    # A TPU pool runs whole slices (init's fleet: 2x2x1 = 4 chips at least); one GPU chip is enough.
    tpu, gpu = ["spec.resources.chips=4", "spec.accelerators={allow: [tpu]}"], ["spec.resources.chips=1"]
    on_ray = client.submit(experiments / "eval-smoke.yaml", sets=[*sets, *tpu])
    local = client.submit(experiments / "eval-smoke.yaml", sets=[*sets, *gpu, "spec.accelerators={allow: [gpu]}"])
    runs = on_ray["run"]["id"], local["run"]["id"]
    drive(client, succeeded(client, *runs))
    ray_log, local_log = (client.logs(r)["attempts"][0]["log"] for r in runs)
    assert ray_log.strip() == f"node {ray_cluster.head_node.node_id}"  # printed inside the TPU-labelled Ray node
    assert local_log.strip() == "node none"
    assert (checkout / ".crossrail" / "attempts" / runs[1] / "1").is_dir()  # the local executor's own records
    assert (checkout / ".crossrail" / "ray" / runs[0] / "1" / "placed.json").is_file()


@pytest.mark.slow
def test_killing_the_ray_worker_is_a_failure_and_the_retry_resumes_from_its_checkpoint(
    client: Client, experiments: Path
) -> None:
    sets = [*SLOW, "spec.retries={max: 1, backoff: {initial: 0s}}"]
    run = client.submit(experiments / "pretrain-small.yaml", sets=sets)["run"]["id"]
    store = client.service.store
    drive(client, lambda: bool(store.checkpoints(run)) and state(client, run) == "running")
    (host,) = ray_executor(client).placement(run, 1)
    os.kill(host["pid"], signal.SIGKILL)  # the Ray worker process the attempt's actor lives in
    deadline = time.monotonic() + 10
    while _alive(host["command_pid"]):  # the training process dies with the worker, not left unwatched
        assert time.monotonic() < deadline, "the attempt's command outlived its Ray worker"
        time.sleep(0.05)
    drive(client, lambda: state(client, run) in ("succeeded", "failed"), timeout_s=120)

    first, second = store.attempts(run)
    assert (first.state, second.state, state(client, run)) == ("lost", "succeeded", "succeeded")
    assert "Ray worker running host 0 died" in (first.reason or "")
    failed = next(e for e in store.events(run=run, types=["failed"]))
    assert failed.data["final"] is False
    resumed = [e for e in store.events(run=run, types=["reported"]) if e.data["name"] == "resumed"]
    step = resumed[-1].data["data"]["step"]
    assert step >= 10  # from a committed checkpoint of the killed attempt, not from zero
    assert step in [c.step for c in store.checkpoints(run) if c.attempt == 1]


@pytest.mark.slow
def test_suspend_stops_a_ray_attempt_with_grace_and_the_workload_checkpoints_on_sigterm(
    client: Client, experiments: Path
) -> None:
    run = client.submit(experiments / "pretrain-small.yaml", sets=SLOW)["run"]["id"]
    store = client.service.store
    drive(client, lambda: bool(store.checkpoints(run)) and state(client, run) == "running")
    client.suspend(run)
    drive(client, lambda: not store.active_attempts())
    (attempt,) = store.attempts(run)
    assert (attempt.state, attempt.stopped_by, attempt.exit_code) == ("suspended", "suspended", 75)
    assert state(client, run) == "suspended"
    name = ray_executor(client).group_name(run, 1)
    assert not [a for a in _named_actors() if a["name"].startswith(f"{name}-h")]  # its actor is gone, chips freed


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


def _named_actors() -> list[dict[str, str]]:
    import ray

    return ray.util.list_named_actors(all_namespaces=True)  # type: ignore[no-any-return]


def test_a_label_selector_ray_refuses_fails_the_attempt_with_the_reason_in_its_log(
    client: Client, experiments: Path
) -> None:
    path = client.workspace.fleet_path
    fleet = yaml.safe_load(path.read_text())
    fleet["spec"]["pools"][0]["ray"]["label_selector"] = {"bad key!": "x"}
    path.write_text(yaml.safe_dump(fleet, sort_keys=False))
    sets = [*SHORT, "spec.accelerators={allow: [tpu]}", "spec.retries={max: 2, backoff: {initial: 0s}}"]
    run = client.submit(experiments / "pretrain-small.yaml", sets=sets)["run"]["id"]
    drive(client, lambda: state(client, run) == "failed")
    (attempt,) = client.service.store.attempts(run)  # a permanent failure: no retry
    assert attempt.exit_code == 127
    assert "Ray refused the placement group: Invalid label" in client.logs(run)["attempts"][0]["log"]


@pytest.mark.slow
def test_a_new_agent_re_adopts_an_attempt_still_running_on_ray(
    client: Client, checkout: Path, experiments: Path
) -> None:
    run = client.submit(experiments / "pretrain-small.yaml", sets=SLOW)["run"]["id"]
    store = client.service.store
    agent = subprocess.Popen(
        [sys.executable, "-m", "crossrail.cli", "agent", "--poll", "0.2", "--fallback-wait", "0"],
        cwd=checkout,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while not (store.checkpoints(run) and state(client, run) == "running"):
            assert agent.poll() is None, "the first agent ended"
            assert time.monotonic() < deadline, "the first agent did not start the run"
            time.sleep(0.2)
    finally:
        agent.kill()  # the agent (a Ray driver) dies; its detached actors do not
        agent.wait()
    assert ray_executor(client).observe()[0].phase == "running"
    drive(client, lambda: state(client, run) == "succeeded", timeout_s=120)
    (attempt,) = store.attempts(run)  # re-adopted, never launched again
    assert (attempt.state, attempt.exit_code) == ("succeeded", 0)
    assert [c.step for c in store.checkpoints(run)][-1] == 120
    assert not [e for e in store.events(run=run, types=["reported"]) if e.data["name"] == "resumed"]


@pytest.mark.slow
def test_cancelling_a_gang_while_ray_is_still_placing_it_starts_nothing(client: Client, experiments: Path) -> None:
    sets = ["spec.command=[python, -c, 'print(1)']", "spec.args=[]", "spec.resources.chips=8"]
    run = client.submit(experiments / "pretrain-small.yaml", sets=[*sets, "spec.accelerators={allow: [tpu]}"])
    run = run["run"]["id"]
    executor = ray_executor(client)
    drive(client, lambda: [s.phase for s in executor.observe()] == ["pending"])
    client.cancel(run)
    drive(client, lambda: not client.service.store.active_attempts())

    from ray.util import placement_group_table

    (attempt,) = client.service.store.attempts(run)
    assert (attempt.state, attempt.stopped_by, state(client, run)) == ("cancelled", "cancelled", "cancelled")
    assert not client.service.store.events(run=run, types=["started"])
    name = executor.group_name(run, 1)
    assert [g["state"] for g in placement_group_table().values() if g["name"] == name] == ["REMOVED"]


@pytest.mark.slow
def test_a_gang_ray_cannot_place_stays_queued_until_a_second_tpu_host_joins(
    client: Client, experiments: Path, ray_cluster: Any
) -> None:
    code = "import os; print('host', os.environ['CROSSRAIL_HOST_INDEX'], 'of', os.environ['CROSSRAIL_HOSTS'])"
    sets = [f'spec.command=[python, -c, "{code}"]', "spec.args=[]", "spec.resources.chips=8"]
    sets.append("spec.retries={max: 0, backoff: {initial: 1s, factor: 1, max: 1s}}")  # re-offered each second
    sets.append("spec.accelerators={allow: [tpu]}")  # two TPU hosts of 4 chips: a gang of two bundles
    run = client.submit(experiments / "pretrain-small.yaml", sets=sets)["run"]["id"]
    store = client.service.store
    drive(client, lambda: bool(store.events(run=run, types=["unplaced"])))

    from ray.util import placement_group_table

    (attempt,) = store.attempts(run)
    assert (attempt.state, state(client, run)) == ("unplaced", "queued")  # back in crossrail's queue
    assert "Ray could not place 2 host(s)" in (attempt.reason or "")
    assert not store.events(run=run, types=["started"])
    assert not store.events(run=run, types=["failed"])
    name = ray_executor(client).group_name(run, 1)
    groups = [g for g in placement_group_table().values() if g["name"] == name]
    assert [g["state"] for g in groups] == ["REMOVED"]  # nothing of it is left reserved or running in Ray
    assert not [a for a in _named_actors() if a["name"].startswith(f"{name}-h")]

    node = ray_cluster.add_node(num_cpus=1, resources={"tpu-v5p": 4}, labels=TPU_LABELS)
    try:
        drive(client, lambda: state(client, run) == "succeeded", timeout_s=60)
        last = store.attempts(run)[-1]
        hosts = ray_executor(client).placement(run, last.number)
        assert len({h["node_id"] for h in hosts}) == 2  # one bundle per host, on two distinct nodes
        assert all(h["labels"]["accelerator"] == "tpu-v5p" for h in hosts)
        log = client.logs(run)["attempts"][-1]["log"]
        assert "host 0 of 2" in log
        assert "host 1 of 2" in log
        assert all(a.state == "unplaced" for a in store.attempts(run)[:-1])  # no retry was spent on them
    finally:
        ray_cluster.remove_node(node)


@pytest.mark.slow
def test_a_two_worker_run_is_one_placement_group_of_a_bundle_per_worker_with_ranks(
    client: Client, experiments: Path, ray_cluster: Any
) -> None:
    code = (
        "import os, time; e = os.environ; time.sleep(1.5); "
        "print('rank', e['RANK'], 'of', e['WORLD_SIZE'], 'local', e['LOCAL_RANK'], 'via', e['MASTER_ADDR'])"
    )
    sets = [f'spec.command=[python, -c, "{code}"]', "spec.args=[]", "spec.resources={chips: 2, duration: 5m}"]
    sets += ["spec.parallelism={data: 2}", "spec.accelerators={allow: [gpu]}"]
    run = client.submit(experiments / "eval-smoke.yaml", sets=sets)["run"]["id"]
    executor = ray_executor(client)
    drive(client, lambda: [s.phase for s in executor.observe()] == ["running"])

    from ray.util import placement_group_table

    name = executor.group_name(run, 1)
    (group,) = [g for g in placement_group_table().values() if g["name"] == name]
    assert (group["state"], group["strategy"]) == ("CREATED", "PACK")
    assert [b["h100"] for b in group["bundles"].values()] == [1.0, 1.0]  # one bundle per worker, chips/2 each
    drive(client, succeeded(client, run))
    hosts = executor.placement(run, 1)
    assert len({h["node_id"] for h in hosts}) == 1  # PACK: both workers on the GPU-like node
    assert all(h["labels"]["accelerator"] == GPU_LABELS["accelerator"] for h in hosts)
    log = client.logs(run)["attempts"][-1]["log"]
    assert "rank 0 of 2 local 0 via" in log
    assert "rank 1 of 2 local 1 via" in log
