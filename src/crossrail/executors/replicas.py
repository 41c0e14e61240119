"""The replicas of one part of a pipeline run as one local attempt: N copies of the part's command.

The local executor runs `python -m crossrail.executors.replicas --replicas N -- COMMAND...` for a part of
`replicas: N` (N > 1), as a JobSet runs a part's replicas as the Jobs of one ReplicatedJob. Replica i
runs COMMAND with `CROSSRAIL_PART_REPLICA=i` (what the RL stages read). They share this process group, so
the supervisor's stop signal reaches every replica at once; this process waits for them all.

Exit: 0 when every replica exited 0 (a replica a controller scaled down exits 0 on its own, the others go
on); the code of the first replica that failed otherwise, once the others were stopped (a part's failure
retries the whole part); 75 when replicas were stopped (SIGTERM) and none failed.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterable

EX_TEMPFAIL = 75
REPLICA_ENV = "CROSSRAIL_PART_REPLICA"
POLL_S = 0.1


def run(replicas: int, command: list[str]) -> int:
    children = [subprocess.Popen(command, env={**os.environ, REPLICA_ENV: str(i)}) for i in range(replicas)]
    signal.signal(signal.SIGTERM, lambda *_: None)  # the group's SIGTERM is the replicas' to act on; wait for them
    failed: int | None = None
    while None in (codes := [c.poll() for c in children]):  # poll every one: each reaps its own exit
        failed = failed if failed is not None else _failure(codes)
        if failed is not None:
            for c in children:
                if c.poll() is None:
                    c.terminate()
        time.sleep(POLL_S)
    failed = failed if failed is not None else _failure(c.returncode for c in children)
    if failed is not None and failed < 0:  # died by a signal: so does the part, as the exit-code contract reads it
        if -failed not in (signal.SIGKILL, signal.SIGSTOP):  # those two have no handler to reset
            signal.signal(-failed, signal.SIG_DFL)
        os.kill(os.getpid(), -failed)
        return 128 - failed
    if failed is not None:
        return failed
    return 0 if all(c.returncode == 0 for c in children) else EX_TEMPFAIL


def _failure(codes: Iterable[int | None]) -> int | None:
    """The first code that is neither still running, nor 0, nor 75 (stopped with everything committed)."""
    return next((c for c in codes if c not in (None, 0, EX_TEMPFAIL)), None)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    usage = "usage: python -m crossrail.executors.replicas --replicas N -- COMMAND..."
    if "--" not in argv:
        print(usage, file=sys.stderr)
        return 2
    cut = argv.index("--")
    head, command = argv[:cut], argv[cut + 1 :]
    given = head[1] if len(head) == 2 and head[0] == "--replicas" else ""
    if not given.isdigit() or int(given) < 1 or not command:
        print(f"{usage} (N >= 1 and a command; got {' '.join(argv)!r})", file=sys.stderr)
        return 2
    return run(int(given), command)


if __name__ == "__main__":
    sys.exit(main())
