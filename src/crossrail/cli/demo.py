"""`crossrail demo` (and `make demo`): real training runs on a TPU-like and a GPU-like pool of this machine.

In a fresh workspace it validates the examples, submits pretraining, post-training from the pretraining
run's checkpoint, an eval of the post-trained model and a few small experiments, and runs the agent in
this process. Once the pretraining attempt has committed a checkpoint its training process is killed;
the agent retries it on the other pool, where it resumes from that checkpoint. It ends with the
research-cycle metrics per stage and pool and the verdicts: all its runs pooled, tpu against gpu (refused: they
are different experiments); one small experiment run three times on each pool, live; and a simulated fleet
before and after one pool grew, and leaves the workspace in place for `crossrail` commands.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.live import Live
from rich.table import Table

from crossrail.client import Client
from crossrail.errors import CrossrailError

# Tables are drawn for a wide terminal even when the output is piped or logged (as `make demo` often is).
WIDTH = max(shutil.get_terminal_size((150, 40)).columns, 150)
os.environ.setdefault("COLUMNS", str(WIDTH))
console = Console(highlight=False, width=WIDTH)


AB, AB_RUNS = "cycle-ab", 3
"""The experiment the demo runs AB_RUNS times on each pool for its live verdict (3: the verdict's minimum)."""


def git_checkout(path: Path) -> None:
    """Make `path` a git checkout, as a researcher's training-code checkout would be (code.commit: auto)."""
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "demo",
        "GIT_AUTHOR_EMAIL": "demo@example.com",
        "GIT_COMMITTER_NAME": "demo",
        "GIT_COMMITTER_EMAIL": "demo@example.com",
    }
    (path / "train.py").write_text("# the team's training code lives in this checkout\n")
    for cmd in (["git", "init", "-q"], ["git", "add", "train.py"], ["git", "commit", "-qm", "trainer"]):
        subprocess.run(cmd, cwd=path, env=env, check=True, capture_output=True)


def run_demo(*, quick: bool = False, directory: Path | None = None, timeout_s: float = 600.0) -> dict[str, Any]:
    """Run the demo; returns the final report object. Raises CrossrailError if a run does not succeed."""
    root = Path(directory) if directory else Path(tempfile.mkdtemp(prefix="crossrail-demo-"))
    root.mkdir(parents=True, exist_ok=True)
    os.environ.pop("CROSSRAIL_HOME", None)
    git_checkout(root)
    Client.init(root, force=True)
    console.rule("crossrail demo")
    console.print(f"workspace: {root / '.crossrail'}")
    with Client.local(cwd=root) as client:  # the demo runs its own workspace, whatever CROSSRAIL_SERVER says
        exps = client.workspace.experiments_dir
        result = client.validate(sorted(exps.glob("*.yaml")))
        console.print(
            f"validated {len(result['files'])} example experiments: "
            f"{'all valid' if result['valid'] else result['problems']}"
        )
        runs = _submit_all(client, exps, quick)
        killed = _drive(client, runs, timeout_s)
        report = client.report()
    _summarise(client, runs, killed, report, root)
    _simulate_policies()
    _verdicts(root)
    return report


def _verdicts(root: Path) -> list[str]:
    """The research-cycle verdicts: this workspace's runs pooled by accelerator (refused: different experiments),
    one experiment run AB_RUNS times on each pool (live, honest about how little a few runs can say), and a
    simulated fleet before and after one pool grew."""
    from crossrail.control.reports.facts import local_pools, pool_peaks, workspace_fleet, workspace_runs
    from crossrail.metrics import Selection, compare
    from crossrail.metrics.hypotheses import check_stage
    from crossrail.sim import Simulation, SyntheticSpec, synthetic
    from crossrail.sim.facts import run_facts
    from crossrail.sim.fleets import pools_fleet

    console.rule("verdicts: did the research cycle get shorter?")
    with Client.local(cwd=root) as c:
        fleet = c.service.fleet
        runs = workspace_runs(c.service.store, c.clock.now(), virtual_pools=local_pools(fleet), peaks=pool_peaks(fleet))
        timeline = workspace_fleet(c.service.store, runs)
        post = c.policy.for_stage("post_training")
    on = {kind: Selection({"accelerator": kind}).pick(runs) for kind in ("tpu", "gpu")}
    pooled = compare(on["tpu"], on["gpu"], fleet=timeline).sentence
    console.print(f"all of this workspace's runs, tpu ({len(on['tpu'])}) against gpu ({len(on['gpu'])}): {pooled}")
    ab = {kind: Selection({"accelerator": kind, "experiment": AB}).pick(runs) for kind in ("tpu", "gpu")}
    own = compare(ab["tpu"], ab["gpu"], fleet=timeline).sentence
    console.print(
        f"[bold]live[/]: {AB} run {len(ab['tpu'])} times on tpu-v5p (before) and {len(ab['gpu'])} on h100 (after):"
        f" {own}"
    )
    found = check_stage("post_training", post.preferred_accelerator, post.metrics, runs)
    console.print(f"policy check ({found.status}): {found.sentence}")
    # 150 post-training runs of about an hour over a day (90% busy), on the same fleet before and after h100 grew.
    spec = SyntheticSpec(jobs=150, span_s=86_400, mix={"post_training": 1}, sizes=(4,), median_s=3600, sigma=0.2)
    grown = []
    for h100 in (20, 26):
        fleet = pools_fleet(f"tpu-v5p:8:4:2.0,h100:{h100}:2:3.0")
        sim = Simulation(fleet, synthetic(spec), seed=0, record_events=True)
        result = sim.run()
        grown.append(run_facts(sim.events or [], fleet, result.end_s))
    # Only what the sentence reads besides the cycle: the bootstrap of every other metric would add a second.
    simulated = compare(grown[0], grown[1], explain=("experiment_queue_seconds", "tokens_per_second")).sentence
    console.print(
        f"[bold]simulated[/]: the same fleet with h100 grown from 20 to 26 chips (150 runs each): {simulated}"
    )
    return [own, simulated]


