"""A misspelt team is named back with the close one, wherever a team is typed: `usage --team`, `audit --team`,
`runs --team` refuse it (not an empty answer), and submit warns of an experiment's misspelt `metadata.team`."""

from __future__ import annotations

from pathlib import Path

import pytest

from crossrail.client import Client
from crossrail.errors import NotFoundError


def test_a_misspelt_team_is_refused_with_the_close_one(client: Client) -> None:
    asks = {
        "alignment": lambda: client.usage(team="alignmnet"),
        "evals": lambda: client.audit(team="evalz"),
        "foundation": lambda: client.runs(team="foundatoin"),
    }
    for close, ask in asks.items():
        with pytest.raises(NotFoundError) as caught:
            ask()
        assert f"did you mean {close!r}?" in str(caught.value)


def test_a_team_only_the_store_knows_is_answered(client: Client, experiments: Path) -> None:
    client.submit(experiments / "eval-smoke.yaml", sets=["metadata.team=red-team"])

    assert client.runs(team="red-team")["runs"][0]["team"] == "red-team"
    assert client.usage(team="alignment")["rows"] == []  # a team the fleet names, with no usage yet
    with pytest.raises(NotFoundError, match="did you mean 'red-team'"):
        client.usage(team="red-taem")


def test_submit_warns_of_a_misspelt_team_and_a_new_one_passes_quietly(client: Client, experiments: Path) -> None:
    misspelt = client.submit(experiments / "eval-smoke.yaml", sets=["metadata.team=evalz"])
    new = client.submit(experiments / "eval-smoke.yaml", sets=["metadata.team=robotics"])

    assert [w for w in misspelt["warnings"] if "did you mean 'evals'?" in w]
    assert not [w for w in new["warnings"] if "team" in w]
