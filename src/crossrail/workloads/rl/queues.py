"""A queue of JSON items as files in a directory, safe between processes on one file system.

`put` writes an item aside and renames it into `ready/` as `<version>-<id>.json`; `claim` takes the oldest
ready items by renaming each into `claimed/` under the claimer's name, so of two claimers one wins each item;
`done` deletes a claimed item once its result is safely elsewhere. A replaced worker first `requeue`s what its
predecessor had claimed. An item written twice under one id lands on one file, and the learner refuses an id
it has already counted, so a crash between writing a result and deleting the claim counts nothing twice.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from crossrail.core.clock import Clock


@dataclass(frozen=True)
class Backlog:
    length: int
    age_s: float  # of the oldest ready item; 0 when empty


class FileQueue:
    def __init__(self, root: Path, clock: Clock) -> None:
        self.ready, self.claimed = root / "ready", root / "claimed"
        self.ready.mkdir(parents=True, exist_ok=True)
        self.claimed.mkdir(parents=True, exist_ok=True)
        self.clock = clock

    @staticmethod
    def name(version: int, item_id: str) -> str:
        return f"{version:09d}-{item_id}.json"

    def put(self, version: int, item_id: str, item: dict[str, Any]) -> None:
        fd, aside = tempfile.mkstemp(dir=self.ready.parent, prefix=".put-", suffix=".tmp")
        with os.fdopen(fd, "w") as out:
            json.dump({**item, "id": item_id, "version": version, "queued_at": self.clock.now()}, out)
        os.replace(aside, self.ready / self.name(version, item_id))

    def _ready(self) -> list[str]:
        return sorted(n for n in os.listdir(self.ready) if n.endswith(".json"))

    def claim(self, owner: str, limit: int) -> list[tuple[str, dict[str, Any]]]:
        """Up to `limit` of the oldest ready items (lowest version first), each now claimed by `owner`."""
        got: list[tuple[str, dict[str, Any]]] = []
        for name in self._ready():
            if len(got) == limit:
                break
            claimed = self.claimed / f"{name}@{owner}"
            try:
                os.rename(self.ready / name, claimed)
            except FileNotFoundError:
                continue  # another claimer won it
            got.append((claimed.name, json.loads(claimed.read_text())))
        return got

    def done(self, claimed_name: str) -> None:
        (self.claimed / claimed_name).unlink(missing_ok=True)

    def requeue(self, owner: str) -> int:
        """Put back every item `owner` claimed and did not finish (its predecessor crashed); how many."""
        count = 0
        for name in os.listdir(self.claimed):
            item, _, who = name.rpartition("@")
            if who == owner:
                os.replace(self.claimed / name, self.ready / item)
                count += 1
        return count

    def reserve(self, owner: str, version: int, item_ids: list[str]) -> list[str]:
        """Mark items `owner` is about to make as claimed (empty files), so other producers count them; the names."""
        names = [f"{self.name(version, i)}@{owner}" for i in item_ids]
        for name in names:
            (self.claimed / name).touch()
        return names

    def release(self, owner: str) -> None:
        """Drop every reservation of `owner`: its items are in `ready/`, or it gave them up, or it crashed."""
        for name in os.listdir(self.claimed):
            if name.rpartition("@")[2] == owner:
                (self.claimed / name).unlink(missing_ok=True)

    def claimed_names(self) -> list[str]:
        """The claimed names in order (version, then id), reservations and claims alike."""
        return sorted(n for n in os.listdir(self.claimed) if n[:1].isdigit())

    def versions(self) -> list[int]:
        """The policy version of every ready or claimed item."""
        names = self._ready() + os.listdir(self.claimed)
        return [int(n.split("-", 1)[0]) for n in names if n[:1].isdigit()]

    def backlog(self) -> Backlog:
        ready = self._ready()
        ages = []
        for name in ready[:64]:  # names sort by version, not age: the oldest is among the lowest versions
            try:
                ages.append(self.clock.now() - (self.ready / name).stat().st_mtime)
            except FileNotFoundError:
                continue
        return Backlog(len(ready), max(ages, default=0.0))
