"""An attempt's end reason has its own column (0008): written and read as core.EndReason, filled for old rows."""

from __future__ import annotations

from pathlib import Path

from crossrail.core import EndReason
from crossrail.store import HEAD_REVISION, Store

from .builders import engine_at

RUN = (
    "INSERT INTO runs (id, experiment, n, experiment_id, stage, priority, chips, queue, state, spec, spec_digest, "
    "dataset_uri, dataset_version, image, checkpoint_dir, created_at, updated_at) VALUES ('old-1', 'old', 1, 1, "
    "'eval', 'normal', 2, 'eval', 'running', '{}', 'sha256:a', 'file:///d', 'v1', 'img', 'file:///c', 1.0, 1.0)"
)
ATTEMPT = (
    "INSERT INTO attempts (run_id, number, state, pool, accelerator, chip_type, chips, cost_per_chip_hour, "
    "dataset_uri, dataset_version, exit_code, signal, stopped_by, reason) VALUES "
    "('old-1', ?, ?, 'h100', 'gpu', 'h100', 2, 3.0, 'file:///d', 'v1', ?, ?, ?, 'why')"
)
AT_0007 = [
    # number, state, exit code, signal, stopped_by as revision 0007 held it
    (1, "failed", None, 9, "signal"),  # the end reason, kept in stopped_by since issue 15
    (2, "preempted", 75, None, "drained"),  # stopped by crossrail for a drain
    (3, "failed", None, 9, None),  # ended before ends carried a reason
    (4, "unplaced", None, None, "stale_number"),
    (5, "cancelled", None, 15, "cancelled"),
    (6, "running", None, None, None),
]


def _store_at_0007(path: Path) -> str:
    url = f"sqlite:///{path}"
    engine = engine_at(url, "0007")
    with engine.begin() as conn:
        conn.exec_driver_sql(
            "INSERT INTO experiments (id, name, digest, spec, created_at) VALUES (1, 'old', 'sha256:e', '{}', 1.0)"
        )
        conn.exec_driver_sql(RUN)
        for row in AT_0007:
            conn.exec_driver_sql(ATTEMPT, row)
    engine.dispose()
    return url


def test_a_store_at_0007_gets_each_ended_attempts_end_reason_and_keeps_only_stop_reasons_in_stopped_by(
    tmp_path: Path,
) -> None:
    store = Store.open(_store_at_0007(tmp_path / "old.db"))
    try:
        assert store.revision() == HEAD_REVISION
        got = [(a.number, a.end_reason, a.stopped_by) for a in store.attempts("old-1")]
        assert got == [
            (1, EndReason.SIGNAL, None),
            (2, EndReason.DRAINED, "drained"),
            (3, EndReason.SIGNAL, None),  # by its state, as crossrail read such an attempt before
            (4, EndReason.STALE_NUMBER, None),
            (5, EndReason.CANCELLED, "cancelled"),
            (6, None, None),  # still running: no end yet
        ]
        assert all(type(a.end_reason) is EndReason for a in store.attempts("old-1")[:5])
    finally:
        store.close()


def test_an_attempts_end_is_written_with_its_reason_and_its_stop_reason_apart(tmp_path: Path) -> None:
    store = Store.open(_store_at_0007(tmp_path / "old.db"))
    try:
        assert store.end_attempt(
            "old-1",
            6,
            state="failed",
            ended_at=9.0,
            exit_code=None,
            signal=15,
            stopped_by="preempted",
            end_reason=EndReason.HEARTBEAT_TIMEOUT,
            reason="lost: no heartbeat for 61s",
            run_state="queued",
            events=[],
        )
        att = store.attempts("old-1")[-1]
        assert (att.end_reason, att.stopped_by) == (EndReason.HEARTBEAT_TIMEOUT, "preempted")
        assert att.as_dict()["end_reason"] == "heartbeat_lost"  # plain JSON for show --json
    finally:
        store.close()
