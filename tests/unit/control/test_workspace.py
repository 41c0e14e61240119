"""Which workspace a command uses, and what `init` writes."""

from __future__ import annotations

from pathlib import Path

import pytest

from crossrail.control.ops import workspace
from crossrail.errors import WorkspaceError


def test_home_argument_wins_over_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CROSSRAIL_HOME", str(tmp_path / "env"))
    assert workspace.find(tmp_path / "arg").root == tmp_path / "arg"
    assert workspace.find(None).root == tmp_path / "env"


def test_the_nearest_dot_crossrail_above_the_directory_is_used(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CROSSRAIL_HOME", raising=False)
    (tmp_path / ".crossrail").mkdir()
    deep = tmp_path / "a" / "b"
    deep.mkdir(parents=True)
    assert workspace.find(None, deep).root == tmp_path / ".crossrail"


def test_without_any_the_home_directory_workspace_is_used(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CROSSRAIL_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    lonely = tmp_path / "x"
    lonely.mkdir()
    assert workspace.find(None, lonely).root == tmp_path / "home" / ".crossrail"


def test_init_writes_a_workspace_and_refuses_to_overwrite_it(tmp_path: Path) -> None:
    ws, files = workspace.init(tmp_path, "workloads: {}\n")
    assert ws.check() is ws
    assert {p.name for p in files} >= {"fleet.yaml", "policy.yaml", "pretrain-small.yaml", "corpus.txt"}
    assert "local_uri_schemes: [file]" in ws.policy_path.read_text()
    assert str(ws.root) in (ws.experiments_dir / "pretrain-small.yaml").read_text()
    before = ws.fleet_path.read_text()
    ws.fleet_path.write_text(before + "# edited\n")
    with pytest.raises(WorkspaceError, match="--force"):
        workspace.init(tmp_path, "workloads: {}\n")
    assert ws.fleet_path.read_text().endswith("# edited\n")
    workspace.init(tmp_path, "workloads: {}\n", force=True)
    assert ws.fleet_path.read_text() == before


def test_a_missing_workspace_says_how_to_create_one(tmp_path: Path) -> None:
    with pytest.raises(WorkspaceError, match="crossrail init"):
        workspace.Workspace(tmp_path / ".crossrail").check()
