"""The workspace: a `.crossrail/` directory with the fleet, the policy, example experiments and the state."""

from __future__ import annotations

import itertools
import json
import os
import random
from dataclasses import dataclass
from pathlib import Path
from string import Template
from typing import TYPE_CHECKING

from crossrail.errors import StoreDamagedError, WorkspaceError

if TYPE_CHECKING:  # the store (SQLAlchemy) loads only for the commands that open it
    from crossrail.store import Store

DIRNAME = ".crossrail"
_TEMPLATES = Path(__file__).parent / "templates"
LOCAL_POLICY_EXTENSION = """  # crossrail extension: this local workspace keeps data and checkpoints on local disk.
  local_uri_schemes: [file]
"""


@dataclass(frozen=True)
class Workspace:
    """Paths of one workspace; `root` is the `.crossrail` directory itself."""

    root: Path

    @property
    def fleet_path(self) -> Path:
        return self.root / "fleet.yaml"

    @property
    def policy_path(self) -> Path:
        return self.root / "policy.yaml"

    @property
    def experiments_dir(self) -> Path:
        return self.root / "experiments"

    @property
    def store_marker(self) -> Path:
        """Written when the workspace's SQLite store is first opened: its id, so a store that vanished is noticed."""
        return self.root / "store.json"

    @property
    def store_url(self) -> str:
        return os.environ.get("CROSSRAIL_STORE_URL") or f"sqlite:///{self.root / 'state.db'}"

    def check(self) -> Workspace:
        if not self.root.is_dir():
            raise WorkspaceError(f"no crossrail workspace at {self.root}; create one with `crossrail init`")
        for path in (self.fleet_path, self.policy_path):
            if not path.is_file():
                raise WorkspaceError(f"workspace {self.root} has no {path.name}; `crossrail init` writes one")
        return self


def find(home: str | os.PathLike[str] | None = None, cwd: Path | None = None) -> Workspace:
    """`home` (or $CROSSRAIL_HOME) first, else the nearest `.crossrail/` above `cwd`, else ~/.crossrail."""
    chosen = home or os.environ.get("CROSSRAIL_HOME")
    if chosen:
        return Workspace(Path(chosen).expanduser().resolve())
    here = (cwd or Path.cwd()).resolve()
    for d in (here, *here.parents):
        if (d / DIRNAME).is_dir():
            return Workspace(d / DIRNAME)
    return Workspace(Path.home() / DIRNAME)


def init(directory: str | os.PathLike[str], policy_yaml: str, *, force: bool = False) -> tuple[Workspace, list[Path]]:
    """Write `<directory>/.crossrail/` with a fleet, a policy, example experiments and their small data.

    Refuses to overwrite an existing workspace's files unless `force`.
    """
    ws = Workspace(Path(directory).expanduser().resolve() / DIRNAME)
    files = _files(ws, policy_yaml)
    clashes = [p for p in files if p.exists()]
    if clashes and not force:
        raise WorkspaceError(
            f"{ws.root} already has {', '.join(str(p.relative_to(ws.root)) for p in clashes[:3])}"
            f"{' and more' if len(clashes) > 3 else ''}; pass --force to overwrite them"
        )
    try:
        for path, text in files.items():
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f".{path.name}.tmp")
            tmp.write_text(text, encoding="utf-8")
            tmp.replace(path)
    except OSError as exc:
        raise WorkspaceError(f"cannot write the workspace at {ws.root}: {exc.strerror or exc}") from exc
    return ws, list(files)


def _files(ws: Workspace, policy_yaml: str) -> dict[Path, str]:
    subst = {"workspace": str(ws.root)}
    out: dict[Path, str] = {
        ws.fleet_path: (_TEMPLATES / "fleet.yaml").read_text(encoding="utf-8"),
        ws.policy_path: _local_policy(policy_yaml),
    }
    for tpl in sorted((_TEMPLATES / "experiments").glob("*.yaml")):
        out[ws.experiments_dir / tpl.name] = Template(tpl.read_text(encoding="utf-8")).substitute(subst)
    out.update(_configs(ws))
    out.update(_data(ws))
    return out


