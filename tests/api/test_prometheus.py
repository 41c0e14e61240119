"""Prometheus metrics: the fold of a known log, /metrics of the server and of `agent --metrics-port`, and a real
Prometheus server scraping them (Debian's `prometheus`; .ci/run installs it)."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import free_port

from crossrail.client import Client
from crossrail.core.events import Event, EventType

from .conftest import CROSSRAIL, serving_home

pytest.importorskip("prometheus_client", reason="the api extra is not installed: pip install -e '.[api]'")
from crossrail.control.reports.prometheus import FleetCounters


def ev(kind: EventType, ts: float, run: str, attempt: int | None = None, **data: Any) -> Event:
    return Event(type=kind, ts=ts, run=run, attempt=attempt, data=data)


def known_log() -> list[Event]:
    """r1 fails on tpu-v5p (killed), is retried and succeeds on h100; r2 waits in eval; r3 is preempted; r4 runs."""
    sub = {"stage": "pretraining", "team": "foundation"}
    return [
        ev(EventType.SUBMITTED, 1000, "r1", **sub, chips=4),
        ev(EventType.QUEUED, 1000, "r1", **sub, queue="pretraining"),
        ev(EventType.ADMITTED, 1010, "r1", 1, pool="tpu-v5p", chips=4),
        ev(EventType.STARTED, 1010, "r1", 1, pool="tpu-v5p", chips=4, cost_per_chip_hour=4.2),
        ev(EventType.FAILED, 1100, "r1", 1, pool="tpu-v5p", cause="signal", final=False),
        ev(EventType.RETRIED, 1100, "r1", None, cause="signal", next_attempt=2),
        ev(EventType.QUEUED, 1100, "r1", **sub, queue="pretraining"),
        ev(EventType.ADMITTED, 1103, "r1", 2, pool="h100", chips=4),
        ev(EventType.STARTED, 1103, "r1", 2, pool="h100", chips=4, cost_per_chip_hour=3.0),
        ev(EventType.SUCCEEDED, 1203, "r1", 2, pool="h100", cause="succeeded"),
        ev(EventType.QUEUED, 1200, "r2", stage="eval", team="evals", queue="eval"),
        ev(EventType.QUEUED, 1000, "r3", stage="experiment", team="foundation", queue="experiment"),
        ev(EventType.ADMITTED, 1001, "r3", 1, pool="h100", chips=1),
        ev(EventType.STARTED, 1001, "r3", 1, pool="h100", chips=1, cost_per_chip_hour=3.0),
        ev(EventType.PREEMPTED, 1061, "r3", 1, pool="h100", cause="preempted"),
        ev(EventType.QUEUED, 1061, "r3", stage="experiment", team="foundation", queue="experiment"),
        ev(EventType.QUEUED, 1000, "r4", stage="inference", team="serving", queue="inference"),
        ev(EventType.ADMITTED, 1000, "r4", 1, pool="cpu", chips=2),
        ev(EventType.STARTED, 1000, "r4", 1, pool="cpu", chips=2, cost_per_chip_hour=0.0),
    ]


# r1's waits (10 s, then 3 s), under the old labels and Kueue's (its queued events name no priority)
WAITED = {"queue": "pretraining", "cluster_queue": "pretraining", "stage": "pretraining", "priority_class": "unknown"}
# (series, labels, value) that the known log yields
EXPECTED = [
    ("crossrail_failures_total", {"reason": "signal", "stage": "pretraining", "pool": "tpu-v5p"}, 1),
    ("crossrail_retries_total", {"reason": "signal", "stage": "pretraining"}, 1),
    ("crossrail_preemptions_total", {"reason": "preempted", "stage": "experiment", "pool": "h100"}, 1),
    ("crossrail_chip_seconds_total", {"team": "foundation", "stage": "pretraining", "pool": "tpu-v5p"}, 360),
    ("crossrail_chip_seconds_total", {"team": "foundation", "stage": "pretraining", "pool": "h100"}, 400),
    ("crossrail_cost_total", {"team": "foundation", "stage": "pretraining", "pool": "tpu-v5p"}, 0.42),
    ("crossrail_cost_total", {"team": "foundation", "stage": "pretraining", "pool": "h100"}, 400 / 3600 * 3.0),
    ("crossrail_cost_total", {"team": "foundation", "stage": "experiment", "pool": "h100"}, 0.05),
    ("crossrail_pending_runs", {"queue": "eval", "cluster_queue": "eval"}, 1),
    ("crossrail_pending_runs", {"queue": "experiment", "cluster_queue": "experiment"}, 1),
    ("crossrail_pending_runs", {"queue": "pretraining", "cluster_queue": "pretraining"}, 0),
    ("crossrail_active_runs", {"queue": "inference", "cluster_queue": "inference"}, 1),
    ("crossrail_active_runs", {"queue": "pretraining", "cluster_queue": "pretraining"}, 0),
    ("crossrail_admission_wait_time_seconds_count", WAITED, 2),
    ("crossrail_admission_wait_time_seconds_sum", WAITED, 13),
    ("crossrail_admission_wait_time_seconds_bucket", {**WAITED, "le": "2.5"}, 0),
    ("crossrail_admission_wait_time_seconds_bucket", {**WAITED, "le": "5.0"}, 1),  # Kueue's buckets: 1, 2.5·2^k
    ("crossrail_admission_wait_time_seconds_bucket", {**WAITED, "le": "10.0"}, 2),
]


def key(name: str, **labels: str) -> tuple[str, frozenset[tuple[str, str]]]:
    return name, frozenset(labels.items())


def samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    from prometheus_client.parser import text_string_to_metric_families

    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_the_fold_of_a_known_log_counts_failures_retries_preemptions_usage_waits_and_queues() -> None:
    from prometheus_client import CollectorRegistry, generate_latest

    from crossrail.control.reports.prometheus import EventLogCollector

    log = [dataclasses.replace(e, seq=i + 1) for i, e in enumerate(known_log())]
    registry = CollectorRegistry(auto_describe=False)
    registry.register(
        EventLogCollector(lambda seq: [e for e in log if (e.seq or 0) > seq], lambda: 2000.0, ["pretraining"])
    )
    got = samples(generate_latest(registry).decode())

    for name, labels, value in EXPECTED:
        assert got[(name, frozenset(labels.items()))] == pytest.approx(value), (name, labels)
    # a running attempt counts up to now: r4's 2 chips since ts 1000
    assert (
        got[
            (
                "crossrail_chip_seconds_total",
                frozenset({"team": "serving", "stage": "inference", "pool": "cpu"}.items()),
            )
        ]
        == 2000
    )


def test_a_terminal_run_takes_no_further_change_and_a_repeated_queued_does_not_restart_the_wait() -> None:
    counters = FleetCounters()
    for e in [
        ev(EventType.QUEUED, 0, "r", stage="eval", team="t", queue="eval"),
        ev(EventType.QUEUED, 5, "r", stage="eval", team="t", queue="eval"),
        ev(EventType.ADMITTED, 8, "r", 1, pool="p"),
        ev(EventType.CANCELLED, 9, "r", 1),
        ev(EventType.FAILED, 10, "r", 1, cause="signal"),
    ]:
        counters.add(e)
    assert counters.admission_wait[("eval", "eval", "unknown")].sum_s == 8
    assert dict(counters.failures) == {}
    assert counters.runs_by_queue(frozenset({"queued", "admitted", "running"})) == {}  # type: ignore[arg-type]


def test_metrics_of_the_demo_workspace_show_the_killed_and_retried_pretraining(demo_server: str) -> None:
    with urllib.request.urlopen(f"{demo_server}/metrics", timeout=30) as resp:
        assert resp.headers["Content-Type"].startswith("text/plain")
        got = samples(resp.read().decode())
    assert got[("crossrail_retries_total", frozenset({"reason": "signal", "stage": "pretraining"}.items()))] == 1
    failed = {"reason": "signal", "stage": "pretraining", "pool": "tpu-v5p"}
    assert got[("crossrail_failures_total", frozenset(failed.items()))] == 1
    pending = {"queue": "pretraining", "cluster_queue": "pretraining"}
    assert got[("crossrail_pending_runs", frozenset(pending.items()))] == 1  # queued-after-demo
    for pool in ("tpu-v5p", "h100"):  # the killed attempt's chips count where it ran, the retry's where it ran
        key = (
            "crossrail_chip_seconds_total",
            frozenset({"team": "foundation", "stage": "pretraining", "pool": pool}.items()),
        )
        assert got[key] > 0


@pytest.fixture
def known_workspace(checkout: Path) -> Path:
    with Client(cwd=checkout) as c:
        c.service.store.append_events(known_log())
    return checkout / ".crossrail"


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=5) as resp:
        return json.loads(resp.read())


@contextmanager
def prometheus(target: str, tmp: Path) -> Iterator[str]:
    """Debian's Prometheus scraping `target` (host:port) every second; yields its base URL, stops it after."""
    exe = shutil.which("prometheus")
    if exe is None:
        pytest.skip("the prometheus server is not installed (.ci/run installs Debian's prometheus package)")
    config = tmp / "prometheus.yml"
    config.write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        f"scrape_configs: [{{job_name: crossrail, static_configs: [{{targets: ['{target}']}}]}}]\n"
    )
    port = free_port()
    args = [f"--config.file={config}", f"--storage.tsdb.path={tmp / 'db'}", f"--web.listen-address=127.0.0.1:{port}"]
    with (tmp / "prometheus.log").open("w") as log:
        proc = subprocess.Popen([exe, *args], stdout=subprocess.DEVNULL, stderr=log)
        try:
            yield f"http://127.0.0.1:{port}"
        finally:
            proc.terminate()
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def query(base: str, expr: str, *, want: int = 1, timeout_s: float = 30) -> list[dict[str, Any]]:
    """The result vector of `expr`, polled until it has `want` series (the first scrapes take a few seconds)."""
    deadline = time.monotonic() + timeout_s
    url = f"{base}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    while True:
        try:
            result: list[dict[str, Any]] = _get(url)["data"]["result"]
            if len(result) >= want:
                return result
        except (urllib.error.URLError, OSError):
            pass
        if time.monotonic() > deadline:
            pytest.fail(f"Prometheus at {base} returned no {expr} within {timeout_s:.0f}s")
        time.sleep(0.25)


