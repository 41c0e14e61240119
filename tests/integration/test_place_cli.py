"""`crossrail place FILE --explain` as a user runs it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

CLI = [sys.executable, "-m", "crossrail.cli"]


def run(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("CROSSRAIL_HOME", "CROSSRAIL_STORE_URL")}
    env["COLUMNS"] = "200"
    return subprocess.run([*CLI, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=60, check=False)


@pytest.mark.slow
def test_place_explain_prints_every_candidate_and_the_reason(checkout: Path, experiments: Path) -> None:
    proc = run(checkout, "place", str(experiments / "pretrain-small.yaml"), "--explain")

    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "pretrain-small (pretraining, 4 chips, objective throughput_per_cost) -> tpu-v5p, would start now" in out
    assert "why: tpu preferred by the pretraining placement policy" in out
    assert "candidate pools" in out
    assert "h100" in out
    assert "relative_speed" in out
    # The stage's preferred accelerator, judged by the runs so far: none have run in a fresh workspace.
    assert "policy check (cannot tell yet): pretraining on tpu: cannot tell yet: no pretraining runs have run" in out


@pytest.mark.slow
def test_tables_piped_at_80_columns_keep_every_cell_whole(checkout: Path, experiments: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("CROSSRAIL_HOME", "CROSSRAIL_STORE_URL")}
    argv = [*CLI, "place", str(experiments / "pretrain-small.yaml"), "--explain"]
    piped = subprocess.run(argv, cwd=checkout, env={**env, "COLUMNS": "80"}, capture_output=True, text=True, check=True)
    assert "…" not in piped.stdout
    rows = [[c.strip() for c in line.split("│")[1:-1]] for line in piped.stdout.splitlines() if "│" in line]
    assert {"tpu-v5p", "h100"} <= {row[1] for row in rows}  # whole names, each row on one line
    assert max(len(line) for line in piped.stdout.splitlines()) > 80  # wider than the terminal would be


@pytest.mark.slow
def test_place_json_is_a_crossrail_object_and_bad_input_is_one_line(checkout: Path, experiments: Path) -> None:
    proc = run(checkout, "place", str(experiments / "eval-smoke.yaml"), "--json")
    obj = json.loads(proc.stdout)
    assert (obj["apiVersion"], obj["kind"]) == ("crossrail/v1", "Placement")
    assert {c["pool"] for c in obj["candidates"]} == {"tpu-v5p", "h100"}

    bad = run(checkout, "place", str(experiments / "eval-smoke.yaml"), "--set", "spec.resources.chips=64")
    assert bad.returncode == 1
    assert "Traceback" not in bad.stderr
    assert bad.stderr.strip()


@pytest.mark.slow
def test_queue_shows_the_planned_pool_and_estimated_start(checkout: Path, experiments: Path) -> None:
    sets = ["spec.stage=post_training", "spec.resources.chips=8", "spec.resources.duration=1h"]
    for _ in range(3):
        submitted = run(checkout, "submit", str(experiments / "eval-smoke.yaml"), *(f"--set={s}" for s in sets))
        assert submitted.returncode == 0, submitted.stderr

    out = run(checkout, "queue").stdout

    assert "est. start" in out
    rows = [[cell.strip() for cell in line.split("│")[1:-1]] for line in out.splitlines() if "eval-smoke-" in line]
    assert [(r[1], r[6], r[7]) for r in rows] == [
        ("eval-smoke-1", "h100", "now"),
        ("eval-smoke-2", "tpu-v5p", "now"),
        ("eval-smoke-3", "h100", "in 1h07m"),
    ]


@pytest.mark.slow
def test_a_run_waiting_for_its_queued_parent_says_so_in_queue_and_place(checkout: Path, experiments: Path) -> None:
    missing = run(checkout, "place", str(experiments / "posttrain-042.yaml"))
    assert missing.returncode == 1  # as submit refuses it, but where it would run is still answered
    assert "posttrain-042 (post_training, 8 chips" in missing.stdout
    assert "would start once its parent is submitted and ends" in missing.stdout
    assert "why: " in missing.stdout
    assert "crossrail: 1 problem in" in missing.stderr
    assert "spec.parent.run (line 19): no run or experiment named 'pretrain-small'" in missing.stderr
    as_json = json.loads(run(checkout, "place", str(experiments / "posttrain-042.yaml"), "--json").stdout)
    assert as_json["pool"] is not None
    assert [p["path"] for p in as_json["problems"]] == ["spec.parent.run"]

    for name in ("pretrain-small", "posttrain-042"):
        assert run(checkout, "submit", str(experiments / f"{name}.yaml")).returncode == 0

    queued = run(checkout, "queue").stdout
    row = next(line for line in queued.splitlines() if "posttrain-042-1" in line)
    assert "waiting for parent pretrain-small-1 (est. start now)" in row
    placed = run(checkout, "place", str(experiments / "posttrain-042.yaml")).stdout
    assert "would start after parent pretrain-small-1 ends (est. start now)" in placed
    assert "would start now" not in placed
