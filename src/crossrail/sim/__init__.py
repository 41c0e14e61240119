"""The fleet simulator: the scheduling core and metrics of the agent, on a virtual clock (docs/simulator.md)."""

from crossrail.core.renamed import renamed
from crossrail.sim.checkpointing import CheckpointModel
from crossrail.sim.engine import Engine
from crossrail.sim.failures import CorrelatedFailure, FailureSpec
from crossrail.sim.records import SimResult, SimRunRecord, SimStageStats
from crossrail.sim.simulation import Simulation
from crossrail.sim.workload import SimJob, SyntheticSpec, parse_workload, synthetic

__all__ = [
    "CheckpointModel",
    "CorrelatedFailure",
    "Engine",
    "FailureSpec",
    "SimJob",
    "SimResult",
    "SimRunRecord",
    "SimStageStats",
    "Simulation",
    "SyntheticSpec",
    "parse_workload",
    "synthetic",
]

__getattr__ = renamed(
    __name__,
    {"CheckpointSpec": "CheckpointModel", "RunRecord": "SimRunRecord", "StageStats": "SimStageStats"},
    globals(),
)
