"""Submission throughput and status latency.

1. Client submissions per second for N experiments (batched, all checks and lineage resolution included)
   against raw SQLite inserts of the same run and event rows, in the same process; ratio printed.
2. `Client.status()` in process with 100,000 events in the log (aim <= 50 ms).
3. Wall time of the `crossrail status` command (aim <= 600 ms).
Each is repeated; medians are reported. The last line is the summary. Each figure is also given in CPU time
(`*_cpu`: this process's, or the command's user + system), which a machine loaded by others slows far less.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rich.progress import track

from crossrail.client import Client
from crossrail.core import Event, EventType
from crossrail.spec import parse_document

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from conftest import make_checkout, standalone_eval


def experiment_docs(root: Path, n: int, offset: int) -> list[object]:
    template = (root / ".crossrail" / "experiments" / "eval-smoke.yaml").read_text()
    return [
        parse_document(template.replace("name: eval-smoke", f"name: bench-{offset + i}"), f"bench-{i}.yaml")
        for i in range(n)
    ]


def client_rate(root: Path, n: int, batch: int, rep: int) -> tuple[float, float]:
    """Submissions per second of wall time and per second of this process's CPU time."""
    docs = experiment_docs(root, n, rep * n)
    with Client(cwd=root) as c:
        c.status()  # open and migrate outside the timed region
        t0, cpu0 = time.perf_counter(), time.process_time()
        for i in range(0, n, batch):
            c.submit_documents(docs[i : i + batch])
        return n / (time.perf_counter() - t0), n / (time.process_time() - cpu0)


def raw_rate(root: Path, n: int, batch: int, rep: int) -> float:
    """The same rows (one run row, its submitted and queued events) through sqlite3 executemany."""
    with Client(cwd=root) as c:
        sample = c.show(c.status()["active"][0]["id"])
    spec = json.dumps(sample["spec"])
    db = sqlite3.connect(root / f"raw-{rep}.db", isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute(
        "CREATE TABLE runs (id TEXT PRIMARY KEY, experiment TEXT, n INT, stage TEXT, state TEXT, "
        "spec TEXT, dataset_uri TEXT, dataset_version TEXT, created_at REAL)"
    )
    db.execute(
        "CREATE TABLE events (seq INTEGER PRIMARY KEY AUTOINCREMENT, ts REAL, type TEXT, run_id TEXT, data TEXT)"
    )
    t0 = time.perf_counter()
    for i in range(0, n, batch):
        now = time.time()
        rows = [
            (f"raw-{j}-1", f"raw-{j}", 1, "eval", "queued", spec, "file:///d", "v", now)
            for j in range(i, min(n, i + batch))
        ]
        db.execute("BEGIN IMMEDIATE")
        db.executemany("INSERT INTO runs VALUES (?,?,?,?,?,?,?,?,?)", rows)
        db.executemany(
            "INSERT INTO events (ts, type, run_id, data) VALUES (?,?,?,?)",
            [(now, t, r[0], "{}") for r in rows for t in ("submitted", "queued")],
        )
        db.execute("COMMIT")
    elapsed = time.perf_counter() - t0
    db.close()
    return n / elapsed


def fill_events(root: Path, total: int) -> None:
    with Client(cwd=root) as c:
        store = c.service.store
        run = c.status()["active"][0]["id"]
        have = store.last_seq()
        chunk = 5000
        for start in track(range(have, total, chunk), description="filling the event log"):
            count = min(chunk, total - start)
            store.append_events([Event(EventType.HEARTBEAT, time.time(), run, 1, {"step": k}) for k in range(count)])


def status_ms(root: Path, reps: int) -> tuple[float, float]:
    """Median wall and CPU milliseconds of `Client.status()`."""
    with Client(cwd=root) as c:
        c.status()
        times, cpu = [], []
        for _ in range(reps):
            t0, cpu0 = time.perf_counter(), time.process_time()
            c.status()
            times.append((time.perf_counter() - t0) * 1000)
            cpu.append((time.process_time() - cpu0) * 1000)
    return statistics.median(times), statistics.median(cpu)


def _children_cpu_s() -> float:
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def cli_ms(root: Path, reps: int) -> tuple[float, float]:
    """Median wall and CPU (user + system) milliseconds of the `crossrail status` command, as installed: after one
    untimed run that may write crossrail's bytecode cache (an editable install under PYTHONDONTWRITEBYTECODE
    would otherwise compile every crossrail module the command loads on every run, a fifth of its CPU time)."""
    exe = Path(sys.executable).with_name("crossrail")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    subprocess.run([str(exe), "status"], cwd=root, check=True, capture_output=True, env=env)
    times, cpu = [], []
    for _ in range(reps):
        t0, cpu0 = time.perf_counter(), _children_cpu_s()
        subprocess.run([str(exe), "status"], cwd=root, check=True, capture_output=True, env=env)
        times.append((time.perf_counter() - t0) * 1000)
        cpu.append((_children_cpu_s() - cpu0) * 1000)
    return statistics.median(times), statistics.median(cpu)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--experiments", type=int, default=10_000)
    ap.add_argument("--batch", type=int, default=500)
    ap.add_argument("--events", type=int, default=100_000)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    os.environ.pop("CROSSRAIL_HOME", None)
    with tempfile.TemporaryDirectory(prefix="crossrail-bench-") as tmp:
        root = Path(tmp)
        make_checkout(root)
        Client.init(root)
        standalone_eval(root)  # init's eval-smoke evaluates posttrain-042's checkpoint; here it stands alone
        ours, ours_cpu, raw = [], [], []
        for rep in range(args.repeats):
            wall, cpu = client_rate(root, args.experiments, args.batch, rep)
            ours.append(wall)
            ours_cpu.append(cpu)
            raw.append(raw_rate(root, args.experiments, args.batch, rep))
            print(f"repeat {rep + 1}: client {wall:,.0f}/s ({cpu:,.0f}/s of CPU), raw sqlite {raw[-1]:,.0f}/s")
        fill_events(root, args.events)
        st, st_cpu = status_ms(root, 11)
        cli, cli_cpu = cli_ms(root, 7)  # the median of 7, as the aim is stated
    rate, rate_cpu, base = statistics.median(ours), statistics.median(ours_cpu), statistics.median(raw)
    print(f"submit: {rate:,.0f} experiments/s (aim >= 1,000) vs raw SQLite {base:,.0f}/s: ratio {rate / base:.3f}")
    print(f"status in process at {args.events:,} events: {st:.1f} ms (aim <= 50 ms)")
    print(f"`crossrail status` wall time: {cli:.0f} ms (aim <= 600 ms)")
    print(f"in CPU time: submit {rate_cpu:,.0f}/s, status {st_cpu:.1f} ms, `crossrail status` {cli_cpu:.0f} ms")
    print(
        f"SUMMARY submit {rate:,.0f}/s ratio_vs_raw_sqlite {rate / base:.3f} status_ms {st:.1f} "
        f"cli_status_ms {cli:.0f} experiments {args.experiments} events {args.events} "
        f"submit_cpu {rate_cpu:,.0f}/s status_cpu_ms {st_cpu:.1f} cli_status_cpu_ms {cli_cpu:.0f}"
    )


if __name__ == "__main__":
    main()
