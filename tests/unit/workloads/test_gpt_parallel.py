"""Data-parallel GPT: the same global batch gives the same loss curve whatever the degree and the framework,
and a checkpoint written at one degree resumes at another, in the other framework.

Workers are started as torchrun would start them (RANK, WORLD_SIZE, MASTER_ADDR/PORT; CROSSRAIL_COORDINATOR for
JAX), without its agents, to keep the test cheap; test_elastic.py runs the real elastic launch. Losses agree to
TOLERANCE: every degree computes the same sums, only in another order (and JAX's kernels are not torch's).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
from pathlib import Path

import numpy as np
import pytest

from crossrail.runtime import RuntimeContext, data_position, read_manifest
from crossrail.workloads import gpt
from crossrail.workloads.gpt_model import GPTConfig, init_tensors

from .builders import Launcher, gpt_launcher, losses, of_type, run_in_process

pytest.importorskip("torch")
pytest.importorskip("jax")

pytestmark = pytest.mark.slow

K = 4  # steps each degree trains
BATCH = 8  # the global batch: 8, 4, 2 rows a worker at degrees 1, 2, 4
TOLERANCE = 1e-4  # relative, on each step's loss


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def start_workers(launcher: Launcher, workers: int, *args: str, devices: int = 1) -> list[subprocess.Popen[str]]:
    """`workers` processes of one data-parallel run, as torchrun would start them, rank 0 first."""
    master, coordinator = free_port(), free_port()
    procs = []
    for rank in range(workers):
        env = launcher.env(1) | {
            "RANK": str(rank),
            "WORLD_SIZE": str(workers),
            "LOCAL_RANK": "0",
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(master),
            "CROSSRAIL_COORDINATOR": f"127.0.0.1:{coordinator}",
        }
        if devices > 1:
            flags = [os.environ.get("XLA_FLAGS", ""), f"--xla_force_host_platform_device_count={devices}"]
            env["XLA_FLAGS"] = " ".join(filter(None, flags))
        command = launcher.command("--batch", str(BATCH), *args)
        procs.append(subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    return procs


def finish(procs: list[subprocess.Popen[str]]) -> None:
    for proc in procs:
        out, _ = proc.communicate(timeout=300)
        assert proc.returncode == 0, out[-3000:]


def launch_workers(launcher: Launcher, workers: int, *args: str, devices: int = 1) -> None:
    finish(start_workers(launcher, workers, *args, devices=devices))


def curve(launcher: Launcher, steps: int | None = None) -> list[float]:
    """The run's loss at each step, the first `steps` of them when given."""
    found = losses(launcher.records(1))
    return [found[s] for s in sorted(found)][:steps]


def assert_same_curve(got: list[float], want: list[float]) -> None:
    assert len(got) == len(want)
    assert got == pytest.approx(want, rel=TOLERANCE)


@pytest.fixture(scope="module")
def torch_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[int, Launcher]:
    """The tiny GPT trained K steps in PyTorch at degrees 2 and 4, and 2K at degree 1 (in this process): its
    steps after K are what an uninterrupted run does after the checkpoint the resume tests start from."""
    runs = {degree: gpt_launcher(tmp_path_factory.mktemp(f"torch{degree}")) for degree in (1, 2, 4)}
    args = ("--steps", str(K), "--framework", "torch")
    started = [start_workers(runs[degree], degree, *args) for degree in (2, 4)]  # side by side: they mostly wait
    assert run_in_process(runs[1], "--steps", str(2 * K), "--framework", "torch", "--batch", str(BATCH)) == 0
    for procs in started:
        finish(procs)
    return runs


def test_pytorch_gives_the_same_loss_at_degrees_1_2_and_4(torch_runs: dict[int, Launcher]) -> None:
    one = curve(torch_runs[1], K)
    assert len(one) == K
    assert one[-1] < one[0]
    for degree in (2, 4):
        assert_same_curve(curve(torch_runs[degree]), one)


