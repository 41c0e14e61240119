"""The workspace: a `.crossrail/` directory with the fleet, the policy, example experiments and the state."""

from __future__ import annotations

import itertools
import json
import os
import random
from dataclasses import dataclass
from pathlib import Path
from string import Template

from crossrail.errors import WorkspaceError

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
