"""Builders for spec documents: a valid experiment and fleet, and small helpers to vary them."""

from __future__ import annotations

import textwrap

from crossrail.spec import Document, parse_document

DIGEST = "716716f6347cd75fb375b7bf7ade9f86aacee812082efae0b84c0d854c1bd74d"

# The full example experiment; every line number the tests assert is counted from here.
EXPERIMENT_YAML = """\
apiVersion: crossrail/v1
kind: Experiment
metadata: {name: posttrain-042, team: alignment, owner: ada@example.com, labels: {project: demo}}
spec:
  stage: post_training
  image: us-docker.pkg.dev/acme/train/posttrain@sha256:<digest>
  command: [python, -m, trainer.run]
  args: [--steps, "200"]
  config: gs://acme-models/configs/posttrain.yaml
  code: {repo: https://github.com/acme/trainer, commit: auto}
  dataset: {uri: gs://acme-data/sft/v3/, version: v3}
  checkpoint: {dir: gs://acme-models/ckpt/posttrain-042, format: crossrail-ckpt/v1, every: 10m, keep_last: 3}
  resources: {chips: 8, min_chips: 4, max_chips: 8, duration: 6h}
  accelerators: {prefer: gpu, allow: [gpu, tpu]}
  parent: {run: pretrain-007, checkpoint: latest}
  retries: {max: 3, exit_codes: []}
  priority: normal
  env: {LOG_LEVEL: info}
""".replace("<digest>", DIGEST)

FLEET_YAML = """\
apiVersion: crossrail/v1
kind: Fleet
metadata: {name: local}
spec:
  pools:
    - name: tpu-v5p-local
      accelerator: tpu
      chip_type: tpu-v5p
      chips: 16
      chips_per_host: 4
      topologies: [2x2x1, 2x2x2, 2x2x4]
      cost_per_chip_hour: 4.20
      relative_speed: 1.0
      node_labels: {accelerator: tpu-v5p}
      backend: local
    - name: h100-local
      accelerator: gpu
      chip_type: h100
      chips: 8
      chips_per_host: 8
      cost_per_chip_hour: 3
  queues:
    - name: pretraining
      stage: pretraining
      quota: {tpu-v5p-local: 16, h100-local: 8}
      cohort: research
    - name: post-training
      stage: post_training
      quota: {h100-local: 8}
    - name: post-training-alignment
      stage: post_training
      team: alignment
      quota: {h100-local: 4}
"""


def doc(text: str, source: str = "experiment.yaml") -> Document:
    return parse_document(textwrap.dedent(text), source)


def edited(text: str, old: str, new: str) -> str:
    """`text` with `old` replaced once; fails loudly when the builder no longer contains `old`."""
    assert old in text, f"{old!r} is not in the document"
    return text.replace(old, new, 1)
