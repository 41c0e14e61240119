"""The executor router and the fleet's ray settings: routing by pool backend, clear errors, requeue of unplaced work."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from crossrail.control.executor import AttemptStatus, LaunchRequest
from crossrail.control.router import Router
from crossrail.core import EndReason, ManualClock
from crossrail.errors import ExecutionError, SpecError, UsageError
from crossrail.executors.local import LocalExecutor
from crossrail.executors.ray import RayExecutor, RayPool
from crossrail.scheduling.decisions import RetryPolicy, decide_end, end_reason
from crossrail.spec import load_fleet

TEMPLATE = Path(__file__).parents[3] / "src/crossrail/control/ops/templates/fleet.yaml"


def fleet_file(tmp_path: Path, **pool_changes: dict[str, Any]) -> Path:
    data = yaml.safe_load(TEMPLATE.read_text())
    for pool in data["spec"]["pools"]:
        pool.update(pool_changes.get(pool["name"].replace("-", "_"), {}))
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        pytest.param(
            {"backend": "ray"}, "a pool with backend: ray needs a ray block", id="a-ray-pool-must-name-its-cluster"
        ),
        pytest.param(
            {"ray": {"address": "head:6379"}},
            "ray settings on a pool whose backend is local",
            id="ray-settings-need-ray",
        ),
        pytest.param(
            {"backend": "ray", "ray": {"address": "head:6379", "resourcez": {}}},
            "resourcez",
            id="an-unknown-ray-key-is-named",
        ),
    ],
)
def test_bad_ray_settings_are_refused_with_their_path(tmp_path: Path, changes: dict[str, Any], message: str) -> None:
    with pytest.raises(SpecError) as err:
        load_fleet(fleet_file(tmp_path, h100=changes))
    (problem,) = err.value.problems
    assert problem.path.startswith("spec.pools[1].ray")
    assert message in problem.render()


def test_a_ray_pool_gets_its_resource_and_labels_from_the_pool_unless_set(tmp_path: Path) -> None:
    fleet = load_fleet(
        fleet_file(
            tmp_path,
            tpu_v5p={"backend": "ray", "ray": {"address": "head:6379", "placement_timeout": "2m"}},
            h100={"backend": "ray", "ray": {"address": "head:6379", "chip_resource": "GPU", "resources": {"CPU": 4}}},
        )
    )
    router = Router(tmp_path, lambda: fleet, lambda _run, _n: None)
    ray = router.executor("ray")
    assert isinstance(ray, RayExecutor)
    pools = ray.pools()
    assert pools["tpu-v5p"] == RayPool(
        name="tpu-v5p",
        address="head:6379",
        chip_resource="tpu-v5p",
        chips_per_host=4,
        label_selector={"accelerator": "tpu-v5p"},
        placement_timeout_s=120.0,
    )
    assert pools["h100"].bundles(8) == [{"GPU": 8.0, "CPU": 4.0}]
    assert pools["tpu-v5p"].bundles(8) == [{"tpu-v5p": 4.0}, {"tpu-v5p": 4.0}]  # a gang: one bundle per host
    assert pools["tpu-v5p"].bundles(1) == [{"tpu-v5p": 1.0}]


def test_a_backend_whose_executor_cannot_be_imported_fails_in_one_line_naming_its_pools(tmp_path: Path) -> None:
    fleet = load_fleet(fleet_file(tmp_path))
    fleet = fleet.model_copy(
        update={"spec": fleet.spec.model_copy(update={"pools": [fleet.pools[0].model_copy(update={"backend": "x"})]})}
    )

    def missing(_ctx: Any) -> Any:
        raise ImportError("No module named 'crossrail.executors.x'")

    router = Router(tmp_path, lambda: fleet, lambda _run, _n: None, {"local": lambda ctx: None, "x": missing})  # type: ignore[arg-type,return-value]
    with pytest.raises(ExecutionError) as err:
        router.capabilities  # noqa: B018
    text = str(err.value)
    assert "\n" not in text
    assert "pool tpu-v5p of the fleet uses backend: x" in text
    assert "install crossrail[x]" in text
    with pytest.raises(UsageError, match="no executor is registered for backend 'y'"):
        Router(tmp_path, lambda: fleet, lambda _run, _n: None, {}).executor("y")


def test_without_ray_installed_a_ray_pool_says_which_extra_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` now fails as if it were not installed
    pool = RayPool(name="tpu", address="head:6379", chip_resource="tpu-v5p", chips_per_host=4)
    executor = RayExecutor(tmp_path, lambda: {"tpu": pool})
    request = LaunchRequest("pretrain-small-1", 1, "tpu", "tpu", "tpu-v5p", 4, ["true"])
    with pytest.raises(ExecutionError) as err:
        executor.launch(request)
    assert str(err.value) == "the ray backend needs Ray; install it with: pip install 'crossrail[ray]'"


def test_an_unreachable_ray_cluster_fails_fast_in_one_line_and_claims_nothing(tmp_path: Path) -> None:
    pool = RayPool(name="tpu", address="127.0.0.1:1", chip_resource="tpu-v5p", chips_per_host=4)
    executor = RayExecutor(tmp_path, lambda: {"tpu": pool})
    request = LaunchRequest("pretrain-small-1", 1, "tpu", "tpu", "tpu-v5p", 4, ["true"])
    started = time.monotonic()
    with pytest.raises(ExecutionError, match=r"^cannot reach the Ray cluster at 127\.0\.0\.1:1 \(.*\); check"):
        executor.launch(request)
    assert time.monotonic() - started < 10
    assert executor.observe() == []  # nothing was claimed: the next agent pass launches it afresh


def test_the_router_runs_local_pools_as_before_and_routes_a_new_routers_calls_by_the_recorded_pool(
    tmp_path: Path,
) -> None:
    fleet = load_fleet(fleet_file(tmp_path))
    pools = {("pretrain-small-1", 1): "tpu-v5p"}
    router = Router(tmp_path, lambda: fleet, lambda run, n: pools.get((run, n)))
    assert router.capabilities.backends == ("local",)
    assert router.capabilities.sees_processes
    assert not router.capabilities.can_withdraw
    assert not router.withdraw("pretrain-small-1", 1)
    code = "print('hello from local')"
    router.launch(LaunchRequest("pretrain-small-1", 1, "tpu-v5p", "tpu", "tpu-v5p", 1, [sys.executable, "-c", code]))
    assert isinstance(router.executor("local"), LocalExecutor)
    assert (tmp_path / "attempts" / "pretrain-small-1" / "1").is_dir()  # where the local executor always kept it

    again = Router(tmp_path, lambda: fleet, lambda run, n: pools.get((run, n)))  # an agent restart
    deadline = time.monotonic() + 30
    while not (ended := [s for s in again.observe() if s.phase == "exited"]):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert ended[0].exit_code == 0
    fresh = Router(tmp_path, lambda: fleet, lambda run, n: pools.get((run, n)))  # knows it only from the store
    assert "hello from local" in fresh.logs("pretrain-small-1", 1)
    fresh.forget("pretrain-small-1", 1)
    assert fresh.observe() == []


def test_an_attempt_its_engine_could_not_place_is_requeued_without_spending_a_retry() -> None:
    status = AttemptStatus("pretrain-small-1", 1, "unplaced", detail="Ray could not place 2 host(s)")
    reason, detail = end_reason(status, "admitted")
    decision = decide_end(reason, detail, pool="ray-tpu", retries=RetryPolicy(max=0), history=[], now=0.0)
    assert (decision.attempt_state, decision.retry, decision.run_state) == ("unplaced", True, "queued")
    assert decision.detail == "not placed: Ray could not place 2 host(s)"
    assert end_reason(status, "cancelled")[0] is EndReason.CANCELLED  # cancelled while it waited: simply cancelled


def test_the_router_gives_each_executor_its_clock(tmp_path: Path) -> None:
    fleet = load_fleet(fleet_file(tmp_path))
    clock = ManualClock(1_000.0)
    router = Router(tmp_path, lambda: fleet, lambda _run, _n: None, clock=clock)
    request = LaunchRequest("pretrain-small-1", 1, "tpu-v5p", "tpu", "tpu-v5p", 1, [sys.executable, "-c", "pass"])
    router.launch(request)
    record = json.loads((tmp_path / "attempts" / "pretrain-small-1" / "1" / "request.json").read_text())
    assert record["launched_at"] == 1_000.0  # stamped by the injected clock, not the wall clock
