"""control.json: the stage sizes of a running RL pipeline, which a controller may change while it runs.

The file lives at `<rendezvous>/control.json` (the rendezvous directory is `<checkpoint dir>/rl` unless
`--rendezvous` names another). It is one JSON object, written whole by write-aside and rename, so a reader
sees either the old object or the new one:

    {
      "format": "crossrail-rl-control/v1",
      "generation": 3,              # counts up with every write; readers act on a newer generation only
      "samplers": 2,                # sampler replicas wanted, >= 1
      "reward_workers": 1,          # reward workers wanted, >= 1
      "max_policy_lag_steps": 2,    # bound on policy lag, >= 0 (0: synchronous); the learner enforces it
      "reason": "learner idle 62% over 20 steps",   # why this generation was written (free text)
      "written_by": "controller"    # who wrote it: "pipeline" for the first, then the controller's name
    }

Who reads it: the learner re-reads it before every step (and the in-attempt parent starts or stops sampler
and reward processes to match); a sampler or reward process with replica index >= the wanted count finishes
its current item and exits 0, so on an executor with one process per part the controller scales a part down
by writing the file, and up by writing it and resizing the part. Unknown keys are an error (a typo would
otherwise be ignored); `write_control` refuses a generation that does not count up.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any, Protocol

from crossrail.errors import CrossrailError

FORMAT = "crossrail-rl-control/v1"
FILENAME = "control.json"


class Sizes(Protocol):
    @property
    def samplers(self) -> int: ...
    @property
    def reward_workers(self) -> int: ...
    @property
    def max_policy_lag_steps(self) -> int: ...


class HasRoot(Protocol):
    @property
    def root(self) -> Path: ...


@dataclass(frozen=True)
class Control:
    samplers: int = 1
    reward_workers: int = 1
    max_policy_lag_steps: int = 2
    generation: int = 0
    reason: str = ""
    written_by: str = "pipeline"

    def problems(self, where: str = FILENAME) -> list[str]:
        sizes = {"samplers": self.samplers, "reward_workers": self.reward_workers}
        found = [f"{where}: {k} must be >= 1 (got {v})" for k, v in sizes.items() if v < 1]
        if self.max_policy_lag_steps < 0:
            found.append(f"{where}: max_policy_lag_steps must be >= 0 (got {self.max_policy_lag_steps})")
        if self.generation < 0:
            found.append(f"{where}: generation must be >= 0 (got {self.generation})")
        return found

    def resized(self, *, reason: str, written_by: str, **sizes: int) -> Control:
        """The next generation with `sizes` (samplers=..., reward_workers=...) changed."""
        return replace(self, **sizes, generation=self.generation + 1, reason=reason, written_by=written_by)

    def to_json(self) -> dict[str, Any]:
        return {"format": FORMAT, **asdict(self)}


def parse_control(value: Any, where: str = FILENAME) -> Control:
    """A Control from the JSON object; every problem (unknown key, wrong type, out of range) named at once."""
    if not isinstance(value, dict):
        raise CrossrailError(f"{where}: must be a JSON object such as {json.dumps(Control().to_json())}")
    problems: list[str] = []
    if value.get("format", FORMAT) != FORMAT:
        problems.append(f"{where}: format {value.get('format')!r} is not {FORMAT!r}; upgrade crossrail to read it")
    known = {f.name: f.type for f in fields(Control)}
    values: dict[str, Any] = {}
    for key, item in value.items():
        if key == "format":
            continue
        if key not in known:
            problems.append(f"{where}: unknown key {key!r}; known keys are {', '.join(['format', *known])}")
        elif known[key] == "str" and not isinstance(item, str):
            problems.append(f"{where}: {key} must be a string (got {item!r})")
        elif known[key] == "int" and (not isinstance(item, int) or isinstance(item, bool)):
            problems.append(f"{where}: {key} must be a whole number (got {item!r})")
        else:
            values[key] = item
    if problems:
        raise CrossrailError("\n".join(problems))
    control = Control(**values)
    if found := control.problems(where):
        raise CrossrailError("\n".join(found))
    return control


def read_control(rendezvous: str | Path) -> Control:
    """The control file of the rendezvous directory; CrossrailError when it is missing or malformed."""
    path = Path(rendezvous) / FILENAME
    try:
        value = json.loads(path.read_text())
    except FileNotFoundError as exc:
        raise CrossrailError(f"{path} does not exist; the pipeline writes it when it starts") from exc
    except json.JSONDecodeError as exc:
        raise CrossrailError(f"{path} is not JSON ({exc}); write it whole, by rename") from exc
    return parse_control(value, str(path))


def write_control(rendezvous: str | Path, control: Control) -> None:
    """Write the control file atomically (aside, fsync, rename); its generation must count up."""
    if found := control.problems():
        raise CrossrailError("\n".join(found))
    path = Path(rendezvous) / FILENAME
    if path.exists():
        current = read_control(rendezvous)
        if control.generation <= current.generation:
            raise CrossrailError(
                f"{path}: generation {control.generation} does not follow {current.generation}; "
                "write the next generation (Control.resized)"
            )
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, aside = tempfile.mkstemp(dir=path.parent, prefix=".control-", suffix=".tmp")
    with os.fdopen(fd, "w") as out:
        json.dump(control.to_json(), out, indent=2)
        out.flush()
        os.fsync(out.fileno())
    os.replace(aside, path)


def first_control(settings: Sizes, rdv: HasRoot) -> Control:
    """The control file as it stands, or the settings' sizes written as generation 0 when there is none."""
    if not (rdv.root / "control.json").exists():
        control = Control(settings.samplers, settings.reward_workers, settings.max_policy_lag_steps)
        write_control(rdv.root, control)
    return read_control(rdv.root)
