"""A degree change the runtime reports becomes the control plane's `resized` event; a garbled one stays reported."""

from __future__ import annotations

from pathlib import Path

from crossrail.control.agent.channel import translate
from crossrail.core import EventType
from crossrail.runtime import Reporter
from crossrail.runtime.report import read_new
from crossrail.store import AttemptRecord


def attempt() -> AttemptRecord:
    return AttemptRecord(
        run_id="gpt-1", number=1, state="running", pool="cpu", accelerator="cpu", chip_type="cpu", chips=4,
        cost_per_chip_hour=0.0, dataset_uri="file:///d", dataset_version="v1", code_commit=None,
        config_digest=None, image_digest=None, started_at=990.0, ended_at=None, exit_code=None, reason=None,
    )  # fmt: skip


def test_a_reported_resize_is_a_resized_event_and_a_garbled_one_stays_reported(tmp_path: Path) -> None:
    channel = str(tmp_path / "report.jsonl")
    with Reporter(channel, run="gpt-1", attempt=1, clock=lambda: 1000.0) as reporter:
        reporter.event("worker_lost", worker=3, signal="SIGKILL", workers_left=3)
        reporter.event("resized", degree_before=4, degree_after=3, reason="a worker was lost", part=None, step=20)
        reporter.event("resized", degree_before="four", degree_after=3)
    records, _ = read_new(channel, None)

    events, _, _, _ = translate(attempt(), records, now=1001.0, checkpoint_dir=str(tmp_path / "ckpt"))

    assert [e.type for e in events] == [EventType.REPORTED, EventType.RESIZED, EventType.REPORTED]
    assert events[1].data == {
        "degree_before": 4,
        "degree_after": 3,
        "reason": "a worker was lost",
        "part": None,
        "step": 20,
    }
    assert (events[1].run, events[1].attempt, events[1].ts) == ("gpt-1", 1, 1000.0)
    assert events[2].data["name"] == "resized"
