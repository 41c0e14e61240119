"""control.json: written whole, generations count up, every problem named."""

from __future__ import annotations

from pathlib import Path

import pytest

from crossrail.errors import CrossrailError
from crossrail.workloads.rl.control import Control, parse_control, read_control, write_control


def test_a_controller_resizes_by_writing_the_next_generation(tmp_path: Path) -> None:
    write_control(tmp_path, Control())
    grown = read_control(tmp_path).resized(reason="learner idle", written_by="backlog", samplers=3)
    write_control(tmp_path, grown)
    assert read_control(tmp_path) == Control(samplers=3, generation=1, reason="learner idle", written_by="backlog")
    assert [p.name for p in tmp_path.iterdir()] == ["control.json"]  # no file left aside


def test_a_stale_generation_is_refused_and_changes_nothing(tmp_path: Path) -> None:
    write_control(tmp_path, Control(generation=4))
    with pytest.raises(CrossrailError, match="generation 4 does not follow 4"):
        write_control(tmp_path, Control(samplers=5, generation=4))
    assert read_control(tmp_path).samplers == 1


def test_every_problem_is_named_at_once() -> None:
    with pytest.raises(CrossrailError) as caught:
        parse_control({"samplers": 0, "sampler": 2, "reward_workers": "two"})
    message = str(caught.value)
    assert "unknown key 'sampler'" in message
    assert "reward_workers must be a whole number" in message
    with pytest.raises(CrossrailError, match="samplers must be >= 1 \\(got 0\\)"):
        parse_control({"samplers": 0, "max_policy_lag_steps": 1})


def test_a_missing_control_file_says_who_writes_it(tmp_path: Path) -> None:
    with pytest.raises(CrossrailError, match="the pipeline writes it when it starts"):
        read_control(tmp_path)
