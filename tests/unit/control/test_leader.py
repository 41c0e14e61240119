"""Several agents, one leader: the lease, its takeover by a standby, and the fencing of a deposed leader's writes."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from crossrail.control.agent.leader import Leadership, LeaseConfig
from crossrail.control.service.progress import agent_liveness
from crossrail.core import Event, EventType, ManualClock, SystemClock
from crossrail.errors import FencedError, StoreUnavailableError, UsageError
from crossrail.store import Store


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return (
        f"sqlite:///{tmp_path / 'state.db'}" if request.param == "sqlite" else request.getfixturevalue("postgres_url")
    )


@pytest.fixture
def stores(url: str) -> Iterator[tuple[Store, Store]]:
    """Two agents' own connections to one store."""
    a, b = Store.open(url), Store.open(url)
    yield a, b
    a.close()
    b.close()


def elect(store: Store, clock: ManualClock, name: str, lease_s: float = 15.0) -> Leadership:
    return Leadership(store, clock, name, "host-" + name, LeaseConfig(lease_s))


def leaders(store: Store) -> list[tuple[int, str]]:
    return [(e.data["term"], e.data["agent"]) for e in store.events(types=["leader_elected"])]


def test_a_standby_takes_over_only_after_a_whole_lease_without_renewal_and_the_old_leader_is_fenced(
    stores: tuple[Store, Store], clock: ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    a_store, b_store = stores
    a, b = elect(a_store, clock, "a"), elect(b_store, clock, "b")
    assert a.step() is True  # nobody held it: taken at once
    assert (a.term, b.step()) == (1, False)
    for _ in range(5):  # the leader renews every 5 s; the standby looks every half second and never sees a lapse
        for _ in range(10):
            clock.advance(0.5)
            assert b.step() is False
        assert a.step() is True
    waited = 0.0  # a stops renewing (paused, or cut off): b leads within the lease, less two of its looks
    while not b.step():
        clock.advance(0.5)
        waited += 0.5
    assert waited == 14.0
    assert (b.term, b_store.leader().agent_id) == (2, "b")

    before = a_store.last_seq()
    with pytest.raises(FencedError, match="leads under term 1, but the store's lease is at term 2, held by agent b"):
        a_store.append_events([Event(EventType.CAPACITY_CHANGED, clock.now(), data={"pool": "x"})])
    assert a_store.last_seq() == before  # refused: nothing written
    with caplog.at_level("WARNING", logger="crossrail.agent"):
        assert a.step() is False  # its renewal is refused for the newer term: it stands by, saying so
    assert "a: no longer leads (term 1): lease renewal refused" in caplog.text
    assert "the store's lease is at term 2, held by agent b" in caplog.text
    assert (a.term, a_store.fence) == (None, None)
    assert leaders(a_store) == [(1, "a"), (2, "b")]


def test_a_clean_stop_hands_the_lease_on_at_once(stores: tuple[Store, Store], clock: ManualClock) -> None:
    a_store, b_store = stores
    a, b = elect(a_store, clock, "a"), elect(b_store, clock, "b")
    assert (a.step(), b.step()) == (True, False)
    a.release()
    assert b.step() is True
    assert leaders(b_store) == [(1, "a"), (2, "b")]


@pytest.mark.slow
def test_of_two_standbys_seeing_the_same_lapsed_lease_exactly_one_leads(url: str, clock: ManualClock) -> None:
    stores = [Store.open(url) for _ in range(3)]
    dead, *standbys = (elect(s, clock, n, lease_s=2.0) for s, n in zip(stores, "abc", strict=True))
    assert dead.step()
    assert [s.step() for s in standbys] == [False, False]
    clock.advance(2.0)
    assert sorted(s.step() for s in standbys) == [False, True]
    assert [t for t, _ in leaders(stores[0])] == [1, 2]
    for s in stores:
        s.close()


def test_a_deposed_leader_cannot_record_a_launch(stores: tuple[Store, Store], clock: ManualClock) -> None:
    a_store, b_store = stores
    a, b = elect(a_store, clock, "a", lease_s=2.0), elect(b_store, clock, "b", lease_s=2.0)
    assert (a.step(), b.step()) == (True, False)
    clock.advance(2.0)
    assert b.step()
    with pytest.raises(FencedError, match="term 2"):
        a_store.record_launch("tiny-1", 1)


@pytest.mark.parametrize("lease_s", [0.0, -1.0], ids=["zero", "negative"])
def test_a_lease_must_be_positive(lease_s: float) -> None:
    with pytest.raises(UsageError, match="must be > 0 seconds"):
        LeaseConfig(lease_s)


def test_a_leader_busy_in_a_long_pass_keeps_its_lease_from_its_renewal_thread(stores: tuple[Store, Store]) -> None:
    a_store, b_store = stores
    a, b = elect(a_store, SystemClock(), "a", lease_s=0.3), elect(b_store, SystemClock(), "b", lease_s=0.3)
    a.renew_in_background()
    assert a.step()
    deadline = time.monotonic() + 0.9  # three leases in which `a` never calls step(): its thread renews
    while time.monotonic() < deadline:
        assert b.step() is False
        time.sleep(0.02)
    assert a_store.leader().renewals >= 6
    a.release()
    assert b.step() is True


def test_status_names_the_leader_its_term_and_the_standbys(stores: tuple[Store, Store], clock: ManualClock) -> None:
    a_store, b_store = stores
    ids = [
        s.register_agent(host=h, pid=p, workspace=None, now=clock.now())
        for s, h, p in ((a_store, "ha", 1), (b_store, "hb", 2))
    ]
    a, b = elect(a_store, clock, ids[0]), elect(b_store, clock, ids[1])
    assert (a.step(), b.step()) == (True, False)
    live = agent_liveness(a_store, clock.now())
    assert (live["alive"], live["term"], live["leader"]["host"]) == (True, 1, "ha")
    assert [s["host"] for s in live["standbys"]] == ["hb"]
    assert live["message"].endswith("; leader term 1, 1 standby")
    a.release()
    live = agent_liveness(a_store, clock.now())
    assert (live["alive"], live["leader"]) == (False, None)
    assert "no leader (last term 1), 2 standbys" in live["message"]


@pytest.mark.postgres
@pytest.mark.slow
def test_a_leader_stopped_inside_a_write_does_not_hold_back_the_takeover(postgres_url: str, clock: ManualClock) -> None:
    """Its fenced write locked the leader row; the server ends the idle transaction, so the standby takes over."""
    a_store, b_store = Store.open(postgres_url), Store.open(postgres_url)
    took: list[float] = []

    def stopped_inside_a_write() -> None:
        with a_store._write() as conn:  # the fence locks the leader row, then the leader stops (a SIGSTOP)
            seen = b_store.leader()
            clock.advance(15.0)
            start = time.monotonic()
            terms: list[int | None] = []
            standby = threading.Thread(
                target=lambda: terms.append(b_store.take_lease("b", seen, lease_s=15.0, now=clock.now(), host="b"))
            )
            standby.start()
            standby.join(timeout=10)  # without the server ending the idle write, this would wait for ever
            assert terms == [2], "the standby could not take the lease while the stopped leader held its write"
            took.append(time.monotonic() - start)
            conn.exec_driver_sql("SELECT 1")  # the stopped leader carries on: its transaction is gone

    try:
        a, b = elect(a_store, clock, "a"), elect(b_store, clock, "b")
        assert a.step() is True
        assert b.step() is False
        with pytest.raises(StoreUnavailableError):  # its transaction was ended under it: nothing it wrote stays
            stopped_inside_a_write()
        assert took[0] < 5.0, took  # the server ended the idle transaction after LEADER_WRITE_IDLE_MS, not never
        assert b_store.leader().agent_id == "b"
        with pytest.raises(FencedError):
            a_store.append_events([Event(EventType.CAPACITY_CHANGED, clock.now(), data={"pool": "x"})])
    finally:
        a_store.close()
        b_store.close()
