"""`crossrail readiness`: the article's four checks on real workspaces and on a simulated fleet's runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from crossrail.cli import app
from crossrail.client import Client
from crossrail.control.reports.readiness import MIN_RUNS, audit, metrics_check, queues_check
from crossrail.core import ManualClock
from crossrail.metrics import RunFacts, fold_runs
from crossrail.spec import Fleet, default_policy, load_fleet
from crossrail.spec.validate import ARTICLE_POLICY_YAML

from .test_report_figures import FLEET, simulated_events

PORTABLE = [
    "spec.dataset={uri: oss://team-bucket/corpus.txt, version: v3}",
    "spec.config=oss://team-bucket/configs/v3/pretrain-small.yaml",
    "spec.checkpoint.dir=oss://team-bucket/checkpoints/pretrain-small",
]


def submit(checkout: Path, clock: ManualClock, *sets: str) -> str:
    client = Client(cwd=checkout, clock=clock)
    try:
        client.service.reach_timeout_s = 1.0  # oss:// has no filesystem here: recorded as given, without a wait
        run = client.submit(checkout / ".crossrail" / "experiments" / "pretrain-small.yaml", sets=list(sets))
        return str(run["run"]["id"])
    finally:
        client.close()


def readiness(checkout: Path, *args: str) -> tuple[int, dict[str, dict[str, object]], float]:
    result = CliRunner().invoke(app, ["readiness", "--home", str(checkout / ".crossrail"), "--json", *args])
    body = json.loads(result.output)
    return result.exit_code, {c["key"]: c for c in body["checks"]}, body["score"]


def test_a_workspace_with_an_unpinned_image_and_a_local_dataset_path_is_flagged_with_the_fixes(
    checkout: Path, clock: ManualClock
) -> None:
    policy = checkout / ".crossrail" / "policy.yaml"
    relaxed = policy.read_text().replace("container_image: pinned-by-digest", "container_image: any")
    policy.write_text(relaxed.replace("dataset_uri_scheme: object-storage", "dataset_uri_scheme: any"))
    corpus = checkout / ".crossrail" / "data" / "corpus.txt"
    run = submit(checkout, clock, "spec.image=trainer:latest", f"spec.dataset={{uri: {corpus}}}")

    code, checks, score = readiness(checkout, "--min-score", "60")

    portable = checks["portable"]
    assert code == 1
    assert score < 60
    assert portable["status"] == "fail"
    assert f"image not pinned by digest: {run}" in portable["evidence"]
    assert f"data on a path only one environment reaches: {run}" in portable["evidence"]
    fixes = "\n".join(portable["fixes"])  # type: ignore[arg-type]
    assert "trainer@sha256:<64 hex>" in fixes
    assert "object storage (gs://, s3://)" in fixes
    assert "the policy relaxes container_image, dataset_uri_scheme, local_uri_schemes (file)" in fixes


def test_a_portable_workspace_passes_the_data_image_and_metadata_check(checkout: Path, clock: ManualClock) -> None:
    (checkout / ".crossrail" / "policy.yaml").write_text(ARTICLE_POLICY_YAML)
    submit(checkout, clock, *PORTABLE)

    code, checks, _ = readiness(checkout, "--min-score", "10")

    assert code == 0
    assert checks["portable"]["status"] == "pass"
    assert checks["portable"]["fixes"] == []
    assert checks["configs"]["evidence"][:3] == [
        "1 of 1 runs record a versioned config (its digest, or a version in its URI)",
        "1 of 1 runs record their code commit",
        "1 of 1 runs write checkpoints in a versioned format",
    ]
    assert checks["configs"]["fixes"] == ["run the experiments once, so their checkpoints show they can resume"]


@pytest.fixture(scope="module")
def simulated(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[RunFacts], Fleet]:
    tmp = tmp_path_factory.mktemp("readiness")
    events = simulated_events(tmp)
    (tmp / "fleet.yaml").write_text(FLEET)
    return fold_runs(events, now=max(e.ts for e in events)), load_fleet(tmp / "fleet.yaml")


def test_queues_of_every_stage_the_policy_names_are_checked_for_isolation_and_measured_waits(
    simulated: tuple[list[RunFacts], Fleet],
) -> None:
    runs, fleet = simulated

    check = queues_check(runs, fleet, default_policy())

    pretraining = next(line for line in check.evidence if line.startswith("pretraining:"))
    assert pretraining.startswith("pretraining: own queue; 20 waits measured, p50 ")
    assert "post_training: no queue of its own; no wait measured yet" in check.evidence
    assert "add a queue with stage: post_training to the fleet, with its own quota" in check.fixes
    assert check.status == "partial"


def test_metrics_are_enough_when_a_stage_has_its_cycles_on_two_accelerators_but_throughput_is_missing(
    simulated: tuple[list[RunFacts], Fleet],
) -> None:
    runs, fleet = simulated

    check = metrics_check(runs, fleet)

    assert check.evidence[:2] == [
        "eval: 10 research cycles measured, on gpu, tpu",
        "pretraining: 20 research cycles measured, on gpu, tpu",
    ]
    assert (
        "0 of 30 succeeded runs report throughput (tokens or samples per second, or steps per hour)" in check.evidence
    )
    assert check.score == pytest.approx(0.75)  # MIN_RUNS met, both accelerators, priced pools; no throughput
    assert MIN_RUNS <= 20


def test_the_audit_of_an_empty_store_says_what_to_do_first(checkout: Path, clock: ManualClock) -> None:
    client = Client(cwd=checkout, clock=clock)
    try:
        result = audit(client.service.store, client.fleet, client.policy, clock.now())
    finally:
        client.close()

    assert [c.status for c in result.checks][:2] == ["fail", "fail"]
    assert result.checks[0].evidence == ["no run in the store yet"]
    assert result.score < 50


def test_metrics_pass_with_ten_cycles_on_both_accelerators_reporting_throughput_on_priced_pools(
    simulated: tuple[list[RunFacts], Fleet],
) -> None:
    from tests.unit.metrics.stories import Story, tell

    _, fleet = simulated
    stories = []
    for i in range(MIN_RUNS):
        run = Story(f"pre-{i}", stage="pretraining", chips=4).wait(30).start("tpu-a" if i % 2 else "h100")
        stories.append(run.wait(600).metric("tokens_per_second", 900.0 + i).wait(600).succeed())
    runs = fold_runs(tell(*stories), [x for s in stories for x in s.samples], now=max(s.now for s in stories))

    check = metrics_check(runs, fleet)

    assert check.status == "pass", check.fixes
    assert check.evidence[0] == f"pretraining: {MIN_RUNS} research cycles measured, on gpu, tpu"
    assert check.fixes == []
