"""An RL pipeline's backlog is scraped: the learner's last reported queue lengths and ages, per running run."""

from __future__ import annotations

from pathlib import Path

import pytest

from crossrail.store import HEAD_REVISION, Store

from .builders import engine_at
from .test_attempt_end_reason import ATTEMPT, RUN

pytest.importorskip("prometheus_client", reason="the api extra is not installed: pip install -e '.[api]'")

SAMPLE = "INSERT INTO metric_samples (run_id, attempt, ts, step, name, value) VALUES ('old-1', 6, ?, ?, ?, ?)"


def test_the_backlog_of_a_running_pipeline_is_scraped_as_its_last_report(tmp_path: Path) -> None:
    from prometheus_client import generate_latest
    from prometheus_client.registry import CollectorRegistry

    from crossrail.control.reports.prometheus import BacklogCollector

    url = f"sqlite:///{tmp_path / 'rl.db'}"
    engine = engine_at(url, HEAD_REVISION)
    with engine.begin() as conn:
        conn.exec_driver_sql(
            "INSERT INTO experiments (id, name, digest, spec, created_at) VALUES (1, 'old', 'sha256:e', '{}', 1.0)"
        )
        conn.exec_driver_sql(RUN)
        conn.exec_driver_sql(ATTEMPT, (6, "running", None, None, None))
        for ts, step, name, value in [
            (1.0, 1, "backlog_samples_length", 40.0),
            (2.0, 2, "backlog_samples_length", 12.0),
            (2.0, 2, "backlog_samples_age_seconds", 3.5),
            (2.0, 2, "backlog_scored_length", 7.0),
            (2.0, 2, "backlog_scored_age_seconds", 0.25),
        ]:
            conn.exec_driver_sql(SAMPLE, (ts, step, name, value))
    engine.dispose()
    store = Store.open(url)
    try:
        registry = CollectorRegistry(auto_describe=False)
        registry.register(BacklogCollector(store))
        text = generate_latest(registry).decode()
    finally:
        store.close()

    assert 'crossrail_rl_backlog_length{queue="samples",run="old-1"} 12.0' in text
    assert 'crossrail_rl_backlog_length{queue="scored",run="old-1"} 7.0' in text
    assert 'crossrail_rl_backlog_age_seconds{queue="samples",run="old-1"} 3.5' in text
    assert 'crossrail_rl_backlog_age_seconds{queue="scored",run="old-1"} 0.25' in text
