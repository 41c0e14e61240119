"""Submission throughput and status latency.

1. Client submissions per second for N experiments (batched, all checks and lineage resolution included)
   against raw SQLite inserts of the same run and event rows, in the same process; ratio printed.
2. `Client.status()` in process with 100,000 events in the log (aim <= 50 ms).
3. Wall time of the `crossrail status` command (aim <= 600 ms).
Each is repeated; medians are reported. The last line is the summary.
"""

from __future__ import annotations

import argparse
import json
import os
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


def client_rate(root: Path, n: int, batch: int, rep: int) -> float:
    docs = experiment_docs(root, n, rep * n)
    with Client(cwd=root) as c:
        c.status()  # open and migrate outside the timed region
        t0 = time.perf_counter()
        for i in range(0, n, batch):
            c.submit_documents(docs[i : i + batch])
        return n / (time.perf_counter() - t0)


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


def status_ms(root: Path, reps: int) -> float:
    with Client(cwd=root) as c:
        c.status()
        times = []
        for _ in range(reps):
            t0 = time.perf_counter()
            c.status()
            times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times)


def cli_ms(root: Path, reps: int) -> float:
    exe = Path(sys.executable).with_name("crossrail")
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        subprocess.run([str(exe), "status"], cwd=root, check=True, capture_output=True)
        times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times)


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
        ours, raw = [], []
        for rep in range(args.repeats):
            ours.append(client_rate(root, args.experiments, args.batch, rep))
            raw.append(raw_rate(root, args.experiments, args.batch, rep))
            print(f"repeat {rep + 1}: client {ours[-1]:,.0f}/s, raw sqlite {raw[-1]:,.0f}/s")
        fill_events(root, args.events)
        st = status_ms(root, 11)
        cli = cli_ms(root, 7)  # the median of 7, as the aim is stated
    rate, base = statistics.median(ours), statistics.median(raw)
    print(f"submit: {rate:,.0f} experiments/s (aim >= 1,000) vs raw SQLite {base:,.0f}/s: ratio {rate / base:.3f}")
    print(f"status in process at {args.events:,} events: {st:.1f} ms (aim <= 50 ms)")
    print(f"`crossrail status` wall time: {cli:.0f} ms (aim <= 600 ms)")
    print(
        f"SUMMARY submit {rate:,.0f}/s ratio_vs_raw_sqlite {rate / base:.3f} status_ms {st:.1f} "
        f"cli_status_ms {cli:.0f} experiments {args.experiments} events {args.events}"
    )


if __name__ == "__main__":
    main()
