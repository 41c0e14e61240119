"""JAX parameter pytrees and optax AdamW state <-> neutral numpy tensors (docs/formats/checkpoint.md).

A leaf's neutral name is its pytree path joined with dots: `params["blocks"][0]["attn"]["qkv"]["weight"]` is
`blocks.0.attn.qkv.weight`. JAX models keep matmul weights as [in, out] (`y = x @ W`), the neutral layout, so
nothing is transposed. jax and optax are imported inside the functions, so importing this module loads neither.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import numpy.typing as npt

from crossrail.runtime.manifest import CheckpointError
from crossrail.runtime.neutral import Arrays, check, moments, weights, with_moments

PyTree = Any


def _key_name(key: Any) -> str:
    import jax

    if isinstance(key, jax.tree_util.DictKey):
        return str(key.key)
    if isinstance(key, jax.tree_util.SequenceKey):
        return str(key.idx)
    if isinstance(key, jax.tree_util.GetAttrKey):
        return str(key.name)
    raise CheckpointError(f"cannot name the pytree key {key!r}; use dicts, lists or named tuples")


def leaf_names(tree: PyTree) -> list[str]:
    """The neutral name of every leaf of `tree`, in its flattening order."""
    import jax

    paths, _ = jax.tree_util.tree_flatten_with_path(tree)
    return [".".join(_key_name(k) for k in path) for path, _ in paths]


def params_to_neutral(params: PyTree) -> Arrays:
    """The pytree's leaves as fp32 numpy arrays under their neutral names."""
    import jax

    leaves = jax.tree_util.tree_leaves(params)
    return {
        name: np.ascontiguousarray(np.asarray(jax.device_get(leaf), np.float32))
        for name, leaf in zip(leaf_names(params), leaves, strict=True)
    }


def params_from_neutral(like: PyTree, tensors: Mapping[str, npt.NDArray[Any]]) -> PyTree:
    """A pytree shaped like `like` holding the neutral weights; CheckpointError when names or shapes differ."""
    return _named(like, weights(tensors), "the checkpoint's weights")


def adamw_to_neutral(opt_state: PyTree) -> tuple[Arrays, int]:
    """`optim.m.<name>`, `optim.v.<name>` from an optax adam/adamw state, and its step count."""
    import optax

    mu, nu = optax.tree_utils.tree_get(opt_state, "mu"), optax.tree_utils.tree_get(opt_state, "nu")
    count = optax.tree_utils.tree_get(opt_state, "count")
    if mu is None or nu is None or count is None:
        raise CheckpointError("the optimizer state holds no adam moments; build it with optax.adam or optax.adamw")
    return with_moments({}, params_to_neutral(mu), params_to_neutral(nu)), int(count)


def adamw_from_neutral(opt_state: PyTree, tensors: Mapping[str, npt.NDArray[Any]], step: int) -> PyTree:
    """`opt_state` with its adam moments and step count replaced by the checkpoint's."""
    import jax.numpy as jnp
    import optax

    if step < 0:
        raise CheckpointError(f"an optimizer step count must be >= 0 (got {step})")
    first, second = moments(tensors)
    like = optax.tree_utils.tree_get(opt_state, "mu")
    count = optax.tree_utils.tree_get(opt_state, "count")
    if like is None or count is None:
        raise CheckpointError("the optimizer state holds no adam moments; build it with optax.adam or optax.adamw")
    mu = _named(like, first, "the checkpoint's first moments (optim.m.*)")
    nu = _named(like, second, "the checkpoint's second moments (optim.v.*)")
    return optax.tree_utils.tree_set(opt_state, mu=mu, nu=nu, count=jnp.asarray(step, dtype=count.dtype))


def _named(like: PyTree, tensors: Arrays, what: str) -> PyTree:
    import jax
    import jax.numpy as jnp

    names = leaf_names(like)
    leaves, treedef = jax.tree_util.tree_flatten(like)
    check({n: tuple(leaf.shape) for n, leaf in zip(names, leaves, strict=True)}, tensors, what)
    new = [jnp.asarray(tensors[n], dtype=leaf.dtype) for n, leaf in zip(names, leaves, strict=True)]
    return jax.tree_util.tree_unflatten(treedef, new)
