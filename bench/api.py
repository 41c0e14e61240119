"""The HTTP API against the in-process client, in one run.

1. Submissions per second: 4 client processes submitting experiments (a pinned code commit, a versioned
   dataset) over HTTP to a `crossrail serve` in its own process, beside the in-process `Client` submitting
   the same documents one call each, measured in the same run (aim: HTTP >= 0.5x in-process). Beside the
   rates, the CPU time one submit costs the server process and the in-process client (Linux: read from
   /proc): a figure the machine's other load moves far less than the rates, which on a busy machine mostly
   say how the scheduler shared the cores between one in-process client and five HTTP processes.
2. p50/p99 of `GET /v1/runs/{id}` with 100,000 events in the store (aim: p99 <= 50 ms).
3. p50/p99 of `GET /v1/queue` with 10,000 runs of 100 experiments pending (aim: p99 <= 250 ms): as asked
   without parameters, its first page (100 runs of each queue, each queue's total stated), and for
   comparison the whole queue at once (`?limit=0`, every run planned and sent).
The last line is the summary, with the load average at the start and the end. Numbers depend on the
machine's load: say what else was running.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from crossrail.client import Client
from crossrail.core import Event, EventType
from crossrail.core.api import QUEUE_PAGE
from crossrail.spec import parse_document

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from conftest import make_checkout

PROCESSES = 4
EXPERIMENTS = 100  # the pending runs are runs of this many experiments (sweeps and resubmissions)


def template(root: Path, commit: str) -> str:
    """The workspace's small pretraining experiment with its commit pinned and its dataset's version resolved."""
    text = (root / ".crossrail" / "experiments" / "pretrain-small.yaml").read_text()
    text = text.replace("commit: auto", f"commit: {commit}")
    with Client.local(cwd=root) as c:
        probe = c.submit_text(named(text, "probe"), source="probe.yaml")
        version = probe["lineage"]["dataset_version"]
    uri = next(line for line in text.splitlines() if "dataset:" in line).split("uri: ")[1].rstrip("}").strip()
    return text.replace(f"dataset: {{uri: {uri}}}", f"dataset: {{uri: {uri}, version: {version}}}")


def named(text: str, name: str) -> str:
    return text.replace("name: pretrain-small", f"name: {name}")


def in_process_rate(root: Path, text: str, n: int, rep: int) -> tuple[float, float]:
    """Submissions per second, and CPU ms per submission, of the in-process client."""
    with Client.local(cwd=root) as c:
        c.status()  # open and migrate outside the timed region
        t0, cpu0 = time.perf_counter(), time.process_time()
        for i in range(n):
            c.submit_text(named(text, f"local-{rep}-{i}"), source=f"local-{i}.yaml")
        return n / (time.perf_counter() - t0), (time.process_time() - cpu0) * 1000 / n


def cpu_s(pid: int) -> float | None:
    """CPU seconds (user + system) process `pid` has used so far; None where /proc cannot say."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _submitter(url: str, text: str, names: list[str], start: Any, done: Any) -> None:
    with Client(server=url) as c:
        c.status()  # connect outside the timed region
        start.wait()
        for name in names:
            c.submit_text(named(text, name), source=f"{name}.yaml")
    done.put(len(names))


def http_rate(url: str, text: str, n: int, rep: int, server_pid: int) -> tuple[float, float | None]:
    """Submissions per second over HTTP, and the server's CPU ms per submission (None where unknown)."""
    ctx = mp.get_context("spawn")
    start, done = ctx.Barrier(PROCESSES + 1), ctx.Queue()
    shares = [[f"http-{rep}-{p}-{i}" for i in range(p, n, PROCESSES)] for p in range(PROCESSES)]
    procs = [ctx.Process(target=_submitter, args=(url, text, share, start, done)) for share in shares]
    for p in procs:
        p.start()
    start.wait()
    t0, cpu0 = time.perf_counter(), cpu_s(server_pid)
    submitted = sum(done.get(timeout=600) for _ in procs)
    elapsed, cpu1 = time.perf_counter() - t0, cpu_s(server_pid)
    for p in procs:
        p.join()
    assert submitted == n, f"{submitted} of {n} submitted"
    return n / elapsed, None if cpu0 is None or cpu1 is None else (cpu1 - cpu0) * 1000 / n


