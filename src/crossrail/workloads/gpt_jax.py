"""The reference GPT in JAX, and its engine: jitted optax AdamW steps, fp32 or bf16 compute over fp32 params.

Parameters are a pytree whose paths are the neutral names (`params["blocks"][0]["attn"]["qkv"]["weight"]`) in
the neutral [in, out] layout, so crossrail.runtime.jax_adapter moves them without transposing. In fp32 every
matmul runs at HIGHEST precision, so a TPU or GPU computes in true fp32 rather than bf16 or TF32 passes.
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import numpy.typing as npt
import optax

from crossrail.runtime.jax_adapter import adamw_from_neutral, adamw_to_neutral, params_from_neutral, params_to_neutral
from crossrail.workloads.gpt_model import LN_EPS, AdamW, Arrays, GPTConfig, Logits, Tokens, shapes

PEAK_SIZE_CPU, PEAK_SIZE_ACCELERATOR = 1024, 4096
PyTree = Any
Step = Callable[[PyTree, PyTree, jax.Array, jax.Array], tuple[PyTree, PyTree, jax.Array]]


def nest(flat: Mapping[str, Any]) -> PyTree:
    """Dotted names to nested dicts, with a list wherever every key is an index: `blocks.0.x` -> blocks[0]["x"]."""
    tree: dict[str, Any] = {}
    for name, value in flat.items():
        *parents, leaf = name.split(".")
        node = tree
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return _lists(tree)


def _lists(node: Any) -> Any:
    if not isinstance(node, dict):
        return node
    if node and all(k.isdigit() for k in node):
        return [_lists(node[str(i)]) for i in range(len(node))]
    return {k: _lists(v) for k, v in node.items()}


def _precision(dtype: str) -> jax.lax.Precision:
    return jax.lax.Precision.HIGHEST if dtype == "fp32" else jax.lax.Precision.DEFAULT


def _compute_dtype(dtype: str) -> np.dtype[Any]:
    compute: np.dtype[Any] = np.dtype(jnp.bfloat16 if dtype == "bf16" else jnp.float32)
    return compute


def _layer_norm(x: jax.Array, p: PyTree) -> jax.Array:
    x32 = x.astype(jnp.float32)
    mean = x32.mean(-1, keepdims=True)
    var = ((x32 - mean) ** 2).mean(-1, keepdims=True)
    weight, bias = p["weight"].astype(jnp.float32), p["bias"].astype(jnp.float32)
    y: jax.Array = (x32 - mean) * jax.lax.rsqrt(var + LN_EPS) * weight + bias
    return y.astype(x.dtype)


def _linear(x: jax.Array, p: PyTree, precision: jax.lax.Precision) -> jax.Array:
    y = jnp.einsum("...i,io->...o", x, p["weight"], precision=precision)
    bias: jax.Array | None = p.get("bias")
    return y if bias is None else y + bias


def _attention(x: jax.Array, p: PyTree, n_head: int, precision: jax.lax.Precision) -> jax.Array:
    b, t, d = x.shape
    q, k, v = (z.reshape(b, t, n_head, d // n_head) for z in jnp.split(_linear(x, p["qkv"], precision), 3, axis=-1))
    scores = jnp.einsum("bqhd,bkhd->bhqk", q, k, precision=precision).astype(jnp.float32) / math.sqrt(d // n_head)
    scores = jnp.where(jnp.tril(jnp.ones((t, t), bool)), scores, -jnp.inf)
    probs = jax.nn.softmax(scores, axis=-1).astype(x.dtype)
    y = jnp.einsum("bhqk,bkhd->bqhd", probs, v, precision=precision).reshape(b, t, d)
    return _linear(y, p["proj"], precision)


def forward(params: PyTree, idx: jax.Array, *, cfg: GPTConfig, dtype: str) -> jax.Array:
    """[batch, time, vocab] fp32 logits; compute in `dtype` over a cast of the fp32 parameters."""
    precision, compute = _precision(dtype), _compute_dtype(dtype)
    p = jax.tree_util.tree_map(lambda a: a.astype(compute), params)
    x = p["tok_emb"]["weight"][idx] + p["pos_emb"]["weight"][: idx.shape[1]]
    for block in p["blocks"]:
        x = x + _attention(_layer_norm(x, block["ln1"]), block["attn"], cfg.n_head, precision)
        h = jax.nn.gelu(_linear(_layer_norm(x, block["ln2"]), block["mlp"]["fc"], precision), approximate=True)
        x = x + _linear(h, block["mlp"]["proj"], precision)
    return _linear(_layer_norm(x, p["ln_f"]), p["head"], precision).astype(jnp.float32)


def _loss(params: PyTree, x: jax.Array, y: jax.Array, *, cfg: GPTConfig, dtype: str) -> jax.Array:
    logits = forward(params, x, cfg=cfg, dtype=dtype)
    losses: jax.Array = optax.softmax_cross_entropy_with_integer_labels(logits, y)
    return losses.mean()


def optimizer(adamw: AdamW) -> optax.GradientTransformation:
    def decayed(params: PyTree) -> PyTree:
        return jax.tree_util.tree_map(lambda a: a.ndim >= 2, params)

    return optax.adamw(adamw.lr, adamw.beta1, adamw.beta2, adamw.eps, weight_decay=adamw.weight_decay, mask=decayed)


@functools.cache
def _compiled(cfg: GPTConfig, adamw: AdamW, dtype: str) -> tuple[Step, Callable[..., jax.Array], Callable[..., Any]]:
    """The jitted train step, loss and logits of one configuration, shared by every engine of it in the process."""
    tx = optimizer(adamw)
    loss = functools.partial(_loss, cfg=cfg, dtype=dtype)

    def train(params: PyTree, opt_state: PyTree, x: jax.Array, y: jax.Array) -> tuple[PyTree, PyTree, jax.Array]:
        value, grads = jax.value_and_grad(loss)(params, x, y)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, value

    logits = functools.partial(forward, cfg=cfg, dtype=dtype)
    return jax.jit(train, donate_argnums=(0, 1)), jax.jit(loss), jax.jit(logits)


def _weighted_loss(
    params: PyTree, x: jax.Array, y: jax.Array, w: jax.Array, *, cfg: GPTConfig, dtype: str
) -> jax.Array:
    """The mean loss over the rows whose weight is 1: rows padding a batch to the device count weigh 0."""
    logits = forward(params, x, cfg=cfg, dtype=dtype)
    losses: jax.Array = optax.softmax_cross_entropy_with_integer_labels(logits, y).mean(-1)
    return (losses * w).sum() / w.sum()


@functools.cache
def _compiled_parallel(cfg: GPTConfig, adamw: AdamW, dtype: str, devices: tuple[Any, ...]) -> tuple[Step, Any, Any]:
    """The jitted data-parallel train step over `devices`: parameters replicated, the batch split by rows;
    XLA sums the gradients across devices (and processes) inside the step."""
    mesh = jax.sharding.Mesh(np.array(devices), ("data",))
    replicated = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())  # type: ignore[no-untyped-call]
    by_rows = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("data"))  # type: ignore[no-untyped-call]
    tx = optimizer(adamw)
    loss = functools.partial(_weighted_loss, cfg=cfg, dtype=dtype)

    def train(params: PyTree, opt_state: PyTree, x: jax.Array, y: jax.Array, w: jax.Array) -> Any:
        value, grads = jax.value_and_grad(loss)(params, x, y, w)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, value

    step = jax.jit(
        train,
        in_shardings=(replicated, replicated, by_rows, by_rows, by_rows),
        out_shardings=(replicated, replicated, replicated),
        donate_argnums=(0, 1),
    )
    return step, replicated, by_rows


def _local(tree: PyTree) -> PyTree:
    """A replicated pytree as this process's copy: every process holds all of it, but jax.Array of many
    processes cannot be read whole with np.asarray."""
    return jax.tree_util.tree_map(lambda a: a.addressable_data(0) if isinstance(a, jax.Array) else a, tree)


class JaxEngine:
    """The GPT and its optax AdamW on JAX's default device (a TPU, a GPU, else the CPU); always jitted."""

    framework = "jax"

    def __init__(self, cfg: GPTConfig, adamw: AdamW, *, dtype: str = "fp32", compile: bool = False) -> None:
        del compile  # jax.jit always compiles; the argument exists for the torch engine
        self.cfg, self.adamw, self.dtype = cfg, adamw, dtype
        self.device = str(jax.devices()[0].platform)
        self.tx = optimizer(adamw)
        self.params = nest({n: jnp.zeros(s, jnp.float32) for n, s in shapes(cfg).items()})
        self.opt_state = self.tx.init(self.params)
        self._train, self._loss, self._logits = _compiled(cfg, adamw, dtype)
        # Data-parallel over every device of every process when there is more than one (jax.distributed joined).
        self.world = jax.device_count()
        self.step = 0

    def load(self, tensors: Mapping[str, npt.NDArray[Any]], step: int | None) -> None:
        self.params = params_from_neutral(_local(self.params), tensors)
        self.opt_state = self.tx.init(self.params)
        if step is not None:
            self.opt_state = adamw_from_neutral(self.opt_state, tensors, step)
        self.step = step or 0
        if self.world > 1:
            _, replicated, _ = _compiled_parallel(self.cfg, self.adamw, self.dtype, tuple(jax.devices()))
            self.params, self.opt_state = (_global(tree, replicated) for tree in (self.params, self.opt_state))

    def host_state(self, step: int) -> Arrays | None:
        """None: jax arrays are immutable buffers on the device (on the CPU too), never host arrays a checkpoint
        could be read into; load() puts copy-on-write views of the checkpoint's files on the device instead."""
        return None

    def tensors(self) -> Arrays:
        moments, _ = adamw_to_neutral(_local(self.opt_state))
        return params_to_neutral(_local(self.params)) | moments

    def train_step(self, x: Tokens, y: Tokens) -> float:
        """One AdamW step on the global batch `x`, `y`; the mean loss over all of it."""
        if self.world > 1:
            return self._parallel_step(x, y)
        self.params, self.opt_state, loss = self._train(self.params, self.opt_state, jnp.asarray(x), jnp.asarray(y))
        self.step += 1
        return float(loss)

    def _parallel_step(self, x: Tokens, y: Tokens) -> float:
        """Pad the batch to a multiple of the devices with rows of weight 0, give each process its rows."""
        train, _, by_rows = _compiled_parallel(self.cfg, self.adamw, self.dtype, tuple(jax.devices()))
        padded = -(-len(x) // self.world) * self.world
        w = np.zeros(padded, np.float32)
        w[: len(x)] = 1.0
        x, y = (np.concatenate([a, np.zeros((padded - len(a), a.shape[1]), a.dtype)]) for a in (x, y))
        mine = slice(
            jax.process_index() * padded // jax.process_count(),
            (jax.process_index() + 1) * padded // jax.process_count(),
        )
        put = jax.make_array_from_process_local_data
        batch = [put(by_rows, a[mine], a.shape) for a in (x, y, w)]  # type: ignore[no-untyped-call]
        self.params, self.opt_state, loss = train(self.params, self.opt_state, *batch)
        self.step += 1
        return float(loss.addressable_data(0))

    def loss(self, x: Tokens, y: Tokens) -> float:
        return float(self._loss(_local(self.params), jnp.asarray(x), jnp.asarray(y)))

    def logits(self, x: Tokens) -> Logits:
        return np.asarray(self._logits(_local(self.params), jnp.asarray(x)), np.float32)

    def peak_flops(self) -> float:
        return measure_peak(self.dtype)

    def utilization(self) -> float | None:
        """None: JAX has no portable busy counter for TPUs or GPUs, and a CPU has no accelerator."""
        return None


def _global(tree: PyTree, replicated: jax.sharding.NamedSharding) -> PyTree:
    """This process's copy of a pytree every process holds equal, as arrays replicated on every device."""

    def put(a: Any) -> jax.Array:
        host = np.asarray(a)
        return jax.make_array_from_callback(host.shape, replicated, lambda index: host[index])

    return jax.tree_util.tree_map(put, tree)


def measure_peak(dtype: str, trials: int = 5) -> float:
    """Best matmul FLOP/s over `trials` timed runs of n x n matmuls (n = 1024 on CPU, 4096 on an accelerator).

    The best, not the median: a trial can only be slowed down (by other processes, a clock ramping up).
    """
    n = PEAK_SIZE_CPU if jax.devices()[0].platform == "cpu" else PEAK_SIZE_ACCELERATOR
    key_a, key_b = jax.random.split(jax.random.key(0))
    a, b = (jax.random.normal(k, (n, n)).astype(_compute_dtype(dtype)) for k in (key_a, key_b))
    mm = jax.jit(functools.partial(jnp.matmul, precision=_precision(dtype)))

    def run(reps: int) -> float:
        began = time.perf_counter()
        out = [mm(a, b) for _ in range(reps)]
        out[-1].block_until_ready()  # one stream: the last done means all done
        return time.perf_counter() - began

    run(1)
    reps = max(1, min(100, int(0.1 / max(run(1), 1e-6))))  # about 100 ms a trial
    return max(2 * n**3 * reps / run(reps) for _ in range(trials))
