"""`crossrail demo --quick`, read from the run that built the shared demo workspace (tests/api/conftest.py):
the demo trains, kills and retries elsewhere, places, simulates and judges, and says so."""

from __future__ import annotations

from pathlib import Path

from tests.api.conftest import DEMO_OUTPUT


def test_the_quick_demo_trains_kills_retries_elsewhere_and_reports(demo_workspace: Path) -> None:
    out = (demo_workspace / DEMO_OUTPUT).read_text()
    assert "killed the training process of pretrain-small-1 attempt 1 on tpu-v5p" in out
    assert "attempt 2 ran on h100 and resumed from step" in out
    assert "research-cycle metrics by stage × pool" in out
    assert str(demo_workspace / ".crossrail") in out
    assert "placement of posttrain-042 (post_training, 8 chips, objective time_to_result): h100" in out
    assert "why: gpu preferred by the post_training placement policy" in out
    assert "min_jct_hetero lowers average JCT by" in out  # the fleet simulation on Gavel's trace
    # The verdicts: pooling all the workspace's runs is refused (they measured different work); one experiment
    # run 3 times on each pool gives a live verdict; the simulated fleet with h100 grown gives another.
    own = out.split("this workspace's runs")[1].split("simulated")[0]
    assert "refused: the sides did not measure the same work (experiment digest differs" in own
    assert "live: cycle-ab run 3 times on tpu-v5p (before) and 3 on h100 (after): research cycle" in own
    assert "policy check (" in own
    assert "h100 grown from 20 to 26 chips (150 runs each): research cycle shorter by" in out
