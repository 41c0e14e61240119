"""Each command loads only what it needs: `crossrail status` leaves every other command's module, the metrics it
does not show, the HTTP transport, pydantic, numpy, YAML, Alembic and SQLAlchemy's ORM unloaded, and with --json
rich too (its start-up time is mostly imports)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from crossrail.client import Client

# Run the command as `crossrail` does, then print the modules it loaded.
PROBE = """
import json, sys
from crossrail.cli import main
sys.argv = ["crossrail", *sys.argv[1:]]
try:
    main()
except SystemExit as exc:
    code = exc.code
else:
    code = 0
sys.stderr.write("\\nMODULES " + json.dumps(sorted(sys.modules)) + "\\n")
sys.exit(code)
"""

UNNEEDED_BY_STATUS = (
    "crossrail.cli.access",
    "crossrail.cli.sim",
    "crossrail.cli.verdict",
    "crossrail.cli.sweep",
    "crossrail.cli.serve",
    "crossrail.cli.manifests",
    "crossrail.metrics.accumulator",
    "crossrail.metrics.verdict",
    "crossrail.metrics.table",
    "crossrail.cli.follow",  # only with --watch
    "crossrail.control.parents",  # submit's and resubmit's checks
    "crossrail.control.isolation",
    "crossrail.control.service.loaded",  # what `show` says a run loaded
    "crossrail.spec",
    "crossrail.scheduling",
    "alembic",  # a store at the head revision is read as it is
    "sqlalchemy.orm",  # the store is SQLAlchemy Core
    "httpx",
    "rich",  # --json draws no table (cli/output.py)
    "pydantic",  # typer coerces an option through it only when one is given (cli/lazy.py)
    "numpy",
    "yaml",
)


def loaded(cwd: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], set[str]]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CROSSRAIL_")}
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=60, check=False
    )
    line = next(x for x in proc.stderr.splitlines() if x.startswith("MODULES "))
    return proc, set(json.loads(line.removeprefix("MODULES ")))


def test_status_loads_no_other_commands_module_no_unshown_metrics_and_no_http(checkout: Path) -> None:
    with Client.local(cwd=checkout) as c:
        c.status()  # the first command in a workspace creates its store (Alembic); status then reads it
    proc, modules = loaded(checkout, "status", "--json")

    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["kind"] == "Status"
    assert sorted(modules & set(UNNEEDED_BY_STATUS)) == []
    assert "crossrail.metrics.progress" in modules  # what status shows of a run's progress


@pytest.mark.parametrize(
    ("args", "module"),
    [
        pytest.param(["whoami", "--json"], "crossrail.cli.access", id="a lazy command loads its module when it runs"),
        pytest.param(["policy", "--help"], "crossrail.cli.verdict", id="a lazy group loads its module for its help"),
    ],
)
def test_a_command_loads_its_own_module_when_named(checkout: Path, args: list[str], module: str) -> None:
    proc, modules = loaded(checkout, *args)

    assert proc.returncode == 0, proc.stderr
    assert module in modules
    assert "crossrail.cli.sim" not in modules