def _local_policy(article_yaml: str) -> str:
    head = "# The first article's placement policy, verbatim, plus crossrail's local-storage extension.\n"
    return head + article_yaml.rstrip("\n") + "\n" + LOCAL_POLICY_EXTENSION


def _configs(ws: Workspace) -> dict[Path, str]:
    model = "model: {n_layer: 2, n_head: 2, d_model: 64, context: 64, vocab: 256}\n"
    return {
        ws.root / "configs" / "pretrain-small.yaml": model + "optim: {lr: 3.0e-3, batch: 16}\n",
        ws.root / "configs" / "posttrain.yaml": model + "optim: {lr: 3.0e-3, batch: 8}\n",
        ws.root / "configs" / "eval.yaml": model + "eval: {max_new_tokens: 8}\n",
    }


def _data(ws: Workspace) -> dict[Path, str]:
    """Small deterministic text, so a workspace needs nothing from the network."""
    rng = random.Random(42)
    words = [
        "chip",
        "slice",
        "pool",
        "queue",
        "stage",
        "tensor",
        "shard",
        "step",
        "token",
        "batch",
        "loss",
        "rate",
        "host",
        "ring",
        "mesh",
        "torus",
        "gradient",
        "optimizer",
        "checkpoint",
        "resume",
        "migrate",
    ]
    lines = [" ".join(rng.choice(words) for _ in range(rng.randint(6, 14))) + "." for _ in range(2000)]
    sft = [json.dumps({"prompt": f"{a} {b}", "completion": f"{b} {a}"}) for a, b in itertools.pairwise(words)]
    heldout = [json.dumps({"prompt": f"{w} {w}", "answer": w}) for w in words]
    return {
        ws.root / "data" / "corpus.txt": "\n".join(lines) + "\n",
        ws.root / "data" / "sft.jsonl": "\n".join(sft * 20) + "\n",
        ws.root / "data" / "heldout.jsonl": "\n".join(heldout) + "\n",
    }


def open_store(ws: Workspace) -> Store:
    """The workspace's store. A SQLite file the user cannot write is opened read-only (reads work, writes say
    why they cannot); a SQLite store this workspace had and that is gone, or that is another store now, is an
    error that points at `crossrail store restore`, never a new empty store made silently in its place."""
    from crossrail.store import Store

    url = ws.store_url
    path = _sqlite_file(url)
    if path is None:
        return Store.open(url)
    known = read_marker(ws.store_marker, url)
    if known is not None and not path.exists():
        raise StoreDamagedError(
            f"the state store {path} is gone: this workspace's store {known} (recorded in {ws.store_marker}) is not "
            f"there; restore it from a backup with `crossrail store restore BACKUP`, or, to start over with an empty "
            f"store and lose its history, delete {ws.store_marker}"
        )
    writable = os.access(path.parent, os.W_OK) and (not path.exists() or os.access(path, os.W_OK))
    store = Store.open(url, read_only=not writable)
    if known is not None and store.id != known:
        store.close()
        raise StoreDamagedError(
            f"{path} is store {store.id}, but this workspace's store is {known} ({ws.store_marker}); put the right "
            f"file back, restore a backup with `crossrail store restore BACKUP`, or delete {ws.store_marker} to "
            "adopt this store"
        )
    if known is None and writable and store.id is not None:
        write_marker(ws, store.id)
    return store


def write_marker(ws: Workspace, store_id: str) -> None:
    tmp = ws.store_marker.with_name(f".{ws.store_marker.name}.tmp")
    tmp.write_text(json.dumps({"store_id": store_id, "url": ws.store_url}) + "\n", encoding="utf-8")
    tmp.replace(ws.store_marker)


def read_marker(marker: Path, url: str) -> str | None:
    try:
        data = json.loads(marker.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("url") != url or not isinstance(data.get("store_id"), str):
        return None
    return str(data["store_id"])


def _sqlite_file(url: str) -> Path | None:
    from crossrail.store.health import sqlite_path

    return sqlite_path(url)
