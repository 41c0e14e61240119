"""One invocation of the RL command: a process that runs stages only (a Ray stage actor) needs its --part."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.unit.workloads.rl.builders import rendezvous, rl_launcher

from crossrail.workloads.rl import launch


def test_a_stage_process_without_a_part_is_refused_before_anything_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    launcher = rl_launcher(tmp_path)
    for name, value in launcher.env(1).items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("CROSSRAIL_PART", raising=False)

    assert launch.main(launcher.defaults, pipeline=None) == launch.EXIT_BAD_INPUT

    assert "--part is needed here" in capsys.readouterr().err
    assert not rendezvous(launcher).exists()


def test_the_command_hands_a_run_without_a_part_to_its_pipeline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    launcher = rl_launcher(tmp_path)
    for name, value in launcher.env(1).items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("CROSSRAIL_PART", raising=False)
    started: list[str] = []

    def pipeline(args: object, settings: object, rdv: launch.Rendezvous, reporter: object) -> int:
        started.append(str(rdv.root))
        return 0

    assert launch.main(launcher.defaults, pipeline=pipeline) == 0
    assert started == [str(rendezvous(launcher))]
