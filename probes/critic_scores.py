"""The critic's scores of every test sample against every candidate, as matrix products.

A diagonal Gaussian's log-density is linear in the features of its point::

    log N(z; m, diag σ²) = φ(z) · ψ(m, σ),   φ(z) = [z², z, 1],
    ψ(m, σ) = [-a/2, a m, -Σ a m²/2 - Σ log σ - k log(2π)/2],   a = σ⁻²

so the density of n candidates under b samples' components is one product
``[b, 2k+1] @ [2k+1, n]`` per cell and position instead of a ``[b, n, k]`` array per
component. :func:`pair_pvi` evaluates the critic's mixture (:mod:`.critic`) so, and
:func:`rank_scores` ranks each sample's matched PVI among its mismatched candidates.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from infoprobe.probes.batched_training import BatchedProbes

PAIR_FLOATS = 1 << 24
"""Values of one block of pair scores (components × cells × positions × rows ×
candidates): 64 MiB in float32."""

LOG_2PI = math.log(2 * math.pi)


def features(z: torch.Tensor) -> torch.Tensor:
    """φ(z) = [z², z, 1] of points ``[..., k]`` → ``[..., 2k+1]``."""
    return torch.cat([z.square(), z, torch.ones_like(z[..., :1])], dim=-1)


def coefficients(mean: torch.Tensor, log_scale: torch.Tensor) -> torch.Tensor:
    """ψ(m, σ) of diagonal Gaussians, mean and log σ ``[..., k]`` → ``[..., 2k+1]``."""
    a = torch.exp(-2.0 * log_scale)
    const = -0.5 * (a * mean.square()).sum(-1) - log_scale.sum(-1) - 0.5 * mean.shape[-1] * LOG_2PI
    return torch.cat([-0.5 * a, a * mean, const.unsqueeze(-1)], dim=-1)


@torch.no_grad()
def candidate_terms(module: BatchedProbes, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """What :func:`pair_pvi` needs of the candidates ``y [n, S, k]`` alone: their features
    in each cell's basis φ(R y) ``[c, S, F, n]`` and their null log-density
    log q0(y | s) ``[c, S, n]``."""
    phi = features(torch.einsum("cij,nsj->csni", module.rotation, y)).transpose(2, 3)
    return phi.contiguous(), module.null_log_density(y).transpose(1, 2).contiguous()


@torch.no_grad()
def pair_pvi(
    module: BatchedProbes, x: torch.Tensor, phi: torch.Tensor, null: torch.Tensor
) -> torch.Tensor:
    """PVI of every candidate under every sample's state ``[c, S, b, n]``: standardised
    states ``x [c, b, E]``, the candidates' :func:`candidate_terms` ``phi [c, S, F, n]`` and
    ``null [c, S, n]``. The values of ``module.pvi`` of each pair up to the rounding of the
    expanded quadratic forms (float32: about 1e-7 · a·|y|², a few hundredths of a nat at
    the smallest σ; one deterministic function of the pair, so matched and mismatched
    pairs stay exchangeable)."""
    c, b, _ = x.shape
    n_pos, n, k = phi.shape[1], phi.shape[3], module.k
    log_pi, pos_mean, pos_ls, mean, ls = module.heads(x)  # log π [c, S, K+2, b]
    K = mean.shape[1]
    log_det = torch.linalg.slogdet(module.rotation)[1].view(c, 1, 1)
    parts = torch.empty(K + 2, c, n_pos, b, n, device=x.device)
    # positional: one product per (cell, position), [b, F] @ [F, n]
    pos_coef = coefficients(pos_mean, pos_ls.unsqueeze(-1).expand(-1, -1, -1, k))
    torch.matmul(pos_coef, phi, out=parts[1])
    # content: the same [b, F] coefficients against every position's candidates
    cont = coefficients(mean, ls).unsqueeze(2).expand(-1, -1, n_pos, -1, -1)  # [c, K, S, b, F]
    for j in range(K):
        torch.matmul(cont[:, j], phi, out=parts[2 + j])
    parts[0] = null.unsqueeze(2)
    weights = log_pi.permute(2, 0, 1, 3).clone()  # [K+2, c, S, b]
    weights[1:] += log_det  # the state's components are densities of R y
    parts += weights.unsqueeze(-1)
    top = parts.amax(dim=0)
    return parts.sub_(top).exp_().sum(dim=0).log_().add_(top).sub_(null.unsqueeze(2))


def negatives_of(n: int, max_negatives: int) -> int:
    """Mismatched candidates per test sample among ``n``: min(n - 1, max_negatives)."""
    return max(0, min(n - 1, max_negatives))


@torch.no_grad()
def rank_scores(
    module: BatchedProbes, x: torch.Tensor, y: torch.Tensor, max_negatives: int
) -> np.ndarray:
    """Matched PVI and the count of mismatched candidates scoring at least as high.

    ``x [c, n, E]``, ``y [n, S, k]`` standardised test states and targets; candidates of
    sample i are ``y[(i + m) % n]`` for m = 1, …, M (M = :func:`negatives_of`), ranked by
    :func:`pair_pvi` against the matched pair's value from the same function. Returns
    ``[n, c, S, 2]`` float32: (PVI from ``module.pvi``, count).
    """
    c, n, _ = x.shape
    n_pos = y.shape[1]
    M = negatives_of(n, max_negatives)
    K = module.w_content.shape[1] // (2 * module.k)
    step = max(1, min(n, PAIR_FLOATS // (c * (M + 1) * n_pos * (K + 2))))
    out = np.empty((n, c, n_pos, 2), dtype=np.float32)
    phi, null = candidate_terms(module, y)
    for start in range(0, n, step):
        rows = torch.arange(start, min(start + step, n), device=x.device)
        if len(rows) + M >= n:  # the block's candidates are every test sample
            columns = torch.arange(n, device=x.device)
            score = pair_pvi(module, x[:, rows], phi, null)  # [c, S, b, n]
        else:  # only the window start .. start + b + M - 1 (mod n)
            columns = (start + torch.arange(len(rows) + M, device=x.device)) % n
            score = pair_pvi(module, x[:, rows], phi[..., columns], null[..., columns])
        offset = (columns[None, :] - rows[:, None]) % n  # [b, columns]: m of each candidate
        matched = score[:, :, torch.arange(len(rows), device=x.device), offset.argmin(dim=1)]
        higher = score >= matched.unsqueeze(-1)
        count = (higher & (offset >= 1) & (offset <= M)).sum(dim=-1)  # [c, S, b]
        log_q, log_q0 = module.pvi(x[:, rows], y[rows].unsqueeze(1))  # [c, b, 1, S]
        pvi = (log_q - log_q0)[:, :, 0].transpose(1, 2)  # [c, S, b]
        block = torch.stack([pvi, count.to(pvi.dtype)], dim=-1)  # [c, S, b, 2]
        out[start : start + len(rows)] = block.permute(2, 0, 1, 3).cpu().numpy()
    return out
