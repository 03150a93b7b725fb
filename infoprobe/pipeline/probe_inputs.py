"""What a probing run reads from its caches: the layer sites of an activation cache streamed
as cells, the random-init control checked against it, and the role targets' partners read
from the cached attention patterns."""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass

import einops
import numpy as np

from infoprobe.base.header import MODEL_IDENTITY
from infoprobe.hooks import CacheFile, layer_sites, open_cache
from infoprobe.probes.controls import check_control_compatible
from infoprobe.probes.errors import ControlMismatchError, MissingSiteError, ProbeInputError
from infoprobe.probes.targets import AttentionRole, role_partners
from infoprobe.probes.validate import check_finite


@dataclass
class LayerSource:
    """The layer sites of one open cache, streamed as cells ``[b, (L+1)(T+1), E]``."""

    cache: CacheFile
    sites: list[str]
    block_size: int | None

    def blocks(self) -> Iterator[tuple[int, np.ndarray]]:
        start = 0
        size = self.block_size or self.cache.default_block_size(self.sites)
        for block in self.cache.iter_blocks(self.sites, size, include_inputs=False):
            for site in self.sites:  # name the dataset and its index, not the stack's
                check_finite(block[site], f"{self.cache.path}:/acts/{site}", offset=start)
            states = np.stack([block[s] for s in self.sites], axis=1)  # [b, l, t, e]
            yield start, einops.rearrange(states, "b l t e -> b (l t) e")
            start += states.shape[0]

    def load(self) -> np.ndarray:
        """All states in memory ``[n, C, E]`` (MLP / query probes)."""
        return np.concatenate([states for _, states in self.blocks()])

    @property
    def name(self) -> str:
        return f"{self.cache.path}:{','.join(self.sites)}"


def open_layers(path: str | os.PathLike[str]) -> tuple[CacheFile, list[str]]:
    cache = open_cache(path)
    sites = layer_sites(cache.n_blocks)
    missing = [s for s in sites if s not in cache.hook_names]
    if missing:
        cache.close()
        raise MissingSiteError(
            f"{path}: hook site(s) {missing} expected (the layer sites of a "
            f"{len(sites) - 1}-block model), not present; the cache holds {cache.hook_names}. "
            "Re-run `infoprobe cache` with --sites residual (or layers)"
        )
    expected = (cache.n, cache.x.shape[1] + 1, cache.acts(sites[0]).shape[-1])
    for site in sites:  # every layer the same [sample, token, d_model], named when not
        shape = tuple(cache.acts(site).shape)
        if shape != expected:
            cache.close()
            raise ProbeInputError(
                f"{path}: dataset /acts/{site} has shape {list(shape)}, expected "
                f"{list(expected)} [sample, token, d_model] (N samples, T+1 tokens, the "
                f"width of /acts/{sites[0]}); the cache is damaged: re-run `infoprobe cache`"
            )
    return cache, sites


def check_control(main: CacheFile, control: CacheFile, x: np.ndarray) -> None:
    seed = control.provenance.get("random_init_seed")
    if seed is None:
        raise ControlMismatchError(
            f"{control.path}: provenance field 'random_init_seed' expected a seed (a "
            "random-init control: `infoprobe cache CHECKPOINT --random-init SEED`), got None: "
            "it caches trained weights, which cannot serve as the untrained control"
        )
    for key in MODEL_IDENTITY:  # the weights it controls, and the code that ran them
        want, got = main.provenance.get(key), control.provenance.get(key)
        if want and got != want:
            raise ControlMismatchError(
                f"{control.path}: provenance field {key!r} expected {want} (the model of "
                f"{main.path}), got {got}: the control of another model"
            )
    check_control_compatible(
        main.model_config,
        control.model_config,
        main.spec,
        control.spec,
        str(main.path),
        str(control.path),
    )
    if control.n != main.n or not np.array_equal(np.asarray(control.x[()]), x):
        raise ControlMismatchError(
            f"{control.path}: dataset /inputs/x expected equal to that of {main.path} "
            "(a control must be computed on the same samples), got different inputs"
        )


def cache_roles(cache: CacheFile) -> list[AttentionRole]:
    """Rank-1 roles of every head of every block whose pattern is in the cache."""
    heads = cache.model_config.get("heads")
    if heads is None:
        raise ProbeInputError(f"{cache.path}: model config field 'heads' expected, not found")
    cached = [b for b in range(len(heads)) if f"blocks.{b}.attn.hook_pattern" in cache.hook_names]
    if not cached:
        raise MissingSiteError(
            f"{cache.path}: role targets need at least one blocks.{{b}}.attn.hook_pattern, "
            f"none present; the cache holds {cache.hook_names}. "
            "Cache with --sites residual,attention"
        )
    return [AttentionRole(b, j, 1) for b in cached for j in range(heads[b])]


def cached_role_partners(
    cache: CacheFile, roles: list[AttentionRole], block_size: int | None
) -> np.ndarray:
    """Partner indices ``[n, R, T+1]`` read block by block from the cached patterns."""
    pattern_sites = sorted({f"blocks.{r.block}.attn.hook_pattern" for r in roles})
    missing = [s for s in pattern_sites if s not in cache.hook_names]
    if missing:
        raise MissingSiteError(
            f"{cache.path}: hook site(s) {missing} expected for role targets, not present; "
            f"the cache holds {cache.hook_names}. Cache with --sites residual,attention"
        )
    size = block_size or cache.default_block_size(pattern_sites)
    out = []
    for block in cache.iter_blocks(pattern_sites, size, include_inputs=False):
        patterns = {int(s.split(".")[1]): block[s] for s in pattern_sites}
        out.append(role_partners(patterns, roles))
    return np.concatenate(out)
