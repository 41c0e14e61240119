"""The neutral tensor convention the framework adapters share: optimizer-moment names and the name/shape check.

Weights are stored under their neutral names (docs/formats/checkpoint.md, "Neutral tensor names"); the AdamW
first and second moments of weight `<name>` under `optim.m.<name>` and `optim.v.<name>`, in the weight's layout.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import numpy.typing as npt

from crossrail.runtime.manifest import CheckpointError

FIRST_MOMENT = "optim.m."
SECOND_MOMENT = "optim.v."
OPTIMIZER_PREFIX = "optim."

Arrays = dict[str, npt.NDArray[Any]]
Shapes = Mapping[str, tuple[int, ...]]


def weights(tensors: Mapping[str, npt.NDArray[Any]]) -> Arrays:
    """The model weights of a neutral tensor dict: every tensor not under `optim.`."""
    return {name: a for name, a in tensors.items() if not name.startswith(OPTIMIZER_PREFIX)}


def moments(tensors: Mapping[str, npt.NDArray[Any]]) -> tuple[Arrays, Arrays]:
    """The first and second AdamW moments, keyed by the weight they belong to."""
    first = {n[len(FIRST_MOMENT) :]: a for n, a in tensors.items() if n.startswith(FIRST_MOMENT)}
    second = {n[len(SECOND_MOMENT) :]: a for n, a in tensors.items() if n.startswith(SECOND_MOMENT)}
    return first, second


def with_moments(params: Mapping[str, npt.NDArray[Any]], first: Arrays, second: Arrays) -> Arrays:
    """Weights and their moments as one neutral tensor dict."""
    out = dict(params)
    out |= {FIRST_MOMENT + n: a for n, a in first.items()}
    out |= {SECOND_MOMENT + n: a for n, a in second.items()}
    return out


def check(expected: Shapes, tensors: Mapping[str, npt.NDArray[Any]], what: str) -> None:
    """Raise CheckpointError listing every missing, unexpected or misshapen tensor of `what`."""
    problems = [f"missing {n} {list(s)}" for n, s in expected.items() if n not in tensors]
    problems += [f"unexpected {n}" for n in tensors if n not in expected]
    problems += [
        f"{n} has shape {list(np.shape(a))}, expected {list(expected[n])}"
        for n, a in tensors.items()
        if n in expected and tuple(np.shape(a)) != tuple(expected[n])
    ]
    if problems:
        listed = "; ".join(problems[:8]) + (f"; and {len(problems) - 8} more" if len(problems) > 8 else "")
        raise CheckpointError(
            f"{what} does not match the model: {listed}. "
            "Neutral names and layouts are in docs/formats/checkpoint.md; point at a checkpoint of this model"
        )