def serve(root: Path, port: int) -> subprocess.Popen[bytes]:
    code = (
        "import sys, uvicorn; from pathlib import Path; from crossrail.api import create_app; "
        "uvicorn.run(create_app(Path(sys.argv[1])), host='127.0.0.1', port=int(sys.argv[2]), ws='none', "
        "log_level='warning')"
    )
    proc = subprocess.Popen([sys.executable, "-c", code, str(root / ".crossrail"), str(port)])
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/v1/health").status_code == 200:
                return proc
        except httpx.TransportError:
            time.sleep(0.1)
    proc.kill()
    raise SystemExit("the API server did not start within 60 s")


def fill(root: Path, text: str, pending: int, events: int) -> str:
    """`pending` queued runs (submitted in batches), then heartbeats on other runs up to `events` in the store;
    returns the id of an ordinary run to show."""
    with Client.local(cwd=root) as c:
        store = c.service.store
        have = len(store.list_runs(states=["queued"]))
        for start in range(have, pending, 500):
            docs = [
                parse_document(named(text, f"pending-{i % EXPERIMENTS}"), f"pending-{i}.yaml")
                for i in range(start, min(pending, start + 500))
            ]
            c.submit_documents(docs)
        runs = [r.id for r in store.list_runs(states=["queued"], limit=1000)]
        shown, others = runs[0], runs[1:] or runs
        now = c.clock.now()
        k = 0
        while store.last_seq() < events:
            count = min(5000, events - store.last_seq())
            batch = [
                Event(EventType.HEARTBEAT, now, others[(k + j) % len(others)], 1, {"step": j}) for j in range(count)
            ]
            store.append_events(batch)
            k += count
        return str(shown)


def latencies(url: str, path: str, reps: int) -> tuple[float, float]:
    with httpx.Client(base_url=url, timeout=60) as http:
        http.get(path).raise_for_status()
        times = []
        for _ in range(reps):
            t0 = time.perf_counter()
            http.get(path).raise_for_status()
            times.append((time.perf_counter() - t0) * 1000)
    times.sort()
    return statistics.median(times), times[min(len(times) - 1, round(0.99 * (len(times) - 1)))]


def in_process_ms(call: Any, reps: int) -> float:
    call()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        call()
        times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times)


def submit_rates(
    root: Path, text: str, url: str, server_pid: int, args: argparse.Namespace
) -> tuple[float, float, float, float | None]:
    """Medians over the repeats of in-process and HTTP submissions per second, and of the CPU ms one submission
    costs the in-process client and the server (None where unknown), the two sides in turn."""
    local, remote, local_cpu, server_cpu = [], [], [], []
    for rep in range(args.repeats):
        rate, cpu = in_process_rate(root, text, args.experiments, rep)
        local.append(rate)
        local_cpu.append(cpu)
        rate, cpu_server = http_rate(url, text, args.experiments, rep, server_pid)
        remote.append(rate)
        server_cpu += [cpu_server] if cpu_server is not None else []
        print(
            f"repeat {rep + 1}: in-process {local[-1]:,.0f}/s ({cpu:.2f} CPU ms each), HTTP x{PROCESSES} "
            f"{remote[-1]:,.0f}/s ({_ms(cpu_server)} server CPU ms each)"
        )
    return (
        statistics.median(local),
        statistics.median(remote),
        statistics.median(local_cpu),
        statistics.median(server_cpu) if server_cpu else None,
    )


