"""Capture the activations of chosen hook sites of any TransformerLens ``HookedRootModule``.

Only the requested sites are hooked (never "cache everything, filter later"), the forward
runs under ``torch.inference_mode`` in eval mode, and it stops right after the last
requested site: through ``forward(..., stop_at_layer=k)`` when the model has that argument
and every site lies in the embedding or the blocks, otherwise with a hook that raises a
private exception once every requested site has fired (the pattern of TransformerLens's
bridge and SAELens).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

import numpy as np
import torch
from transformer_lens import HookedRootModule
from transformer_lens.hook_points import HookPoint

from infoprobe.hooks.errors import SiteCaptureError, UnknownSiteError
from infoprobe.hooks.sites import block_index

EMBEDDING_HOOKS = frozenset({"hook_embed", "hook_pos_embed", "hook_tokens"})
"""Hooks outside ``blocks.*`` that fire before block 0 (safe to combine with stop_at_layer)."""


class _StopForward(Exception):
    """Raised by the last requested hook to end a forward pass early (never escapes)."""


def model_device(model: torch.nn.Module) -> torch.device:
    """Device of the model's first parameter or buffer (CPU for a model with neither)."""
    for tensor in (*model.parameters(), *model.buffers()):
        return tensor.device
    return torch.device("cpu")


@functools.cache
def accepts_stop_at_layer(forward: Callable) -> bool:
    """Whether a ``forward`` function has a ``stop_at_layer`` argument (read once per
    function: ``inspect.signature`` costs about 25 µs, 0.2 % of a small forward pass)."""
    return "stop_at_layer" in inspect.signature(forward).parameters


def stop_layer(model: HookedRootModule, names: Sequence[str]) -> int | None:
    """The ``stop_at_layer`` to pass so the forward ends after the last block with a site.

    None when the model's ``forward`` has no ``stop_at_layer`` argument, or a site lies
    outside the embedding and the blocks (its position in the forward is unknown).
    """
    if not accepts_stop_at_layer(getattr(model.forward, "__func__", model.forward)):
        return None
    if any(block_index(n) is None and n not in EMBEDDING_HOOKS for n in names):
        return None
    return max((block_index(n) + 1 for n in names if block_index(n) is not None), default=0)


def check_sites(model: HookedRootModule, names: Sequence[str]) -> None:
    """Raise :class:`UnknownSiteError` unless every name is a hook point of ``model``."""
    unknown = [name for name in names if name not in model.hook_dict]
    if unknown:
        raise UnknownSiteError(
            f"hook site(s) {unknown} not in model.hook_dict; valid: {list(model.hook_dict)}"
        )


@contextmanager
def eval_mode(model: torch.nn.Module) -> Iterator[None]:
    """Run in eval mode (no dropout) and restore the caller's train/eval flags after.

    Only modules in training mode are touched: ``model.eval()`` on a model already in
    eval mode costs about 0.5 ms for the default model (a ``__setattr__`` per module),
    3 % of a forward pass of 512 samples.
    """
    training = [module for module in model.modules() if module.training]
    if training:
        model.eval()
    try:
        yield
    finally:
        for module in training:
            module.training = True


@contextmanager
def temporary_hooks(model: HookedRootModule, names: Sequence[str], fn: Callable) -> Iterator[None]:
    """``fn`` on the hook points ``names`` for the block, then removed from them only.

    ``model.hooks(...)`` does the same but its exit walks every hook point of the model
    (148 µs per call for the default model, 1 % of a forward pass of 512 samples; this
    takes 65 µs). Hooks are added at a fresh context level, as ``model.hooks`` does, so
    hooks of an enclosing ``model.hooks`` block and permanent hooks stay.
    """
    model.context_level += 1
    level = model.context_level
    points = [model.mod_dict[name] for name in names]
    try:
        for point in points:
            point.add_hook(fn, dir="fwd", level=level)
        yield
    finally:
        for point in points:
            point.remove_hooks("fwd", level=level)
        model.context_level -= 1


def as_model_input(x: np.ndarray | torch.Tensor, model: torch.nn.Module) -> torch.Tensor:
    """``x`` as a float32 tensor on the model's device."""
    tensor = torch.as_tensor(x, dtype=torch.float32)
    return tensor.to(model_device(model))


def capture(
    model: HookedRootModule,
    x: np.ndarray | torch.Tensor,
    names: Sequence[str],
    *,
    early_stop: bool = True,
) -> dict[str, torch.Tensor]:
    """Activations of the hook sites ``names`` for the batch ``x``.

    Args:
        model: any ``HookedRootModule``; called as ``model(x)`` (plus ``stop_at_layer``
            when it accepts that argument).
        x: model input, e.g. float32 [b, T, d_in]; moved to the model's device.
        names: hook names, all in ``model.hook_dict``.
        early_stop: end the forward after the last requested site (default); False runs
            the whole forward (used to check that early stopping changes nothing).

    Returns:
        ``{name: tensor [b, ...]}`` (detached, on the model's device) in the order the
        hooks fired.

    Raises:
        UnknownSiteError: a name is not a hook point of the model.
        SiteCaptureError: a site did not fire, or its tensor has no leading batch axis.
    """
    check_sites(model, names)
    wanted = set(names)
    stored: dict[str, torch.Tensor] = {}
    layer = stop_layer(model, names) if early_stop else None
    raise_when_done = early_stop and layer is None

    def save(tensor: torch.Tensor, hook: HookPoint) -> None:
        stored[hook.name] = tensor.detach()
        if raise_when_done and len(stored) == len(wanted):
            raise _StopForward

    batch = as_model_input(x, model)
    kwargs = {} if layer is None else {"stop_at_layer": layer}
    with eval_mode(model), torch.inference_mode(), temporary_hooks(model, names, save):
        try:
            model(batch, **kwargs)
        except _StopForward:
            pass
    missing = [name for name in names if name not in stored]
    if missing:
        raise SiteCaptureError(f"hook site(s) {missing} did not fire during the forward pass")
    for name, tensor in stored.items():
        if tensor.ndim == 0 or tensor.shape[0] != batch.shape[0]:
            raise SiteCaptureError(
                f"hook site {name!r} produced shape {list(tensor.shape)}, expected a leading "
                f"batch axis of {batch.shape[0]}; exclude it from the sites"
            )
    return stored
