"""Write sample.csv: a small synthetic job log in the Philly-style format (not real data; see docs/traces.md).

    python data/philly/make_sample.py        # rewrites data/philly/sample.csv, the same bytes every time

200 jobs over one week on 4 virtual clusters: GPU counts skewed small like Philly's (most 1-GPU), log-normal
run times (median 20 min, a long tail of multi-day runs), some zero-duration rows (jobs that failed at
once, which the adapter skips), rows not in time order (as in the published traces).
"""

from __future__ import annotations

import csv
import random
from datetime import UTC, datetime, timedelta
from pathlib import Path

OUT = Path(__file__).with_name("sample.csv")
START = datetime(2017, 10, 3, tzinfo=UTC)


def rows(n: int = 200, seed: int = 7) -> list[list[str]]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        when = START + timedelta(seconds=rng.uniform(0, 7 * 86_400))
        gpus = rng.choices((1, 2, 4, 8, 16), weights=(60, 15, 12, 10, 3))[0]
        duration = 0.0 if rng.random() < 0.05 else round(min(rng.lognormvariate(7.1, 1.6), 5 * 86_400), 1)
        cluster = rng.choice(("vc-a", "vc-b", "vc-c", "vc-d"))
        out.append([when.strftime("%Y-%m-%d %H:%M:%S"), f"{duration}", str(gpus), f"{duration * gpus:.1f}", cluster])
    rng.shuffle(out)
    return out


def main() -> None:
    with OUT.open("w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f, lineterminator="\n")
        writer.writerow(["timestamp", "duration", "num_gpus", "gpu_time", "cluster"])
        writer.writerows(rows())
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
