"""Mixed HTTP traffic against `crossrail serve` on PostgreSQL while three agents share the store.

    python bench/load.py [--seconds 60] [--clients 8] [--agents 3] [--replay 0.2] [--keep]

Starts its own PostgreSQL server (initdb and pg_ctl on 127.0.0.1, as the test fixtures do; as the `postgres`
user when run as root), a workspace in a git checkout of its own, `crossrail serve` and `--agents` agents on
that store (one leads, the rest stand by), then `--clients` processes that for `--seconds` each loop over:
submit the workspace's small pretraining experiment as a short bigram run (a `--replay` share of them with
one of 20 idempotency keys every client uses, so replays race across processes), show a run they submitted,
and read the queue. Prints each operation's throughput and p50/p99 latency, then audits the store against
every acknowledged answer:

- lost: an acknowledged run that is not in the store, or whose stored idempotency key is another;
- duplicated: a key that answered two different runs, or more runs stored than keys acknowledged.

The last line is `SUMMARY requests=N rps=R p50_ms=P p99_ms=Q errors=E lost=L duplicated=D`.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from crossrail.client import Client

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from conftest import make_checkout

SHARED_KEYS = 20
# What the agents run: the numpy bigram workload for a few steps, so the runs they admit load the host little.
SETS = [
    "spec.command=[python, -m, crossrail.workloads.bigram]",
    "spec.args=[--steps, '20', --checkpoint-every-steps, '10']",
    "spec.resources.chips=2",
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def postgres() -> Iterator[str]:
    """A throwaway PostgreSQL cluster on 127.0.0.1 (the recipe of tests/conftest.py); yields a database URL."""
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"), key=lambda p: int(p.parts[-3]))
    which = shutil.which("initdb")
    pg = found[-1].parent if found else Path(which).parent if which else None
    if pg is None:
        sys.exit("bench/load.py: PostgreSQL server binaries are not installed (apt-get install postgresql)")
    as_postgres = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
    # as root the server runs as postgres, which must reach its directory: not under a private $TMPDIR
    root = Path(tempfile.mkdtemp(prefix="crossrail-bench-pg-", dir="/tmp" if as_postgres else None))
    if as_postgres:
        shutil.chown(root, "postgres")
    port, data = free_port(), root / "data"
    initdb = [*as_postgres, str(pg / "initdb"), "-D", str(data), "-U", "postgres", "-A", "trust", "--no-sync"]
    subprocess.run(initdb, check=True, capture_output=True, timeout=120)
    opts = f"-p {port} -k {root} -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off"
    start = [*as_postgres, str(pg / "pg_ctl"), "-D", str(data), "-l", str(root / "server.log"), "-w", "-o", opts]
    subprocess.run([*start, "start"], check=True, capture_output=True, timeout=120)
    try:
        yield f"postgresql+psycopg://postgres@127.0.0.1:{port}/postgres"
    finally:
        stop = [*as_postgres, str(pg / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop"]
        subprocess.run(stop, capture_output=True, check=False, timeout=60)
        shutil.rmtree(root, ignore_errors=True)


def start(root: Path, url: str, *args: str) -> subprocess.Popen[bytes]:
    env = {**os.environ, "CROSSRAIL_HOME": str(root / ".crossrail"), "CROSSRAIL_STORE_URL": url}
    log = (root / f"{args[0]}-{time.monotonic_ns()}.log").open("ab")
    cmd = [sys.executable, "-m", "crossrail.cli", *args]
    return subprocess.Popen(cmd, env=env, stdout=log, stderr=log, cwd=root)  # `commit: auto` reads the checkout


def wait_healthy(url: str, proc: subprocess.Popen[bytes], timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            sys.exit(f"bench/load.py: crossrail serve exited {proc.returncode}")
        try:
            if httpx.get(f"{url}/v1/health", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    sys.exit(f"bench/load.py: crossrail serve did not answer on {url} within {timeout_s:.0f}s")


def worker(url: str, worker_id: int, seconds: float, replay: float, document: str) -> None:
    """One client process: mixed traffic until `seconds` pass; one JSON line per request on stdout:
    [op, latency ms, HTTP status (0: no answer), idempotency key, run id, the error class when no answer]."""
    rng = random.Random(worker_id)
    mine: list[str] = []
    n = 0
    deadline = time.monotonic() + seconds
    with httpx.Client(base_url=url, timeout=30) as http:
        while time.monotonic() < deadline:
            op = rng.choices(["submit", "show", "queue"], weights=[2, 2, 1])[0] if mine else "submit"
            key, rid, error = None, "", ""
            began = time.perf_counter()
            try:
                if op == "submit":
                    shared = rng.random() < replay
                    key = f"shared-{rng.randrange(SHARED_KEYS)}" if shared else f"c{worker_id}-{n}"
                    n += 1
                    body = {"document": document, "source": "load.yaml", "sets": SETS, "idempotencyKey": key}
                    r = http.post("/v1/runs", json=body)
                    if r.status_code < 300:
                        rid = r.json()["run"]["id"]
                        mine.append(rid)
                elif op == "show":
                    r = http.get(f"/v1/runs/{rng.choice(mine)}")
                else:
                    r = http.get("/v1/queue")
                status = r.status_code
            except httpx.HTTPError as exc:
                status, error = 0, type(exc).__name__
            ms = (time.perf_counter() - began) * 1000
            print(json.dumps([op, round(ms, 3), status, key, rid, error]), flush=True)


def traffic(url: str, args: argparse.Namespace, document: Path) -> list[list[Any]]:
    cmd = [sys.executable, __file__, "--worker", url, "--seconds", str(args.seconds), "--replay", str(args.replay)]
    procs = [
        subprocess.Popen([*cmd, "--worker-id", str(w), "--document", str(document)], stdout=subprocess.PIPE, text=True)
        for w in range(args.clients)
    ]
    answers: list[list[Any]] = []
    for p in procs:
        out, _ = p.communicate(timeout=args.seconds + 120)
        answers += [json.loads(line) for line in out.splitlines() if line.startswith("[")]
    return answers


def audit(root: Path, store_url: str, answers: list[list[Any]]) -> tuple[int, int]:
    """(lost, duplicated) between the acknowledged submissions and the store."""
    acknowledged: dict[str, set[str]] = defaultdict(set)
    for op, _ms, status, key, rid, _error in answers:
        if op == "submit" and 200 <= status < 300:
            acknowledged[key].add(rid)
    os.environ["CROSSRAIL_STORE_URL"] = store_url
    with Client.local(cwd=root) as c:
        stored = {r.id: r.idempotency_key for r in c.service.store.list_runs(experiment="load")}
    lost = sum(1 for key, rids in acknowledged.items() for rid in rids if stored.get(rid) != key)
    duplicated = sum(len(rids) - 1 for rids in acknowledged.values()) + max(0, len(stored) - len(acknowledged))
    return lost, duplicated


def report(answers: list[list[Any]], seconds: float, lost: int, duplicated: int) -> None:
    for op in ("submit", "show", "queue"):
        ms = sorted(a[1] for a in answers if a[0] == op)
        if ms:
            p50, p99 = statistics.median(ms), ms[min(len(ms) - 1, int(len(ms) * 0.99))]
            print(f"{op:>6}: {len(ms):6d} requests, {len(ms) / seconds:7.1f}/s, p50 {p50:7.1f} ms, p99 {p99:7.1f} ms")
    ms = sorted(a[1] for a in answers)
    errors = sum(1 for a in answers if not 200 <= a[2] < 300)
    if errors:
        by_status = Counter(f"{a[0]} {a[2] or a[5]}" for a in answers if not 200 <= a[2] < 300)
        print("errors: " + ", ".join(f"{what}: {n}" for what, n in by_status.most_common()))
    p50, p99 = statistics.median(ms), ms[min(len(ms) - 1, int(len(ms) * 0.99))]
    print(
        f"SUMMARY requests={len(ms)} rps={len(ms) / seconds:.1f} p50_ms={p50:.1f} p99_ms={p99:.1f} "
        f"errors={errors} lost={lost} duplicated={duplicated}"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=60.0, help="how long the clients send traffic")
    ap.add_argument("--clients", type=int, default=8, help="client processes")
    ap.add_argument("--agents", type=int, default=3, help="agents on the store (one leads)")
    ap.add_argument("--replay", type=float, default=0.2, help="share of submissions that reuse a shared key")
    ap.add_argument("--keep", action="store_true", help="keep the workspace directory (its logs) afterwards")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--worker-id", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--document", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(args.worker, args.worker_id, args.seconds, args.replay, Path(args.document).read_text())
        return
    for name in ("CROSSRAIL_HOME", "CROSSRAIL_SERVER", "CROSSRAIL_STORE_URL"):
        os.environ.pop(name, None)
    print(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())} on {os.cpu_count()} CPUs")
    root = Path(tempfile.mkdtemp(prefix="crossrail-bench-load-"))
    with postgres() as store_url:
        make_checkout(root)
        Client.init(root)
        document = root / "load.yaml"
        exp = (root / ".crossrail" / "experiments" / "pretrain-small.yaml").read_text()
        document.write_text(exp.replace("name: pretrain-small", "name: load", 1))
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        procs = [start(root, store_url, "serve", "--port", str(port))]
        try:
            wait_healthy(url, procs[0])
            procs += [start(root, store_url, "agent", "--poll", "0.2") for _ in range(args.agents)]
            answers = traffic(url, args, document)
            health = httpx.get(f"{url}/v1/health", timeout=10).json().get("agents", {})
            leader = (health.get("leader") or {}).get("id")
            print(f"agents: leader {leader} (term {health.get('term')}), {len(health.get('standbys', []))} standing by")
        finally:
            for p in procs:
                p.send_signal(signal.SIGTERM)
            for p in procs:
                try:
                    p.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    p.kill()
        lost, duplicated = audit(root, store_url, answers)
    if args.keep:
        print(f"workspace kept at {root}")
    else:
        shutil.rmtree(root, ignore_errors=True)
    report(answers, args.seconds, lost, duplicated)


if __name__ == "__main__":
    main()
