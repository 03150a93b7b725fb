"""Critic probe: does h(t, l) hold information about this x(s), whichever position it came from?

A fixed-position probe asks "what is x(s)?" of a state and must know where the answer came
from; a head that selects a key by content copies that key's x into the reader with no tag
of its position, so no such probe can follow it. The critic asks the other question: given
the state h and a candidate value x, how much more likely is x under what h holds than
under no state at all? Per cell c (one state, e.g. h(t, l)) it fits a conditional density
of x(s) for every queried position s, a mixture of

- **background**: the null model q0(x | s), the same density family with no state (a
  mixture of :data:`NULL_COMPONENTS` diagonal Gaussians per position, fitted alongside);
- **positional**: N(x; μ(h, s), σ(h, s)² I), read from the query probe's hidden layer
  GELU(W h + q(s) + b) (what a fixed-position probe can see);
- **content**: :data:`CONTENT_COMPONENTS` Gaussians N(x; m_k(h), diag σ_k(h)²) whose means
  and scales depend on the state alone, the same for every queried s: a copy of a token's
  content, wherever it came from;

with mixing weights π(h, s) from the same hidden layer::

    q_c(x | h, s) = π_0 q0(x | s) + π_1 N(x; μ(h, s), σ(h, s)²) + Σ_k π_{k+1} N(x; m_k(h), σ_k(h)²)

trained by maximum likelihood (no negatives), every cell at once, with the budget, early
stopping and seeding of :mod:`infoprobe.probes.batched_training` on the summed negative log
likelihood of the mixture and of the null (the null's own, not through the mixture);
gradients by autograd, or on the CPU by the fused kernel (:mod:`infoprobe.probes.fused`);
the test-sample ranking is :mod:`infoprobe.probes.critic_scores`.

**Pointwise V-information** of test sample i (nats; Xu et al. 2020, Ethayarajh et al.
2022)::

    PVI_i(c, s) = log q_c(x_i(s) | h_i, s) − log q0(x_i(s) | s)

Its mean over the test samples estimates the V-information I_V(h_c → x(s)).

**Membership against mismatched pairs.** The same score of the same state against the
x(s) of M other test samples (j = i+1, …, i+M modulo n_test, in test order) gives the
rank p-value::

    p_i(c, s) = (1 + #{j : PVI(h_i, x_j(s)) ≥ PVI(h_i, x_i(s))}) / (M + 1)

When x_i(s) is independent of h_i the matched and the M mismatched values are exchangeable
(the samples are i.i.d. and the critic saw none of them), so P(p ≤ α) ≤ α whatever the
critic learned: an exact per-sample test. Per-sample sets are the Benjamini–Hochberg
rejections at level q among the test samples of each cell and position
(:func:`infoprobe.base.fdr.benjamini_hochberg`, one family per (c, s)). Not one family over
the whole grid: a p-value is at least 1/(M+1), and over the grid whether a cell's samples
pass would depend on how many *other* cells hold members (on the demo's random-init model,
whose states hold only their own x(t), a grid-wide family marked nothing at all).
Everything is computed on standardised values; the Jacobian of the standardisation is the
same for both terms of PVI and cancels.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from infoprobe.base.fdr import FDR_Q, benjamini_hochberg, check_fdr_level
from infoprobe.probes import fused
from infoprobe.probes.batched_training import (
    BatchedProbes,
    TrainingBudget,
    accelerator_of,
    init_params,
)
from infoprobe.probes.chunked_fit import (
    DEFAULT_MAX_MEMORY_BYTES,
    ChunkedFit,
    ModuleFactory,
    ProbeDesign,
    ProbeShape,
    fit_checked,
)
from infoprobe.probes.critic_scores import coefficients, features
from infoprobe.probes.critic_scores import negatives_of as pair_negatives
from infoprobe.probes.critic_scores import rank_scores as pair_rank_scores
from infoprobe.probes.errors import SplitTooSmallError
from infoprobe.probes.references import ridge_reference
from infoprobe.probes.validate import ArrayLike, check_positive_int

__all__ = [
    "CONTENT_COMPONENTS",
    "MAX_NEGATIVES",
    "NULL_COMPONENTS",
    "BatchedCritic",
    "CriticFit",
    "critic_members",
    "fit_critic_probe",
    "fit_critic_probe_sets",
    "min_test_samples",
]

CONTENT_COMPONENTS = 4
"""Content components of the mixture: values a state may hold with no tag of their position
(a retrieving head's copy); fixed, so every cell gets the same density family. Four, not
two: a state at layer 1 may hold its own x(t), a fixed-position copy and a content copy,
and with two components a cell whose components both took the first two lost the third
(6 of 48 layer-1 cells of the hand-set model, d = 2, six probe seeds; none with four)."""
NULL_COMPONENTS = 4
"""Diagonal Gaussians of the null model q0(x | s) per position."""
MAX_NEGATIVES = 2047
"""Mismatched x(s) each test sample is ranked against: every other test sample, at most this
many; the smallest p-value is 1/(M+1)."""
LOG_SCALE_FLOOR = -5.0
"""log σ of every component is at least this (σ ≥ 0.0067 standard deviations of x(s)), so
an exact copy gives a large but finite density."""

LOG_2PI = math.log(2 * math.pi)


def min_test_samples(q: float) -> int:
    """The fewest test samples the rank null needs at level ``q``: ⌈10 / q⌉.

    Among the n test samples of a cell a member passes Benjamini–Hochberg only if its
    p-value, at least 1/(M+1) = 1/n, is at most q·k/n (k samples marked): a cell marks
    nothing with fewer than 1/q members. With n ≥ 10 / q a cell marks its members once a
    tenth of its samples or more are members.
    """
    return math.ceil(10.0 / check_fdr_level(q))


def check_test_split(n_test: int, q: float = FDR_Q) -> None:
    """:class:`SplitTooSmallError` when ``n_test`` test samples are fewer than the rank
    null at level ``q`` needs (:func:`min_test_samples`)."""
    need = min_test_samples(q)
    if n_test < need:
        raise SplitTooSmallError(
            f"test split: the critic's rank null at q = {q} needs at least {need} test "
            f"samples (10 / q), got {n_test}; use more samples or a larger test fraction"
        )


def _log_scale(raw: torch.Tensor) -> torch.Tensor:
    """Unconstrained outputs -> log σ ≥ :data:`LOG_SCALE_FLOOR` (≈ raw above 0)."""
    return LOG_SCALE_FLOOR + nn.functional.softplus(raw - LOG_SCALE_FLOOR)


def _log_normal(y: torch.Tensor, mean: torch.Tensor, log_scale: torch.Tensor) -> torch.Tensor:
    """Diagonal Gaussian log-density summed over the last axis (broadcasting)."""
    z = (y - mean) * torch.exp(-log_scale)
    return -0.5 * (z.square() + LOG_2PI).sum(-1) - log_scale.sum(-1)


class BatchedCritic(BatchedProbes):
    """C critics, one per cell: the mixture density of the module docstring.

    Parameters (leading axis = cell, ``nn.Linear`` orientation), for S positions, k
    coordinates, hidden width h, K = :data:`CONTENT_COMPONENTS`, K0 =
    :data:`NULL_COMPONENTS`: mixing and positional head ``w_in [c, h, E]``,
    ``b_in [c, h]``, ``w_query [c, S, h]``, ``w_out [c, K+2+k+1, h]``, ``b_out``;
    content head (linear in the state) ``w_content [c, 2·K·k, E]``, ``b_content``; the
    cell's basis ``rotation [c, k, k]`` (starts at the identity); null
    ``null_mean [c, S, K0, k]``, ``null_log_scale [c, S, K0, k]``, ``null_logit [c, S, K0]``.
    """

    components = CONTENT_COMPONENTS
    scale_floor = LOG_SCALE_FLOOR
    accelerator = fused.CRITIC

    def __init__(
        self,
        cells: range,
        n_positions: int,
        d_in: int,
        hidden: int,
        d_out: int,
        *,
        seed: int = 0,
        arrays: dict[str, np.ndarray] | None = None,
    ) -> None:
        super().__init__()
        K, K0, k = CONTENT_COMPONENTS, NULL_COMPONENTS, d_out
        fan = d_in + n_positions
        shapes = {
            "w_in": (hidden, d_in),
            "b_in": (hidden,),
            "w_query": (n_positions, hidden),
            "w_out": (K + 2 + k + 1, hidden),
            "b_out": (K + 2 + k + 1,),
            "w_content": (2 * K * k, d_in),
            "b_content": (2 * K * k,),
            "null_mean": (n_positions, K0, k),
            "null_log_scale": (n_positions, K0, k),
            "null_logit": (n_positions, K0),
            "rotation": (k, k),
        }
        fan_in: dict[str, int | None] = {"w_in": fan, "b_in": fan, "w_query": fan}
        fan_in |= {"w_out": hidden, "b_out": hidden, "w_content": d_in, "b_content": d_in}
        fan_in |= {"null_mean": None}
        fan_in |= {"null_log_scale": 1 << 30, "null_logit": 1 << 30}  # ≈ 0: unit, equal
        fan_in["rotation"] = 1 << 30
        init_params(self, cells, shapes, fan_in, seed, arrays)
        if arrays is None:
            with torch.no_grad():
                self.rotation += torch.eye(k)
        self.k = k
        self.probe_shape = (len(cells),)

    @staticmethod
    def log_scale(raw: torch.Tensor) -> torch.Tensor:
        """Unconstrained outputs -> log σ ≥ :data:`LOG_SCALE_FLOOR` (≈ raw above 0)."""
        return _log_scale(raw)

    def readout(self, x: torch.Tensor) -> torch.Tensor:
        """The hidden layer's outputs ``[c, S, K+3+k, b]`` for standardised states
        ``x [c, b, E]``: GELU(W h + Q[s] + b) read out by ``w_out``. Without autograd, the
        accelerator computes them where it serves (without writing the ``[c, h, S, b]``
        activations)."""
        fast = None if torch.is_grad_enabled() else accelerator_of(self, x.device)
        if fast is not None:
            return fast.readout(self, x)
        c, b, _ = x.shape
        pre = self.state(x).unsqueeze(2) + self.w_query.transpose(1, 2).unsqueeze(3)
        n_pos = pre.shape[2]  # pre: [c, h, S, b]
        act = nn.functional.gelu(pre).reshape(c, pre.shape[1], n_pos * b)
        out = torch.baddbmm(self.b_out.unsqueeze(2), self.w_out, act)
        return out.view(c, -1, n_pos, b).transpose(1, 2)

    def state(self, x: torch.Tensor) -> torch.Tensor:
        """The first layer's contribution of the state ``[c, h, b]`` (contiguous)."""
        return torch.baddbmm(self.b_in.unsqueeze(2), self.w_in, x.transpose(1, 2))

    def heads(self, x: torch.Tensor, out: torch.Tensor | None = None) -> tuple[torch.Tensor, ...]:
        """Per-sample mixture parameters for standardised states ``x [c, b, E]`` (``out``:
        their :meth:`readout`, computed when not given).

        Returns log π ``[c, S, K+2, b]``, the positional mean ``[c, S, b, k]`` and log σ
        ``[c, S, b]``, the content means and log σ ``[c, K, b, k]`` each.
        """
        c, b, _ = x.shape
        K, k = CONTENT_COMPONENTS, self.k
        out = self.readout(x) if out is None else out  # [c, S, K+3+k, b]
        log_pi = torch.log_softmax(out[:, :, : K + 2], dim=2)
        pos_mean = out[:, :, K + 2 : K + 2 + k].transpose(2, 3)  # [c, S, b, k]
        pos_log_scale = _log_scale(out[:, :, -1])  # [c, S, b]
        content = torch.baddbmm(self.b_content.unsqueeze(2), self.w_content, x.transpose(1, 2))
        content = content.view(c, 2, K, k, b).permute(0, 1, 2, 4, 3)  # [c, 2, K, b, k]
        return log_pi, pos_mean, pos_log_scale, content[:, 0], _log_scale(content[:, 1])

    def null_log_density(self, y: torch.Tensor) -> torch.Tensor:
        """log q0(y | s) for ``y [..., S, k]`` -> ``[c, ..., S]``: per position one product
        of the points' features with every cell's components
        (:func:`~infoprobe.probes.critic_scores.features`)."""
        c, n_pos, K0, _ = self.null_mean.shape
        lead = y.shape[:-2]
        phi = features(y.reshape(-1, n_pos, self.k)).transpose(0, 1)  # [S, N, F]
        coef = coefficients(self.null_mean, _log_scale(self.null_log_scale))  # [c, S, K0, F]
        coef = coef.permute(1, 3, 0, 2).reshape(n_pos, phi.shape[2], c * K0)
        dens = torch.bmm(phi, coef).view(n_pos, -1, c, K0)
        log_w = torch.log_softmax(self.null_logit, dim=-1).transpose(0, 1).unsqueeze(1)
        out = torch.logsumexp(dens + log_w, dim=-1)  # [S, N, c]
        return out.permute(2, 1, 0).reshape(c, *lead, n_pos)

    def pvi(
        self, x: torch.Tensor, y: torch.Tensor, out: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(log q(y | h, s), log q0(y | s)), each ``[c, b, m, S]``, of ``m`` candidates per
        sample: standardised states ``x [c, b, E]`` and candidates ``y [b, m, S, k]``
        (``out``: the states' :meth:`readout`, computed when not given)."""
        log_pi, pos_mean, pos_ls, mean, ls = self.heads(x, out)
        null = self.null_log_density(y)  # [c, b, m, S]
        # the state's components are diagonal in the cell's own basis R y (+ log |det R|)
        y = torch.einsum("cij,bmsj->cbmsi", self.rotation, y)
        log_det = torch.linalg.slogdet(self.rotation)[1].view(-1, 1, 1, 1)
        # positional: mean [c, S, b, k] -> [c, b, 1, S, k] against y [b, m, S, k]
        pos_ls = pos_ls.transpose(1, 2)[:, :, None, :, None].expand(-1, -1, -1, -1, self.k)
        pos = _log_normal(y, pos_mean.permute(0, 2, 1, 3).unsqueeze(2), pos_ls)
        # content: mean [c, K, b, k] -> [c, K, b, 1, 1, k] against y [c, 1, b, m, S, k]
        cont = _log_normal(y.unsqueeze(1), mean[:, :, :, None, None], ls[:, :, :, None, None])
        parts = torch.cat(
            [null.detach().unsqueeze(1), (pos + log_det).unsqueeze(1), cont + log_det.unsqueeze(1)],
            dim=1,
        )
        weights = log_pi.permute(0, 2, 3, 1).unsqueeze(3)  # [c, K+2, b, 1, S]
        return torch.logsumexp(parts + weights, dim=1), null

    def per_probe_loss(
        self, x: torch.Tensor, y: torch.Tensor, out: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Negative log likelihood per cell ``[c]``: mixture plus null, each the mean over
        samples and positions (``x [c, b, E]``, ``y [b, S, k]`` standardised; ``out``:
        the states' :meth:`readout`, computed when not given)."""
        log_q, null = self.pvi(x, y.unsqueeze(1), out)
        return -(log_q.mean(dim=(1, 2, 3)) + null.mean(dim=(1, 2, 3)))


def negatives_of(n: int) -> int:
    """Mismatched candidates per test sample among ``n``: min(n - 1, MAX_NEGATIVES)."""
    return pair_negatives(n, MAX_NEGATIVES)


def rank_scores(module: BatchedCritic, x: torch.Tensor, y: torch.Tensor) -> np.ndarray:
    """Matched PVI and the count of mismatched candidates scoring at least as high,
    ``[n, c, S, 2]`` (:func:`infoprobe.probes.critic_scores.rank_scores`, M =
    :func:`negatives_of`)."""
    return pair_rank_scores(module, x, y, MAX_NEGATIVES)


def critic_factory(
    n_positions: int, d_in: int, hidden: int, d_out: int, seed: int
) -> ModuleFactory:
    """A module factory building :class:`BatchedCritic` probes for a range of cells."""

    def make(cells: range, arrays: dict[str, np.ndarray] | None) -> BatchedProbes:
        return BatchedCritic(cells, n_positions, d_in, hidden, d_out, seed=seed, arrays=arrays)

    return make


NULL_MARGIN = 0.05
"""Nats per validation sample a fitted density may fall below its own null at a position
before its fit counts as failed (``below_null``: the null is one of its components)."""
LINEAR_LEVEL = 0.75
"""Where the linear-Gaussian reference tells matched from mismatched validation pairs at
least this often, the state is known to hold x(s) (``below_linear``)."""
LINEAR_MARGIN = 0.1
"""... and a critic that tells them apart this much less often than the reference failed
(about 3.5 standard errors of the difference at 600 validation samples)."""
STATISTICS = ("log_q", "log_q0", "discrimination", "linear_discrimination")
"""The critic's validation statistics per cell and position (:func:`validation_statistics`)."""


def _wins(pvi: torch.Tensor) -> torch.Tensor:
    """Sum over samples of [matched > mismatched] + ½[equal], ``pvi [c, b, 2, S]`` -> ``[c, S]``."""
    matched, mismatched = pvi[:, :, 0], pvi[:, :, 1]
    return ((matched > mismatched).double() + 0.5 * (matched == mismatched).double()).sum(1)


def linear_reference(pred: torch.Tensor, var: torch.Tensor, cand: torch.Tensor) -> torch.Tensor:
    """PVI ``[c, b, m, S]`` of candidates ``cand [b, m, S, k]`` under a linear-Gaussian
    model of each cell, its ridge predictions ``pred [c, b, S, k]`` and residual variances
    ``var [c, S]`` (:func:`~infoprobe.probes.references.ridge_reference`; isotropic, floored
    as the critic's scales), against a standard normal null."""
    var = var.clamp_min(math.exp(2 * LOG_SCALE_FLOOR))
    k, y = cand.shape[-1], cand.double().unsqueeze(0)  # [1, b, m, S, k]
    pred = pred.unsqueeze(2)  # [c, b, 1, S, k]
    fit = -0.5 * ((y - pred).square().sum(-1) / var[:, None, None] + k * var.log()[:, None, None])
    return fit + 0.5 * y.square().sum(-1)


def validation_statistics(
    module: BatchedCritic,
    x_train: torch.Tensor,
    z_train: torch.Tensor,
    x_val: torch.Tensor,
    z_val: torch.Tensor,
) -> np.ndarray:
    """How a fitted critic does on the validation split, ``[c, 4, S]`` (:data:`STATISTICS`):
    the mean log-likelihood per sample of its density and of its null (nats, standardised
    units), and how often its PVI ranks each sample's own x(s) above the next sample's
    (ties count half), beside the same for :func:`linear_reference`. Validation samples
    only: nothing here reads the test split."""
    c, n = x_val.shape[:2]
    cand = torch.stack([z_val, z_val.roll(-1, dims=0)], dim=1)  # [n, 2, S, k]: own, next
    total = torch.zeros(c, 4, z_val.shape[1], dtype=torch.float64, device=x_val.device)
    pred, var = ridge_reference(x_train, z_train, x_val)  # fitted once, read per batch
    step = 256
    for start in range(0, n, step):
        rows = slice(start, start + step)
        log_q, null = module.pvi(x_val[:, rows], cand[rows])  # [c, b, 2, S]
        total[:, 0] += log_q[:, :, 0].sum(1).double()
        total[:, 1] += null[:, :, 0].sum(1).double()
        total[:, 2] += _wins(log_q - null)
        total[:, 3] += _wins(linear_reference(pred[:, rows], var, cand[rows]))
    return (total / max(n, 1)).cpu().numpy()


def judge_fits(stats: np.ndarray) -> np.ndarray:
    """Failure bits ``[C]`` (:data:`~infoprobe.probes.refits.FAILURES`) of validation
    statistics ``[C, 4, S]``: ``below_null`` where the density falls more than
    :data:`NULL_MARGIN` below its null at some position; ``below_linear`` where, at a
    position the linear reference tells apart at least :data:`LINEAR_LEVEL` of the time,
    the critic does :data:`LINEAR_MARGIN` worse."""
    below_null = (stats[:, 0] - stats[:, 1]).min(axis=1) < -NULL_MARGIN
    ours, linear = stats[:, 2], stats[:, 3]
    below_linear = ((linear >= LINEAR_LEVEL) & (ours < linear - LINEAR_MARGIN)).any(axis=1)
    return below_null.astype(np.uint8) << 1 | below_linear.astype(np.uint8) << 2


def critic_design(shape: ProbeShape, hidden: int, budget: TrainingBudget) -> ProbeDesign:
    """The :class:`ProbeDesign` of critics of width ``hidden`` for these sizes."""
    S, k, b, E = shape.n_targets, shape.d_out, budget.batch_size, shape.d_in
    K, K0 = CONTENT_COMPONENTS, NULL_COMPONENTS
    params = E * hidden + hidden + S * hidden + (K + 3 + k) * (hidden + 1)
    params += 2 * K * k * (E + 1) + k * k
    params += S * K0 * (2 * k + 1)
    # scoring the test samples keeps the readout [S, K+3+k, b] and the per-component
    # densities [K+2+K0, S, b, k]; a training step also the hidden layer [h, S, b]
    outputs = S * b * (K + 3 + k) + (K + 2 + K0) * S * b * k
    step = S * hidden * b + outputs
    return ProbeDesign(
        make_module=critic_factory(S, E, hidden, k, budget.seed),
        bytes_per_cell=4 * (5 * params + shape.n * E + 2 * max(step, outputs)),
        activation_bytes_per_cell=4 * step,
        desc="critic probes",
        evaluate=rank_scores,
        validate=validation_statistics,
        statistics=STATISTICS,
        judge=judge_fits,
    )


@dataclass
class CriticFit:
    """A fitted critic per cell (all arrays numpy).

    ``pvi [n_test, C, S]``: pointwise V-information of each test sample (nats);
    ``p_value [n_test, C, S]``: its rank p-value against ``negatives`` mismatched pairs;
    ``v_information [C, S]``: the mean of ``pvi`` over the test samples;
    ``best_val_loss``, ``best_epoch`` ``[C]``: per-cell early stopping; ``test_idx``: the
    test rows, in the order of the per-sample axes; ``engine``: weights and standardisation.
    """

    probe = "critic"

    pvi: np.ndarray
    p_value: np.ndarray
    negatives: int
    best_val_loss: np.ndarray
    best_epoch: np.ndarray
    test_idx: np.ndarray
    budget: TrainingBudget
    hidden: int
    engine: ChunkedFit

    @property
    def failures(self) -> np.ndarray:
        """Why each cell's kept fit failed ``[C]`` (0: it did not;
        :data:`~infoprobe.probes.refits.FAILURES`), after its restarts."""
        return self.engine.failures

    @property
    def starts(self) -> np.ndarray:
        """The starts each cell was fitted from ``[C]`` (1, or more after a failure)."""
        return self.engine.starts

    @property
    def validation_statistics(self) -> np.ndarray:
        """``[C, 4, S]``, :data:`STATISTICS` of the kept fits on the validation split."""
        return self.engine.val_stats

    @property
    def v_information(self) -> np.ndarray:
        """Mean PVI over the test samples ``[C, S]`` (nats)."""
        return self.pvi.astype(np.float64).mean(axis=0)

    def members(self, q: float = FDR_Q) -> np.ndarray:
        """Per-sample sets ``[n_test, C, S]``: :func:`critic_members` at level ``q``."""
        return critic_members(self.p_value, q)

    def settings(self) -> dict[str, object]:
        """The probe settings as plain data (for provenance in results files)."""
        return {
            "probe": self.probe,
            "hidden": self.hidden,
            "content_components": CONTENT_COMPONENTS,
            "null_components": NULL_COMPONENTS,
            "negatives": self.negatives,
            **vars(self.budget),
        }


def critic_members(p_value: np.ndarray, q: float = FDR_Q) -> np.ndarray:
    """Per-sample sets ``[n, C, S]`` of p-values ``[n, C, S]``: Benjamini–Hochberg at level
    ``q`` among the samples of each (cell, position)."""
    return benjamini_hochberg(p_value, q, axis=0)


def fit_critic_probe_sets(
    datasets: Sequence[tuple[ArrayLike, ArrayLike]],
    train_idx: ArrayLike,
    val_idx: ArrayLike,
    test_idx: ArrayLike,
    *,
    hidden: int = 64,
    q: float = FDR_Q,
    budget: TrainingBudget | None = None,
    device: str | torch.device = "cpu",
    max_memory_bytes: int = DEFAULT_MAX_MEMORY_BYTES,
    progress: bool = True,
) -> list[CriticFit]:
    """:func:`fit_critic_probe` on several ``(X [n, C, E], Y [n, S, k])`` datasets of the
    same shapes (a probe and its controls) with the same splits and budget, in one worker
    pool; one fit per dataset, each equal to its own :func:`fit_critic_probe`."""
    hidden = check_positive_int(hidden, "hidden")
    n_test = len(np.asarray(test_idx).reshape(-1))
    check_test_split(n_test, q)
    budget = TrainingBudget() if budget is None else budget
    engines, _, split = fit_checked(
        datasets,
        (train_idx, val_idx, test_idx),
        lambda shape: critic_design(shape, hidden, budget),
        budget,
        device=device,
        max_memory_bytes=max_memory_bytes,
        progress=progress,
    )
    negatives = negatives_of(n_test)
    return [
        CriticFit(
            pvi=e.test_pred[..., 0],
            # float32, as the results file keeps it: sets made here and from a file agree
            p_value=((1.0 + e.test_pred[..., 1]) / (negatives + 1.0)).astype(np.float32),
            negatives=negatives,
            best_val_loss=e.best_val_loss,
            best_epoch=e.best_epoch,
            test_idx=split[2],
            budget=budget,
            hidden=hidden,
            engine=e,
        )
        for e in engines
    ]


def fit_critic_probe(
    X: ArrayLike,
    Y: ArrayLike,
    train_idx: ArrayLike,
    val_idx: ArrayLike,
    test_idx: ArrayLike,
    *,
    hidden: int = 64,
    q: float = FDR_Q,
    budget: TrainingBudget | None = None,
    device: str | torch.device = "cpu",
    max_memory_bytes: int = DEFAULT_MAX_MEMORY_BYTES,
    progress: bool = True,
) -> CriticFit:
    """Fit one critic per cell and score every test sample against mismatched pairs.

    ``X [n, C, E]``: states of every cell. ``Y [n, S, k]``: x(s) of every queried position.
    Splits and budget as for :func:`~infoprobe.probes.query.fit_query_probe`; ``q``: the
    false discovery rate of the per-sample sets (:meth:`CriticFit.members`), which needs at
    least :func:`min_test_samples` test samples (:class:`SplitTooSmallError` otherwise).
    Returns per-sample PVI and p-values ``[n_test, C, S]`` (module docstring).
    """
    return fit_critic_probe_sets(
        [(X, Y)],
        train_idx,
        val_idx,
        test_idx,
        hidden=hidden,
        q=q,
        budget=budget,
        device=device,
        max_memory_bytes=max_memory_bytes,
        progress=progress,
    )[0]
