"""Team names: a team named for the first time (by a token, a fleet queue or an experiment) is a DNS-1123
label; a team the workspace already knows keeps working under its name, and renders for Kueue only with a
namespace of its own named in `team_namespaces`."""

from __future__ import annotations

from pathlib import Path

import pytest

from crossrail.client import Client
from crossrail.errors import SpecError, UsageError
from crossrail.executors.render.kueue import render_kueue
from crossrail.spec import load_fleet

NEW_TEAMS = ["Équipe", "team_a", "x" * 64, "ops\u200bteam", "-lead"]
LEGACY = "Legacy Team"


@pytest.fixture
def home(tmp_path: Path) -> Path:
    Client.init(tmp_path)
    return tmp_path / ".crossrail"


def with_queue_of(fleet_text: str, team: str) -> str:
    entry = f"    - {{name: legacy, stage: pretraining, teams: [{team!r}], quota: {{tpu-v5p: 8, h100: 4}}}}\n"
    return fleet_text.replace("  queues:\n", "  queues:\n" + entry, 1)


@pytest.mark.parametrize("team", NEW_TEAMS)
def test_team_names_accept_no_unicode_or_other_non_dns_label_when_new(home: Path, tmp_path: Path, team: str) -> None:
    experiment = home / "experiments" / "pretrain-small.yaml"
    with Client(home) as c:
        with pytest.raises(SpecError) as refused:
            c.submit(experiment, sets=[f"metadata.team={team}", "metadata.name=named"])
        assert [p.path for p in refused.value.problems] == ["metadata.team"]
        with pytest.raises(UsageError):
            c.token_create(team=team, role="submitter")
        fleet = tmp_path / "fleet-new-team.yaml"
        fleet.write_text(with_queue_of((home / "fleet.yaml").read_text(), team), encoding="utf-8")
        with pytest.raises(SpecError):
            c.fleet_apply(fleet)
        assert c.service.store.list_runs() == []
    assert team not in load_fleet(home / "fleet.yaml").spec.teams


def test_a_team_the_workspace_already_knows_keeps_working(home: Path) -> None:
    # A fleet written before the rule (by hand) names a team that is no DNS label.
    (home / "fleet.yaml").write_text(with_queue_of((home / "fleet.yaml").read_text(), LEGACY), encoding="utf-8")
    experiment = home / "experiments" / "pretrain-small.yaml"
    with Client(home) as c:
        assert c.fleet_apply(home / "fleet.yaml")["changes"] == []
        run = c.submit(experiment, sets=[f"metadata.team={LEGACY}", "metadata.name=legacy"])
        assert run["run"]["team"] == LEGACY


def test_fleet_render_needs_a_team_namespaces_entry_for_a_team_that_is_no_dns_label(home: Path) -> None:
    on_gke = (home / "fleet.yaml").read_text().replace("backend: local", "backend: kubernetes")
    legacy = with_queue_of(on_gke, LEGACY)
    (home / "fleet.yaml").write_text(legacy, encoding="utf-8")
    with pytest.raises(SpecError) as refused:
        render_kueue(load_fleet(home / "fleet.yaml"))
    assert [p.path for p in refused.value.problems] == ["spec.kubernetes.team_namespaces"]
    mapped = legacy.replace("team_namespaces: {", f"team_namespaces: {{{LEGACY!r}: legacy-team, ", 1)
    (home / "fleet.yaml").write_text(mapped, encoding="utf-8")
    namespaces = [
        o["metadata"]["name"] for o in render_kueue(load_fleet(home / "fleet.yaml")) if o["kind"] == "Namespace"
    ]
    assert "legacy-team" in namespaces
