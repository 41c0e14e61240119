"""`crossrail compare` refuses confounded sides with exit status 1, and judges them with --allow-confounds."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from crossrail.cli import app
from crossrail.metrics import AttemptFacts, RunFacts


def records(path: Path, work: str, cycles: tuple[float, ...]) -> str:
    runs = []
    for i, cycle in enumerate(cycles):
        attempt = AttemptFacts(1, "h100", 0.0, chips=1, cost_per_chip_hour=3.0, queue_s=0.0, ended_ts=cycle)
        run = RunFacts(f"{path.stem}-{i}", now=cycle, submitted_ts=0.0, ended_ts=cycle, outcome="succeeded",
                       attempts=[attempt], work=work)  # fmt: skip
        runs.append(run.as_dict())
    path.write_text(json.dumps({"records": runs}))
    return f"sim:{path}"


def test_compare_refuses_other_work_and_judges_it_when_allowed(tmp_path: Path) -> None:
    before = records(tmp_path / "before.json", "sha256:" + "a" * 64, (3600, 3700, 3800))
    after = records(tmp_path / "after.json", "sha256:" + "b" * 64, (1800, 1850, 1900))
    args = ["compare", "--before", before, "--after", after, "--home", str(tmp_path / "none"), "--resamples", "200"]

    refused = CliRunner().invoke(app, [*args, "--json"])
    allowed = CliRunner().invoke(app, [*args, "--allow-confounds"])
    bad = CliRunner().invoke(app, [*args, "--cost", "idle"])

    assert refused.exit_code == 1, refused.output
    body = json.loads(refused.stdout)
    assert body["refused"] is True
    assert [c["what"] for c in body["confounds"]] == ["experiment digest"]
    assert allowed.exit_code == 0, allowed.output
    assert "research cycle shorter by 50%" in " ".join(allowed.output.split())
    assert "confounded: the sides differ in experiment digest" in " ".join(allowed.output.split())
    assert "--cost must be one of allocated, fleet (got 'idle')" in bad.output