def _explain_placement(client: Client, path: Path) -> None:
    """Where post-training would run if submitted now, every candidate pool's estimate, and why."""
    from crossrail.cli import render

    out = client.place(path)
    console.print(
        f"placement of {out['experiment']} ({out['stage']}, {out['chips']} chips, objective {out['objective']}): "
        f"{out['pool']}\nwhy: {out['reason']}"
    )
    render.candidates(out["candidates"], chosen=out["pool"], title=f"candidate pools for {out['experiment']}")


GAVEL = Path(__file__).resolve().parents[3] / "data" / "gavel"
DEMO_POLICIES = ("fifo", "fifo_hetero", "las_hetero", "max_min_fairness_hetero", "min_jct_hetero")


def _simulate_policies() -> dict[str, float] | None:
    """Replay Gavel's 15-job trace on 2 V100 + 4 K80 through the scheduling step the agent runs: average JCT
    per policy."""
    from crossrail.sim.fleets import pools_fleet
    from crossrail.sim.report import comparison, summary_table
    from crossrail.sim.simulation import Simulation
    from crossrail.sim.traces import gavel_jobs

    trace, matrix = GAVEL / "artifact_evaluation.trace", GAVEL / "simulation_throughputs.json"
    if not (trace.is_file() and matrix.is_file()):
        console.print(f"[dim]fleet simulation skipped: Gavel's trace is not at {GAVEL} (it ships in the repo)[/]")
        return None
    console.rule("fleet simulation: Gavel's trace on 2 V100 + 4 K80 (time-sliced), the agent's scheduling step")
    jobs = gavel_jobs(trace, matrix)
    fleet = pools_fleet("v100:2:2,k80:4:4", jobs, time_sliced=True)
    results = [Simulation(fleet, jobs, policy=p, seed=0).run() for p in DEMO_POLICIES]
    console.print(summary_table(results))
    for other in results[1:]:
        console.print(comparison(results[0], other))
    return {p: r.avg_jct_s or 0.0 for p, r in zip(DEMO_POLICIES, results, strict=True)}


def _submit_all(client: Client, exps: Path, quick: bool) -> list[str]:
    steps = ("60", "30") if quick else ("120", "60")
    # The demo's kill is retried after 2 s rather than the default 30 s back-off, to keep the demo short.
    fast_retry = "spec.retries.backoff.initial=2s"
    # Pretraining pauses 0.1 s a step, so the kill lands between its first checkpoint (step 20) and its end: at
    # full speed the small GPT trains 40 steps in about a second, between two of the agent's passes.
    paced = f"spec.args=[--steps, '{steps[0]}', --checkpoint-every-steps, '20', --step-sleep, '0.1']"
    sub = [client.submit(exps / "pretrain-small.yaml", sets=[paced, fast_retry])]
    # Post-training names pretraining as its parent, so its placement is explained once that run exists.
    _explain_placement(client, exps / "posttrain-042.yaml")
    sub += [
        client.submit(exps / "posttrain-042.yaml", sets=[f"spec.args.3={steps[1]}"]),
        client.submit(exps / "eval-smoke.yaml", sets=["spec.parent={run: posttrain-042, checkpoint: latest}"]),
    ]
    for i, lr in enumerate(["1e-3", "1e-2"] if quick else ["1e-3", "3e-3", "1e-2"]):
        sub.append(
            client.submit(
                exps / "pretrain-small.yaml",
                sets=[
                    f"metadata.name=sweep-lr-{i + 1}",
                    "spec.stage=experiment",
                    "spec.resources.chips=1",
                    "spec.args=[--steps, '40', --checkpoint-every-steps, '20', --lr, '" + lr + "']",
                    "spec.priority=low",
                ],
            )
        )
    # One small experiment AB_RUNS times on each pool, alike in all but where it runs: the live verdict's runs.
    for kind in ("tpu", "gpu"):
        for _ in range(AB_RUNS):
            sets = [
                f"metadata.name={AB}",
                "spec.stage=experiment",
                "spec.resources.chips=4",  # a TPU slice's smallest shape here; the same on both, as the work is
                "spec.priority=low",
                "spec.args=[--steps, '20', --checkpoint-every-steps, '20']",
                f"spec.accelerators.allow=[{kind}]",
            ]
            sub.append(client.submit(exps / "pretrain-small.yaml", sets=sets))
    for s in sub:
        r = s["run"]
        console.print(f"submitted {r['id']:<16} stage {r['stage']:<14} {r['chips']} chips -> queue {r['queue']}")
    return [s["run"]["id"] for s in sub]


