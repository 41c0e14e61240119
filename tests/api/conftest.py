"""The shared workspace of the API, dashboard, browser, Prometheus and MLflow tests.

`demo_workspace` is a checkout where a real agent ran `crossrail demo --quick` (what it printed is kept in
`demo-output.txt`): pretraining trained on the TPU-like pool, its training process was killed after its first
checkpoint and the retry resumed on the GPU-like pool; post-training started from pretraining's checkpoint, an
eval from post-training's, and two small sweep runs ran beside them. Afterwards, with no agent running, one
more experiment was submitted, so the queue has a pending run. It is built once per test session (once in all,
under pytest-xdist: the first worker builds it, the others wait for it) and is read-only: a test that writes
takes `demo_copy`.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from filelock import FileLock
from tests.conftest import serving

# The installed console script: the same entry point a user runs, wherever the CLI's modules live.
CROSSRAIL = str(Path(sys.executable).with_name("crossrail"))
PENDING = "queued-after-demo"
DEMO_OUTPUT = "demo-output.txt"


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("CROSSRAIL_HOME", "CROSSRAIL_STORE_URL")}
    return env | {"COLUMNS": "200"}


def _crossrail(root: Path, *args: str, timeout_s: float = 60) -> str:
    proc = subprocess.run(
        [CROSSRAIL, *args], cwd=root, env=_env(), capture_output=True, text=True, timeout=timeout_s, check=False
    )
    assert proc.returncode == 0, f"crossrail {' '.join(args)} failed:\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


def _build(root: Path) -> None:
    root.mkdir(parents=True)
    out = _crossrail(root, "demo", "--quick", "--dir", str(root), timeout_s=400)
    assert "killed the training process of pretrain-small-1" in out, out
    (root / DEMO_OUTPUT).write_text(out)  # what the demo printed, for the test of the demo itself
    # Submitted after the agent stopped: it stays queued, so the queue pages have a pending run to show.
    exp = root / ".crossrail" / "experiments" / "pretrain-small.yaml"
    _crossrail(root, "submit", str(exp), "--set", f"metadata.name={PENDING}", "--set", "spec.priority=low")
    (root / ".built").write_text("ok\n")


@pytest.fixture(scope="session")
def demo_workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The checkout of the demo workspace (its store is `<root>/.crossrail`); do not write to it."""
    shared = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        shared = shared.parent  # the directory every worker's base temp sits in
    root = shared / "demo-workspace"
    with FileLock(str(shared / "demo-workspace.lock")):
        if not (root / ".built").is_file():
            shutil.rmtree(root, ignore_errors=True)
            _build(root)
    return root


@pytest.fixture
def demo_copy(demo_workspace: Path, tmp_path: Path) -> Path:
    """A private copy of the demo workspace, for a test that writes to it."""
    copy = tmp_path / "demo"
    shutil.copytree(demo_workspace, copy, symlinks=True)
    return copy


@contextmanager
def serving_home(home: Path) -> Iterator[str]:
    """`create_app(home)` on a socket (tests.conftest.serving); yields its base URL."""
    from crossrail.api import create_app

    with serving(create_app(home)) as url:
        yield url


@pytest.fixture(scope="session")
def demo_server(demo_workspace: Path) -> Iterator[str]:
    """The API server over the demo workspace, for this session; yields its base URL."""
    with serving_home(demo_workspace / ".crossrail") as url:
        yield url
