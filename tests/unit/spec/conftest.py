"""Fixtures for the spec tests: the default policy and a writer of files under tmp_path."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from crossrail.spec import PlacementPolicy, default_policy


@pytest.fixture
def policy() -> PlacementPolicy:
    return default_policy()


@pytest.fixture
def write(tmp_path: Path) -> Callable[[str, str | bytes], Path]:
    def _write(name: str, content: str | bytes) -> Path:
        path = tmp_path / name
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content, encoding="utf-8")
        return path

    return _write
