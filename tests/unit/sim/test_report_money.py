"""The simulator's tables write cost as the rest of crossrail does: in the simulated fleet's currency."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from crossrail.cli import app

FLEET = """\
apiVersion: crossrail/v1
kind: Fleet
metadata: {name: priced}
spec:
  currency: <currency>
  pools:
    - {name: h100, accelerator: gpu, chip_type: h100, chips: 8, chips_per_host: 8, cost_per_chip_hour: 2.5}
  queues:
    - {name: post-training, stage: post_training, quota: {h100: 8}}
"""
JOBS = {"jobs": [{"name": f"sft-{i}", "stage": "post_training", "chips": 4, "work_s": 3600.0} for i in range(2)]}


def simulate(tmp_path: Path, currency: str) -> str:
    (tmp_path / "fleet.yaml").write_text(FLEET.replace("<currency>", currency))
    (tmp_path / "jobs.json").write_text(json.dumps(JOBS))
    args = ["simulate", "--fleet", str(tmp_path / "fleet.yaml"), "--workload", str(tmp_path / "jobs.json")]
    result = CliRunner().invoke(app, args, env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    return result.stdout


def test_the_cost_per_run_is_written_in_the_fleets_currency(tmp_path: Path) -> None:
    euros = simulate(tmp_path, "EUR")

    # two one-hour runs of 4 chips at 2.50 a chip-hour: 10.00 each, in the summary and in the stage's row
    assert euros.count("€10.00") == 2
    assert "$" not in euros
