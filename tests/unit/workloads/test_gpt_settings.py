"""Compilation and precision are switches of the workload config, which the command line overrides."""

from __future__ import annotations

from pathlib import Path

import pytest

from crossrail.errors import CrossrailError
from crossrail.runtime import RuntimeContext
from crossrail.workloads import gpt


def settings(tmp_path: Path, config: str, *args: str) -> gpt.GptSettings:
    path = tmp_path / "train.yaml"
    path.write_text(config)
    ctx = RuntimeContext("cpu", "gpt", "gpt-1", 1, "file:///c", "file:///d", str(tmp_path / "r"), path.as_uri())
    return gpt.settings(gpt.parse_args(list(args)), ctx)


def test_the_config_switches_compile_and_precision_and_the_command_line_wins(tmp_path: Path) -> None:
    plain = settings(tmp_path, "optim: {batch: 4}\n")
    assert (plain.compile, plain.dtype) == (False, "fp32")
    on = settings(tmp_path, "compile: true\nprecision: bf16\n")
    assert (on.compile, on.dtype) == (True, "bf16")
    off = settings(tmp_path, "compile: true\nprecision: bf16\n", "--no-compile", "--dtype", "fp32")
    assert (off.compile, off.dtype) == (False, "fp32")


def test_a_garbled_switch_is_named_with_what_it_takes(tmp_path: Path) -> None:
    with pytest.raises(CrossrailError) as err:
        settings(tmp_path, "compile: sometimes\nprecision: fp8\n")
    assert "precision: 'fp8' is not fp32 or bf16" in str(err.value)
    assert "compile: 'sometimes' is not true or false" in str(err.value)


@pytest.mark.slow
def test_gradient_accumulation_over_micro_batches_leaves_the_loss_curve_as_it_was(tmp_path: Path) -> None:
    from .builders import TINY_CONFIG, gpt_launcher, losses, run_in_process

    whole = gpt_launcher(tmp_path / "whole")
    assert run_in_process(whole, "--steps", "3", "--batch", "8", "--framework", "torch") == 0
    micro = gpt_launcher(tmp_path / "micro", config=TINY_CONFIG.replace("batch: 4}", "batch: 4, micro_batch: 3}"))
    assert run_in_process(micro, "--steps", "3", "--batch", "8", "--framework", "torch") == 0  # passes of 3, 3, 2

    want = losses(whole.records(1))
    assert losses(micro.records(1)) == pytest.approx(want, rel=1e-5)


def test_micro_batches_are_refused_for_jax_which_takes_its_rows_in_one_pass(tmp_path: Path) -> None:
    cfg = settings(tmp_path, "optim: {micro_batch: 2}\n", "--framework", "jax")
    with pytest.raises(CrossrailError, match=r"optim\.micro_batch .* is a PyTorch setting"):
        gpt.build_engine(cfg, cfg.model)


@pytest.mark.slow
def test_an_elastic_restart_before_any_checkpoint_reports_the_resize(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import json

    from .builders import gpt_launcher, of_type, run_in_process

    launcher = gpt_launcher(tmp_path / "run")
    launcher.spec = json.dumps({**json.loads(launcher.spec), "spec": {"parallelism": {"data": 2}}})
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", "1")  # a second round, of one worker where two were asked

    assert run_in_process(launcher, "--steps", "1", "--framework", "torch") == 0

    [resized] = of_type(launcher.records(1), "event", "resized")
    assert resized["data"] == {
        "degree_before": 2,
        "degree_after": 1,
        "reason": "the elastic launch restarted its workers",
        "part": None,
        "step": 0,
    }
