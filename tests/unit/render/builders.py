"""Experiments for the render tests, written as a person would write them."""

from __future__ import annotations

from crossrail.spec import Experiment, parse_document, parse_experiment

DIGEST = "sha256:" + "ab" * 32
IMAGE = f"us-docker.pkg.dev/acme/train/trainer@{DIGEST}"


def experiment(
    stage: str = "post_training",
    chips: int = 8,
    *,
    name: str = "exp-042",
    team: str | None = None,
    priority: str = "normal",
    image: str = IMAGE,
    retries: str = "{max: 2, exit_codes: [3]}",
    checkpoint: str | None = None,
    code: str = "{repo: https://github.com/acme/trainer, commit: auto}",
    workers: int = 1,
) -> Experiment:
    team_line = f", team: {team}" if team else ""
    parallelism = f"\n  parallelism: {{data: {workers}}}" if workers != 1 else ""
    text = f"""
apiVersion: crossrail/v1
kind: Experiment
metadata: {{name: {name}, owner: ada@example.com{team_line}, labels: {{project: demo}}}}
spec:
  stage: {stage}
  image: {image}
  command: [python, -m, trainer.run]
  args: [--steps, "200", --note, "it's a $HOME test"]
  config: gs://acme-models/configs/{name}.yaml
  dataset: {{uri: gs://acme-data/sft/v3/, version: v3}}
  code: {code}
  checkpoint: {{dir: {checkpoint or f"gs://acme-models/checkpoints/{name}"}, every: 10m}}
  resources: {{chips: {chips}, duration: 90m}}{parallelism}
  retries: {retries}
  priority: {priority}
  env: {{LOG_LEVEL: info}}
"""
    return parse_experiment(parse_document(text, f"{name}.yaml"))
