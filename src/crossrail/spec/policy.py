"""The placement policy: each stage's preferred accelerator and metrics, and what portability means."""

from __future__ import annotations

import difflib
from typing import Literal

from pydantic import Field, model_validator

from crossrail.core.metric_names import METRIC_NAMES
from crossrail.spec.common import ApiVersion, Items, NonEmpty, SpecModel, Stage, Text, raise_items

# The policy of the article crossrail grew from, kept byte for byte so `crossrail init` can write it out.
ARTICLE_POLICY_YAML = """workloads:
  pretraining:
    preferred_accelerator: tpu
    metrics:
      - tokens_per_second
      - checkpoint_write_seconds
      - accelerator_utilization
  post_training:
    preferred_accelerator: gpu
    metrics:
      - steps_per_hour
      - experiment_queue_seconds
      - eval_pass_rate
  reinforcement_learning:
    preferred_accelerator: mixed
    metrics:
      - samples_per_second
      - learner_idle_seconds
      - policy_lag_steps
portability_requirements:
  checkpoint_format: versioned
  dataset_uri_scheme: object-storage
  experiment_metadata: required
  container_image: pinned-by-digest
"""

PreferredAccelerator = Literal["tpu", "gpu", "mixed", "any"]
Objective = Literal["throughput_per_cost", "time_to_result", "cost"]


class WorkloadPolicy(SpecModel):
    """One stage's placement: its preferred accelerator, the metrics it is judged by, its objective."""

    preferred_accelerator: PreferredAccelerator = "any"
    metrics: list[NonEmpty] = Field(default_factory=list)
    objective: Objective | None = None

    @model_validator(mode="after")
    def _known_metrics(self) -> WorkloadPolicy:
        raise_items(metric_name_items(self.metrics))
        return self


def metric_name_items(names: list[str]) -> Items:
    """Each name must be one crossrail computes (crossrail.core.metric_names), so a hypothesis can be tested."""
    items: Items = []
    for i, name in enumerate(names):
        if name in METRIC_NAMES:
            continue
        close = difflib.get_close_matches(name, list(METRIC_NAMES), n=1, cutoff=0.6)
        fix = f"did you mean {close[0]!r}? " if close else ""
        items.append((("metrics", i), f"unknown metric {name!r}", fix + "known metrics: " + ", ".join(METRIC_NAMES)))
    return items


class PortabilityRequirements(SpecModel):
    """What an experiment must state so it can run on any pool; every value but `code_commit` defaults to the
    strict one."""

    checkpoint_format: Literal["versioned", "any"] = "versioned"
    dataset_uri_scheme: Literal["object-storage", "any"] = "object-storage"
    experiment_metadata: Literal["required", "optional"] = "required"
    container_image: Literal["pinned-by-digest", "any"] = "pinned-by-digest"
    local_uri_schemes: list[NonEmpty] = Field(default_factory=list)
    # `recorded`: a `code.commit: auto` submitted outside a git checkout records no commit, with a warning;
    # `required`: it is refused. Not in the article's policy, so the default is the lenient one.
    code_commit: Literal["required", "recorded"] = "recorded"


class PolicyMetadata(SpecModel):
    name: NonEmpty | None = None
    labels: dict[str, Text] = Field(default_factory=dict)


class PlacementPolicy(SpecModel):
    api_version: ApiVersion | None = Field(default=None, alias="apiVersion")
    kind: Literal["PlacementPolicy"] | None = None
    metadata: PolicyMetadata = Field(default_factory=PolicyMetadata)
    workloads: dict[Stage, WorkloadPolicy] = Field(default_factory=dict)
    portability_requirements: PortabilityRequirements = Field(default_factory=PortabilityRequirements)

    def for_stage(self, stage: Stage | str) -> WorkloadPolicy:
        """The stage's workload policy; a stage the file does not name prefers `any` accelerator."""
        return self.workloads.get(Stage(stage), WorkloadPolicy())

    def objective_for(self, stage: Stage | str) -> Objective:
        """The stage's placement objective: as written, else `throughput_per_cost` for pretraining and
        `time_to_result` for every other stage."""
        written = self.for_stage(stage).objective
        if written is not None:
            return written
        return "throughput_per_cost" if str(stage) == "pretraining" else "time_to_result"

    @property
    def portability(self) -> PortabilityRequirements:
        return self.portability_requirements
