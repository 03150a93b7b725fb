"""Measurements on a trained run beyond its NMSE: CLS attention, probes at CLS, role probes.

Each analysis reads the run's checkpoint folder, works in a scratch folder it is given,
and returns a JSON-ready dict stored under ``record["analyses"][name]``. Samples are
fresh: drawn from ``default_rng([seed + DATA_SEED_OFFSET, ...])`` (the caching
convention), never the training, validation or test streams. The *untrained* control
of the probes is the same network at its initialisation (the run's own seed) *(our
choice)*. Decodable is not used: a probe score says how well a linear map of a fixed
budget recovers x(s) from a state, not whether the network uses it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from infoprobe.checkpoint import load_checkpoint
from infoprobe.pipeline.cache_settings import DATA_SEED_OFFSET
from infoprobe.pipeline.caching import cache_checkpoint
from infoprobe.pipeline.probing import ProbeSettings, probe_cache
from infoprobe.reproduce.grid import ReproduceError

PATTERN = "blocks.{b}.attn.hook_pattern"


def mean_cls_attention(model: torch.nn.Module, x: np.ndarray) -> list[np.ndarray]:
    """Mean attention of the CLS query on every key, per block: ``[h_b, T+1]`` each.

    x: inputs ``[n, T, d]``; averaged over the n samples.
    """
    n_blocks = model.cfg.n_layers
    names = [PATTERN.format(b=b) for b in range(n_blocks)]
    with torch.inference_mode():
        _, cache = model.run_with_cache(torch.as_tensor(x), names_filter=names)
    T = x.shape[1]
    return [cache[name][:, :, T, :].double().mean(0).cpu().numpy() for name in names]


def cls_attention(checkpoint: Path, work: Path, *, seed: int, n: int = 2048) -> dict[str, Any]:
    """CLS attention per block, head and key position (0..T-1 data, T = CLS itself)."""
    model, task = load_checkpoint(checkpoint, allow_no_task=False)
    x, _ = task.sample(n, np.random.default_rng([seed + DATA_SEED_OFFSET, 0]))
    return {"n": n, "blocks": [a.tolist() for a in mean_cls_attention(model, x)]}


def _caches(checkpoint: Path, work: Path, *, seed: int, n: int, sites: str) -> tuple[Path, Path]:
    """Activation caches of the trained run and of its initial weights (same samples)."""
    work.mkdir(parents=True, exist_ok=True)
    main, control = work / "acts.h5", work / "control.h5"
    common = {"n": n, "batch_size": min(n, 1024), "progress": False, "overwrite": True}
    cache_checkpoint(checkpoint, main, sites=sites, **common)
    cache_checkpoint(checkpoint, control, sites="residual", random_init_seed=seed, **common)
    return main, control


def cls_probe(checkpoint: Path, work: Path, *, seed: int, n: int = 4096) -> dict[str, Any]:
    """Linear probes of x(s) from the CLS state at every layer, with controls.

    Returns R² ``[L+1][T]`` for the probe, the shuffled pairing and the untrained network,
    and the aggregate observed set at CLS (fixed thresholds of :class:`Thresholds`).
    """
    main, control = _caches(checkpoint, work, seed=seed, n=n, sites="residual")
    res = probe_cache(main, control_path=control, settings=ProbeSettings(), progress=False)
    T = res.T
    return {
        "n": n,
        "layers": list(res.layers),
        "r2": res.score("r2")[:, T, :].tolist(),
        "shuffled_r2": res.score("r2", control="shuffled")[:, T, :].tolist(),
        "random_init_r2": res.score("r2", control="random_init")[:, T, :].tolist(),
        "observed": res.observed[("positions", "aggregate")][:, T, :T].tolist(),
        "thresholds": res.thresholds,
    }


def _parse_role(name: str) -> tuple[int, int, int]:
    """``"b0.h1.rank2"`` → (block 0, head 1, rank 2)."""
    block, head, rank = name.split(".")
    return int(block[1:]), int(head[1:]), int(rank[4:])


def role_probe(
    checkpoint: Path,
    work: Path,
    *,
    seed: int,
    n: int = 4096,
    ranks: Sequence[int] = (1, 2),
    tokens: str = "data",
) -> dict[str, Any]:
    """Probe x at the k-th most attended key of each head from h(t, b+1), trained vs untrained.

    For each attention role (block b, head j, rank k) the linear probe's test NMSE is
    averaged over the query tokens ``tokens`` (``"data"``: 0..T-1, ``"cls"``: T) at layer
    b+1 (the residual stream after block b), for the trained network and for the same
    network at initialisation (same samples, same partner positions, read from the
    trained network's patterns); ``ratio`` = trained / untrained.
    """
    if tokens not in ("data", "cls"):
        raise ReproduceError(f"role_probe: tokens must be 'data' or 'cls', got {tokens!r}")
    main, control = _caches(checkpoint, work, seed=seed, n=n, sites="residual,attention")
    settings = ProbeSettings(targets="roles", ranks=tuple(ranks))
    res = probe_cache(main, control_path=control, settings=settings, progress=False)
    T = res.T
    query = slice(0, T) if tokens == "data" else slice(T, T + 1)
    trained = res.score("nmse", "roles")
    untrained = res.score("nmse", "roles", control="random_init")
    baseline = res.score("nmse", "roles", control="conditional")
    roles = []
    for r, name in enumerate(res.role_names):
        block, head, rank = _parse_role(name)
        layer = block + 1
        err = float(trained[layer, query, r].mean())
        ref = float(untrained[layer, query, r].mean())
        roles.append(
            {
                "name": name,
                "block": block,
                "head": head,
                "rank": rank,
                "layer": layer,
                "nmse": err,
                "untrained_nmse": ref,
                "embedding_nmse": float(baseline[layer, query, r].mean()),
                "ratio": err / ref if ref > 0 else float("nan"),
            }
        )
    return {"n": n, "tokens": tokens, "roles": roles}


Analysis = Callable[..., dict[str, Any]]
ANALYSES: dict[str, Analysis] = {
    "cls_attention": cls_attention,
    "cls_probe": cls_probe,
    "role_probe": role_probe,
}


def run_analysis(
    name: str, checkpoint: Path, work: Path, *, seed: int, params: dict[str, Any]
) -> dict[str, Any]:
    """Run analysis ``name`` with its parameters from the grid point."""
    if name not in ANALYSES:
        raise ReproduceError(f"unknown analysis {name!r}; valid: {sorted(ANALYSES)}")
    return ANALYSES[name](checkpoint, work, seed=seed, **params)
