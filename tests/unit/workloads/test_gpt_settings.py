"""Compilation and precision are switches of the workload config, which the command line overrides."""

from __future__ import annotations

from pathlib import Path

import pytest

from crossrail.errors import CrossrailError
from crossrail.runtime import RuntimeContext
from crossrail.workloads import gpt


def settings(tmp_path: Path, config: str, *args: str) -> gpt.Settings:
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
