"""The workers of one data-parallel local attempt: N elastic torchrun agents, one worker each, as one command.

The local executor runs `python -m crossrail.executors.gang --workers N --min-workers MIN --max-workers MAX
-- COMMAND...` under the attempt's supervisor when the experiment asks for `spec.parallelism.data` > 1. It
starts N `torchrun --nnodes=MIN:MAX --nproc-per-node=1 --rdzv-backend=c10d` agents (one per worker, as if each
were a host: a single-node torchrun restarts every worker rather than carry on smaller) and hosts their
rendezvous store itself, so losing any one worker loses no rendezvous. When a worker dies the others fail
their next collective, their agents restart them into a smaller group (at least MIN) and they resume from the
last checkpoint; the gang reports the loss (`worker_lost`) through the attempt's report channel, and rank 0
reports the resize. A stop (SIGTERM) reaches every agent, and each agent passes it to its worker.

It grows on request: SIGUSR1 tells it to read `grow.json` (`{"workers": N}`, written whole by the local
executor's `resize`) and start as many more agents as take it to N live workers, never past MAX. A new agent
joins the same rendezvous; the running agents see it waiting and restart their workers into the larger group,
which resume from the last checkpoint. The gang reports the growth (`workers_added`) as it reports a loss, and
rank 0 reports the resize.

Exit: 0 when a worker finished the run; when stopped, 75 (the workers checkpointed); else as the last agent.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import time
from contextlib import suppress
from pathlib import Path
from typing import Any

WORKERS_FILE = "workers.json"  # the agents' pids, in the attempt directory (the gang's working directory)
GROW_FILE = "grow.json"  # how many workers to grow to, beside it: written before SIGUSR1
GROW_SIGNAL = signal.SIGUSR1
EXIT_TEMPFAIL = 75
POLL_S = 0.2
LAST_CALL_S = 2.0  # how long a rendezvous that has MIN workers waits for more before it starts
FINISHED_GRACE_S = 30.0  # how long agents may outlive one that finished the run (one started as it ended waits)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def torchrun(args: argparse.Namespace, port: int, command: list[str]) -> list[str]:
    """One worker's elastic agent: its own node of MIN:MAX, meeting the others at 127.0.0.1:`port`."""
    run = os.environ.get("CROSSRAIL_RUN_ID", "run")
    attempt = os.environ.get("CROSSRAIL_ATTEMPT", "0")
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        f"--nnodes={args.min_workers}:{args.max_workers}",
        "--nproc-per-node=1",
        "--rdzv-backend=c10d",
        f"--rdzv-endpoint=127.0.0.1:{port}",
        f"--rdzv-id={run}-{attempt}",
        f"--rdzv-conf=is_host=false,last_call_timeout={LAST_CALL_S:g},join_timeout=300",
        f"--max-restarts={args.max_restarts}",
        "--monitor-interval=0.5",
        "--no-python",
        *command,
    ]


