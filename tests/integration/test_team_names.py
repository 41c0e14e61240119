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


def test_a_batch_reads_the_stores_teams_once_and_still_warns_of_each_misspelling(
    client: Client, experiments: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from crossrail.spec import parse_document

    client.submit(experiments / "eval-smoke.yaml", sets=["metadata.team=red-team"])
    store = client.service.store
    reads: list[int] = []
    team_names = store.team_names
    monkeypatch.setattr(store, "team_names", lambda: reads.append(1) or team_names())
    text = (experiments / "eval-smoke.yaml").read_text()
    docs = [
        parse_document(text.replace("name: eval-smoke", f"name: batch-{i}") + f"\n# {i}\n", f"batch-{i}.yaml")
        for i in range(3)
    ]
    for doc, team in zip(docs, ["red-taem", "evalz", "robotics"], strict=True):
        doc.data["metadata"]["team"] = team

    results = client.submit_documents(docs)["results"]

    assert len(reads) == 1
    assert [w for w in results[0]["warnings"] if "did you mean 'red-team'?" in w]
    assert [w for w in results[1]["warnings"] if "did you mean 'evals'?" in w]
    assert not [w for w in results[2]["warnings"] if "team" in w]
    client.submit(experiments / "eval-smoke.yaml", sets=["metadata.team=red-teem"])
    assert len(reads) == 2  # the next call reads them afresh
