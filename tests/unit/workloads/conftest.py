"""Fixtures for the workload tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from .builders import Launcher


@pytest.fixture
def launcher(tmp_path: Path) -> Launcher:
    return Launcher(tmp_path)
