"""The agent's watch over its store, and a workspace that never makes a new empty store where one was."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from crossrail.control.agent.storewatch import StoreWatch, WatchConfig
from crossrail.control.executor import AttemptStatus
from crossrail.control.ops.workspace import Workspace, open_store
from crossrail.core import ManualClock
from crossrail.errors import StoreDamagedError, StoreUnavailableError
from crossrail.store import Store


@pytest.fixture
def store(tmp_path: Path) -> Store:
    return Store.open(f"sqlite:///{tmp_path / 'state.db'}")


def test_an_agent_registers_beats_at_its_heartbeat_and_records_its_stop(store: Store, clock: ManualClock) -> None:
    watch = StoreWatch(store, clock, WatchConfig(heartbeat_s=10.0), workspace="/w")
    watch.start()
    clock.advance(5)
    watch.before_pass()  # too soon for a heartbeat
    assert store.agents(running=True)[0]["heartbeat_at"] == clock.now() - 5
    clock.advance(6)
    watch.before_pass()
    (row,) = store.agents(running=True)
    assert (row["heartbeat_at"], row["workspace"]) == (clock.now(), "/w")
    watch.stop()
    assert store.agents(running=True) == []


def test_an_unreachable_store_is_waited_for_then_given_up_on(
    store: Store, clock: ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    watch = StoreWatch(store, clock, WatchConfig(wait_s=30.0))
    down = StoreUnavailableError("the state store db cannot be reached (connection refused)")
    with caplog.at_level(logging.WARNING, logger="crossrail.agent"):
        watch.unavailable(down, 0.5)
        clock.advance(20)
        watch.unavailable(down, 0.5)
        watch.before_pass()  # it came back: the outage is over, the clock starts again next time
        clock.advance(100)
        watch.unavailable(down, 0.5)
    assert "retrying in 0.5s" in caplog.text
    assert "reachable again" in caplog.text
    clock.advance(30)
    with pytest.raises(StoreUnavailableError, match="stops after waiting 30s"):
        watch.unavailable(down, 0.5)


def test_attempts_the_store_does_not_know_are_reported_once(
    store: Store, clock: ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    watch = StoreWatch(store, clock, WatchConfig())
    stale = AttemptStatus("tiny-1", 1, "running", detail="pid 42")
    with caplog.at_level(logging.WARNING, logger="crossrail.agent"):
        assert watch.unknown_attempts([stale]) == [stale]
        assert watch.unknown_attempts([stale]) == []
    (event,) = store.events(types=["unknown_attempt"])
    assert event.data == {"run": "tiny-1", "attempt": 1, "phase": "running", "detail": "pid 42"}
    assert "tiny-1/1 (running) that this store does not know" in caplog.text


def test_a_workspace_store_that_vanished_is_an_error_not_a_new_empty_store(tmp_path: Path) -> None:
    ws = Workspace(tmp_path)
    first = open_store(ws)
    assert first.id is not None
    first.close()
    assert ws.store_marker.is_file()
    (tmp_path / "state.db").unlink()
    with pytest.raises(StoreDamagedError, match=r"is gone.*crossrail store restore BACKUP"):
        open_store(ws)
    assert not (tmp_path / "state.db").exists()


def test_a_workspace_refuses_a_store_file_that_is_another_store(tmp_path: Path) -> None:
    ws = Workspace(tmp_path)
    open_store(ws).close()
    (tmp_path / "state.db").unlink()
    Store.open(f"sqlite:///{tmp_path / 'state.db'}").close()  # someone else's store put in its place
    with pytest.raises(StoreDamagedError, match="but this workspace's store is"):
        open_store(ws)