class Gang:
    def __init__(self, args: argparse.Namespace, command: list[str]) -> None:
        self.args, self.command = args, command
        self.agents: list[subprocess.Popen[bytes]] = []
        self.ended: dict[int, int] = {}
        self.stopping = False
        self.grow_asked = False
        self.finished_at: float | None = None  # when the first agent ended 0: the run is done
        self.env: dict[str, str] = {}
        self.port = 0

    def run(self) -> int:
        """1. host the rendezvous store, 2. start the agents, 3. watch them (growing on request), 4. end as the
        run ended."""
        from torch.distributed import TCPStore  # type: ignore[attr-defined]

        store = TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
        self.port = store.port
        self.env = {
            **os.environ,
            "CROSSRAIL_COORDINATOR": f"127.0.0.1:{free_port()}",  # JAX's, served by rank 0
            # A fresh store for the workers in each round, served by that round's rank 0: a shared one keeps
            # pointing at the first round's rank 0, which may be the worker that was lost (torch 2.13).
            "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1",
        }
        signal.signal(signal.SIGTERM, self._on_stop)
        signal.signal(signal.SIGINT, self._on_stop)
        signal.signal(GROW_SIGNAL, self._on_grow)  # before workers.json: the executor signals only after it
        for _ in range(self.args.workers):
            if self.stopping:  # stopped while starting: start no more
                break
            self._start_agent()
        self._write_workers()
        while len(self.ended) < len(self.agents):
            if self.grow_asked:
                self.grow_asked = False
                self._grow()
            for i, agent in enumerate(self.agents):
                if i not in self.ended and agent.poll() is not None:
                    self._ended(i, agent.returncode)
            if self.finished_at is not None and time.monotonic() - self.finished_at > FINISHED_GRACE_S:
                self.finished_at = float("inf")  # once
                self._signal_agents(signal.SIGTERM)
            time.sleep(POLL_S)
        return self._exit_code()

    def _start_agent(self) -> None:
        # Each agent leads its own group, so one can be lost (or signalled) without the others.
        agent = subprocess.Popen(torchrun(self.args, self.port, self.command), env=self.env, process_group=0)
        self.agents.append(agent)
        if self.stopping:  # the stop came while it started, and may have missed it
            with suppress(ProcessLookupError, PermissionError):
                os.killpg(agent.pid, signal.SIGTERM)

    def _write_workers(self) -> None:
        _write_json(
            Path(WORKERS_FILE),
            {"agents": [a.pid for a in self.agents], "store_port": self.port, "gang": os.getpid()},
        )

    def _live(self) -> int:
        return sum(1 for i, a in enumerate(self.agents) if i not in self.ended and a.poll() is None)

    def _grow(self) -> None:
        """Start agents up to the workers `grow.json` asks for (at most MAX live), and report them."""
        try:
            asked = json.loads(Path(GROW_FILE).read_text()).get("workers")
        except (OSError, ValueError, AttributeError):
            return
        live = self._live()
        if self.stopping or self.finished_at is not None or not isinstance(asked, int) or live == 0:
            return
        target = min(asked, self.args.max_workers)
        added: list[int] = []
        while live + len(added) < target and not self.stopping:
            self._start_agent()
            added.append(len(self.agents) - 1)
        if not added:
            return
        self._write_workers()
        print(f"crossrail: started workers {added}; {live + len(added)} now", file=sys.stderr, flush=True)
        _report("workers_added", workers=added, workers_before=live, workers_after=live + len(added))

    def _ended(self, i: int, code: int) -> None:
        self.ended[i] = code
        left = len(self.agents) - len(self.ended)
        if code == 0 and self.finished_at is None:
            self.finished_at = time.monotonic()
        if code == 0 or self.stopping or left == 0 or self.finished_at is not None:  # not lost: the run ended
            return
        how = {"signal": signal.Signals(-code).name} if code < 0 else {"exit_code": code}
        print(
            f"crossrail: worker {i} ended ({how}); {left} of {len(self.agents)} carry on", file=sys.stderr, flush=True
        )
        _report("worker_lost", worker=i, workers_left=left, **how)

    def _exit_code(self) -> int:
        codes = list(self.ended.values())
        if any(c == 0 for c in codes):
            return 0
        if self.stopping:
            return EXIT_TEMPFAIL
        last = codes[-1] if codes else 1
        if last < 0:  # end as the agent did, so the supervisor records the signal
            signal.signal(-last, signal.SIG_DFL)
            os.kill(os.getpid(), -last)
        return last if last > 0 else 1

    def _on_grow(self, signum: int, _frame: object) -> None:
        self.grow_asked = True  # acted on in the watch loop: no process is started inside a handler

    def _on_stop(self, signum: int, _frame: object) -> None:
        self.stopping = True
        self._signal_agents(signal.SIGTERM)

    def _signal_agents(self, sig: int) -> None:
        for i, agent in enumerate(self.agents):
            if i not in self.ended:
                with suppress(ProcessLookupError, PermissionError):
                    os.killpg(agent.pid, sig)


def _report(name: str, **data: Any) -> None:
    """A record in the attempt's report channel, when this process has one (crossrail launched it)."""
    from crossrail.errors import CrossrailError
    from crossrail.runtime import Reporter, RuntimeContext

    try:
        with Reporter(RuntimeContext.from_env()) as reporter:
            reporter.event(name, **data)
    except CrossrailError as exc:
        print(f"crossrail: cannot report {name}: {exc}", file=sys.stderr, flush=True)


def _write_json(path: Path, data: dict[str, Any]) -> None:
    temp = path.with_name(f".{path.name}.tmp")
    temp.write_text(json.dumps(data))
    os.replace(temp, path)


def parse_args(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    if "--" not in argv:
        raise SystemExit("usage: python -m crossrail.executors.gang --workers N [...] -- COMMAND...")
    cut = argv.index("--")
    p = argparse.ArgumentParser(prog="crossrail.executors.gang")
    p.add_argument("--workers", type=int, required=True)
    p.add_argument("--min-workers", type=int)
    p.add_argument("--max-workers", type=int)
    p.add_argument("--max-restarts", type=int, default=3)
    args = p.parse_args(argv[:cut])
    args.min_workers = args.min_workers or args.workers
    args.max_workers = args.max_workers or args.workers
    if not 1 <= args.min_workers <= args.workers <= args.max_workers or not argv[cut + 1 :]:
        p.error(
            f"need 1 <= min ({args.min_workers}) <= workers ({args.workers}) <= max ({args.max_workers}) and a command"
        )
    return args, argv[cut + 1 :]


def main(argv: list[str] | None = None) -> int:
    args, command = parse_args(sys.argv[1:] if argv is None else argv)
    return Gang(args, command).run()


if __name__ == "__main__":
    sys.exit(main())
