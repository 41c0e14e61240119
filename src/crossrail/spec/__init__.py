"""Experiment, Fleet and PlacementPolicy documents: safe loading, validation with lines, portability lint."""

from crossrail.spec.common import Accelerator, Stage
from crossrail.spec.experiment import (
    AcceleratorPrefs,
    CheckpointSpec,
    CodeRef,
    DatasetRef,
    Experiment,
    ExperimentSpec,
    Metadata,
    ParentRef,
    Part,
    Resources,
    Retries,
    experiment_digest,
    work_digest,
)
from crossrail.spec.fleet import ClusterSpec, Fleet, Pool, Queue
from crossrail.spec.lint import lint_experiment, placeholder
from crossrail.spec.loader import Document, load_document, parse_document
from crossrail.spec.overrides import apply_overrides
from crossrail.spec.policy import (
    ARTICLE_POLICY_YAML,
    PlacementPolicy,
    PortabilityRequirements,
    WorkloadPolicy,
)
from crossrail.spec.validate import (
    check_experiment,
    default_policy,
    kind_of,
    load_experiment,
    load_fleet,
    load_policy,
    parse_experiment,
    parse_fleet,
    parse_policy,
    validate_files,
)

__all__ = [
    "ARTICLE_POLICY_YAML",
    "Accelerator",
    "AcceleratorPrefs",
    "CheckpointSpec",
    "ClusterSpec",
    "CodeRef",
    "DatasetRef",
    "Document",
    "Experiment",
    "ExperimentSpec",
    "Fleet",
    "Metadata",
    "ParentRef",
    "Part",
    "PlacementPolicy",
    "Pool",
    "PortabilityRequirements",
    "Queue",
    "Resources",
    "Retries",
    "Stage",
    "WorkloadPolicy",
    "apply_overrides",
    "check_experiment",
    "default_policy",
    "experiment_digest",
    "kind_of",
    "lint_experiment",
    "load_document",
    "load_experiment",
    "load_fleet",
    "load_policy",
    "parse_document",
    "parse_experiment",
    "parse_fleet",
    "parse_policy",
    "placeholder",
    "validate_files",
    "work_digest",
]
