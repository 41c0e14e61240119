"""PyTorch state dicts and AdamW state <-> neutral numpy tensors (docs/formats/checkpoint.md).

A module's parameter names are its neutral names (`blocks.0.attn.qkv.weight`); what differs is the layout:
`nn.Linear` stores its weight as [out, in] and the neutral layout is [in, out] (`y = x @ W`), so the weights of
Linear layers, and their AdamW moments, are transposed here and nowhere else. torch is imported by the caller;
this module only touches the objects it is given, so importing it loads no framework.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from crossrail.runtime.manifest import CheckpointError
from crossrail.runtime.neutral import Arrays, check, moments, weights, with_moments

if TYPE_CHECKING:
    import torch


def linear_weights(model: torch.nn.Module) -> set[str]:
    """Names of the parameters stored [out, in]: the weights of the model's nn.Linear layers."""
    import torch

    return {
        f"{name}.weight" if name else "weight" for name, m in model.named_modules() if isinstance(m, torch.nn.Linear)
    }


def _to_numpy(tensor: torch.Tensor, transpose: bool) -> npt.NDArray[Any]:
    import torch

    value = tensor.detach()
    if transpose:
        value = value.t()
    return np.ascontiguousarray(value.to(device="cpu", dtype=torch.float32).numpy())


def _shapes(model: torch.nn.Module) -> dict[str, tuple[int, ...]]:
    flipped = linear_weights(model)
    return {
        name: tuple(reversed(p.shape)) if name in flipped else tuple(p.shape) for name, p in model.named_parameters()
    }


def state_to_neutral(model: torch.nn.Module) -> Arrays:
    """The model's parameters as fp32 numpy arrays under neutral names, in neutral layout."""
    flipped = linear_weights(model)
    return {name: _to_numpy(p, name in flipped) for name, p in model.named_parameters()}


def state_from_neutral(model: torch.nn.Module, tensors: Mapping[str, npt.NDArray[Any]]) -> None:
    """Copy neutral weights into the model in place; CheckpointError when names or shapes do not match."""
    import torch

    params = weights(tensors)
    check(_shapes(model), params, "the checkpoint's weights")
    flipped = linear_weights(model)
    with torch.no_grad():
        for name, p in model.named_parameters():
            value = torch.from_numpy(np.array(params[name], np.float32))  # a copy: the source may be read-only
            p.copy_(value.t() if name in flipped else value)


def adamw_to_neutral(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> tuple[Arrays, int]:
    """`optim.m.<name>` and `optim.v.<name>` of every parameter (zeros before the first step), and the step count."""
    import torch

    flipped = linear_weights(model)
    first: Arrays = {}
    second: Arrays = {}
    step = 0
    for name, p in model.named_parameters():
        state = optimizer.state.get(p, {})
        transpose = name in flipped
        zeros = torch.zeros_like(p)
        first[name] = _to_numpy(state.get("exp_avg", zeros), transpose)
        second[name] = _to_numpy(state.get("exp_avg_sq", zeros), transpose)
        if "step" in state:
            step = max(step, int(float(state["step"])))
    return with_moments({}, first, second), step


def adamw_from_neutral(
    model: torch.nn.Module, optimizer: torch.optim.Optimizer, tensors: Mapping[str, npt.NDArray[Any]], step: int
) -> None:
    """Set the AdamW moments of every parameter from neutral tensors, and its step count to `step`."""
    import torch

    if step < 0:
        raise CheckpointError(f"an optimizer step count must be >= 0 (got {step})")
    first, second = moments(tensors)
    shapes = _shapes(model)
    check(shapes, first, "the checkpoint's first moments (optim.m.*)")
    check(shapes, second, "the checkpoint's second moments (optim.v.*)")
    flipped = linear_weights(model)
    groups = {id(p): group for group in optimizer.param_groups for p in group["params"]}
    for name, p in model.named_parameters():
        group = groups.get(id(p))
        if group is None:
            raise CheckpointError(f"parameter {name} is not in the optimizer; build it over model.parameters()")
        on_device = bool(group.get("fused") or group.get("capturable"))
        moment = {}
        for key, source in (("exp_avg", first[name]), ("exp_avg_sq", second[name])):
            value = torch.from_numpy(np.array(source, np.float32))
            moment[key] = (value.t() if name in flipped else value).contiguous().to(p.device, p.dtype)
        count = torch.tensor(float(step), dtype=torch.float32, device=p.device if on_device else "cpu")
        optimizer.state[p] = {"step": count, **moment}


def neutral_views(model: torch.nn.Module, optimizer: torch.optim.Optimizer, step: int) -> Arrays | None:
    """Writable numpy views, under neutral names and in neutral layout, of the model's parameters and of AdamW
    moments made for them now (zeros, step count `step`): a checkpoint restored into them in place
    (Checkpointer.restore(into=...)) is the model and optimizer adamw_from_neutral would have set, without a
    copy of either. The weights of nn.Linear layers are transposed views. None unless every parameter is an
    fp32 tensor in CPU memory: on an accelerator the tensors go through state_from_neutral instead.
    """
    import torch

    params = dict(model.named_parameters())
    if any(p.device.type != "cpu" or p.dtype != torch.float32 for p in params.values()):
        return None
    if step < 0:
        raise CheckpointError(f"an optimizer step count must be >= 0 (got {step})")
    flipped = linear_weights(model)
    groups = {id(p): group for group in optimizer.param_groups for p in group["params"]}
    weights_: Arrays = {}
    first: Arrays = {}
    second: Arrays = {}
    for name, p in params.items():
        if id(p) not in groups:
            raise CheckpointError(f"parameter {name} is not in the optimizer; build it over model.parameters()")
        moment = {"exp_avg": torch.zeros_like(p), "exp_avg_sq": torch.zeros_like(p)}
        optimizer.state[p] = {"step": torch.tensor(float(step), dtype=torch.float32), **moment}
        for out, tensor in ((weights_, p.detach()), (first, moment["exp_avg"]), (second, moment["exp_avg_sq"])):
            array = tensor.numpy()
            out[name] = array.T if name in flipped else array
    return with_moments(weights_, first, second)
