"""`make demo`: a fresh workspace in a temporary directory, driven through the `crossrail` command.

It validates the example experiments and the first article's policy, shows what the portability lint
says about a hardware-bound experiment, submits the examples (one twice with an idempotency key, one
with an override), and prints the status, the queues, one run's lineage and the metrics report.
Experiments are queued, not run: the local executor arrives with the execution layer.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from rich.console import Console
from rich.rule import Rule

console = Console(highlight=False, width=max(shutil.get_terminal_size((140, 40)).columns, 120))

BAD_EXPERIMENT = """\
apiVersion: crossrail/v1
kind: Experiment
metadata: {name: posttrain-gpu-run, team: alignment, owner: ada@example.com}
spec:
  stage: post_training
  image: us-docker.pkg.dev/PROJECT/train/posttrain:latest
  command: [python, -m, trainer.run]
  dataset: {uri: /data/sft/v3, version: v3}
  checkpoint: {dir: gs://MODEL_BUCKET/checkpoints/run-042}
  resources:
    chips: 8
    nvidia.com/gpu: 8
"""


def crossrail(*args: str, cwd: Path, check: bool = True) -> int:
    console.print(f"[bold cyan]$ crossrail {shlex.join(args)}[/]")
    # Tables are drawn for a wide terminal even when the demo's output is piped or logged.
    env = {**os.environ, "COLUMNS": str(max(shutil.get_terminal_size((140, 40)).columns, 120))}
    proc = subprocess.run([sys.executable, "-m", "crossrail.cli", *args], cwd=cwd, env=env, check=False)
    if check and proc.returncode != 0:
        console.print(f"[red]crossrail {args[0]} exited {proc.returncode}[/]")
        raise SystemExit(proc.returncode)
    return proc.returncode


def git_checkout(path: Path) -> None:
    """Make `path` a git checkout, as a researcher's training-code checkout would be (code.commit: auto)."""
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "demo",
        "GIT_AUTHOR_EMAIL": "demo@example.com",
        "GIT_COMMITTER_NAME": "demo",
        "GIT_COMMITTER_EMAIL": "demo@example.com",
    }
    (path / "train.py").write_text("print('training code lives here')\n")
    for cmd in (["git", "init", "-q"], ["git", "add", "train.py"], ["git", "commit", "-qm", "trainer"]):
        subprocess.run(cmd, cwd=path, env=env, check=True)


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="crossrail-demo-") as tmp:
        root = Path(tmp)
        os.environ.pop("CROSSRAIL_HOME", None)
        git_checkout(root)
        console.print(Rule("1. a workspace"))
        crossrail("init", cwd=root)
        exps = sorted(str(p.relative_to(root)) for p in (root / ".crossrail" / "experiments").glob("*.yaml"))

        console.print(Rule("2. validation and the portability lint"))
        crossrail("validate", *exps, ".crossrail/policy.yaml", ".crossrail/fleet.yaml", cwd=root)
        bad = root / "posttrain-gpu-run.yaml"
        bad.write_text(BAD_EXPERIMENT)
        console.print("a hardware-bound copy of the article's Job, under the strict article policy:")
        rc = crossrail("validate", "--policy", str(_article_policy(root)), bad.name, cwd=root, check=False)
        console.print(f"exit code {rc} (1 = invalid)")

        console.print(Rule("3. submit"))
        pre, post, ev = (
            ".crossrail/experiments/" + n for n in ("pretrain-small.yaml", "posttrain-042.yaml", "eval-smoke.yaml")
        )
        crossrail("submit", pre, "--idempotency-key", "demo-pretrain", cwd=root)
        crossrail("submit", pre, "--idempotency-key", "demo-pretrain", cwd=root)
        crossrail("submit", post, cwd=root)
        crossrail("submit", ev, "--set", "spec.resources.chips=2", "--set", "spec.priority=high", cwd=root)
        console.print("a request no pool could ever hold is refused at submit:")
        crossrail("submit", ev, "--set", "spec.resources.chips=64", cwd=root, check=False)

        console.print(Rule("4. queues, lineage, state changes, metrics"))
        crossrail("queue", cwd=root)
        crossrail("show", "posttrain-042", cwd=root)
        crossrail("suspend", "eval-smoke", cwd=root)
        crossrail("status", cwd=root)
        crossrail("report", cwd=root)
        console.print(Rule("done"))
        console.print("Runs are queued, not executed, in this version; the workspace was temporary.")


def _article_policy(root: Path) -> Path:
    from crossrail.spec import ARTICLE_POLICY_YAML

    path = root / "article-policy.yaml"
    path.write_text(ARTICLE_POLICY_YAML)
    return path


if __name__ == "__main__":
    main()
