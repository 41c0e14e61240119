"""crossrail.metrics gives each public name from its module, loading the module on first use."""

from __future__ import annotations

import importlib
import subprocess
import sys

from crossrail import metrics


def _run(code: str) -> str:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()


def test_every_public_name_is_its_modules_object() -> None:
    for name in metrics.__all__:
        value = getattr(metrics, name)
        home = importlib.import_module(metrics._HOMES[name])
        assert value is getattr(home, name), name


def test_table_is_the_function_even_once_its_module_is_loaded() -> None:
    # Loading crossrail.metrics.table (for Row) binds the package's `table` to the module; the name stays the function.
    code = "from crossrail.metrics import Row\nfrom crossrail.metrics import table\nprint(type(table).__name__)"

    assert _run(code) == "function"


def test_the_progress_module_alone_loads_no_other_metric() -> None:
    code = "import sys, crossrail.metrics.progress\nprint([m for m in sorted(sys.modules) if 'crossrail.metrics' in m])"

    assert _run(code) == "['crossrail.metrics', 'crossrail.metrics.progress']"
