"""Probe an activation cache: every (layer, token, position) probe with its controls.

Hub orchestration (the only probes code that opens caches): read the layer sites of an
activation cache block by block, fit the linear (or MLP / query) probes of every cell
(l, t) and target, fit the identical probes on the controls (shuffled pairing, a
random-init cache of the same architecture on the same samples, the h(t, 0) conditional
baseline for role targets), derive observed sets with fixed thresholds, and return a
:class:`~infoprobe.probes.results.ProbeResults` (or write it with :func:`run_probe`).

Cells are (layer, token) pairs flattened as ``c = l·(T+1) + t``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from enum import StrEnum

import einops
import numpy as np

from infoprobe.base.header import MODEL_IDENTITY
from infoprobe.hooks import CacheFile, layer_sites, open_cache
from infoprobe.infoflow.store import inputs_hash
from infoprobe.pipeline.probe_settings import ProbeSettings
from infoprobe.probes.controls import (
    check_control_compatible,
    conditional_baseline,
    control_level,
    shuffled_pairing,
)
from infoprobe.probes.errors import ControlMismatchError, MissingSiteError, ProbeInputError
from infoprobe.probes.linear import LinearProbeScores, ProbeTargets, fit_linear_probes
from infoprobe.probes.metrics import identification_hits
from infoprobe.probes.mlp import MLPProbeFit, fit_mlp_probe_sets
from infoprobe.probes.observed import aggregate_observed, per_sample_observed
from infoprobe.probes.query import QueryProbeFit, fit_query_probe_sets
from infoprobe.probes.results import ProbeResults
from infoprobe.probes.split import TEST, TRAIN, VAL
from infoprobe.probes.targets import AttentionRole, gather_partner_inputs, role_partners
from infoprobe.probes.validate import check_finite


class Control(StrEnum):
    """The ``control`` level of a score key: the probe itself (``none``), a control, or the
    selectivity against the controls."""

    NONE = "none"
    SHUFFLED = "shuffled"
    RANDOM_INIT = "random_init"
    CONDITIONAL = "conditional"
    SELECTIVITY = "selectivity"


class Metric(StrEnum):
    """The ``metric`` level of a score key."""

    R2 = "r2"
    NMSE = "nmse"
    IDENTIFICATION = "identification"
    ALPHA = "alpha"


@dataclass
class _Source:
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


def _open_layers(path: str | os.PathLike[str]) -> tuple[CacheFile, list[str]]:
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


def _check_control(main: CacheFile, control: CacheFile, x: np.ndarray) -> None:
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


def _roles(cache: CacheFile) -> list[AttentionRole]:
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


def _role_partners(
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


def _cells(arr: np.ndarray, n_layer_axis: int) -> np.ndarray:
    """``[C, ...] -> [L+1, T+1, ...]`` (cells are layer-major; ``n_layer_axis`` = L+1)."""
    return einops.rearrange(arr, "(l t) ... -> l t ...", l=n_layer_axis)


def _per_sample(arr: np.ndarray, n_layer_axis: int) -> np.ndarray:
    """``[n_test, C, S] -> [L+1, n_test, T+1, S]`` (``n_layer_axis`` = L+1)."""
    return einops.rearrange(arr, "n (l t) s -> l n t s", l=n_layer_axis)


def probe_cache(
    cache_path: str | os.PathLike[str],
    *,
    control_path: str | os.PathLike[str] | None = None,
    settings: ProbeSettings | None = None,
    partners: dict[str, np.ndarray] | None = None,
    progress: bool = True,
) -> ProbeResults:
    """Fit every probe of an activation cache, with controls, and derive observed sets.

    Args:
        cache_path: activation cache holding the layer sites (``--sites residual``; role
            targets also need ``blocks.{b}.attn.hook_pattern``).
        control_path: optional random-init cache of the same architecture on the same
            samples (``infoprobe cache CHECKPOINT --random-init SEED``).
        settings: see :class:`ProbeSettings`.
        partners: extra role targets for ``targets="roles"``: name → per-sample partner
            position ``[n, T+1]`` (e.g. the InfoFlow engine's predicted partner).
        progress: tqdm bars.

    Returns:
        :class:`ProbeResults` (scores ``[L+1, T+1, S]``, per-sample errors
        ``[L+1, n_test, T+1, S]``, observed sets with a T+1 position axis).
    """
    settings = settings or ProbeSettings()
    cache, sites = _open_layers(cache_path)
    control = None
    try:
        x = np.asarray(cache.x[()])
        check_finite(x, f"{cache.path}:/inputs/x")
        n, T, d = x.shape
        split = settings.split(n)
        ctrl_source = None
        if control_path is not None:
            control, ctrl_sites = _open_layers(control_path)
            _check_control(cache, control, x)
            ctrl_source = _Source(control, ctrl_sites, settings.block_size)
        results = ProbeResults(
            T=T,
            d=d,
            layers=list(range(len(sites))),
            sites=sites,
            settings=settings.to_dict(),
            thresholds=settings.thresholds.to_dict(),
            provenance=cache.provenance,
            control_provenance=control.provenance if control is not None else None,
            test_index=np.flatnonzero(split == TEST),
            inputs_sha256=inputs_hash(x),
        )
        run = _ProbeRun(
            results,
            _Source(cache, sites, settings.block_size),
            ctrl_source,
            x,
            split,
            settings,
            progress,
        )
        if settings.targets == "roles":
            run.probe_roles(partners)
        elif settings.probe == "linear":
            run.probe_positions_linear()
        else:
            run.probe_positions_batched()
        return results
    finally:
        cache.close()
        if control is not None:
            control.close()


@dataclass
class _ProbeRun:
    """One probing run: the results it fills, the states it reads (the cache and the
    random-init control, if any), the inputs ``x [n, T, d]``, the split ``[n]`` and the
    settings. Scores are stored under ``(targets, probe, control, metric)``."""

    results: ProbeResults
    main: _Source
    control: _Source | None
    x: np.ndarray
    split: np.ndarray
    settings: ProbeSettings
    progress: bool

    @property
    def n_layer_axis(self) -> int:
        """L+1, the length of the layer axis (one site per layer)."""
        return len(self.results.sites)

    @property
    def targets(self) -> str:
        return self.settings.targets

    def put(self, control: Control, metric: Metric, scores: np.ndarray) -> None:
        """Store ``scores [L+1, T+1, S]`` under this run's targets and probe."""
        key = (self.targets, self.settings.probe, control.value, metric.value)
        self.results.scores[key] = scores

    def get(self, control: Control, metric: Metric = Metric.R2) -> np.ndarray | None:
        """The stored ``[L+1, T+1, S]`` scores, or None."""
        key = (self.targets, self.settings.probe, control.value, metric.value)
        return self.results.scores.get(key)

    def put_cells(self, control: Control, metric: Metric, scores: np.ndarray) -> np.ndarray:
        """Store per-cell ``scores [C, S]`` as ``[L+1, T+1, S]`` and return them so."""
        by_layer = _cells(scores, self.n_layer_axis)
        self.put(control, metric, by_layer)
        return by_layer

    def put_errors(self, errors: np.ndarray) -> np.ndarray:
        """Store per-sample test errors ``[n_test, C, S]`` as ``[L+1, n_test, T+1, S]``."""
        per_sample = _per_sample(errors, self.n_layer_axis)
        self.results.per_sample[(self.targets, self.settings.probe, Control.NONE.value)] = (
            per_sample
        )
        return per_sample

    # ------------------------------------------------------------------ linear probes

    def fit_linear(self, targets: ProbeTargets) -> tuple[LinearProbeScores, np.ndarray | None]:
        """Fit the linear probes on the main cache (and the random-init control, if any).

        Stores R², NMSE, identification, the shuffled control's R² and the random-init
        control's R²; returns the main fit and the control's R² ``[L+1, T+1, S]``.
        """
        common = {
            "alphas": self.settings.alphas,
            "device": self.settings.device,
            "progress": self.progress,
        }
        fit = fit_linear_probes(
            self.main.blocks,
            targets,
            self.split,
            shuffle_seed=self.settings.shuffle_seed,
            source_name=self.main.name,
            **common,
        )
        assert fit.shuffled_r2 is not None and fit.per_sample_error is not None
        for metric in (Metric.R2, Metric.NMSE, Metric.IDENTIFICATION):
            self.put_cells(Control.NONE, metric, getattr(fit, metric.value))
        self.put_cells(Control.SHUFFLED, Metric.R2, fit.shuffled_r2)
        if self.control is None:
            return fit, None
        control = fit_linear_probes(
            self.control.blocks,
            targets,
            self.split,
            shuffle_seed=None,
            second_pass=False,
            source_name=self.control.name,
            **common,
        )
        return fit, self.put_cells(Control.RANDOM_INIT, Metric.R2, control.r2)

    def probe_positions_linear(self) -> None:
        """x(s) of every data position from every cell, by ridge."""
        T = self.results.T
        targets = ProbeTargets(values=self.x, inputs=self.x, true_index=np.arange(T))
        fit, _ = self.fit_linear(targets)
        self.put_cells(Control.NONE, Metric.ALPHA, fit.alpha)
        self.position_sets()
        self.per_sample_sets(self.put_errors(fit.per_sample_error))

    def probe_roles(self, partners: dict[str, np.ndarray] | None) -> None:
        """x at each head's k-th most attended key (and ``partners``), by ridge, beside
        the conditional baseline."""
        res, x, T = self.results, self.x, self.results.T
        cache = self.main.cache
        base = _roles(cache)
        roles = [AttentionRole(r.block, r.head, k) for k in self.settings.ranks for r in base]
        names = [r.name for r in roles]
        idx = _role_partners(cache, roles, self.settings.block_size)  # [n, R, T+1]
        for name, extra in (partners or {}).items():
            arr = np.asarray(extra)
            if arr.shape != (x.shape[0], T + 1):
                raise ProbeInputError(
                    f"partners[{name!r}]: expected shape {(x.shape[0], T + 1)}, got {arr.shape}"
                )
            idx = np.concatenate([idx, arr[:, None, :].astype(np.int64)], axis=1)
            names.append(name)
        values = einops.rearrange(gather_partner_inputs(x, idx), "n r t d -> n t r d")
        targets = ProbeTargets(
            values=values,
            inputs=x,
            true_index=einops.rearrange(idx, "n r t -> n t r"),
            cell_row=np.tile(np.arange(T + 1), self.n_layer_axis),
        )
        fit, random_r2 = self.fit_linear(targets)
        r2 = self.get(Control.NONE)
        cond = conditional_baseline(r2)
        self.put(Control.CONDITIONAL, Metric.R2, cond)
        self.put(Control.CONDITIONAL, Metric.NMSE, 1.0 - cond)
        if random_r2 is not None:
            self.put(Control.RANDOM_INIT, Metric.NMSE, 1.0 - random_r2)
        self.put(Control.SELECTIVITY, Metric.R2, r2 - control_level(cond, random_r2))
        self.put_errors(fit.per_sample_error)
        res.role_names = names
        res.role_partners = idx[self.split == TEST]

    # ------------------------------------------------------------------ observed sets

    def position_sets(self) -> None:
        """Selectivity (vs every control present) and the aggregate observed sets (vs the
        gating controls of the thresholds)."""
        th = self.settings.thresholds
        r2 = self.get(Control.NONE)
        present = {c: self.get(Control(c)) for c in ("shuffled", "random_init")}
        self.put(Control.SELECTIVITY, Metric.R2, r2 - control_level(*present.values()))
        gating = [present[c] for c in th.gate if present.get(c) is not None]
        level = control_level(*gating) if gating else np.zeros_like(r2)
        self.results.observed[("positions", "aggregate")] = aggregate_observed(
            r2, level, th.tau, th.margin
        )

    def per_sample_sets(self, errors: np.ndarray) -> None:
        """Per-sample observed sets from per-sample errors ``[L+1, n_test, T+1, S]``."""
        tau = self.settings.thresholds.tau_sample
        self.results.observed[("positions", "per_sample")] = per_sample_observed(errors, tau)

    # ------------------------------------------------------------------ MLP / query probes

    def probe_positions_batched(self) -> None:
        """x(s) of every data position by MLP or query probes, beside the shuffled and
        random-init controls, all three fits trained in one pass (one worker pool)."""
        x, split = self.x, self.split
        idx = [np.flatnonzero(split == s) for s in (TRAIN, VAL, TEST)]
        states = self.main.load()
        datasets = [(states, x)]  # the probe, then the longer fits first: the pool is FIFO
        if self.control is not None:
            datasets.append((self.control.load(), x))
        datasets.append((states, x[shuffled_pairing(split, self.settings.shuffle_seed)]))
        fits = self.fit_batched(datasets, idx)
        fit, shuffled = fits[0], fits[-1]
        self.put_cells(Control.NONE, Metric.R2, fit.r2)
        self.put_cells(Control.NONE, Metric.NMSE, fit.nmse)
        hits = identification_hits(fit.test_pred, x[idx[2]], np.arange(self.results.T))
        self.put_cells(Control.NONE, Metric.IDENTIFICATION, hits.double().mean(0).numpy())
        self.put_cells(Control.SHUFFLED, Metric.R2, shuffled.r2)
        if self.control is not None:
            self.put_cells(Control.RANDOM_INIT, Metric.R2, fits[1].r2)
        self.position_sets()
        if isinstance(fit, QueryProbeFit):
            self.per_sample_sets(self.put_errors(fit.errors))

    def fit_batched(
        self, datasets: list[tuple[np.ndarray, np.ndarray]], idx: list[np.ndarray]
    ) -> list[MLPProbeFit] | list[QueryProbeFit]:
        """The MLP or query probes of ``datasets`` (``(states [n, C, E], x [n, T, d])``)
        with the settings' width and budget, one fit per dataset."""
        fit_sets = fit_mlp_probe_sets if self.settings.probe == "mlp" else fit_query_probe_sets
        return fit_sets(
            datasets,
            *idx,
            hidden=self.settings.mlp_hidden,
            budget=self.settings.budget,
            device=self.settings.device,
            progress=self.progress,
        )
