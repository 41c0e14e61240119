"""The fleet simulator: the scheduling core and metrics of the agent, on a virtual clock (docs/simulator.md)."""

from crossrail.sim.checkpointing import CheckpointSpec
from crossrail.sim.engine import Engine
from crossrail.sim.failures import CorrelatedFailure, FailureSpec
from crossrail.sim.records import RunRecord, SimResult, StageStats
from crossrail.sim.simulation import Simulation
from crossrail.sim.workload import SimJob, SyntheticSpec, parse_workload, synthetic

__all__ = [
    "CheckpointSpec",
    "CorrelatedFailure",
    "Engine",
    "FailureSpec",
    "RunRecord",
    "SimJob",
    "SimResult",
    "Simulation",
    "StageStats",
    "SyntheticSpec",
    "parse_workload",
    "synthetic",
]
