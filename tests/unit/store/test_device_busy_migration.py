"""Revision 0014: NVML busy shares recorded as accelerator_utilization move to device_busy; nothing else moves."""

from __future__ import annotations

from pathlib import Path

from crossrail.store import HEAD_REVISION, Store

from .builders import engine_at
from .test_attempt_end_reason import RUN

SAMPLE = "INSERT INTO metric_samples (run_id, attempt, ts, step, name, value) VALUES ('old-1', 1, ?, ?, ?, ?)"


def test_a_store_at_0013_moves_its_busy_share_samples_to_device_busy(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'old.db'}"
    engine = engine_at(url, "0013")
    with engine.begin() as conn:
        conn.exec_driver_sql(
            "INSERT INTO experiments (id, name, digest, spec, created_at) VALUES (1, 'old', 'sha256:e', '{}', 1.0)"
        )
        conn.exec_driver_sql(RUN)
        for row in [(1.0, 1, "accelerator_utilization", 0.91), (1.0, 1, "loss", 2.5), (2.0, 2, "mfu", 0.3)]:
            conn.exec_driver_sql(SAMPLE, row)
    engine.dispose()

    store = Store.open(url)
    try:
        assert store.revision() == HEAD_REVISION == "0014"
        got = [(s["name"], s["value"]) for s in store.metric_samples("old-1")]
        assert sorted(got) == [("device_busy", 0.91), ("loss", 2.5), ("mfu", 0.3)]
    finally:
        store.close()
