"""A selection (`compare --before`, `report --after`, `metrics --select`) with a misspelt key or value names the
close one instead of judging an empty side."""

from __future__ import annotations

import pytest

from crossrail.control.reports.facts import select_runs
from crossrail.errors import UsageError
from crossrail.metrics import fold_runs, parse_selection

from .stories import Story, tell


def runs() -> list:  # type: ignore[type-arg]
    stories = [Story("sft-1", team="alignment").wait(60).start("h100").succeed(), Story("pre-1", team="foundation")]
    return fold_runs(tell(*stories), now=1e10)


def test_a_value_no_run_has_but_one_is_spelt_like_is_refused_with_it() -> None:
    with pytest.raises(UsageError) as caught:
        select_runs("team=alignmnet,pool=h100", "--before", runs)

    assert "--before 'team=alignmnet,pool=h100'" in str(caught.value)
    assert "did you mean 'alignment'?" in str(caught.value)


def test_a_value_like_none_selects_nothing_as_before() -> None:
    assert select_runs("team=robotics", "--before", runs) == []
    assert [r.id for r in select_runs("team=alignment", "--before", runs)] == ["sft-1"]


def test_a_misspelt_key_names_the_close_one() -> None:
    with pytest.raises(UsageError, match="unknown key 'tema'; did you mean 'team'"):
        parse_selection("tema=alignment", "--after")