def _ms(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}"


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--experiments", type=int, default=400, help="submitted per side and repeat")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--events", type=int, default=100_000)
    ap.add_argument("--pending", type=int, default=10_000)
    ap.add_argument("--requests", type=int, default=300, help="GET /v1/runs/{id} requests (the queue gets a tenth)")
    args = ap.parse_args()
    os.environ.pop("CROSSRAIL_HOME", None)
    os.environ.pop("CROSSRAIL_SERVER", None)
    start_load = os.getloadavg()[0]
    print(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())} on {os.cpu_count()} CPUs")
    with tempfile.TemporaryDirectory(prefix="crossrail-bench-api-") as tmp:
        root = Path(tmp)
        commit = make_checkout(root)
        Client.init(root)
        os.chdir(root)
        text = template(root, commit)
        port = free_port()
        server = serve(root, port)
        url = f"http://127.0.0.1:{port}"
        try:
            rate, http, cpu_local, cpu_server = submit_rates(root, text, url, server.pid, args)
            shown = fill(root, text, args.pending, args.events)
            with Client.local(cwd=root) as c:
                held = c.service.store.last_seq()
                queued = len(c.service.store.list_runs(states=["queued"]))
            run_p50, run_p99 = latencies(url, f"/v1/runs/{shown}", args.requests)
            queue_p50, queue_p99 = latencies(url, "/v1/queue", max(20, args.requests // 10))
            whole_p50, whole_p99 = latencies(url, "/v1/queue?limit=0", 10)
            with Client.local(cwd=root) as c:  # the same reads in process: what the API adds to them
                local_run = in_process_ms(lambda: c.show(shown), args.requests)
                local_queue = in_process_ms(c.queue, max(20, args.requests // 10))
                local_whole = in_process_ms(lambda: c.queue(limit=0), 10)
        finally:
            server.terminate()
            server.wait(30)
    cpu_ratio = f"{cpu_local / cpu_server:.2f}" if cpu_server else "n/a"
    print(f"submit: HTTP x{PROCESSES} {http:,.0f}/s vs in-process {rate:,.0f}/s: ratio {http / rate:.2f} (aim >= 0.5)")
    print(
        f"submit CPU: server {_ms(cpu_server)} ms per HTTP submit vs in-process {cpu_local:.2f} ms: "
        f"in-process/server {cpu_ratio}"
    )
    print(
        f"GET /v1/runs/{{id}} at {held:,} events: p50 {run_p50:.1f} ms, p99 {run_p99:.1f} ms (aim p99 <= 50 ms);"
        f" Client.show in process p50 {local_run:.1f} ms"
    )
    print(
        f"GET /v1/queue (first {QUEUE_PAGE} of each queue) at {queued:,} pending: p50 {queue_p50:.1f} ms, "
        f"p99 {queue_p99:.1f} ms (aim p99 <= 250 ms); Client.queue in process p50 {local_queue:.1f} ms"
    )
    print(
        f"GET /v1/queue?limit=0 (every pending run) at {queued:,} pending: p50 {whole_p50:.1f} ms, "
        f"p99 {whole_p99:.1f} ms; Client.queue(limit=0) in process p50 {local_whole:.1f} ms"
    )
    end_load = os.getloadavg()[0]
    print(f"load average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(
        f"SUMMARY api submit_http {http:,.0f}/s submit_in_process {rate:,.0f}/s ratio {http / rate:.2f} "
        f"server_cpu_ms_per_submit {_ms(cpu_server)} in_process_cpu_ms_per_submit {cpu_local:.2f} "
        f"cpu_ratio {cpu_ratio} "
        f"run_p50_ms {run_p50:.1f} run_p99_ms {run_p99:.1f} queue_p50_ms {queue_p50:.1f} queue_p99_ms {queue_p99:.1f} "
        f"whole_queue_p50_ms {whole_p50:.1f} whole_queue_p99_ms {whole_p99:.1f} "
        f"in_process_show_ms {local_run:.1f} in_process_queue_ms {local_queue:.1f} "
        f"in_process_whole_queue_ms {local_whole:.1f} events {held} pending {queued} "
        f"load {start_load:.1f}->{end_load:.1f} on {os.cpu_count()} cores"
    )


if __name__ == "__main__":
    main()
