"""Pure base of crossrail: ids, quantities, the Clock protocol and event types. Imports nothing of ours."""

from crossrail.core.attempts import ACTIVE_ATTEMPT_STATES, AttemptState, EndReason
from crossrail.core.clock import Clock, ManualClock, MonotonicClock, SystemClock
from crossrail.core.events import RUN_STATES, TERMINAL_RUN_STATES, Event, EventType, RunState
from crossrail.core.ids import (
    attempt_id,
    is_uid,
    new_uid,
    parse_run_id,
    run_dir_name,
    run_id,
    validate_name,
    validate_team,
)
from crossrail.core.priority import PRIORITIES, PRIORITY_RANK, priority_level, priority_rank
from crossrail.core.quantities import format_duration, format_money, parse_duration, parse_topology

__all__ = [
    "ACTIVE_ATTEMPT_STATES",
    "PRIORITIES",
    "PRIORITY_RANK",
    "RUN_STATES",
    "TERMINAL_RUN_STATES",
    "AttemptState",
    "Clock",
    "EndReason",
    "Event",
    "EventType",
    "ManualClock",
    "MonotonicClock",
    "RunState",
    "SystemClock",
    "attempt_id",
    "format_duration",
    "format_money",
    "is_uid",
    "new_uid",
    "parse_duration",
    "parse_run_id",
    "parse_topology",
    "priority_level",
    "priority_rank",
    "run_dir_name",
    "run_id",
    "validate_name",
    "validate_team",
]