@pytest.mark.slow
def test_a_real_prometheus_scrapes_the_server_and_its_query_api_returns_the_known_logs_values(
    known_workspace: Path, tmp_path: Path
) -> None:
    with serving_home(known_workspace) as url, prometheus(url.removeprefix("http://"), tmp_path) as prom:
        for name, labels, value in EXPECTED:
            selector = ",".join(f'{k}="{v}"' for k, v in labels.items())
            (series,) = query(prom, f"{name}{{{selector}}}")
            assert float(series["value"][1]) == pytest.approx(value), (name, labels)
            assert series["metric"]["job"] == "crossrail"
        targets = _get(f"{prom}/api/v1/targets")["data"]["activeTargets"]
        assert [t["health"] for t in targets] == ["up"]


@pytest.mark.slow
def test_agent_metrics_port_serves_the_same_metrics_until_the_agent_stops(known_workspace: Path) -> None:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("CROSSRAIL_HOME", "CROSSRAIL_STORE_URL")}
    agent = subprocess.Popen(
        [CROSSRAIL, "agent", "--home", str(known_workspace), "--metrics-port", str(port), "--poll", "0.2"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline, text = time.monotonic() + 60, ""
        while not text:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as resp:
                    text = resp.read().decode()
            except (urllib.error.URLError, OSError):
                if agent.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"agent --metrics-port {port} served nothing: {agent.communicate()[0]}")
                time.sleep(0.1)
        got = samples(text)
        for name, labels, value in EXPECTED[:8]:  # the counters: the agent may change queues as it runs
            assert got[(name, frozenset(labels.items()))] == pytest.approx(value), (name, labels)
    finally:
        agent.send_signal(signal.SIGINT)
        try:
            out = agent.communicate(timeout=60)[0]
        except subprocess.TimeoutExpired:
            agent.kill()
            agent.communicate()
            raise
    assert f"Prometheus metrics on http://127.0.0.1:{port}/metrics" in out
    assert "agent stopped" in out
    assert agent.returncode == 0


@pytest.mark.slow
def test_agent_metrics_port_refuses_a_port_in_use_and_says_which(checkout: Path) -> None:
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        proc = subprocess.run(
            [sys.executable, "-m", "crossrail.cli", "agent", "--until-idle", "--metrics-port", str(port)],
            cwd=checkout,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    assert proc.returncode == 1
    assert f"--metrics-port {port}: cannot listen on 127.0.0.1:{port}" in proc.stderr


def _scrape(url: str, token: str | None = None) -> tuple[int, str]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=10) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_agent_metrics_beyond_loopback_need_a_readers_token_as_serve_does(checkout: Path) -> None:
    from crossrail.api.prom import serve_metrics
    from crossrail.control.ops.deploy import AGENT_HEALTH

    with Client(cwd=checkout) as c:
        c.submit(checkout / ".crossrail" / "experiments" / "eval-smoke.yaml")
        viewer = c.token_create(team="foundation", role="viewer")
        revoked = c.token_create(team="foundation", role="admin")
        c.token_revoke(revoked["id"])
        wide, local = free_port(), free_port()
        servers = [serve_metrics(c, "0.0.0.0", wide), serve_metrics(c, "127.0.0.1", local)]
        try:
            url = f"http://127.0.0.1:{wide}/metrics"
            status, body = _scrape(url)
            assert status == 401
            assert "requires a token" in json.loads(body)["message"]
            assert _scrape(url, revoked["token"])[0] == 401
            assert _scrape(url, "crossrail_not-a-token")[0] == 401
            status, body = _scrape(url, viewer["token"])
            assert status == 200
            assert 'crossrail_pending_runs{cluster_queue="eval",queue="eval"} 1.0' in body
            # a workspace with tokens has no anonymous reader on loopback either (docs/auth.md)
            assert _scrape(f"http://127.0.0.1:{local}/metrics")[0] == 401
            assert _scrape(f"http://127.0.0.1:{local}/metrics", viewer["token"]) == (
                200,
                _scrape(url, viewer["token"])[1],
            )
            assert _scrape(f"http://127.0.0.1:{wide}{AGENT_HEALTH}") == (200, "ok\n")  # probes need no token
        finally:
            for server in servers:
                server.shutdown()
                server.server_close()
        refused = [e for e in c.audit()["entries"] if e["action"] == "GET /metrics"]
    assert [(e["result"], e["status"]) for e in refused] == [("refused", 401)] * 4  # 3 beyond loopback, 1 on it
