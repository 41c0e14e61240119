"""What the runtime knows of a data-parallel worker: its rank from torchrun's variables, that only rank 0
reports, and the global sample cursor a checkpoint keeps (read from old manifests too)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from crossrail.runtime import ContextError, Reporter, RuntimeContext, data_position, read_new

from .test_context import launched_env


def test_one_process_is_rank_0_of_1() -> None:
    ctx = RuntimeContext.from_env(launched_env())
    assert (ctx.rank, ctx.world_size, ctx.local_rank, ctx.restart_count, ctx.coordinator) == (0, 1, 0, 0, None)
    assert ctx.is_primary


def test_torchrun_variables_make_a_worker() -> None:
    env = launched_env(
        RANK="2", WORLD_SIZE="4", LOCAL_RANK="0", TORCHELASTIC_RESTART_COUNT="1", CROSSRAIL_COORDINATOR="127.0.0.1:9"
    )
    ctx = RuntimeContext.from_env(env)
    assert (ctx.rank, ctx.world_size, ctx.restart_count, ctx.coordinator) == (2, 4, 1, "127.0.0.1:9")
    assert not ctx.is_primary


def test_a_rank_outside_the_world_is_refused_with_every_problem() -> None:
    with pytest.raises(ContextError) as err:
        RuntimeContext.from_env(launched_env(RANK="4", WORLD_SIZE="4", LOCAL_RANK="x"))
    assert err.value.problems == ["LOCAL_RANK: 'x' is not a whole number", "RANK: must be < WORLD_SIZE (4) (got 4)"]


def test_only_rank_0_writes_reports(tmp_path: Path) -> None:
    report = tmp_path / "report.jsonl"
    for rank in ("0", "1"):
        ctx = RuntimeContext.from_env(launched_env(RANK=rank, WORLD_SIZE="2", CROSSRAIL_REPORT=str(report)))
        with Reporter(ctx) as reporter:
            reporter.event("hello", rank=rank)
    assert [r["data"]["rank"] for r in read_new(str(report), None)[0]] == ["0"]


def manifest(data: Any) -> dict[str, Any]:
    return {"step": 12, "state": {"data": data}}


@pytest.mark.parametrize(
    ("data", "position"),
    [
        pytest.param({"position": 12, "samples": 96, "batch": 8, "degree": 4}, (96, 4), id="cursor-and-degree"),
        pytest.param({"position": 12, "batch": 8}, (96, 1), id="before-the-cursor-position-times-batch"),
        pytest.param({"position": 12}, (None, 1), id="a-position-without-a-batch"),
        pytest.param(None, (None, 1), id="no-data-position"),
        pytest.param({"samples": True, "degree": 0}, (None, 1), id="garbled"),
    ],
)
def test_the_data_position_of_a_checkpoint(data: Any, position: tuple[int | None, int]) -> None:
    assert data_position(manifest(data)) == position


def test_a_host_of_a_multi_slice_tpu_jobset_knows_its_rank_from_its_slice_and_host() -> None:
    env = launched_env(
        MEGASCALE_SLICE_ID="1", CROSSRAIL_HOSTS_PER_SLICE="4", CROSSRAIL_HOST_INDEX="2", CROSSRAIL_SLICES="2"
    )
    ctx = RuntimeContext.from_env(env)
    assert (ctx.rank, ctx.world_size) == (6, 8)  # slice 1 x 4 hosts + host 2, of 2 x 4
    assert not ctx.is_primary
    first = RuntimeContext.from_env({**env, "MEGASCALE_SLICE_ID": "0", "CROSSRAIL_HOST_INDEX": "0"})
    assert (first.rank, first.is_primary) == (0, True)