def _drive(client: Client, runs: list[str], timeout_s: float) -> dict[str, Any]:
    """Run the agent here until every run ended; kill the pretraining attempt after its first checkpoint."""
    from crossrail.control.agent.lock import agent_lock
    from crossrail.control.agent.loop import AgentConfig

    store = client.service.store
    target, killed = runs[0], dict[str, Any]()
    deadline = time.monotonic() + timeout_s

    def done() -> bool:
        if not killed:
            killed.update(_maybe_kill(client, target))
        if time.monotonic() > deadline:
            raise CrossrailError(f"the demo did not finish within {timeout_s:.0f}s; see `crossrail status`")
        return all(store.get_run(r).state in ("succeeded", "failed", "cancelled") for r in runs)

    config = AgentConfig(poll_s=0.3, fallback_wait_s=5.0, stop_grace_s=10.0, heartbeat_s=2.0)
    with agent_lock(client.workspace.root), Live(_table(client, runs), console=console, refresh_per_second=4) as live:
        client.agent(config).run(should_stop=done, on_tick=lambda _t: live.update(_table(client, runs)))
        live.update(_table(client, runs))
    console.print()
    return killed


def _maybe_kill(client: Client, run_id: str) -> dict[str, Any]:
    """SIGKILL the training process of `run_id`'s first attempt once it has committed a checkpoint."""
    store = client.service.store
    attempts = store.attempts(run_id)
    if not attempts or attempts[0].state != "running" or not store.checkpoints(run_id):
        return {}
    child = client.workspace.root / "attempts" / run_id / "1" / "child.json"
    try:
        pid = int(json.loads(child.read_text())["pid"])
        os.killpg(pid, signal.SIGKILL)
    except (OSError, ValueError, KeyError):
        return {}
    step = store.checkpoints(run_id)[-1].step
    console.print(
        f"[red]killed[/] the training process of {run_id} attempt 1 on {attempts[0].pool} "
        f"(last committed checkpoint: step {step})"
    )
    return {"run": run_id, "pool": attempts[0].pool, "step": step}


def _table(client: Client, runs: list[str]) -> Table:
    store = client.service.store
    t = Table(title="runs")
    for col in ("run", "stage", "state", "attempt", "pool", "step", "loss"):
        t.add_column(col)
    for rid in runs:
        run = store.get_run(rid)
        atts = store.attempts(rid)
        last = atts[-1] if atts else None
        losses = store.metric_samples(rid, "loss")
        ckpt = store.checkpoints(rid)
        t.add_row(
            rid,
            run.stage,
            run.state,
            str(last.number) if last else "-",
            last.pool if last else "-",
            str(losses[-1]["step"]) if losses else (str(ckpt[-1].step) if ckpt else "-"),
            f"{losses[-1]['value']:.3f}" if losses else "-",
        )
    return t


def _summarise(client: Client, runs: list[str], killed: dict[str, Any], report: dict[str, Any], root: Path) -> None:
    from crossrail.cli import render

    with Client.local(cwd=root) as c:
        store = c.service.store
        if killed:
            att = store.attempts(killed["run"])
            resumed = [
                e for e in store.events(run=killed["run"], types=["reported"]) if e.data.get("name") == "resumed"
            ]
            step = resumed[-1].data.get("data", {}).get("step") if resumed else None
            console.print(
                f"{killed['run']}: attempt 1 on {att[0].pool} was killed at/after step {killed['step']}; "
                f"attempt {att[-1].number} ran on {att[-1].pool} and resumed from step {step}"
            )
        for rid in runs:
            losses = store.metric_samples(rid, "loss")
            if len(losses) > 1:
                console.print(f"{rid}: loss {losses[0]['value']:.3f} -> {losses[-1]['value']:.3f}")
        render.report(report)
        failed = [r for r in runs if store.get_run(r).state != "succeeded"]
    console.print(
        f"workspace kept at {root / '.crossrail'}; try: crossrail --help, "
        f"CROSSRAIL_HOME={root / '.crossrail'} crossrail show {runs[0]}"
    )
    if failed:
        raise CrossrailError(f"runs that did not succeed: {', '.join(failed)}; see `crossrail logs RUN`")


def main() -> None:
    try:
        run_demo()
    except CrossrailError as exc:
        console.print(f"crossrail: {exc}")
        raise SystemExit(1) from None


if __name__ == "__main__":
    main()
