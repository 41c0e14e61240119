"""What tests of isolated local attempts need: a directory and an interpreter that other uids can reach."""

from __future__ import annotations

import os
import shutil
import stat
import sys
import sysconfig
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

import crossrail


def open_to_others(path: Path) -> bool:
    """Whether a uid of no group of the path's owners can reach and run `path` (every directory above it too)."""
    real = path.resolve()
    for directory in real.parents:
        if not directory.stat().st_mode & stat.S_IXOTH:
            return False
    return bool(real.stat().st_mode & stat.S_IXOTH and real.stat().st_mode & stat.S_IROTH)


def python_for_others() -> tuple[str, dict[str, str]]:
    """An interpreter a team's uid can run with crossrail importable, and the env a run needs for it: this one,
    or (when this one lies in a directory closed to others, as a home under /root) a system one of the same
    version over this one's packages. Skips the test when there is none."""
    if open_to_others(Path(sys.executable)):
        return sys.executable, {}
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    for candidate in (f"/usr/bin/{version}", f"/usr/local/bin/{version}"):
        if Path(candidate).is_file() and open_to_others(Path(candidate)):
            code = Path(crossrail.__file__).resolve().parents[1]
            paths = [sysconfig.get_paths()["purelib"], str(code)]
            if all(open_to_others(Path(p)) for p in paths):
                return candidate, {"PYTHONPATH": os.pathsep.join(paths)}
    pytest.skip(f"no {version} that other uids may run (this one, {sys.executable}, is closed to them)")


@contextmanager
def open_directory(prefix: str) -> Iterator[Path]:
    """A new directory other uids may pass through: pytest's tmp dirs are closed to other users."""
    root = Path(tempfile.mkdtemp(prefix=prefix))
    root.chmod(0o755)
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)
