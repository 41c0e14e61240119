"""Acting on the cycle's growth proposals (`CycleResult.grown`), alike in the agent and the simulator.

Step 7 of a cycle proposes a `Growth` for an elastic run below its `max_chips` on a pool whose free chips
no blocked head wants; nothing changes until a driver acts on it. A driver whose executor takes the extra
chips into the running attempt tells `Scheduler.resized(run, chips_to, at)` and records a `resized` event
with `resized_data(growth)`; one that cannot leaves the run at its size and records nothing.
"""

from __future__ import annotations

from typing import Any

from crossrail.scheduling.types import Growth


def resized_data(growth: Growth) -> dict[str, Any]:
    """The `resized` event of a growth taken: a whole run (`part` null), its degree counted in chips."""
    return {
        "part": None,
        "degree_before": growth.chips_from,
        "degree_after": growth.chips_to,
        "chips": growth.chips_to,
        "reason": growth.reason,
    }
