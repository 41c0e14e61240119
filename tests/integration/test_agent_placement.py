"""The agent places pending runs by the estimates, records why, and re-places one when its pool drains."""

from __future__ import annotations

from pathlib import Path

from tests.integration.test_agent import FAST

from crossrail.client import Client

POST_TRAINING = ["spec.stage=post_training", "spec.resources.chips=8", "spec.resources.duration=1h"]


def placements(client: Client, run: str) -> list[tuple[str, str, str | None]]:
    return [(p["type"], p["pool"], p["from"]) for p in client.show(run)["placements"]]


def test_the_agent_records_each_placement_and_re_places_a_waiting_run_when_its_pool_drains(
    checkout: Path, experiments: Path
) -> None:
    with Client(cwd=checkout) as client:
        for pool in ("tpu-v5p", "h100"):  # every chip held for another team: the runs wait, nothing launches
            client.reserve(pool, chips=8, start="now", duration="1h", team="another-team")
        first, second = (
            client.submit(experiments / "eval-smoke.yaml", sets=POST_TRAINING)["run"]["id"] for _ in range(2)
        )
        agent = client.agent(FAST)
        for _ in range(3):
            agent.reconcile()

        assert placements(client, first) == [("planned", "h100", None)]
        assert placements(client, second) == [("planned", "tpu-v5p", None)]  # h100's queue would double its wait
        assert client.show(second)["placements"][0]["reason"].startswith("left preferred gpu")

        client.drain("tpu-v5p")
        for _ in range(3):
            agent.reconcile()

        assert placements(client, second) == [("planned", "tpu-v5p", None), ("replaced", "h100", "tpu-v5p")]
        moved = client.show(second)["placements"][-1]
        assert moved["reason"].startswith("re-placed from tpu-v5p (drained: takes no new work)")
        assert {c["pool"]: c["note"] for c in moved["candidates"]}["tpu-v5p"] == "drained: takes no new work"
        assert placements(client, first) == [("planned", "h100", None)]  # nothing better for it: no event
        assert [client.service.store.get_run(r).state for r in (first, second)] == ["queued", "queued"]
        queue = client.queue()["queues"][1]["pending"]
        assert [(p["id"], p["planned_pool"]) for p in queue] == [(first, "h100"), (second, "h100")]
