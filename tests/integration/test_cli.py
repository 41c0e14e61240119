"""The real `crossrail` command, in subprocesses, as a user runs it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from crossrail.spec import ARTICLE_POLICY_YAML

CLI = [sys.executable, "-m", "crossrail.cli"]

BAD = """\
apiVersion: crossrail/v1
kind: Experiment
metadata: {name: posttrain-gpu-run, team: alignment, owner: ada@example.com}
spec:
  stage: post_training
  image: us-docker.pkg.dev/PROJECT/train/posttrain:latest
  command: [python, -m, trainer.run]
  code: {repo: https://github.com/acme/trainer, commit: auto}
  dataset: {uri: /data/sft/v3, version: v3}
  checkpoint: {dir: gs://MODEL_BUCKET/checkpoints/run-042}
  resources:
    chips: 8
    nvidia.com/gpu: 8
"""


def run(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("CROSSRAIL_HOME", "CROSSRAIL_STORE_URL")}
    return subprocess.run([*CLI, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=60, check=False)


def as_json(proc: subprocess.CompletedProcess[str]) -> dict[str, object]:
    assert proc.returncode == 0, proc.stderr
    obj = json.loads(proc.stdout)
    assert obj["apiVersion"] == "crossrail/v1"
    return obj  # type: ignore[no-any-return]


@pytest.mark.slow
def test_validate_accepts_the_first_articles_policy_as_written(checkout: Path) -> None:
    (checkout / "article.yaml").write_text(ARTICLE_POLICY_YAML)
    proc = run(checkout, "validate", "article.yaml")
    assert proc.returncode == 0, proc.stderr
    assert "valid" in proc.stdout


@pytest.mark.slow
def test_validate_names_each_portability_problem_with_its_line(checkout: Path) -> None:
    (checkout / "article.yaml").write_text(ARTICLE_POLICY_YAML)
    (checkout / "bad.yaml").write_text(BAD)
    proc = run(checkout, "validate", "--policy", "article.yaml", "bad.yaml")
    assert proc.returncode == 1
    err = proc.stderr
    assert "Traceback" not in err
    assert "spec.image (line 6)" in err
    assert "digest" in err
    assert "(line 13)" in err
    assert "nvidia.com/gpu" in err
    assert "spec.resources.chips" in err
    assert "spec.dataset.uri (line 9)" in err
    proc = run(checkout, "validate", "--policy", "article.yaml", "bad.yaml", "--json")
    assert proc.returncode == 1
    data = json.loads(proc.stdout)
    assert data["apiVersion"] == "crossrail/v1"
    assert data["valid"] is False
    lines = {p["line"] for p in data["problems"]}
    assert {6, 9, 13} <= lines


@pytest.mark.slow
def test_submit_twice_with_a_key_creates_one_run_and_show_gives_the_lineage(checkout: Path) -> None:
    exp = ".crossrail/experiments/eval-smoke.yaml"
    first = as_json(run(checkout, "submit", exp, "--idempotency-key", "k", "--set", "spec.resources.chips=2", "--json"))
    again = as_json(run(checkout, "submit", exp, "--idempotency-key", "k", "--set", "spec.resources.chips=2", "--json"))
    assert (first["created"], again["created"]) == (True, False)
    status = as_json(run(checkout, "status", "--json"))
    assert [r["id"] for r in status["active"]] == ["eval-smoke-1"]  # type: ignore[attr-defined]
    shown = as_json(run(checkout, "show", "eval-smoke", "--json"))
    lineage = shown["lineage"]
    for key in (
        "dataset_uri",
        "dataset_version",
        "code_repo",
        "code_commit",
        "config_uri",
        "config_digest",
        "image",
        "image_digest",
        "checkpoint_dir",
        "spec_digest",
    ):
        assert lineage[key], key  # type: ignore[index]
    assert shown["spec"]["spec"]["resources"]["chips"] == 2  # type: ignore[index]
    events = as_json(run(checkout, "events", "--run", "eval-smoke-1", "--json"))
    assert [e["type"] for e in events["events"]] == ["submitted", "queued"]  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        pytest.param(b"a: &a [*a, *a]\n" * 1, "", id="a-recursive-alias"),
        pytest.param(b"!!python/object/apply:os.system ['echo pwned']\n", "python", id="a-python-tag"),
        pytest.param(b"\xff\xfe\x00binary", "", id="binary-bytes"),
    ],
)
@pytest.mark.slow
def test_hostile_files_end_in_a_clear_error_and_exit_1(checkout: Path, content: bytes, needle: str) -> None:
    (checkout / "evil.yaml").write_bytes(content)
    proc = run(checkout, "submit", "evil.yaml")
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr
    assert "crossrail:" in proc.stderr
    assert needle in proc.stderr
    assert "pwned" not in proc.stdout
    assert as_json(run(checkout, "status", "--json"))["active"] == []


@pytest.mark.slow
def test_usage_errors_exit_2(checkout: Path) -> None:
    assert run(checkout, "submit").returncode == 2
    assert run(checkout, "status", "--no-such-flag").returncode == 2


@pytest.mark.slow
def test_a_terminal_run_refuses_state_changes_with_exit_1(checkout: Path) -> None:
    as_json(run(checkout, "submit", ".crossrail/experiments/eval-smoke.yaml", "--json"))
    assert as_json(run(checkout, "cancel", "eval-smoke", "--json"))["run"]["state"] == "cancelled"  # type: ignore[index]
    proc = run(checkout, "resume", "eval-smoke")
    assert proc.returncode == 1
    assert "eval-smoke-1 is cancelled" in proc.stderr


@pytest.mark.slow
def test_a_command_outside_any_workspace_says_how_to_create_one(tmp_path: Path) -> None:
    env_home = tmp_path / "home"
    env_home.mkdir()
    proc = subprocess.run(
        [*CLI, "status"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "HOME": str(env_home), "CROSSRAIL_HOME": ""},
        check=False,
    )
    assert proc.returncode == 1
    assert "crossrail init" in proc.stderr


@pytest.mark.slow
def test_submit_wait_runs_an_agent_here_and_logs_show_each_attempt(checkout: Path) -> None:
    args = "spec.args=[--steps, '20', --checkpoint-every-steps, '10', --step-sleep, '0.01']"
    shown = as_json(
        run(checkout, "submit", ".crossrail/experiments/pretrain-small.yaml", "--set", args, "--wait", "--json")
    )
    assert shown["kind"] == "Run"
    assert shown["run"]["state"] == "succeeded"  # type: ignore[index]
    (attempt,) = shown["attempts"]  # type: ignore[misc]
    assert (attempt["exit_code"], attempt["pool"]) == (0, "tpu-v5p")
    assert [c["step"] for c in shown["checkpoints"]] == [10, 20]  # type: ignore[attr-defined]
    logs = as_json(run(checkout, "logs", "pretrain-small", "--json"))
    assert logs["attempts"][0]["attempt"] == 1  # type: ignore[index]
    assert run(checkout, "logs", "pretrain-small", "--attempt", "7").returncode == 1


@pytest.mark.slow
def test_submit_wait_ends_with_one_summary_line_and_the_whole_run_only_with_json(checkout: Path) -> None:
    sets = ["--set", "spec.command=[python, -c, 'print(42)']", "--set", "spec.args=[]"]
    proc = run(checkout, "submit", ".crossrail/experiments/eval-smoke.yaml", *sets, "--wait")
    assert proc.returncode == 0, proc.stderr
    last = proc.stdout.strip().splitlines()[-1]
    assert last.startswith("eval-smoke-1 succeeded on ")
    assert last.endswith("; more: crossrail show eval-smoke-1")
    assert "lineage" not in proc.stdout  # the whole run is `show`'s, or --json's
    failing = ["--set", "spec.command=[python, -c, 'raise SystemExit(3)']", "--set", "spec.args=[]"]
    failing += ["--set", "spec.retries.max=0", "--wait"]
    failed = run(checkout, "submit", ".crossrail/experiments/eval-smoke.yaml", *failing)
    assert failed.returncode == 1
    assert failed.stdout.strip().splitlines()[-1].endswith("; more: crossrail logs eval-smoke-2")


@pytest.mark.slow
def test_agent_until_idle_runs_every_queued_run_and_exits(checkout: Path) -> None:
    for sets in ("spec.resources.chips=1", "spec.resources.chips=2"):
        as_json(
            run(
                checkout,
                "submit",
                ".crossrail/experiments/eval-smoke.yaml",
                "--set",
                sets,
                "--set",
                "spec.command=[python, -c, 'print(42)']",
                "--set",
                "spec.args=[]",
                "--json",
            )
        )
    proc = run(checkout, "agent", "--until-idle", "--poll", "0.1")
    assert proc.returncode == 0, proc.stderr
    status = as_json(run(checkout, "status", "--json"))
    assert status["active"] == []
    assert {r["stage"]: r["succeeded"] for r in status["stages"]} == {"eval": 2}  # type: ignore[attr-defined]


@pytest.mark.slow
def test_the_shipped_examples_are_valid_under_the_strict_article_policy() -> None:
    root = Path(__file__).resolve().parents[2]
    files = sorted(str(p) for p in (root / "examples").glob("*.yaml"))
    assert len(files) == 4  # the article's experiment, policy and fleet, and an RL pipeline with parts
    proc = subprocess.run(
        [*CLI, "validate", "--policy", str(root / "examples" / "policy.yaml"), *files, "--json"],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert json.loads(proc.stdout)["valid"] is True


@pytest.mark.slow
def test_validate_in_a_workspace_refuses_what_submit_refuses_each_with_line_field_and_fix(
    checkout: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "80")  # stderr is not a terminal: each problem stays on one line anyway
    exp = checkout / ".crossrail" / "experiments" / "posttrain-042.yaml"
    text = exp.read_text().replace("chips: 8, min_chips: 4, max_chips: 8", "chips: 64")
    (checkout / "bad.yaml").write_text(text.replace("data/sft.jsonl", "data/no-such.jsonl"))

    proc = run(checkout, "validate", "bad.yaml")

    assert proc.returncode == 1
    problems = [line.strip() for line in proc.stderr.splitlines()[1:]]
    assert len(problems) == 3, proc.stderr  # one line each, however long
    dataset, chips, parent = problems
    assert dataset.startswith("spec.dataset.uri (line 16): file://")
    assert "no-such.jsonl does not exist" in dataset
    assert chips.startswith("spec.resources.chips (line 18): no pool of fleet 'local' could ever hold")
    assert "tpu-v5p: needs 64 chips; the pool has 8; h100: needs 64 chips; the pool has 8" in chips
    assert chips.endswith("change spec.resources or spec.accelerators, or add a pool to the fleet")
    assert parent.startswith("spec.parent.run (line 19): no run or experiment named 'pretrain-small'; submit")
    offline = run(checkout, "validate", "--offline", "bad.yaml")
    assert offline.returncode == 0, offline.stderr

    submitted = run(checkout, "submit", "bad.yaml")
    assert submitted.returncode == 1
    assert [line.strip() for line in submitted.stderr.splitlines()[1:]] == problems


@pytest.mark.slow
def test_problems_of_a_set_argument_cite_the_argument_not_the_line_it_overrides(checkout: Path) -> None:
    proc = run(
        checkout, "submit", ".crossrail/experiments/eval-smoke.yaml", "--set", "spec.resources.chips=64", "--json"
    )
    assert proc.returncode == 1
    assert "spec.resources.chips (--set spec.resources.chips=64): no pool of fleet" in proc.stderr
    assert "(line " not in proc.stderr


@pytest.mark.slow
def test_a_tab_in_the_indentation_is_named_with_its_line_and_column(checkout: Path) -> None:
    (checkout / "tab.yaml").write_text("apiVersion: crossrail/v1\nkind: Experiment\nmetadata:\n\tname: x\n")
    proc = run(checkout, "validate", "tab.yaml")
    assert proc.returncode == 1
    assert "(document) (line 4): a tab character at line 4, column 1; YAML indents with spaces only" in proc.stderr
    assert "cannot start any token" not in proc.stderr


@pytest.mark.slow
def test_import_of_the_articles_job_needs_no_flags_and_validate_flags_its_dataset_placeholder(
    checkout: Path,
) -> None:
    job = Path(__file__).resolve().parents[1] / "fixtures" / "kubernetes" / "posttrain-gpu-run.yaml"
    imported = run(checkout, "import", str(job), "-o", "exp.yaml")
    assert imported.returncode == 0, imported.stderr
    assert "wrote exp.yaml" in imported.stderr

    checked = run(checkout, "validate", "--offline", "exp.yaml")
    assert checked.returncode == 1
    (dataset,) = [line.strip() for line in checked.stderr.splitlines() if "spec.dataset.uri" in line]
    assert dataset.startswith("spec.dataset.uri (line 21): is a placeholder, not a value (to fill in: the dataset URI")

    local = run(checkout, "import", str(job), "--dataset", "/data/sft", "-o", "local.yaml")
    assert "portability_requirements.local_uri_schemes: [file] in the placement policy" in local.stderr
