"""Data parallelism for the reference workloads: joining the workers of a run and splitting its global batch.

Every worker holds the whole model; each step every worker draws the same global batch (it is seeded by the
step, gpt_data.batch) and trains on its own rows of it, and the gradients are summed so that the update is the
one a single process would make on the whole batch: the loss curve does not depend on the degree. PyTorch
joins through torch.distributed (gloo on the CPU, nccl on GPUs) from the variables torchrun sets; JAX through
jax.distributed at CROSSRAIL_COORDINATOR, with gloo collectives on the CPU.
"""

from __future__ import annotations

import os
import signal
import sys

import numpy as np

from crossrail.errors import CrossrailError
from crossrail.runtime import RuntimeContext

PROG = "crossrail.workloads.gpt"
PR_SET_PDEATHSIG = 1  # prctl(2)


def rows(batch: int, rank: int, world: int) -> slice:
    """The rows of a global batch of `batch` that worker `rank` of `world` trains on: near-equal contiguous parts."""
    if batch < world:
        raise CrossrailError(
            f"{PROG}: a global batch of {batch} cannot be split among {world} workers; "
            f"raise optim.batch to at least {world} or lower spec.parallelism.data"
        )
    bounds = np.linspace(0, batch, world + 1).round().astype(int)
    return slice(int(bounds[rank]), int(bounds[rank + 1]))


def join(framework: str, ctx: RuntimeContext) -> None:
    """Join this process to the run's other workers; nothing to do for a single worker."""
    if ctx.world_size == 1:
        return
    _die_with_parent()
    if framework == "jax":
        _join_jax(ctx)
    else:
        _join_torch(ctx)


def _die_with_parent() -> None:
    """End this worker when the process that started it (its torchrun agent) ends: torchrun starts workers in
    sessions of their own, so an agent's death would otherwise leave its worker training unsupervised."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    parent = os.getppid()
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:  # the parent ended before the request was made
        os.kill(os.getpid(), signal.SIGKILL)


def _join_torch(ctx: RuntimeContext) -> None:
    import torch
    import torch.distributed as dist

    if dist.is_initialized():
        return
    if torch.cuda.is_available():
        torch.cuda.set_device(ctx.local_rank)
    # env:// reads MASTER_ADDR, MASTER_PORT, RANK and WORLD_SIZE, which torchrun sets.
    dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")


def _join_jax(ctx: RuntimeContext) -> None:
    import jax

    if ctx.coordinator is None:
        raise CrossrailError(
            f"{PROG}: worker {ctx.rank} of {ctx.world_size} runs JAX but CROSSRAIL_COORDINATOR is not set; "
            "launch data-parallel runs through crossrail (or set it to host:port of a free port on rank 0's host)"
        )
    # CPU collectives across processes; it touches only the CPU backend, so it is harmless beside a TPU or GPU.
    jax.config.update("jax_cpu_collectives_implementation", "gloo")  # type: ignore[no-untyped-call]
    jax.distributed.initialize(coordinator_address=ctx.coordinator, num_processes=ctx.world_size, process_id=ctx.rank)


def any_worker(framework: str, flag: bool) -> bool:
    """Whether `flag` is true on any worker of the group; every worker must ask, at the same step."""
    if framework == "jax":
        from jax.experimental import multihost_utils

        return bool(np.asarray(multihost_utils.process_allgather(np.array([flag]))).any())
    import torch
    import torch.distributed as dist

    device = torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else None
    value = torch.tensor([int(flag)], device=device)
    dist.all_reduce(value, op=dist.ReduceOp.MAX)
    return bool(value.item())


def leave(framework: str) -> None:
    """Leave the group cleanly at the end of a run (torch warns about a group never destroyed)."""
    if framework == "torch":
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()
