"""crossrail.runtime is what training images install: it imports nothing beyond numpy, safetensors and fsspec."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import crossrail.runtime

RUNTIME = Path(crossrail.runtime.__file__).parent
ALLOWED_THIRD_PARTY = {"numpy", "safetensors", "fsspec", "xxhash"}
ALLOWED_OURS = ("crossrail.errors", "crossrail.core", "crossrail.runtime")
# The framework adapters import their framework inside functions only, so importing them loads none.
LAZY = {"torch_adapter.py": {"torch"}, "jax_adapter.py": {"jax", "optax"}}


def imported_names(path: Path) -> list[str]:
    names = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.append(node.module)
    return names


def eager_names(path: Path) -> list[str]:
    """What importing the module imports: module-level statements, leaving out `if TYPE_CHECKING:` blocks."""
    names = []
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            continue
        if isinstance(node, ast.Import | ast.ImportFrom):
            names += imported_names_of(node)
    return names


def imported_names_of(node: ast.Import | ast.ImportFrom) -> list[str]:
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    return [node.module] if node.level == 0 and node.module else []


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
                ok = ok or top in LAZY.get(path.name, set())
            if not ok:
                bad.append(f"{path.name}: {name}")
        eager = [name for name in eager_names(path) if name.split(".")[0] in LAZY.get(path.name, set())]
        bad += [f"{path.name}: {name} at module level" for name in eager]
    assert bad == []


def test_importing_the_framework_adapters_loads_no_framework() -> None:
    script = "import sys, crossrail.runtime.torch_adapter, crossrail.runtime.jax_adapter; print(sorted(sys.modules))"
    loaded = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
    assert "'crossrail.runtime.torch_adapter'" in loaded
    assert "'torch'" not in loaded
    assert "'jax'" not in loaded
    assert "'optax'" not in loaded


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
