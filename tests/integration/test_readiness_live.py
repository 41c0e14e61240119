"""`crossrail readiness` on a genuinely ready workspace: real bigram runs through the agent, an image pinned by
digest, a versioned dataset, config and checkpoints on object storage (the GCS emulator), a queue per stage."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from crossrail.cli import app
from crossrail.client import Client
from crossrail.spec.validate import ARTICLE_POLICY_YAML

from .test_agent import SHORT, drive

pytestmark = pytest.mark.slow

# A stage needs this many research cycles before a verdict means much (readiness.MIN_RUNS): half on each kind.
POST_TRAINING = 10


@pytest.fixture
def client(checkout: Path, gcs_bucket: tuple[str, dict[str, Any]]) -> Iterator[Client]:
    """The real clock: the agent compares it with the times its supervisors and the runtime take."""
    (checkout / ".crossrail" / "policy.yaml").write_text(ARTICLE_POLICY_YAML)  # no local paths allowed
    with Client(cwd=checkout) as c:
        yield c


def test_a_ready_workspace_passes_all_four_checks(
    client: Client, checkout: Path, gcs_bucket: tuple[str, dict[str, Any]]
) -> None:
    import gcsfs

    bucket, options = gcs_bucket
    fs = gcsfs.GCSFileSystem(**options)
    fs.pipe(f"{bucket}/corpus/v3/corpus.txt", (checkout / ".crossrail" / "data" / "corpus.txt").read_bytes())
    fs.pipe(f"{bucket}/configs/v3/bigram.yaml", b"optim: {lr: 0.01, batch: 16}\nseed: 0\n")
    shared = [
        *SHORT,
        f"spec.dataset={{uri: {bucket}/corpus/v3/corpus.txt, version: v3}}",
        f"spec.config={bucket}/configs/v3/bigram.yaml",
        f"spec.checkpoint.dir={bucket}/checkpoints",
    ]
    experiment = client.workspace.root / "experiments" / "pretrain-small.yaml"
    plan = [("post_training", "tpu" if i % 2 else "gpu") for i in range(POST_TRAINING)]
    plan += [("pretraining", "tpu"), ("reinforcement_learning", "gpu")]  # every stage the policy names
    ids = [
        client.submit(experiment, sets=[*shared, f"spec.stage={stage}", f"spec.accelerators.allow=[{kind}]"])["run"][
            "id"
        ]
        for stage, kind in plan
    ]
    store = client.service.store
    drive(client, lambda: all(store.get_run(r).state in ("succeeded", "failed") for r in ids), timeout_s=300)
    assert [store.get_run(r).state for r in ids] == ["succeeded"] * len(ids)
    assert all(c.uri.startswith(f"{bucket}/checkpoints/") for r in ids for c in store.checkpoints(r))

    result = CliRunner().invoke(
        app, ["readiness", "--home", str(checkout / ".crossrail"), "--json", "--min-score", "100"]
    )

    body = json.loads(result.output)
    checks = {c["key"]: c for c in body["checks"]}
    assert {k: (c["status"], c["fixes"]) for k, c in checks.items()} == {
        "configs": ("pass", []),
        "portable": ("pass", []),
        "queues": ("pass", []),
        "metrics": ("pass", []),
    }, json.dumps(checks, indent=1)
    assert (result.exit_code, body["score"], body["runs"]) == (0, 100.0, len(ids))
    assert (
        f"{len(ids)} of {len(ids)} training runs that ran committed a checkpoint a retry can resume from"
        in (checks["configs"]["evidence"])
    )
    assert f"post_training: {POST_TRAINING} research cycles measured, on gpu, tpu" in checks["metrics"]["evidence"]
