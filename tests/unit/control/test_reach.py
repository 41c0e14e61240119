"""The dataset check validate, place and submit share: one bounded stat or metadata call, nothing read."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import fsspec
import pytest
from fsspec.implementations.memory import MemoryFileSystem

from crossrail.control.service.reach import reach


class _StuckFileSystem(MemoryFileSystem):
    """Object storage that never answers a metadata call (a black-holed endpoint)."""

    protocol = "stuck"
    released = threading.Event()

    def info(self, path: str, **kwargs: Any) -> dict[str, Any]:
        self.released.wait(30)
        return {"name": path, "type": "file", "size": 0}


@pytest.fixture
def stuck() -> Any:
    fsspec.register_implementation("stuck", _StuckFileSystem, clobber=True)
    yield _StuckFileSystem
    _StuckFileSystem.released.set()


def test_a_local_path_is_there_or_missing_and_nothing_is_read(tmp_path: Path) -> None:
    data = tmp_path / "data.jsonl"
    data.write_text("{}\n")
    data.chmod(0)  # a stat needs no read permission

    assert reach(str(data)).state == "ok"
    assert reach(f"file://{data}").state == "ok"
    assert reach(f"file://{tmp_path}/none.jsonl").state == "missing"


def test_object_storage_is_asked_once_and_a_missing_object_is_missing() -> None:
    fs = fsspec.filesystem("memory")
    fs.pipe("/bucket/data.jsonl", b"{}")

    assert reach("memory://bucket/data.jsonl").state == "ok"
    assert reach("memory://bucket/none.jsonl").state == "missing"


def test_a_scheme_with_no_filesystem_installed_is_unknown_with_why() -> None:
    found = reach("nosuchscheme://bucket/data")

    assert found.state == "unknown"
    assert found.why


def test_storage_that_does_not_answer_is_unknown_once_the_timeout_passes(stuck: Any) -> None:
    began = time.monotonic()
    found = reach("stuck://bucket/data.jsonl", timeout_s=0.2)

    assert (found.state, found.why) == ("unknown", "no answer within 0.2 s")
    assert time.monotonic() - began < 2
