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
from dataclasses import dataclass
from enum import StrEnum

import einops
import numpy as np

from infoprobe.infoflow.store import inputs_hash
from infoprobe.pipeline.probe_inputs import (
    LayerSource,
    cache_roles,
    cached_role_partners,
    check_control,
    open_layers,
)
from infoprobe.pipeline.probe_settings import ProbeSettings
from infoprobe.probes.chunked_fit import ChunkedFit
from infoprobe.probes.controls import (
    conditional_baseline,
    control_level,
    shuffled_pairing,
)
from infoprobe.probes.errors import ProbeInputError
from infoprobe.probes.families import family
from infoprobe.probes.linear import LinearProbeScores, ProbeTargets, fit_linear_probes
from infoprobe.probes.metrics import identification_hits
from infoprobe.probes.observed import (
    DEFAULT_SHARE,
    aggregate_observed,
    pad_cls,
    per_sample_observed,
)
from infoprobe.probes.results import ProbeResults
from infoprobe.probes.split import TEST, TRAIN, VAL
from infoprobe.probes.targets import AttentionRole, gather_partner_inputs
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
    V_INFORMATION = "v_information"
    SHARE = "share"
    FIT_FAILURE = "fit_failure"
    FIT_STARTS = "fit_starts"
    FIT_BEST_EPOCH = "fit_best_epoch"
    VAL_LOG_Q = "val_log_q"
    VAL_LOG_Q0 = "val_log_q0"
    VAL_DISCRIMINATION = "val_discrimination"
    VAL_LINEAR_DISCRIMINATION = "val_linear_discrimination"
    VAL_R2 = "val_r2"
    VAL_LINEAR_R2 = "val_linear_r2"


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
    cache, sites = open_layers(cache_path)
    control = None
    try:
        x = np.asarray(cache.x[()])
        check_finite(x, f"{cache.path}:/inputs/x")
        n, T, d = x.shape
        split = settings.split(n)
        ctrl_source = None
        if control_path is not None:
            control, ctrl_sites = open_layers(control_path)
            check_control(cache, control, x)
            ctrl_source = LayerSource(control, ctrl_sites, settings.block_size)
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
            LayerSource(cache, sites, settings.block_size),
            ctrl_source,
            x,
            split,
            settings,
            progress,
        )
        kind = family(settings.probe).kind
        if settings.targets == "roles":
            run.probe_roles(partners)
        elif kind == "closed_form":
            run.probe_positions_linear()
        elif kind == "density":
            run.probe_positions_critic()
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
    main: LayerSource
    control: LayerSource | None
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

    def put_fit_record(self, control: Control, engine: ChunkedFit) -> None:
        """Store how each cell's fit went (:mod:`infoprobe.probes.refits`): its failure code
        (0: a good fit), the starts it took, its best epoch and its validation statistics
        (``val_<name>``, the design's: the critic's log-likelihoods and discriminations,
        the MLP and query probes' R² beside the linear reference's), each ``[L+1, T+1, S]``."""
        n_pos = self.results.T

        def per_position(values: np.ndarray) -> np.ndarray:
            values = values.reshape(len(values), -1).astype(np.float64)
            return np.broadcast_to(values, (len(values), n_pos)) if values.shape[1] == 1 else values

        self.put_cells(control, Metric.FIT_FAILURE, per_position(engine.failures))
        self.put_cells(control, Metric.FIT_STARTS, per_position(engine.starts))
        self.put_cells(control, Metric.FIT_BEST_EPOCH, per_position(engine.best_epoch))
        if engine.val_stats is not None:  # [C, statistics, S]
            for name, values in zip(engine.val_names, engine.val_stats.swapaxes(0, 1), strict=True):
                self.put_cells(control, Metric(f"val_{name}"), values)

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
        base = cache_roles(cache)
        roles = [AttentionRole(r.block, r.head, k) for k in self.settings.ranks for r in base]
        names = [r.name for r in roles]
        idx = cached_role_partners(cache, roles, self.settings.block_size)  # [n, R, T+1]
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
        """Per-sample observed sets from per-sample errors ``[L+1, n_test, T+1, S]`` by the
        one per-sample rule (:func:`~infoprobe.probes.observed.per_sample_observed`)."""
        tau = self.settings.thresholds.tau_sample
        x_test = self.x[self.split == TEST]
        observed = per_sample_observed(errors, x_test, tau)
        self.results.observed[("positions", "per_sample")] = observed

    # ------------------------------------------------------------------ MLP / query probes

    def batched_datasets(self) -> tuple[list[tuple[np.ndarray, np.ndarray]], list[Control]]:
        """The probe's data, the random-init control's (if any) and the shuffled pairing's:
        ``(states [n, C, E], x [n, T, d])`` each, and which control each one is."""
        states = self.main.load()
        datasets = [(states, self.x)]  # the probe, then the longer fits first: the pool is FIFO
        controls = [Control.NONE]
        if self.control is not None:
            datasets.append((self.control.load(), self.x))
            controls.append(Control.RANDOM_INIT)
        shuffled = self.x[shuffled_pairing(self.split, self.settings.shuffle_seed)]
        datasets.append((states, shuffled))
        controls.append(Control.SHUFFLED)
        return datasets, controls

    def probe_positions_critic(self) -> None:
        """Whether each state holds x(s) of every data position, by the critic, beside the
        random-init and shuffled controls, all fits trained in one pass: V-information and
        the share of test samples in the per-sample sets per cell, each sample's PVI and
        p-value, and the sets (per sample: Benjamini–Hochberg at ``q``; aggregate: a share
        of at least :data:`DEFAULT_SHARE` and ``margin`` above the gating controls')."""
        idx = [np.flatnonzero(self.split == s) for s in (TRAIN, VAL, TEST)]
        datasets, controls = self.batched_datasets()
        th = self.settings.thresholds
        fits = family(self.settings.probe).fit(
            datasets,
            *idx,
            hidden=self.settings.mlp_hidden,
            q=th.q,
            budget=self.settings.budget,
            device=self.settings.device,
            progress=self.progress,
        )
        shares = {}
        for control, fit in zip(controls, fits, strict=True):
            self.put_fit_record(control, fit.engine)
            self.put_cells(control, Metric.V_INFORMATION, fit.v_information)
            shares[control] = _per_sample(fit.members(th.q), self.n_layer_axis).mean(axis=1)
            self.put(control, Metric.SHARE, shares[control])
        main = fits[0]
        for control, fit in zip(controls, fits, strict=True):
            if control in (Control.NONE, Control.RANDOM_INIT):  # the per-sample control
                key = (self.targets, self.settings.probe, control.value)
                self.results.sample_scores[(*key, "pvi")] = _per_sample(fit.pvi, self.n_layer_axis)
                p_value = _per_sample(fit.p_value, self.n_layer_axis)
                self.results.sample_scores[(*key, "p_value")] = p_value
        present = [shares[c] for c in (Control.SHUFFLED, Control.RANDOM_INIT) if c in shares]
        self.put(Control.SELECTIVITY, Metric.SHARE, shares[Control.NONE] - control_level(*present))
        gating = [shares[Control(c)] for c in th.gate if Control(c) in shares]
        level = control_level(*gating) if gating else np.zeros_like(shares[Control.NONE])
        self.results.observed[("positions", "aggregate")] = aggregate_observed(
            shares[Control.NONE], level, DEFAULT_SHARE, th.margin
        )
        member = _per_sample(main.members(th.q), self.n_layer_axis)
        self.results.observed[("positions", "per_sample")] = pad_cls(member)

    def probe_positions_batched(self) -> None:
        """x(s) of every data position by MLP or query probes, beside the shuffled and
        random-init controls, all three fits trained in one pass (one worker pool)."""
        x, split = self.x, self.split
        idx = [np.flatnonzero(split == s) for s in (TRAIN, VAL, TEST)]
        datasets, controls = self.batched_datasets()
        fits = self.fit_batched(datasets, idx)
        for control, one in zip(controls, fits, strict=True):
            self.put_fit_record(control, one.engine)
        fit, shuffled = fits[0], fits[-1]
        self.put_cells(Control.NONE, Metric.R2, fit.r2)
        self.put_cells(Control.NONE, Metric.NMSE, fit.nmse)
        hits = identification_hits(fit.test_pred, x[idx[2]], np.arange(self.results.T))
        self.put_cells(Control.NONE, Metric.IDENTIFICATION, hits.double().mean(0).numpy())
        self.put_cells(Control.SHUFFLED, Metric.R2, shuffled.r2)
        if self.control is not None:
            self.put_cells(Control.RANDOM_INIT, Metric.R2, fits[1].r2)
        self.position_sets()
        if getattr(fit, "errors", None) is not None:  # a family with per-sample errors
            self.per_sample_sets(self.put_errors(fit.errors))

    def fit_batched(
        self, datasets: list[tuple[np.ndarray, np.ndarray]], idx: list[np.ndarray]
    ) -> list:
        """The regression family's probes of ``datasets`` (``(states [n, C, E], x [n, T,
        d])``) with the settings' width and budget, one fit per dataset."""
        return family(self.settings.probe).fit(
            datasets,
            *idx,
            hidden=self.settings.mlp_hidden,
            budget=self.settings.budget,
            device=self.settings.device,
            progress=self.progress,
        )
