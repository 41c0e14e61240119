"""One invocation of the RL pipeline's command: its arguments, its rendezvous, and one stage or the whole pipeline.

`python -m crossrail.workloads.rl` (crossrail.workloads.rl.__main__) passes `main` the pipeline's starter; a
Ray stage actor (crossrail.workloads.rl.ray_stages) calls it for one `--part` in its own process.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlparse

from crossrail.errors import CrossrailError
from crossrail.runtime import HeartbeatThread, Reporter, RuntimeContext
from crossrail.workloads.rl.settings import PARTS, Rendezvous, Settings, add_arguments, from_args

PROG = "crossrail.workloads.rl"
EXIT_BAD_INPUT = 2

Pipeline = Callable[[argparse.Namespace, Settings, Rendezvous, Reporter], int]
"""Starts and tends the whole pipeline; returns the exit code."""


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog=PROG, description="RL with a verifiable reward on the reference GPT.")
    part = os.environ.get("CROSSRAIL_PART") or None
    p.add_argument("--part", choices=PARTS, default=part, help="run only this stage (default: the whole pipeline)")
    p.add_argument("--replica", type=int, help="this stage's replica index (default RANK, else 0)")
    p.add_argument("--stages", choices=("process", "ray"), default="process", help="how the parent runs stages")
    p.add_argument("--rendezvous", help="the directory stages share (default <checkpoint dir>/rl)")
    add_arguments(p)
    return p.parse_args(argv)


def rendezvous(ctx: RuntimeContext, given: str | None) -> Rendezvous:
    if given:
        return Rendezvous(Path(given))
    url = urlparse(ctx.checkpoint_dir)
    if url.scheme not in ("", "file"):
        raise CrossrailError(
            f"CROSSRAIL_CHECKPOINT_DIR {ctx.checkpoint_dir} is not on this machine's file system; "
            "name a shared directory with --rendezvous"
        )
    return Rendezvous(Path(url.path if url.scheme else ctx.checkpoint_dir) / "rl")


def main(argv: list[str] | None = None, pipeline: Pipeline | None = None) -> int:
    """Run what `argv` asks: the stage of `--part`, or else the whole pipeline through `pipeline`."""
    args = parse_args(argv)
    try:
        ctx = RuntimeContext.from_env()
        settings, rdv = from_args(args), rendezvous(ctx, args.rendezvous)
        if args.replica is not None and args.replica < 0:
            raise CrossrailError(f"--replica must be >= 0 (got {args.replica})")
        if args.part is None and pipeline is None:  # a caller that runs stages only (a Ray stage actor)
            raise CrossrailError("--part is needed here: this process runs one stage")
    except CrossrailError as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    rdv.root.mkdir(parents=True, exist_ok=True)
    with Reporter(ctx) as reporter:
        reporter.environment()
        beats = HeartbeatThread(reporter, ctx.heartbeat_s)
        beats.start()
        try:
            if args.part is None:
                assert pipeline is not None  # refused above
                return pipeline(args, settings, rdv, reporter)
            from crossrail.workloads.rl.stages import StageProcess, run_stage

            given = os.environ.get("CROSSRAIL_PART_REPLICA", "")
            replica = args.replica if args.replica is not None else int(given) if given.isdigit() else ctx.rank
            return run_stage(StageProcess(settings, ctx, rdv, reporter, args.part, replica))
        finally:
            beats.stop()
