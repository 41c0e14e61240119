"""One invocation of the RL command: a process that runs stages only (a Ray stage actor) needs its --part."""

from __future__ import annotations

import subprocess
import sys
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


def test_a_reward_worker_starts_without_importing_torch() -> None:
    """A reward worker runs only the verifier: torch's import (seconds of CPU) is left to the stages that use it,
    so each reward process a pipeline or a controller starts comes up that much sooner."""
    code = (
        "import sys\n"
        "from crossrail.workloads.rl.stages import run_reward\n"
        "assert 'torch' not in sys.modules, sorted(m for m in sys.modules if m.startswith('torch'))[:5]\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
