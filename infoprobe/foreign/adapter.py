"""Hook points for a plain ``torch.nn.Module``: infoprobe's instruments on any model.

:class:`HookedAdapter` wraps the user's module and adds TransformerLens-named hook points
where its site map says the states live, through PyTorch forward (pre-)hooks:

* ``blocks.0.hook_resid_pre``: the residual stream entering block 0 (layer 0);
* ``blocks.{l}.hook_resid_post``: the residual stream after block l (layer l+1);
* ``blocks.{l}.attn.hook_pattern``: block l's attention pattern (when the map names it).

The wrapped module runs unchanged (``nn.MultiheadAttention`` on its reference path rather
than its fused inference kernel: the same arithmetic, with derivatives); a hook on these
points may read the tensor or return a replacement (which then flows on through the
model), as on any ``HookedRootModule``.
So capture, the cache, flow, the probes and the observed program run on it as on
infoprobe's own model.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import nn
from transformer_lens import HookedRootModule
from transformer_lens.hook_points import HookPoint

from infoprobe.foreign.errors import SiteMapError
from infoprobe.foreign.sites import SiteMap, SiteRef


class _AttentionSites(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.hook_pattern = HookPoint()


class _BlockSites(nn.Module):
    def __init__(self, first: bool, pattern: bool) -> None:
        super().__init__()
        if first:
            self.hook_resid_pre = HookPoint()
        self.hook_resid_post = HookPoint()
        if pattern:
            self.attn = _AttentionSites()


def _replace(output, ref: SiteRef, value: torch.Tensor):
    if ref.index is None:
        return value
    items = list(output)
    items[ref.index] = value
    return tuple(items) if isinstance(output, tuple) else items


def _select(output, ref: SiteRef, where: str) -> torch.Tensor:
    if ref.read is not None:
        try:
            value = ref.read(output)
        except Exception as err:
            raise SiteMapError(f"{where}: its read function failed: {type(err).__name__}: "
                               f"{err}") from None  # fmt: skip
    elif ref.index is None:
        value = output
    else:
        try:
            value = output[ref.index]
        except (TypeError, IndexError, KeyError):
            raise SiteMapError(
                f"{where}: module {ref.path!r} returned {type(output).__name__}, which has no "
                f"element [{ref.index}]"
            ) from None
    if not isinstance(value, torch.Tensor):
        hidden = " (the model hides its attention weights: leave 'pattern' out)"
        raise SiteMapError(
            f"{where}: {str(ref)!r} is {type(value).__name__}, expected a tensor"
            + (hidden if value is None else "")
        )
    return value


class HookedAdapter(HookedRootModule):
    """A plain module with hook points added where ``sites`` says its states live.

    ``adapter(x)`` is ``model(x)``: x [b, T, d] → y [b, d_out] (a model's y [b] is given
    as [b, 1]). The wrapped module is
    ``adapter.wrapped`` (its ``state_dict`` is the checkpoint's); hook names follow
    TransformerLens (module doc), so ``run_with_cache`` and ``hooks`` work.
    """

    def __init__(self, model: nn.Module, sites: SiteMap):
        super().__init__()
        if not isinstance(model, nn.Module):
            raise SiteMapError(f"HookedAdapter: expected a torch.nn.Module, got {type(model)}")
        self.wrapped = model
        self.sites = sites
        patterns = sites.pattern_refs
        self.blocks = nn.ModuleList(
            _BlockSites(first=i == 0, pattern=patterns is not None) for i in range(sites.layers)
        )
        modules = dict(model.named_modules())
        points = [(sites.embed_ref, self.blocks[0].hook_resid_pre)]
        points += [
            (r, b.hook_resid_post) for r, b in zip(sites.block_refs, self.blocks, strict=True)
        ]
        if patterns is not None:
            points += [(r, b.attn.hook_pattern) for r, b in zip(patterns, self.blocks, strict=True)]
        self._handles = []
        for ref, point in points:
            module = modules.get(ref.path)
            if module is None:
                near = [name for name in modules if name][:12]
                raise SiteMapError(
                    f"site map: the model ({type(model).__name__}) has no module {ref.path!r} "
                    f"(named by {str(ref)!r}); its modules include {near}"
                )
            self._handles.append(self._attach(module, ref, point))
        self.setup()

    @property
    def exposes_patterns(self) -> bool:
        """Whether the site map names the attention patterns."""
        return self.sites.pattern is not None

    def _attach(self, module: nn.Module, ref: SiteRef, point: HookPoint):
        where = f"site {str(ref)!r}"
        if ref.input:

            def pre_hook(_module, args):
                if not args or not isinstance(args[0], torch.Tensor):
                    raise SiteMapError(f"{where}: the module's first input is not a tensor")
                new = point(args[0])
                return None if new is args[0] else (new, *args[1:])

            return module.register_forward_pre_hook(pre_hook)

        def hook(_module, _args, output):
            value = _select(output, ref, where)
            new = point(value)
            if new is value:
                return None
            if ref.read is not None:
                raise SiteMapError(f"{where} is read by a function: a hook can read it but "
                                   "not replace it")  # fmt: skip
            return _replace(output, ref, new)

        return module.register_forward_hook(hook)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """y [b, d_out]; a model returning one number per sample, y [b], gives [b, 1]
        (d_out = 1), so every instrument and check sees the same shape."""
        with unfused_attention():
            y = self.wrapped(x)
        return y[:, None] if isinstance(y, torch.Tensor) and y.ndim == 1 else y


@contextmanager
def unfused_attention() -> Iterator[None]:
    """Run ``nn.MultiheadAttention`` on its reference path, not the fused inference kernel
    (the same arithmetic; the fused kernel has no forward-mode derivative, which flow's
    Jacobian estimator needs). The global flag is restored after."""
    enabled = torch.backends.mha.get_fastpath_enabled()
    torch.backends.mha.set_fastpath_enabled(False)
    try:
        yield
    finally:
        torch.backends.mha.set_fastpath_enabled(enabled)


def adapt(model: nn.Module, sites: SiteMap | None) -> HookedRootModule:
    """``model`` itself when it is a ``HookedRootModule`` (it follows TransformerLens names
    already) and ``sites`` is None; otherwise a :class:`HookedAdapter` over it."""
    if sites is None:
        if not isinstance(model, HookedRootModule):
            raise SiteMapError(
                f"{type(model).__name__} is a plain torch.nn.Module without hook points: name "
                "its sites (embed, blocks, pattern) so infoprobe can add them"
            )
        return model
    return HookedAdapter(model, sites)
