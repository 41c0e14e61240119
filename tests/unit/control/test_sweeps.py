"""A sweep's grid, its points, its random draw, its id and its ranking (crossrail.control.ops.sweeps)."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from crossrail.control.ops import sweeps
from crossrail.control.ops.sweeps import Point, parse_grid, points, ranked, sweep_id
from crossrail.errors import UsageError

GRID = ["spec.args.7=0.003,0.01,0.03", "spec.resources.chips=1,2"]


def test_grid_values_are_read_as_yaml_scalars_and_keep_the_text_they_were_written_as() -> None:
    (axis,) = parse_grid(["spec.x=1, 2.5,true,low,'3'"])
    assert axis.key == "spec.x"
    assert axis.values == (1, 2.5, True, "low", "3")
    assert [type(v) for v in axis.values] == [int, float, bool, str, str]
    assert axis.texts == ("1", "2.5", "true", "low", "'3'")


@pytest.mark.parametrize(
    ("grid", "said"),
    [
        pytest.param(["spec.resources.chips"], "expected KEY=V1,V2", id="no equals sign"),
        pytest.param(["spec.resources.chips="], "expected KEY=V1,V2", id="no values"),
        pytest.param(["=1,2"], "expected KEY=V1,V2", id="no key"),
        pytest.param(["spec..chips=1,2"], "empty part", id="an empty part of the key"),
        pytest.param(["spec.resources.chips=1,,2"], "not a scalar", id="an empty value between commas"),
        pytest.param(["spec.resources.chips=1,2,1"], "given twice", id="a value twice"),
        pytest.param(["spec.x={a: 1}"], "not a scalar", id="a mapping"),
        pytest.param(["spec.x=[1"], "not valid YAML", id="broken YAML"),
        pytest.param(["spec.x=1,2", "spec.x=3"], "gridded twice", id="a key twice"),
        pytest.param([], "at least one --grid", id="no grid at all"),
    ],
)
def test_a_malformed_grid_is_refused_saying_which_argument_and_how(grid: list[str], said: str) -> None:
    with pytest.raises(UsageError, match=said):
        parse_grid(grid)


def test_every_problem_of_the_grid_is_said_at_once() -> None:
    with pytest.raises(UsageError) as caught:
        parse_grid(["spec.a", "spec.b=1,1"])
    assert "--grid 'spec.a'" in str(caught.value)
    assert "--grid 'spec.b=1,1'" in str(caught.value)


def test_the_points_are_every_combination_the_first_grid_varying_slowest() -> None:
    pts = points(parse_grid(GRID))
    assert [p.index for p in pts] == list(range(6))
    assert [tuple(p.params.values()) for p in pts] == list(itertools.product((0.003, 0.01, 0.03), (1, 2)))
    assert pts[3].sets(parse_grid(GRID)) == ["spec.args.7=0.01", "spec.resources.chips=2"]


def test_a_random_draw_with_a_seed_picks_the_same_points_every_time() -> None:
    axes = parse_grid(GRID)
    first, again = points(axes, sample=4, seed=1), points(axes, sample=4, seed=1)
    assert first == again
    assert len({p.index for p in first}) == 4
    whole = {p.index: p for p in points(axes)}
    assert all(whole[p.index] == p for p in first)  # the drawn points are the grid's own
    others = {tuple(p.index for p in points(axes, sample=4, seed=s)) for s in range(2, 10)}
    assert len(others) > 1  # other seeds draw other points


@pytest.mark.parametrize("sample", [0, 7])
def test_a_draw_outside_the_grid_is_refused(sample: int) -> None:
    with pytest.raises(UsageError, match="the grid has 6 points"):
        points(parse_grid(GRID), sample=sample)


def test_a_grid_too_large_to_submit_whole_asks_for_a_draw_and_a_draw_finds_its_points() -> None:
    axes = parse_grid([f"spec.k{i}={','.join(str(v) for v in range(10))}" for i in range(4)])  # 10,000 points
    with pytest.raises(UsageError, match="--random N"):
        points(axes)
    drawn = points(axes, sample=5, seed=3)
    for p in drawn:  # the index-th point of the product, in its order
        assert tuple(p.params.values()) == tuple(int(d) for d in f"{p.index:04d}")


def test_the_sweep_id_is_the_digest_of_the_file_the_sets_the_grid_and_the_draw() -> None:
    axes = parse_grid(GRID)
    base = sweep_id("kind: Experiment\n", ["spec.priority=low"], axes, None, 0)
    assert base == sweep_id("kind: Experiment\n", ["spec.priority=low"], parse_grid(GRID), None, 0)
    assert base.startswith("sw-")
    assert sweep_id("kind: Experiment\n", ["spec.priority=low"], axes, None, 9) == base  # no draw: no seed
    others = {
        sweep_id("kind: Experiment \n", ["spec.priority=low"], axes, None, 0),
        sweep_id("kind: Experiment\n", [], axes, None, 0),
        sweep_id("kind: Experiment\n", ["spec.priority=low"], parse_grid(["spec.resources.chips=1,2"]), None, 0),
        sweep_id("kind: Experiment\n", ["spec.priority=low"], axes, 4, 1),
        sweep_id("kind: Experiment\n", ["spec.priority=low"], axes, 4, 2),
    }
    assert base not in others
    assert len(others) == 5


def test_a_member_is_labelled_with_its_sweep_and_point_and_keyed_by_the_points_index() -> None:
    from crossrail.spec.loader import Document

    doc = Document("exp.yaml", {"metadata": {"name": "a", "labels": {"mine": "yes"}}}, {})
    point = Point(4, (("spec.resources.chips", 2), ("spec.args.7", 0.01)))
    out = sweeps.labelled(doc, "sw-abc", point)
    assert out.data["metadata"]["labels"]["mine"] == "yes"
    assert sweeps.point_of(out.data) == {"spec.resources.chips": 2, "spec.args.7": 0.01}
    assert out.data["metadata"]["labels"][sweeps.SWEEP_LABEL] == "sw-abc"
    assert "labels" not in doc.data["metadata"] or sweeps.SWEEP_LABEL not in doc.data["metadata"]["labels"]
    assert sweeps.member_key("sw-abc", point) == "sweep:sw-abc:4"


def test_a_value_is_read_from_a_recorded_experiment_by_its_path() -> None:
    spec = {"spec": {"resources": {"chips": 4}, "args": ["--lr", "0.1"]}}
    assert sweeps.value_at(spec, "spec.resources.chips") == 4
    assert sweeps.value_at(spec, "spec.args.1") == "0.1"
    assert sweeps.value_at(spec, "spec.args.5") is None
    assert sweeps.value_at(spec, "spec.nothing.here") is None


def _member(point: int, metric: float | None) -> dict[str, Any]:
    return {"run": f"r-{point}", "point": point, "metric": metric}


def test_ranking_puts_the_best_first_by_the_metrics_direction_and_runs_without_one_last() -> None:
    members = [_member(0, 3.0), _member(1, None), _member(2, 1.0), _member(3, 2.0)]
    lower = ranked(members, "lower")
    assert [(m["run"], m["rank"]) for m in lower] == [("r-2", 1), ("r-3", 2), ("r-0", 3), ("r-1", None)]
    higher = ranked(members, "higher")
    assert [m["run"] for m in higher] == ["r-0", "r-3", "r-2", "r-1"]