def test_only_rank_0_reports_and_checkpoints_with_the_global_sample_cursor(torch_runs: dict[int, Launcher]) -> None:
    launcher = torch_runs[4]
    records = launcher.records(1)
    assert [r["step"] for r in of_type(records, "checkpoint")] == [K]  # one writer, not four
    assert len(of_type(records, "event", "started")) == 1
    manifest = read_manifest(of_type(records, "checkpoint")[0]["uri"])
    assert data_position(manifest) == (K * BATCH, 4)


def test_jax_gives_the_same_loss_at_degree_1_and_over_two_processes_of_two_devices(
    torch_runs: dict[int, Launcher], tmp_path: Path
) -> None:
    one = gpt_launcher(tmp_path / "jax1")
    assert run_in_process(one, "--steps", str(K), "--batch", str(BATCH), "--framework", "jax") == 0
    four = gpt_launcher(tmp_path / "jax4")
    launch_workers(four, 2, "--steps", str(K), "--framework", "jax", devices=2)

    assert_same_curve(curve(one), curve(torch_runs[1], K))
    assert_same_curve(curve(four), curve(one))
    started = of_type(four.records(1), "event", "started")
    assert [e["data"]["degree"] for e in started] == [4]  # four devices, two in each process


def test_a_pytorch_checkpoint_of_degree_4_resumes_in_jax_at_degree_2_and_loss_keeps_falling(
    torch_runs: dict[int, Launcher],
) -> None:
    resumed = torch_runs[4]

    launch_workers(resumed, 2, "--steps", str(2 * K), "--framework", "jax")

    records = resumed.records(1)
    after = {s: v for s, v in losses(records).items() if s > K}
    assert sorted(after) == list(range(K + 1, 2 * K + 1))
    want = curve(torch_runs[1])[K:]  # the degree-1 run carried on to 2K steps without a stop
    assert_same_curve([after[s] for s in sorted(after)], want)
    assert after[2 * K] < losses(records)[K]
    [resized] = of_type(records, "event", "resized")
    assert resized["data"] == {
        "degree_before": 4,
        "degree_after": 2,
        "reason": "resumed at another degree",
        "part": None,
        "step": K,
    }
    newest = of_type(records, "checkpoint")[-1]
    manifest = read_manifest(newest["uri"])
    assert manifest["lineage"]["framework"] == "jax"
    assert data_position(manifest) == (2 * K * BATCH, 2)
    assert json.loads(json.dumps(manifest["state"]["data"]))["batch"] == BATCH


@pytest.mark.filterwarnings("ignore:.*torch.jit.script_method.*:DeprecationWarning")  # inside torch.compile
def test_compiled_pytorch_smoke_gives_the_same_loss(tmp_path: Path) -> None:
    """The one torch.compile test: the config's compile switch compiles the model and leaves the numbers alone.

    It compiles the loss of the tiniest GPT (one layer, a forward pass): inductor's cold compile of a whole
    training step costs about 25 s of CPU, and CI always starts cold."""
    model = GPTConfig(n_layer=1, n_head=1, d_model=8, context=8, vocab=256)
    engines = []
    for compiled in (False, True):
        config = tmp_path / f"compile-{compiled}.yaml"
        config.write_text(f"compile: {str(compiled).lower()}\n")
        ctx = RuntimeContext("cpu", "gpt", "gpt-1", 1, "file:///c", "file:///d", str(tmp_path / "r"), config.as_uri())
        engine = gpt.build_engine(gpt.settings(gpt.parse_args(["--framework", "torch"]), ctx), model)
        engine.load(init_tensors(model, 0), None)
        engines.append(engine)
    plain, compiled_engine = engines
    windows = np.random.default_rng(0).integers(0, model.vocab, (2, model.context + 1))
    x, y = windows[:, :-1], windows[:, 1:]

    assert (plain.compile, compiled_engine.compile) == (False, True)
    assert compiled_engine.loss(x, y) == pytest.approx(plain.loss(x, y), rel=TOLERANCE)
