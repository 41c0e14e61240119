"""Fixtures for the runtime: an empty fsspec memory filesystem per test."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import fsspec
import pytest


@pytest.fixture
def memfs() -> Iterator[Any]:
    """fsspec's process-wide memory filesystem, emptied before and after the test."""
    fs = fsspec.filesystem("memory")
    fs.store.clear()
    fs.pseudo_dirs.clear()
    fs.pseudo_dirs.append("")
    yield fs
    fs.store.clear()
    fs.pseudo_dirs.clear()
    fs.pseudo_dirs.append("")
