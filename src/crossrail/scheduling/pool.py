"""Free chips per host of one pool: a count-based allocator that keeps gangs whole and slices in shape.

A gang is all or nothing: one host when it fits one, else whole free hosts. A data-parallel gang of N
workers (`unit` = chips per worker) may instead spread over hosts in whole workers, where no host or set
of whole hosts holds it, so a run of workers never waits for an emptier host than its workers need.

Hosts are grouped into classes by the reservations pinning them (most hosts are in the class with no
pins); within a class, hosts sit in buckets by their number of free chips, so finding a host with room or
k wholly free hosts costs O(chips per host), not O(hosts). Hosts that are leaving (a pool that shrank)
take no new work and disappear once their last chips are released.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator

from crossrail.scheduling.types import Hosts
from crossrail.spec import Pool

Pins = frozenset[str]
NO_PINS: Pins = frozenset()

ACTIVE, LEAVING, GONE = 0, 1, 2


class Buckets(dict[int, set[int]]):
    """Free chips -> the hosts with that many free; a count no host has reads as an empty set, and only the
    counts some host has are copied, so a snapshot of a pool of 65,536-chip hosts copies two sets, not 65,537."""

    def __missing__(self, free: int) -> set[int]:
        found = self[free] = set()
        return found

    def copy(self) -> Buckets:  # a Buckets, each set its own
        return Buckets({free: set(hosts) for free, hosts in self.items() if hosts})


class PoolState:
    """One pool's hosts. `copy()` is what a cycle's snapshot changes; the cache keeps the original."""

    def __init__(self, pool: Pool) -> None:
        hosts = pool.hosts
        self.name = pool.name
        self.accelerator = str(pool.accelerator)
        self.per_host = pool.chips_per_host
        self.cost_key = (pool.cost_per_chip_hour / max(pool.relative_speed, 1e-9), pool.name)
        tpu_shapes = sorted(set(pool.topology_chips())) if self.accelerator == "tpu" else []
        self.shapes: list[int] | None = tpu_shapes or None
        self.free = [self.per_host] * hosts
        self.state = [ACTIVE] * hosts
        self.pins: list[Pins] = [NO_PINS] * hosts
        self.buckets: dict[Pins, Buckets] = {NO_PINS: Buckets()}
        self.buckets[NO_PINS][self.per_host] = set(range(hosts))
        self.active_hosts = hosts
        self.free_chips = hosts * self.per_host
        self.drained = pool.drained
        self.preempt_drained = False
        self.retired = False
        """Removed from the fleet: no longer ranked for new work; running work finishes."""
        self.overflow = 0
        self._sizes: dict[tuple[int, int, int | None, int], tuple[int, ...]] = {}
        """(low, high, unit, active hosts) -> the gang sizes `sizes` yields; copies share it (shapes never change)."""

    def copy(self) -> PoolState:
        other = object.__new__(PoolState)
        other.__dict__.update(self.__dict__)
        other.free = list(self.free)
        other.state = list(self.state)
        other.pins = list(self.pins)
        other.buckets = {pins: buckets.copy() for pins, buckets in self.buckets.items()}
        return other

    @property
    def capacity(self) -> int:
        """Chips on active hosts (leaving hosts no longer count)."""
        return self.active_hosts * self.per_host

    @property
    def classes(self) -> list[Pins]:
        return list(self.buckets)

    # --- shapes --------------------------------------------------------------------------------

    def allows(self, chips: int, unit: int | None = None) -> bool:
        """Whether one gang of `chips` can ever take a shape here: an allowed slice, and whole hosts above one
        (or, for workers of `unit` chips on a pool without slice shapes, whole workers of at most a host)."""
        if chips <= 0:
            return False
        if self._spreads(unit):
            assert unit is not None
            return chips % unit == 0
        if chips > self.per_host and chips % self.per_host:
            return False
        return self.shapes is None or chips in self.shapes

    def _spreads(self, unit: int | None) -> bool:
        """Workers of `unit` chips may spread over hosts here (not on sliced pools: a slice is the shape)."""
        return unit is not None and self.shapes is None and 0 < unit <= self.per_host

    def sizes(self, low: int, high: int, unit: int | None = None) -> Iterator[int]:
        """Allowed gang sizes in [low, high], largest first (whole workers of `unit` chips, when given)."""
        return iter(self.sizes_of(low, high, unit))

    def sizes_of(self, low: int, high: int, unit: int | None = None) -> tuple[int, ...]:
        """`sizes` as a tuple, remembered: a cycle asks for the same few shapes thousands of times."""
        key = (low, high, unit, self.active_hosts)
        found = self._sizes.get(key)
        if found is None:
            found = self._sizes[key] = tuple(self._sizes_in(low, high, unit))
        return found

    def _sizes_in(self, low: int, high: int, unit: int | None) -> Iterator[int]:
        high = min(high, self.capacity)
        if high < low:
            return
        if self.shapes is not None:
            yield from (n for n in reversed(self.shapes) if low <= n <= high and self.allows(n))
            return
        if self._spreads(unit):
            assert unit is not None
            yield from (n for n in range(high // unit * unit, low - 1, -unit) if n > 0)
            return
        per = self.per_host
        yield from (n for n in range(high // per * per, per, -per) if n >= low)
        yield from range(min(high, per), low - 1, -1)

    # --- finding and taking chips --------------------------------------------------------------

    def find(self, chips: int, pins: Pins, unit: int | None = None) -> Hosts | None:
        """Hosts in class `pins` that can hold a gang of `chips` now: best fit on one host, or whole free hosts;
        for workers of `unit` chips, failing those, whole workers on the fullest hosts that have room."""
        buckets = self.buckets.get(pins)
        if buckets is None or self.overflow or not self.allows(chips, unit):
            return None
        per = self.per_host
        if chips <= per:
            for free in range(chips, per + 1):
                if buckets[free]:
                    return ((next(iter(buckets[free])), chips),)
        elif chips % per == 0 and len(buckets[per]) >= chips // per:
            return tuple((h, per) for h in sorted(itertools.islice(buckets[per], chips // per)))
        return self._spread(chips, buckets, unit) if self._spreads(unit) else None

    def _spread(self, chips: int, buckets: Buckets, unit: int | None) -> Hosts | None:
        """`chips` as whole workers of `unit` chips, the freest hosts first (fewest hosts); None unless all fit."""
        assert unit is not None
        taken: list[tuple[int, int]] = []
        left = chips // unit
        for free in range(self.per_host, unit - 1, -1):
            for h in sorted(buckets[free]):
                workers = min(free // unit, left)
                taken.append((h, workers * unit))
                left -= workers
                if left == 0:
                    return tuple(sorted(taken))
        return None

    def take(self, hosts: Hosts) -> None:
        self.move(hosts, -1)

    def release(self, hosts: Hosts) -> None:
        self.move(hosts, 1)

    def move(self, hosts: Hosts, sign: int) -> None:
        """Give back (sign 1) or take (sign -1) the chips of `hosts`; a cycle's trials call this thousands of times."""
        free, state, pins, buckets = self.free, self.state, self.pins, self.buckets
        moved = 0
        for h, chips in hosts:
            if state[h] == ACTIVE:
                bucket = buckets[pins[h]]
                bucket[free[h]].discard(h)
                free[h] += sign * chips
                bucket[free[h]].add(h)
                moved += chips
            else:
                free[h] += sign * chips
        self.free_chips += sign * moved

    def place_anyhow(self, chips: int) -> tuple[Hosts, int]:
        """Chips for work that already runs, wherever they are free; what no host has is returned as overflow."""
        taken: list[tuple[int, int]] = []
        left = chips
        for h in sorted(self._active(), key=lambda h: (-self.free[h], h)):
            if left == 0:
                break
            got = min(self.free[h], left)
            if got:
                taken.append((h, got))
                left -= got
        hosts = tuple(taken)
        self.take(hosts)
        self.overflow += left
        return hosts, left

    # --- hosts coming and going ----------------------------------------------------------------

    def _active(self) -> Iterable[int]:
        return (h for h, s in enumerate(self.state) if s == ACTIVE)

    def resize(self, chips: int) -> list[int]:
        """Change capacity to `chips` (whole hosts). Returns pinned hosts that left, so their pins can move."""
        target = chips // self.per_host
        if target >= self.active_hosts:
            self._grow(target - self.active_hosts)
            return []
        used = self.per_host
        order = sorted(self._active(), key=lambda h: (bool(self.pins[h]), used - self.free[h], -h))
        lost = order[: self.active_hosts - target]
        for h in lost:
            self._deactivate(h)
        return [h for h in lost if self.pins[h]]

    def _grow(self, count: int) -> None:
        leaving = [h for h, s in enumerate(self.state) if s == LEAVING][:count]
        for h in leaving:
            self._activate(h)
        for _ in range(count - len(leaving)):
            self.free.append(self.per_host)
            self.state.append(GONE)
            self.pins.append(NO_PINS)
            self._activate(len(self.free) - 1)

    def _activate(self, h: int) -> None:
        self.state[h] = ACTIVE
        self.buckets.setdefault(self.pins[h], Buckets())[self.free[h]].add(h)
        self.active_hosts += 1
        self.free_chips += self.free[h]

    def _deactivate(self, h: int) -> None:
        self.buckets[self.pins[h]][self.free[h]].discard(h)
        self.state[h] = GONE if self.free[h] == self.per_host else LEAVING
        self.active_hosts -= 1
        self.free_chips -= self.free[h]

    def settle(self, hosts: Hosts) -> None:
        """Leaving hosts among `hosts` that are now wholly free are gone."""
        for h, _ in hosts:
            if self.state[h] == LEAVING and self.free[h] == self.per_host:
                self.state[h] = GONE

    def leaving(self) -> set[int]:
        return {h for h, s in enumerate(self.state) if s == LEAVING}

    def set_pins(self, h: int, pins: Pins) -> None:
        """Move host `h` to the class of `pins` (the reservations that hold it)."""
        old = self.pins[h]
        if self.state[h] == ACTIVE:
            self.buckets[old][self.free[h]].discard(h)
            self.buckets.setdefault(pins, Buckets())[self.free[h]].add(h)
        self.pins[h] = pins
        if old and old in self.buckets and not any(self.buckets[old].values()):
            del self.buckets[old]

    def pinnable(self, exclude: set[str]) -> list[int]:
        """Active hosts pinned by none of the reservations in `exclude`."""
        return [h for h in self._active() if not (self.pins[h] & exclude)]
