"""The reporting channel: records written by training code and read back by the agent, over both transports."""

from __future__ import annotations

import json
import math
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import wait_for

from crossrail.errors import CrossrailError
from crossrail.runtime import HeartbeatThread, Reporter, RuntimeContext, read_new
from crossrail.runtime.report import CURSOR_CHARS, MAX_BATCH_BYTES, REPLICAS_READ, replica_report


class Ticks:
    """A clock for the reporter that moves only when told."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def kinds(records: list[dict[str, Any]]) -> list[str]:
    return [r["type"] for r in records]


def test_file_records_round_trip_through_read_new(tmp_path: Path) -> None:
    target = str(tmp_path / "attempt" / "report.jsonl")
    with Reporter(target, run="pretrain-small-1", attempt=2, clock=Ticks()) as r:
        r.metric("loss", 2.5, step=10)
        r.metrics({"lr": 0.01, "grad_norm": 1}, step=10)
        r.heartbeat(step=10)
        r.checkpoint(10, "file:///ckpt/step-0000000010", tokens=4096)
        r.event("resumed", step=8, uri="file:///ckpt/step-0000000008")
    records, cursor = read_new(target, None)
    assert kinds(records) == ["metric", "metric", "metric", "heartbeat", "checkpoint", "event"]
    assert records[0] == {
        "v": 1,
        "ts": 100.0,
        "run": "pretrain-small-1",
        "attempt": 2,
        "type": "metric",
        "name": "loss",
        "value": 2.5,
        "step": 10,
    }
    assert records[2]["value"] == 1.0
    assert isinstance(records[2]["value"], float)
    assert records[4] | {"ts": 0} == {
        "v": 1,
        "ts": 0,
        "run": "pretrain-small-1",
        "attempt": 2,
        "type": "checkpoint",
        "step": 10,
        "uri": "file:///ckpt/step-0000000010",
        "tokens": 4096,
    }
    assert records[5]["data"] == {"step": 8, "uri": "file:///ckpt/step-0000000008"}
    assert cursor == str((tmp_path / "attempt" / "report.jsonl").stat().st_size)
    assert read_new(target, cursor) == ([], cursor)


def test_the_cursor_resumes_exactly_after_the_records_already_read(tmp_path: Path) -> None:
    target = (tmp_path / "report.jsonl").as_uri()
    r = Reporter(target, run="r-1", attempt=1)
    r.metric("loss", 3.0, 1)
    first, cursor = read_new(target, None)
    r.metric("loss", 2.0, 2)
    r.metric("loss", 1.0, 3)
    second, cursor = read_new(target, cursor)
    r.close()
    assert [x["value"] for x in first] == [3.0]
    assert [x["value"] for x in second] == [2.0, 1.0]
    assert read_new(target, cursor)[0] == []


def test_a_partial_trailing_line_is_left_until_it_is_complete(tmp_path: Path) -> None:
    path = tmp_path / "report.jsonl"
    whole = json.dumps({"v": 1, "ts": 1.0, "run": "r-1", "attempt": 1, "type": "heartbeat", "step": 4})
    path.write_text(whole + "\n" + whole[:20])
    records, cursor = read_new(str(path), None)
    assert kinds(records) == ["heartbeat"]
    assert cursor == str(len(whole) + 1)
    assert read_new(str(path), cursor) == ([], cursor)
    with path.open("a") as f:
        f.write(whole[20:] + "\n")
    records, cursor = read_new(str(path), cursor)
    assert records == [json.loads(whole)]
    assert cursor == str(path.stat().st_size)


def test_a_writer_continuing_after_a_torn_line_keeps_its_own_lines_whole(tmp_path: Path) -> None:
    path = tmp_path / "report.jsonl"
    path.write_text('{"v": 1, "ts": 1.0, "ru')  # an earlier attempt killed mid-line
    with Reporter(str(path), run="r-1", attempt=2) as r:
        r.heartbeat(1)
    records, _ = read_new(str(path), None)
    assert kinds(records) == ["invalid", "heartbeat"]
    assert records[1]["attempt"] == 2


def raw(**fields: object) -> str:
    """A record line with the envelope filled in; `fields` override or add."""
    return json.dumps({"v": 1, "ts": 1, "run": "r", "attempt": 1} | fields)


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        pytest.param("not json at all", "not JSON", id="not-json"),
        pytest.param("[1, 2]", "JSON object", id="not-an-object"),
        pytest.param(raw(v=2, type="heartbeat"), "version", id="newer-version"),
        pytest.param(raw(type="gossip"), "unknown record type", id="unknown-type"),
        pytest.param(raw(type="metric", name="x"), "lacks 'value'", id="metric-without-value"),
        pytest.param(raw(type="metric", name="x", value=[1]), "'value'", id="metric-value-a-list"),
        pytest.param(raw(type="heartbeat", attempt="1"), "'attempt'", id="attempt-as-text"),
        pytest.param(raw(type="checkpoint", step=3), "'uri'", id="checkpoint-without-uri"),
        pytest.param(raw(type="event", name="x", data=3), "'data'", id="event-data-not-an-object"),
        pytest.param("", "not JSON", id="empty-line"),
    ],
)
def test_lines_that_are_not_records_come_back_as_invalid_and_reading_goes_on(
    tmp_path: Path, line: str, reason: str
) -> None:
    path = tmp_path / "report.jsonl"
    good = json.dumps({"v": 1, "ts": 1.0, "run": "r-1", "attempt": 1, "type": "heartbeat", "step": None})
    path.write_text(f"{good}\n{line}\n{good}\n")
    records, cursor = read_new(str(path), None)
    assert kinds(records) == ["heartbeat", "invalid", "heartbeat"]
    assert reason in records[1]["reason"]
    assert records[1]["line"] == line
    assert records[1]["where"] == f"byte {len(good) + 1}"
    assert cursor == str(path.stat().st_size)


def test_undecodable_bytes_are_an_invalid_record_not_an_exception(tmp_path: Path) -> None:
    path = tmp_path / "report.jsonl"
    path.write_bytes(b"\xff\xfe garbage\n")
    records, _ = read_new(str(path), None)
    assert kinds(records) == ["invalid"]


def test_a_missing_report_has_no_records_and_keeps_the_cursor(tmp_path: Path, memfs: Any) -> None:
    assert read_new(str(tmp_path / "absent.jsonl"), "42") == ([], "42")
    assert read_new("memory://absent/prefix", "3") == ([], "3")
    assert read_new("memory://absent/prefix", None) == ([], "0")


def test_a_cursor_read_new_did_not_return_is_refused(tmp_path: Path) -> None:
    with pytest.raises(CrossrailError, match="cursor"):
        read_new(str(tmp_path / "r.jsonl"), "chunk-3")


def test_a_diverged_loss_is_reported_as_nan_and_read_back_as_nan(tmp_path: Path) -> None:
    target = str(tmp_path / "r.jsonl")
    with Reporter(target, run="r-1", attempt=1) as r:
        r.metric("loss", math.nan, 5)
        r.metric("grad_norm", -math.inf, 5)
    raw = (tmp_path / "r.jsonl").read_text()
    assert "NaN" not in raw  # strict JSON, readable by any parser
    records, _ = read_new(target, None)
    assert math.isnan(records[0]["value"])
    assert records[1]["value"] == -math.inf


def test_chunks_are_numbered_and_each_is_written_whole_once(memfs: Any) -> None:
    ticks = Ticks()
    r = Reporter("memory://reports/run-1/attempt-1", run="run-1", attempt=1, clock=ticks, flush_records=3, flush_s=5)
    for step in range(1, 8):
        r.metric("loss", 1.0 / step, step)
    assert sorted(memfs.ls("/reports/run-1/attempt-1", detail=False)) == [
        "/reports/run-1/attempt-1/chunk-000001.jsonl",
        "/reports/run-1/attempt-1/chunk-000002.jsonl",
    ]
    first = memfs.cat_file("/reports/run-1/attempt-1/chunk-000001.jsonl")
    r.close()
    assert memfs.cat_file("/reports/run-1/attempt-1/chunk-000001.jsonl") == first
    records, cursor = read_new("memory://reports/run-1/attempt-1", None)
    assert [x["step"] for x in records] == [1, 2, 3, 4, 5, 6, 7]
    assert cursor == "3"


def test_a_chunk_is_flushed_by_age_by_a_checkpoint_and_by_close(memfs: Any) -> None:
    ticks = Ticks()
    target = "memory://rep"
    r = Reporter(target, run="r-1", attempt=1, clock=ticks, flush_records=100, flush_s=5)
    r.heartbeat(1)
    assert read_new(target, None) == ([], "0")
    ticks.now += 6
    r.heartbeat(2)  # the oldest buffered record is 6 s old
    records, cursor = read_new(target, None)
    assert ([x["step"] for x in records], cursor) == ([1, 2], "1")
    r.metric("loss", 0.5, 3)
    r.checkpoint(3, "file:///c/step-0000000003")
    records, cursor = read_new(target, cursor)
    assert (kinds(records), cursor) == (["metric", "checkpoint"], "2")
    r.event("done")
    r.close()
    records, cursor = read_new(target, cursor)
    assert (kinds(records), cursor) == (["event"], "3")


def test_a_chunk_over_the_batch_bound_is_one_invalid_record_and_the_next_chunk_is_read(memfs: Any) -> None:
    memfs.pipe_file("/big/chunk-000001.jsonl", b"x" * (MAX_BATCH_BYTES + 10))
    with Reporter("memory://big", run="r-1", attempt=1, flush_records=1) as r:  # continues with chunk 2
        r.heartbeat(1)
    records, cursor = read_new("memory://big", None)  # a read stops after about MAX_BATCH_BYTES
    assert (kinds(records), cursor) == (["invalid"], "1")
    assert len(records[0]["line"]) <= 500
    assert kinds(read_new("memory://big", cursor)[0]) == ["heartbeat"]


def test_chunks_stay_within_the_batch_bound_whatever_flush_records_says(memfs: Any) -> None:
    with Reporter("memory://bounded", run="r-1", attempt=1, flush_records=10**6, flush_s=10**6) as r:
        for i in range(100):  # 100 records of 60 kB: 6 MB, two chunks
            r.event("blob", i=i, data="y" * 60_000)
    sizes = [memfs.size(p) for p in memfs.ls("/bounded", detail=False)]
    assert len(sizes) == 2
    assert max(sizes) <= MAX_BATCH_BYTES
    records, cursor = read_new("memory://bounded", None)
    records += read_new("memory://bounded", cursor)[0]
    assert [x["data"]["i"] for x in records] == list(range(100))


def test_a_new_writer_on_the_same_prefix_continues_the_numbering(memfs: Any) -> None:
    for attempt in (1, 2):
        with Reporter("memory://shared", run="r-1", attempt=attempt) as r:
            r.heartbeat(attempt)
    records, cursor = read_new("memory://shared", None)
    assert [x["attempt"] for x in records] == [1, 2]
    assert cursor == "2"


def test_an_invalid_line_inside_a_chunk_names_its_chunk(memfs: Any) -> None:
    memfs.pipe_file("/p/chunk-000001.jsonl", b'{"v": 1}\n')
    records, _ = read_new("memory://p", None)
    assert records[0]["type"] == "invalid"
    assert records[0]["where"] == "chunk-000001.jsonl line 1"


def test_many_threads_writing_at_once_leave_only_whole_lines(tmp_path: Path) -> None:
    target = str(tmp_path / "r.jsonl")
    r = Reporter(target, run="r-1", attempt=1)
    payload = "x" * 3000

    def write(thread: int) -> None:
        for i in range(200):
            r.event("tick", thread=thread, i=i, payload=payload)

    threads = [threading.Thread(target=write, args=(t,)) for t in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    r.close()
    lines = (tmp_path / "r.jsonl").read_text().splitlines()
    assert len(lines) == 1600
    assert all(json.loads(line)["data"]["payload"] == payload for line in lines)
    records, cursor = read_new(target, None)  # 4.9 MB: one read takes at most MAX_BATCH_BYTES of whole lines
    while more := read_new(target, cursor)[0]:
        records, cursor = records + more, read_new(target, cursor)[1]
    assert sorted((x["data"]["thread"], x["data"]["i"]) for x in records) == [
        (t, i) for t in range(8) for i in range(200)
    ]


def test_the_heartbeat_thread_reports_the_current_step_until_stopped(tmp_path: Path) -> None:
    target = str(tmp_path / "r.jsonl")
    step = {"now": 7}

    def beats_so_far() -> list[dict[str, Any]]:
        return read_new(target, None)[0]

    with Reporter(target, run="r-1", attempt=1) as r:
        beats = HeartbeatThread(r, interval_s=0.01, step_fn=lambda: step["now"])
        beats.start()
        wait_for(lambda: len(beats_so_far()) >= 3)
        step["now"] = 8
        wait_for(lambda: beats_so_far()[-1]["step"] == 8)
        beats.stop()
        assert not beats.is_alive()
        count = len(beats_so_far())
        time.sleep(0.05)
        assert len(beats_so_far()) == count  # nothing after stop()
    records = beats_so_far()
    assert set(kinds(records)) == {"heartbeat"}
    assert records[0]["step"] == 7


def test_the_heartbeat_thread_ends_quietly_when_the_reporter_closes_first(tmp_path: Path) -> None:
    r = Reporter(str(tmp_path / "r.jsonl"), run="r-1", attempt=1)
    beats = HeartbeatThread(r, interval_s=0.01)
    beats.start()
    r.close()
    beats.join(5)
    assert not beats.is_alive()


def test_a_closed_reporter_refuses_records_and_reserved_fields_are_refused(tmp_path: Path) -> None:
    r = Reporter(str(tmp_path / "r.jsonl"), run="r-1", attempt=1)
    with pytest.raises(CrossrailError, match="reserved"):
        r.checkpoint(1, "file:///c", run="other")
    r.close()
    with pytest.raises(CrossrailError, match="closed"):
        r.metric("loss", 1.0)


def test_a_reporter_built_from_the_context_reports_where_crossrail_said(tmp_path: Path) -> None:
    env = {
        "TRAINING_BACKEND": "gpu",
        "EXPERIMENT_ID": "posttrain-042",
        "CROSSRAIL_RUN_ID": "posttrain-042-1",
        "CROSSRAIL_ATTEMPT": "3",
        "CROSSRAIL_CHECKPOINT_DIR": str(tmp_path / "ckpt"),
        "CROSSRAIL_DATASET": str(tmp_path / "data"),
        "CROSSRAIL_REPORT": (tmp_path / "report.jsonl").as_uri(),
    }
    with Reporter(RuntimeContext.from_env(env)) as r:
        r.heartbeat(0)
    (record,) = read_new(str(tmp_path / "report.jsonl"), None)[0]
    assert (record["run"], record["attempt"], record["type"]) == ("posttrain-042-1", 3, "heartbeat")


def test_a_reporter_without_run_and_attempt_is_refused(tmp_path: Path) -> None:
    with pytest.raises(CrossrailError, match="run and attempt"):
        Reporter(str(tmp_path / "r.jsonl"))


def test_heartbeats_continue_after_a_storage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = str(tmp_path / "r.jsonl")
    r = Reporter(target, run="r-1", attempt=1)
    real, failures = r.heartbeat, [OSError("bucket unavailable")]

    def flaky(step: int | None = None) -> None:
        if failures:
            raise failures.pop()
        real(step)

    r.heartbeat = flaky  # type: ignore[method-assign]
    beats = HeartbeatThread(r, interval_s=0.01)
    beats.start()
    wait_until = time.monotonic() + 5
    while not read_new(target, None)[0] and time.monotonic() < wait_until:
        time.sleep(0.01)
    beats.stop()
    r.close()
    assert kinds(read_new(target, None)[0])[:1] == ["heartbeat"]
    assert "heartbeat not written (bucket unavailable)" in capsys.readouterr().err


def test_a_scheme_fsspec_does_not_know_is_refused_with_the_uri(memfs: Any) -> None:
    with pytest.raises(CrossrailError, match="nosuchscheme://reports"):
        Reporter("nosuchscheme://reports", run="r-1", attempt=1)


def test_an_http_report_needs_the_attempts_secret_and_is_not_read_back(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CROSSRAIL_REPORT_SECRET", raising=False)
    url = "http://127.0.0.1:9/v1/ingest/r-1/1"
    with pytest.raises(CrossrailError, match="CROSSRAIL_REPORT_SECRET"):
        Reporter(url, run="r-1", attempt=1)
    with pytest.raises(CrossrailError, match="crossrail events --run RUN"):
        read_new(url, None)


def test_an_http_batch_that_cannot_be_posted_stays_buffered_and_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("crossrail.runtime.report.POST_BACKOFF_S", 0.0)
    reporter = Reporter("http://127.0.0.1:9/v1/ingest/r-1/1", run="r-1", attempt=1, secret="s", flush_records=10)
    reporter.metric("loss", 1.0, step=1)
    with pytest.raises(OSError, match=r"cannot post 1 report records to http://127\.0\.0\.1:9"):
        reporter.flush()
    reporter.metric("loss", 0.5, step=2)
    with pytest.raises(OSError, match="cannot post 2 report records"):
        reporter.flush()


@pytest.mark.parametrize("where", ["memory", "file"])
def test_the_replicas_of_a_part_each_report_under_their_own_prefix_and_are_read_back_merged(
    where: str, memfs: Any, tmp_path: Path
) -> None:
    """Replicas of a pipeline's part write `<report>/parts/<part>/<replica>`; reading the attempt's report reads them
    all, oldest first, each record tagged, the part's progress its first replica's, and resumes each where it was."""
    target = "memory://reports/rl-1/attempt-2" if where == "memory" else str(tmp_path / "rl-1" / "2.jsonl")
    assert read_new(target, None) == ([], "0")
    ticks = Ticks()
    writers = [Reporter(replica_report(target, "sampler", i), run="rl-1", attempt=2, clock=ticks) for i in (0, 1)]
    assert len({w.target for w in writers}) == 2
    for step in (1, 2):
        for i, writer in enumerate(writers):
            ticks.now += 1
            writer.metric("reward", 10 * i + step, step)
            writer.heartbeat(step)
            writer.flush()
    records, cursor = read_new(target, None)
    assert [(r["replica"], r["value"]) for r in records if r["type"] == "metric"] == [(0, 1), (1, 11), (0, 2), (1, 12)]
    assert {r["part"] for r in records} == {"sampler"}
    assert [r["step"] for r in records if r["type"] == "heartbeat"] == [1, None, 2, None]
    assert cursor.startswith("m1:0;sampler=")
    assert read_new(target, cursor) == ([], cursor)

    third = Reporter(replica_report(target, "sampler", 2), run="rl-1", attempt=2, clock=ticks)  # one more replica
    ticks.now += 1
    writers[1].metric("reward", 13, 3)
    third.metric("reward", 23, 3)
    for writer in [*writers, third]:
        writer.close()
    records, cursor = read_new(target, cursor)
    assert [(r["replica"], r["value"]) for r in records] == [(1, 13), (2, 23)]
    assert read_new(target, cursor) == ([], cursor)


def test_an_attempts_own_channel_is_read_as_before_and_a_bad_merged_cursor_is_refused(memfs: Any) -> None:
    with Reporter("memory://own", run="r-1", attempt=1) as r:
        r.heartbeat(1)
    assert read_new("memory://own", None)[1] == "1"  # no replicas: the plain cursor
    with pytest.raises(CrossrailError, match="not returned by read_new"):
        read_new("memory://own", "m1:0;Sampler=zz")


def test_a_part_with_more_replicas_than_a_cursor_holds_is_read_for_its_first_ones_and_says_so(memfs: Any) -> None:
    target = "memory://reports/rl-2/attempt-1"
    part = "a-sampler-with-a-long-name"  # keyed by a hash in the cursor
    for replica in range(REPLICAS_READ["chunks"] + 1):
        with Reporter(replica_report(target, part, replica), run="rl-2", attempt=1) as r:
            r.metric("reward", replica, 1)
    records, cursor = read_new(target, None)
    assert sorted(r["replica"] for r in records if r["type"] == "metric") == list(range(REPLICAS_READ["chunks"]))
    (invalid,) = [r for r in records if r["type"] == "invalid"]
    assert f"parts/{part}/8" in invalid["line"]
    assert "only the first 8 replicas" in invalid["reason"]
    assert cursor.endswith("!")
    assert len(cursor) <= CURSOR_CHARS
    assert part not in cursor
    assert read_new(target, cursor) == ([], cursor)  # said once
