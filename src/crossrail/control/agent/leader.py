"""Several agents, one leader: the lease in the store's `leader` row, renewed by its holder and taken by a standby
that saw it unchanged for a whole lease; while an agent leads, every store write it makes carries its fencing term.

The standby times the lease on its own clock from the moment it last saw the row change (as Kubernetes' leader
election does), so no two hosts' clocks are compared. Taking the lease is a compare-and-set on the term and the
renewal count it saw, so of several standbys exactly one wins each term. Safety does not rest on timing: a
leader that was paused or cut off past its lease and carries on finds its next write refused (FencedError, the
term moved on), and it launches an attempt only after a fenced write recording that launch committed.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass

from crossrail.core import Clock
from crossrail.errors import StoreError, UsageError
from crossrail.store import Fence, LeaseRecord, Store

log = logging.getLogger("crossrail.agent")

DEFAULT_LEASE_S = 15.0


@dataclass(frozen=True)
class LeaseConfig:
    lease_s: float = DEFAULT_LEASE_S
    """How long a standby waits, from the last renewal it saw, before it takes the lease."""
    look_s: float = 0.0
    """How often a standby means to look at the lease (its poll). A renewal it sees may be up to one look old, and
    it notices the lapse up to one look late, so it waits two looks less than the lease: it leads within one lease
    of the holder's last renewal. The look it counts is the longer of this and the last interval it measured
    between two looks (a loaded host looks late), and two looks never count for more than a third of the lease."""

    def __post_init__(self) -> None:
        if not self.lease_s > 0:
            raise UsageError(f"a leader lease must be > 0 seconds (got {self.lease_s}); the default is 15")

    @property
    def renew_s(self) -> float:
        """The holder renews three times per lease (15 s -> every 5 s), so one late renewal costs nothing."""
        return self.lease_s / 3

    def lapse_s(self, lease_s: float, look_s: float = 0.0) -> float:
        """How long the holder's lease (`lease_s`, as it declared it) must look unchanged before a standby that looks
        every `look_s` (at least `self.look_s`) takes it."""
        return lease_s - min(2 * max(self.look_s, look_s), lease_s / 3)


class Leadership:
    """One agent's side of the election: `step()` each pass says whether it leads now, renewing or taking the lease.

    `renew_in_background()` renews from a thread of its own as well, so a long pass (launches, a slow store)
    never lets the lease lapse under a live leader.
    """

    def __init__(self, store: Store, clock: Clock, agent_id: str, host: str, config: LeaseConfig) -> None:
        self.store, self.clock, self.agent_id, self.host, self.config = store, clock, agent_id, host, config
        self.term: int | None = None
        self._renewed_at = -float("inf")
        self._seen: tuple[int, str | None, int] | None = None
        self._seen_at = 0.0
        self._looked_at: float | None = None
        self._lock = threading.Lock()
        self._lost: str | None = None
        self._background = False
        self._stop = threading.Event()
        self._renewer: threading.Thread | None = None

    @property
    def leading(self) -> bool:
        return self.term is not None

    def step(self) -> bool:
        """Renew the lease when it is due (a leader), or take it once it lapsed (a standby); True while leading."""
        if self.term is not None:
            with self._lock:
                lost = self._lost if self._lost is not None else self._renew()
            if lost is None:
                return True
            self.step_down(lost)
            return False
        return self._try_take(self.store.leader(), self.clock.now())

    def _renew(self) -> str | None:
        """Renew if due (the caller holds the lock); why the lease is lost, or None while it is held."""
        now = self.clock.now()
        if self.term is None or now - self._renewed_at < self.config.renew_s:
            return None
        if self.store.renew_lease(self.agent_id, self.term, now):
            self._renewed_at = now
            return None
        lease = self.store.leader()
        holder = f"agent {lease.agent_id}" if lease.agent_id else "nobody (its leader stepped down)"
        return (
            f"lease renewal refused: agent {self.agent_id} leads under term {self.term}, but the store's lease is at "
            f"term {lease.term}, held by {holder}"
        )

    def renew_in_background(self) -> None:
        """From now on, whenever this agent leads, a thread renews its lease on time whatever the passes do."""
        self._background = True

    def _keep_renewing(self, stop: threading.Event) -> None:
        while not stop.wait(self.config.renew_s / 4):
            with self._lock:
                if self.term is None or self._lost is not None:
                    return
                try:
                    self._lost = self._renew()
                except StoreError as exc:  # unreachable now: the lease holds until it lapses, then it is lost
                    if self.clock.now() - self._renewed_at >= self.config.lease_s:
                        self._lost = f"could not renew the lease within {self.config.lease_s:g}s ({exc})"

    def _try_take(self, lease: LeaseRecord, now: float) -> bool:
        seen = (lease.term, lease.agent_id, lease.renewals)
        if seen != self._seen:
            self._seen, self._seen_at = seen, now
        look_s = 0.0 if self._looked_at is None else now - self._looked_at
        self._looked_at = now
        lapse_s = self.config.lapse_s(lease.lease_s or self.config.lease_s, look_s)  # the holder's own lease decides
        if lease.agent_id is not None and now - self._seen_at < lapse_s:
            return False
        term = self.store.take_lease(self.agent_id, lease, lease_s=self.config.lease_s, now=now, host=self.host)
        if term is None:  # another standby won this term
            return False
        with self._lock:
            self.term, self._renewed_at, self._lost = term, now, None
        self.store.fence = Fence(self.agent_id, term)
        log.warning("crossrail agent %s: leading under term %d (lease %gs)", self.agent_id, term, self.config.lease_s)
        if self._background:
            self._stop = threading.Event()
            self._renewer = threading.Thread(
                target=self._keep_renewing, args=(self._stop,), name="crossrail-lease", daemon=True
            )
            self._renewer.start()
        return True

    def step_down(self, why: str) -> None:
        """Stop leading (writes are no longer fenced by this term; the agent acts only after it leads again)."""
        self._stop_renewing()
        if self.term is not None:
            log.warning("crossrail agent %s: no longer leads (term %d): %s", self.agent_id, self.term, why)
        with self._lock:
            self.term, self._lost = None, None
        self.store.fence = None
        self._seen = self._looked_at = None

    def release(self) -> None:
        """A clean stop: hand the lease to nobody, so a standby takes it at once instead of after a lease."""
        self._stop_renewing()
        if self.term is None:
            return
        with self._lock:
            term, self.term = self.term, None
        self.store.fence = None
        try:
            self.store.release_lease(self.agent_id, term, self.clock.now())
        except StoreError as exc:  # unreachable or damaged: the lease then lapses on its own
            log.warning("crossrail agent %s: could not release the lease of term %d: %s", self.agent_id, term, exc)

    def _stop_renewing(self) -> None:
        self._stop.set()
        if self._renewer is not None and self._renewer is not threading.current_thread():
            self._renewer.join()
        self._renewer = None
