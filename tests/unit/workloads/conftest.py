"""Fixtures for the workload tests."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from .builders import Launcher, write_corpus


@pytest.fixture
def launcher(tmp_path: Path) -> Launcher:
    return Launcher(tmp_path)


@pytest.fixture(scope="module")
def text(tmp_path_factory: pytest.TempPathFactory) -> np.ndarray:
    """The small deterministic corpus as bytes, what the GPT trains on."""
    path = write_corpus(tmp_path_factory.mktemp("corpus") / "corpus.txt")
    return np.frombuffer(path.read_bytes(), np.uint8)


@pytest.fixture(scope="session", autouse=True)
def jax_compilation_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """One XLA compilation cache for the session, and less LLVM optimisation, so the JAX tests compile fast.

    XLA takes seconds to compile even the tiny test model on a CPU. With the cache each program compiles once
    and not once per process; LLVM's -O0 halves each compile for slower steps, a good trade for a few hundred
    tiny steps. Neither changes what is computed: XLA's CPU backend does not use fast-math at any level.
    """
    path = str(tmp_path_factory.mktemp("jax-cache"))
    flags = " ".join(filter(None, [os.environ.get("XLA_FLAGS"), "--xla_backend_optimization_level=0"]))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("XLA_FLAGS", flags)
        mp.setenv("JAX_COMPILATION_CACHE_DIR", path)
        mp.setenv("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
        if "jax" in sys.modules:
            jax = sys.modules["jax"]
            jax.config.update("jax_compilation_cache_dir", path)
            jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
        yield
