"""RuntimeContext.from_env: what crossrail tells a training process, and every problem at once when it is wrong."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from crossrail.errors import CrossrailError
from crossrail.runtime import ContextError, RuntimeContext, read_text

RUN_UID = "01kdvdna00fxw8v58gracy6j4g"


def launched_env(**changes: str) -> dict[str, str]:
    env = {
        "TRAINING_BACKEND": "tpu",
        "EXPERIMENT_ID": "pretrain-small",
        "CROSSRAIL_RUN_ID": "pretrain-small-3",
        "CROSSRAIL_ATTEMPT": "2",
        "CROSSRAIL_RUN_UID": RUN_UID,
        "CROSSRAIL_CHECKPOINT_DIR": f"file:///ckpt/pretrain-small-3-{RUN_UID}",
        "CROSSRAIL_CONFIG": "",
        "CROSSRAIL_DATASET": "file:///data/corpus.txt",
        "CROSSRAIL_REPORT": "/run/report.jsonl",
        "CROSSRAIL_SPEC": json.dumps(
            {
                "apiVersion": "crossrail/v1",
                "spec": {"checkpoint": {"every": 120, "keep_last": 3}},
                "lineage": {
                    "dataset_version": "sha256:ab",
                    "code_commit": "abc1234",
                    "config_digest": "sha256:cd",
                    "spec_digest": "sha256:ef",
                    "parent_run": "pretrain-small-1",
                },
                "placement": {"pool": "v5e-west", "chip_type": "v5e", "accelerator": "tpu", "chips": 4},
                "parent_checkpoint": "file:///ckpt/pretrain-small-1/step-0000000200",
            }
        ),
    }
    return env | changes


def test_a_launched_process_reads_every_variable_and_the_spec() -> None:
    ctx = RuntimeContext.from_env(launched_env())
    assert (ctx.backend, ctx.experiment, ctx.run, ctx.attempt) == ("tpu", "pretrain-small", "pretrain-small-3", 2)
    assert ctx.config is None
    assert ctx.checkpoint_every_s == 120
    assert ctx.keep_last == 3
    assert ctx.heartbeat_s == 10.0
    assert ctx.parent_checkpoint == "file:///ckpt/pretrain-small-1/step-0000000200"
    assert ctx.placement["chips"] == 4


def test_checkpoint_lineage_names_the_attempt_its_code_data_and_hardware() -> None:
    lineage = RuntimeContext.from_env(launched_env()).checkpoint_lineage("numpy", parent="file:///p")
    assert lineage == {
        "run": "pretrain-small-3",
        "run_uid": RUN_UID,
        "experiment": "pretrain-small",
        "spec_digest": "sha256:ef",
        "attempt": 2,
        "parent": "file:///p",
        "dataset_version": "sha256:ab",
        "code_commit": "abc1234",
        "hardware": {"pool": "v5e-west", "chip_type": "v5e", "accelerator": "tpu"},
        "framework": "numpy",
    }


def test_a_duration_interval_and_a_null_one_are_both_understood() -> None:
    spec = {"spec": {"checkpoint": {"every": "2m"}}}
    assert RuntimeContext.from_env(launched_env(CROSSRAIL_SPEC=json.dumps(spec))).checkpoint_every_s == 120
    spec = {"spec": {"checkpoint": {"every": None}}, "parent_checkpoint": None}
    ctx = RuntimeContext.from_env(launched_env(CROSSRAIL_SPEC=json.dumps(spec)))
    assert ctx.checkpoint_every_s is None
    assert ctx.parent_checkpoint is None


def test_a_hand_launched_process_needs_no_spec() -> None:
    env = launched_env(CROSSRAIL_HEARTBEAT_S="0.5")
    del env["CROSSRAIL_SPEC"], env["CROSSRAIL_CONFIG"]
    ctx = RuntimeContext.from_env(env)
    assert (ctx.spec, ctx.checkpoint_every_s, ctx.keep_last, ctx.heartbeat_s) == ({}, None, None, 0.5)


def test_every_missing_or_garbled_variable_is_named_in_one_error() -> None:
    env = launched_env(TRAINING_BACKEND="cuda", CROSSRAIL_ATTEMPT="two", CROSSRAIL_SPEC="{not json")
    del env["CROSSRAIL_RUN_ID"], env["CROSSRAIL_REPORT"]
    with pytest.raises(ContextError) as caught:
        RuntimeContext.from_env(env)
    message = str(caught.value)
    assert "5 problems" in message
    for fragment in ("CROSSRAIL_RUN_ID: not set", "CROSSRAIL_REPORT: not set", "'cuda'", "'two'", "CROSSRAIL_SPEC"):
        assert fragment in message
    assert "launched by crossrail" in message
    assert caught.value.exit_code == 2


@pytest.mark.parametrize(
    ("spec", "fragment"),
    [
        pytest.param(
            {"spec": {"checkpoint": {"every": "soon"}}}, "spec.checkpoint.every", id="interval-not-a-duration"
        ),
        pytest.param({"spec": {"checkpoint": {"keep_last": 0}}}, "keep_last", id="keep-last-zero"),
        pytest.param([1, 2], "must be a JSON object", id="spec-not-an-object"),
    ],
)
def test_a_spec_the_runtime_cannot_use_is_refused_at_start(spec: object, fragment: str) -> None:
    with pytest.raises(ContextError, match=fragment):
        RuntimeContext.from_env(launched_env(CROSSRAIL_SPEC=json.dumps(spec)))


def test_read_text_reads_local_paths_file_uris_and_fsspec_uris(tmp_path: Path, memfs: Any) -> None:
    (tmp_path / "c yaml.yaml").write_text("optim: {lr: 0.1}\n")
    assert read_text(str(tmp_path / "c yaml.yaml")) == "optim: {lr: 0.1}\n"
    assert read_text((tmp_path / "c yaml.yaml").as_uri()) == "optim: {lr: 0.1}\n"  # %20 in the URI
    memfs.pipe_file("/cfg/c.json", b'{"a": 1}')
    assert read_text("memory://cfg/c.json") == '{"a": 1}'


def test_read_text_of_a_missing_file_names_it(tmp_path: Path, memfs: Any) -> None:
    with pytest.raises(CrossrailError, match=r"cannot read .*nope\.txt"):
        read_text(str(tmp_path / "nope.txt"))
    with pytest.raises(CrossrailError, match="cannot read memory://cfg/absent"):
        read_text("memory://cfg/absent")


def test_read_text_refuses_a_fifo_or_a_device_at_once(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "fifo")  # no writer: a plain open would wait for one forever
    for uri in (str(tmp_path / "fifo"), "/dev/zero"):
        with pytest.raises(CrossrailError, match="is not a regular file"):
            read_text(uri)


def test_read_text_of_a_bare_scheme_says_so_instead_of_a_backend_traceback() -> None:
    with pytest.raises(CrossrailError, match="cannot read s3://: it names no bucket or path"):
        read_text("s3://")
