"""Check a foreign model against its config on two inputs, before any use: two samples of
its task, or standard normal ones of its T and d when it has none.

The instruments read ``[b, T+1, E]`` residual streams (data tokens 0..T-1, the readout
token last) and ``[b, h_l, T+1, T+1]`` attention patterns whose rows sum to 1; a model
whose named sites hold anything else would give numbers that mean nothing, so it is
refused here with the site, the module path and the shapes.
"""

from __future__ import annotations

import numpy as np
import torch
from transformer_lens import HookedRootModule

from infoprobe.foreign.config import ForeignConfig
from infoprobe.foreign.errors import ForeignModelError
from infoprobe.hooks.capture import as_model_input, capture, eval_mode
from infoprobe.hooks.errors import CacheError
from infoprobe.hooks.sites import layer_sites

PATTERN = "blocks.{l}.attn.hook_pattern"


def pattern_sites(model: HookedRootModule, n_layers: int) -> list[str]:
    """The attention-pattern hook names of ``model`` ([] when it exposes none)."""
    names = [PATTERN.format(l=b) for b in range(n_layers)]
    return names if all(n in model.hook_dict for n in names) else []


def _where(cfg: ForeignConfig, name: str) -> str:
    """The hook name and, for an adapted model, the module reference behind it."""
    if cfg.sites is None:
        return f"hook {name!r}"
    refs = dict(
        zip(layer_sites(cfg.n_layers), (cfg.sites.embed_ref, *cfg.sites.block_refs), strict=True)
    )
    for block, ref in enumerate(cfg.sites.pattern_refs or ()):
        refs[PATTERN.format(l=block)] = ref
    return f"site {str(refs[name])!r} (hook {name!r})"


def check_inputs(cfg: ForeignConfig, task) -> tuple[np.ndarray, str]:
    """Two inputs x [2, T, d] to check a model on, and their name: two samples of
    ``task``, or (no task) standard normal draws of the config's T and d."""
    rng = np.random.default_rng(0)
    if task is None:
        x = rng.standard_normal((2, cfg.n_ctx, cfg.d_in)).astype(np.float32)
        return x, "standard normal inputs"
    return task.sample(2, rng)[0], f"task {task.name!r}"


def check_foreign_model(model: HookedRootModule, cfg: ForeignConfig, task=None) -> None:
    """Raise :class:`ForeignModelError` unless ``model`` has the shapes ``cfg`` declares
    (on two samples of ``task``; None: of standard normal inputs of its T and d)."""
    T, E = cfg.n_ctx, cfg.d_model
    x, source = check_inputs(cfg, task)
    names = layer_sites(cfg.n_layers)
    missing = [n for n in names if n not in model.hook_dict]
    if missing:
        raise ForeignModelError(
            f"the model has no hook point(s) {missing}; a HookedRootModule must follow "
            "TransformerLens names, a plain module needs field 'sites'"
        )
    patterns = pattern_sites(model, cfg.n_layers)
    try:
        with eval_mode(model), torch.inference_mode():
            y = model(as_model_input(x, model))
        states = capture(model, x, names + patterns, early_stop=False)
    except (ForeignModelError, CacheError):
        raise
    except Exception as err:
        raise ForeignModelError(
            f"the model failed on inputs x [2, T={T}, d={cfg.d_in}] ({source}): "
            f"{type(err).__name__}: {err}"
        ) from None
    if not isinstance(y, torch.Tensor) or tuple(y.shape) != (2, cfg.d_out):
        shape = list(y.shape) if isinstance(y, torch.Tensor) else type(y).__name__
        raise ForeignModelError(
            f"the model's output for x [2, {T}, {cfg.d_in}] is {shape}, expected "
            f"[2, d_out={cfg.d_out}] (a tensor)"
        )
    for name in names:
        got = list(states[name].shape)
        if got != [2, T + 1, E]:
            raise ForeignModelError(
                f"{_where(cfg, name)} holds shape {got}, expected [batch=2, T+1={T + 1}, "
                f"d_model={E}] (data tokens 0..T-1 and the readout token last)"
            )
    for block, name in enumerate(patterns):
        p = states[name].double()
        want = [2, cfg.heads[block], T + 1, T + 1]
        if list(p.shape) != want:
            raise ForeignModelError(
                f"{_where(cfg, name)} holds shape {list(p.shape)}, expected {want} "
                f"([batch, heads of block {block} (field 'heads'), query, key])"
            )
        rows = p.sum(dim=-1)
        if bool((p < -1e-6).any()) or not torch.allclose(rows, torch.ones_like(rows), atol=1e-3):
            raise ForeignModelError(
                f"{_where(cfg, name)} is not an attention pattern: its rows sum to "
                f"{float(rows.min()):.4g}..{float(rows.max()):.4g}, expected softmax weights "
                "(non-negative, rows summing to 1)"
            )
