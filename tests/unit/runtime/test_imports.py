"""crossrail.runtime is what training images install: it imports nothing beyond numpy, safetensors and fsspec."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import crossrail.runtime

RUNTIME = Path(crossrail.runtime.__file__).parent
ALLOWED_THIRD_PARTY = {"numpy", "safetensors", "fsspec"}
ALLOWED_OURS = ("crossrail.errors", "crossrail.core", "crossrail.runtime")


def imported_names(path: Path) -> list[str]:
    names = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.append(node.module)
    return names


def test_runtime_modules_import_only_the_standard_library_numpy_safetensors_fsspec_errors_and_core() -> None:
    modules = sorted(RUNTIME.glob("*.py"))
    assert len(modules) >= 5
    bad = []
    for path in modules:
        for name in imported_names(path):
            top = name.split(".")[0]
            if top == "crossrail":
                ok = any(name == ours or name.startswith(ours + ".") for ours in ALLOWED_OURS)
            else:
                ok = top in sys.stdlib_module_names or top in ALLOWED_THIRD_PARTY or top == "__future__"
            if not ok:
                bad.append(f"{path.name}: {name}")
    assert bad == []


def test_using_the_runtime_loads_no_control_plane_dependency(tmp_path: Path) -> None:
    script = f"""
import json, sys
import numpy as np
from crossrail.runtime import Checkpointer, Reporter, read_new
with Reporter("memory://r", run="r-1", attempt=1) as r:
    r.heartbeat(1)
read_new("memory://r", None)
Checkpointer({str(tmp_path)!r}).save({{"w": np.ones(2)}}, 1, {{}})
print(json.dumps(sorted(sys.modules)))
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
    loaded = set(json.loads(out))
    third_party = {m.split(".")[0] for m in loaded} - set(sys.stdlib_module_names) - {"crossrail", "__main__"}
    assert third_party - {"_distutils_hack"} <= ALLOWED_THIRD_PARTY
    heavy = ("pydantic", "sqlalchemy", "alembic", "yaml", "typer", "rich")
    assert [name for name in heavy if name in loaded] == []
    for layer in (
        "crossrail.spec",
        "crossrail.store",
        "crossrail.cli",
        "crossrail.control.service",
        "crossrail.metrics",
    ):
        assert layer not in loaded
