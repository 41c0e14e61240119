"""The RL pipeline under crossrail: all stages in one attempt, or one stage of it.

    python -m crossrail.workloads.rl [--part sampler|reward|learner [--replica N]] [--stages process|ray]
        [--rendezvous DIR] [--task reversal|addition] [--verifier digits|exact] [--steps N] ...

Without --part the process is the parent of a whole pipeline (crossrail.workloads.rl.supervisor); with it,
one stage, for an executor that runs each part as its own process. The part defaults to CROSSRAIL_PART, the
replica to CROSSRAIL_PART_REPLICA, else RANK, else 0. Stages meet
in the rendezvous directory, `<CROSSRAIL_CHECKPOINT_DIR>/rl` unless named. Exit codes: 0 done, 75 stopped by
SIGTERM with everything committed, 2 bad input.
"""

from __future__ import annotations

import argparse
import sys

from crossrail.runtime import Reporter
from crossrail.workloads.rl.launch import EXIT_BAD_INPUT, PROG, parse_args, rendezvous
from crossrail.workloads.rl.launch import main as run
from crossrail.workloads.rl.settings import Rendezvous, Settings

__all__ = ["EXIT_BAD_INPUT", "PROG", "main", "parse_args", "rendezvous"]


def main(argv: list[str] | None = None) -> int:
    return run(argv, _pipeline)


def _pipeline(args: argparse.Namespace, settings: Settings, rdv: Rendezvous, reporter: Reporter) -> int:
    from crossrail.workloads.rl.supervisor import StageSupervisor, processes

    if args.stages == "ray":
        from crossrail.workloads.rl.ray_stages import actors

        start = actors(settings, rdv)
    else:
        start = processes(settings, rdv)
    return StageSupervisor(settings, rdv, reporter, start).run()


if __name__ == "__main__":
    sys.exit(main())
