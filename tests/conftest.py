"""Shared fixtures: a manual clock, a git checkout with a fresh workspace, and a client over it."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from crossrail.client import Client
from crossrail.core import ManualClock

GIT_ENV = {
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@example.com",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@example.com",
}


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


def make_checkout(path: Path) -> str:
    """A git checkout at `path` with one commit; returns the commit id."""
    env = {**os.environ, **GIT_ENV}
    (path / "train.py").write_text("print('train')\n")
    for cmd in (["git", "init", "-q"], ["git", "add", "train.py"], ["git", "commit", "-qm", "c"]):
        subprocess.run(cmd, cwd=path, env=env, check=True)
    return subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=path, capture_output=True, text=True, check=True
    ).stdout.strip()


@pytest.fixture
def checkout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.delenv("CROSSRAIL_HOME", raising=False)
    monkeypatch.delenv("CROSSRAIL_STORE_URL", raising=False)
    make_checkout(tmp_path)
    Client.init(tmp_path)
    return tmp_path


@pytest.fixture
def client(checkout: Path, clock: ManualClock) -> Iterator[Client]:
    with Client(cwd=checkout, clock=clock) as c:
        yield c


@pytest.fixture
def experiments(checkout: Path) -> Path:
    return checkout / ".crossrail" / "experiments"
