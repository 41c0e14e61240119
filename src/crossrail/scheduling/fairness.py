"""Fair share between teams: dominant resource shares over usage that decays with a half-life.

For a tenant t (a team, or a queue for work without a team) and pool p, with capacity C_p:

    U_t,p(now) = (ln 2 / h) * integral of chips_t,p(s) * 2^(-(now - s) / h) ds    (decayed average chips)
    share(t)   = max over p of (A_t,p + U_t,p) / C_p                              (dominant share)

where A_t,p is the chips t holds now (admissions of the current cycle included) and h the half-life.
U is kept per (t, p) as an exponentially weighted average updated only when t's chips there change, so
reading a share costs O(pools t has used).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping


class DecayedUsage:
    def __init__(self, half_life_s: float) -> None:
        self.rate = 0.0
        self.set_half_life(half_life_s)
        self._by_tenant: dict[str, dict[str, list[float]]] = {}
        """tenant -> pool -> [average chips, chips held now, time of the average]"""

    def set_half_life(self, half_life_s: float) -> None:
        self.rate = math.log(2) / half_life_s

    def change(self, tenant: str, pool: str, chips: int, at: float) -> None:
        """`tenant` holds `chips` more (or fewer, when negative) chips of `pool` from `at` on."""
        rec = self._by_tenant.setdefault(tenant, {}).setdefault(pool, [0.0, 0.0, at])
        rec[0] = self._average(rec, at)
        rec[2] = max(rec[2], at)
        rec[1] = max(rec[1] + chips, 0.0)

    def _average(self, rec: list[float], now: float) -> float:
        weight = math.exp(-self.rate * max(now - rec[2], 0.0))
        return rec[0] * weight + rec[1] * (1.0 - weight)

    def held(self, tenant: str, now: float) -> dict[str, float]:
        """Per pool, the chips the tenant holds now plus its decayed average: the numerator of its share."""
        # Every cycle asks this for every tenant with a head, over every pool it used: kept to one comprehension.
        down, exp = -self.rate, math.exp
        return {
            pool: holding + average * (w := exp(down * (now - at)) if now > at else 1.0) + holding * (1.0 - w)
            for pool, (average, holding, at) in self._by_tenant.get(tenant, {}).items()
        }

    def share(
        self, tenant: str, now: float, capacity: Callable[[str], int], extra: Mapping[str, int] | None = None
    ) -> float:
        """The tenant's dominant share at `now`; `extra` adds chips per pool held but not yet recorded."""
        held = self.held(tenant, now)
        for pool, chips in (extra or {}).items():
            held[pool] = held.get(pool, 0.0) + chips
        return max((chips / max(capacity(pool), 1) for pool, chips in held.items()), default=0.0)

    def tenants(self) -> list[str]:
        return list(self._by_tenant)
