"""`crossrail ckpt ls|show|verify`: tables or JSON, exit 0 when all is well, 1 for a bad checkpoint, 2 for usage."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from crossrail.cli.ckpt import ckpt_app
from crossrail.runtime import Checkpointer

from .ckpt_builders import DAMAGE, delete_manifest, flip_a_data_byte, rewrite_manifest, saved, step_dir, tensors_of

runner = CliRunner()


def run(*args: str) -> tuple[int, str]:
    result = runner.invoke(ckpt_app, list(args))
    return result.exit_code, result.output


def run_json(*args: str) -> tuple[int, dict[str, Any]]:
    code, out = run(*args, "--json")
    return code, json.loads(out)


def test_ls_lists_each_checkpoint_with_step_size_and_whether_it_verifies(tmp_path: Path) -> None:
    saved(tmp_path, 10, 20)
    code, out = run("ls", str(tmp_path))
    assert code == 0
    assert "10" in out
    assert "20" in out
    assert out.count("yes") == 2
    code, listing = run_json("ls", str(tmp_path))
    assert code == 0
    assert (listing["apiVersion"], listing["kind"]) == ("crossrail/v1", "CheckpointList")
    assert [i["step"] for i in listing["items"]] == [10, 20]
    assert [i["verified"] for i in listing["items"]] == [True, True]
    sizes = [sum(f.stat().st_size for f in step_dir(tmp_path, s).iterdir()) for s in (10, 20)]
    assert [i["sizeBytes"] for i in listing["items"]] == sizes


def test_ls_marks_a_damaged_checkpoint_and_exits_1(tmp_path: Path) -> None:
    saved(tmp_path, 10, 20)
    flip_a_data_byte(tmp_path, 20)
    code, listing = run_json("ls", str(tmp_path))
    assert code == 1
    assert [i["verified"] for i in listing["items"]] == [True, False]
    assert "checksum mismatch in model.safetensors" in listing["items"][1]["problem"]
    code, listing = run_json("ls", "--no-verify", str(tmp_path))
    assert code == 0
    assert [i["verified"] for i in listing["items"]] == [None, None]


def test_show_prints_the_manifest(tmp_path: Path) -> None:
    saved(tmp_path, 10, 20)
    code, out = run("show", str(step_dir(tmp_path, 10)))
    assert code == 0
    assert "embed.weight" in out
    assert "xxh3-64:" in out
    assert "position" in out
    code, shown = run_json("show", str(tmp_path))  # a run's directory: its newest checkpoint
    assert code == 0
    assert (shown["kind"], shown["uri"]) == ("CheckpointManifest", step_dir(tmp_path, 20).as_uri())
    assert shown["manifest"]["step"] == 20
    assert shown["manifest"]["tokens"] == 20 * 64


def test_verify_names_the_bad_tensor_and_file_and_exits_1(tmp_path: Path) -> None:
    saved(tmp_path, 10, 20)
    assert run("verify", str(tmp_path)) == (0, f"ok      step 20 {step_dir(tmp_path, 20).as_uri()}\n")
    flip_a_data_byte(tmp_path, 10)
    assert run("verify", str(tmp_path))[0] == 0  # the newest is fine
    code, out = run("verify", str(step_dir(tmp_path, 10)))
    assert code == 1
    assert "tensor half: checksum mismatch in model.safetensors" in out
    code, report = run_json("verify", "--all", str(tmp_path))
    assert code == 1
    assert report["kind"] == "CheckpointVerification"
    assert report["ok"] is False
    assert [(r["step"], r["ok"]) for r in report["results"]] == [(10, False), (20, True)]


def test_verify_refuses_a_newer_major_format_with_exit_1(tmp_path: Path) -> None:
    saved(tmp_path, 10)
    rewrite_manifest(tmp_path, 10, lambda m: m | {"format": "crossrail-ckpt/v2"})
    code, out = run("verify", str(step_dir(tmp_path, 10)))
    assert code == 1
    assert "newer than this reader" in out


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        pytest.param(["verify"], 2, "Missing argument", id="no-uri"),
        pytest.param(["ls", "--bogus", "x"], 2, "No such option", id="unknown-option"),
        pytest.param(["ls", "-o", "novalue", "x"], 2, "is not KEY=VALUE", id="bad-storage-option"),
        pytest.param(["ls", "nosuchscheme://b/run"], 2, "fsspec cannot open it", id="unknown-scheme"),
        pytest.param(["verify", "{tmp}/run/step-0000000007"], 1, "no committed checkpoint", id="missing-step"),
        pytest.param(["show", "{tmp}/empty"], 1, "no committed checkpoint", id="no-checkpoints"),
    ],
)
def test_usage_errors_exit_2_and_missing_checkpoints_exit_1(
    tmp_path: Path, args: list[str], code: int, message: str
) -> None:
    (tmp_path / "empty").mkdir()
    saved(tmp_path / "run", 1)
    got, out = run(*[a.format(tmp=tmp_path) for a in args])
    assert got == code
    assert message in out


@pytest.mark.slow
def test_ckpt_app_runs_as_a_program(tmp_path: Path) -> None:
    saved(tmp_path, 3)
    program = "from crossrail.cli.ckpt import ckpt_app; ckpt_app()"
    done = subprocess.run(
        [sys.executable, "-c", program, "ls", "--json", str(tmp_path)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    assert [i["step"] for i in json.loads(done.stdout)["items"]] == [3]
    flip_a_data_byte(tmp_path, 3)
    done = subprocess.run([sys.executable, "-c", program, "ls", str(tmp_path)], capture_output=True, check=False)
    assert done.returncode == 1


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_verify_of_a_run_directory_names_its_damaged_newest_step_and_never_an_older_one(
    tmp_path: Path, damage: str
) -> None:
    saved(tmp_path, 10, 20, 30, 40, 50)
    DAMAGE[damage](tmp_path, 50)
    code, out = run("verify", str(tmp_path))
    assert code == 1
    assert out.startswith(f"FAILED  step 50 {step_dir(tmp_path, 50).as_uri()}: ")
    assert "step 40" not in out
    code, listing = run_json("ls", str(tmp_path))
    assert code == 1
    assert [(i["step"], i["verified"]) for i in listing["items"]] == [
        (10, True),
        (20, True),
        (30, True),
        (40, True),
        (50, False),
    ]


def test_a_lost_manifest_is_damaged_even_without_checksums_and_verify_all_names_each_damaged_step(
    tmp_path: Path,
) -> None:
    saved(tmp_path, 10, 20, 30, 40, 50)
    delete_manifest(tmp_path, 50)
    code, listing = run_json("ls", "--no-verify", str(tmp_path))
    assert code == 1
    assert "no manifest.json" in listing["items"][-1]["problem"]
    DAMAGE["truncated-tensor"](tmp_path, 40)
    DAMAGE["flipped-byte"](tmp_path, 30)
    code, out = run("verify", "--all", str(tmp_path))
    assert code == 1
    failed = [line.split()[2] for line in out.splitlines() if line.startswith("FAILED")]
    assert failed == ["30", "40", "50"]
    assert out.count("ok      step") == 2


@pytest.mark.slow
def test_ls_show_and_verify_take_a_run_of_the_workspace(checkout: Path) -> None:
    from crossrail.client import Client

    home = str(checkout / ".crossrail")
    with Client(home) as client:
        run_id = client.submit(checkout / ".crossrail" / "experiments" / "pretrain-small.yaml")["run"]["id"]
        run_dir = Path(client.service.get(run_id).run_checkpoint_dir.removeprefix("file://"))
    saved(run_dir, 10, 20)
    for ref in (run_id, "pretrain-small"):
        code, listing = run_json("ls", "--home", home, ref)
        assert code == 0
        assert [i["step"] for i in listing["items"]] == [10, 20]
    assert run("verify", "--home", home, run_id)[0] == 0
    assert run_json("show", "--home", home, run_id)[1]["manifest"]["step"] == 20
    code, out = run("ls", "--home", home, "no-such-run")
    assert code == 1
    assert "no-such-run is neither a checkpoint directory nor a run of the workspace" in out


def test_on_object_storage_a_marker_whose_manifest_is_gone_is_listed_and_verified_as_damaged(memfs: Any) -> None:
    root = "memory://ckpt/run-1"
    ckpt = Checkpointer(root)
    for step in (10, 20):
        ckpt.save(tensors_of(step), step)
    memfs.rm("/ckpt/run-1/step-0000000020/manifest.json")
    code, listing = run_json("ls", root)
    assert code == 1
    assert [(i["step"], i["verified"]) for i in listing["items"]] == [(10, True), (20, False)]
    assert "no manifest.json" in listing["items"][1]["problem"]
    code, out = run("verify", root)
    assert code == 1
    assert out.startswith(f"FAILED  step 20 {root}/step-0000000020: no manifest.json")
    code, report = run_json("verify", "--all", root)
    assert (code, [(r["step"], r["ok"]) for r in report["results"]]) == (1, [(10, True), (20, False)])
