"""Fixtures for the local executor tests: an executor over a fresh state directory that leaks no processes."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from crossrail.executors.local import LocalExecutor

from .helpers import kill_everything


@pytest.fixture
def state_dir(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "state"
    yield path
    kill_everything(path)


@pytest.fixture
def executor(state_dir: Path) -> LocalExecutor:
    return LocalExecutor(state_dir)


@pytest.fixture
def attempt_dir(state_dir: Path) -> Path:
    """Where attempt 1 of run train-1 keeps its files."""
    return state_dir / "train-1" / "1"
