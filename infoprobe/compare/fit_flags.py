"""Cells whose probe fit failed after its restarts, and the AUROCs with and without them.

A probe results file records how each cell's fit went (``/scores/positions/<probe>/none/
fit_failure``: 0 for a good fit, else the failure bits of
:data:`~infoprobe.probes.refits.FAILURES`). A flagged cell is never dropped from a
statistic in silence: wherever one is flagged, `compare` and the report name it and give
each instrument's per-sample AUROC (own positions left out) over all cells and over the
cells not flagged, side by side.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from einops import rearrange

from infoprobe.compare.auroc import auroc
from infoprobe.compare.observations import Observations
from infoprobe.probes.refits import failure_names

__all__ = ["flag_lines", "flagged_cells", "flagged_fits"]


def flagged_cells(results: Any, probe: str, control: str = "none") -> np.ndarray | None:
    """Failure codes ``[L+1, T+1]`` (uint8, 0: a good fit) of the fit of ``probe`` (its
    ``control``) in a results file, or None when the file records no judgement of it."""
    codes = results.scores.get(("positions", probe, control, "fit_failure"))
    if codes is None:
        return None
    return np.bitwise_or.reduce(np.asarray(codes).astype(np.uint8), axis=-1)


def _others_auroc(pred: np.ndarray, obs: Observations, keep: np.ndarray) -> list[float | None]:
    """Per-layer per-sample AUROC over data positions s != t of the cells ``keep [L+1,
    T+1]``."""
    signed = obs.signed_sample_score()
    if signed is None:  # aggregate scores only: no per-sample AUROC
        return [None] * len(keep)
    tokens, positions = signed.shape[2:]
    valid = ~np.eye(tokens, positions, dtype=bool)[None, None] & keep[:, None, :, None]
    valid = np.broadcast_to(valid, signed.shape)
    flat = "l n t s -> l (n t s)"
    values = auroc(rearrange(signed, flat), rearrange(pred, flat), rearrange(valid, flat))
    return [None if not np.isfinite(v) else float(v) for v in values]


def flagged_fits(predicted: np.ndarray, instruments: dict[str, Observations]) -> dict[str, Any]:
    """For every instrument with a flagged cell: the cells ``[[layer, token], ...]``, their
    failure reasons, and the per-layer AUROC against ``predicted [L+1, n, T+1, T+1]`` with
    and without them. Empty when nothing is flagged."""
    found = {}
    for name, obs in instruments.items():
        if obs.fit_failures is None or not obs.fit_failures.any():
            continue
        pred = predicted[..., :-1]  # the CLS position column is never measured
        codes = obs.fit_failures
        cells = np.argwhere(codes != 0)
        found[name] = {
            "T": int(predicted.shape[2] - 1),
            "cells": cells.tolist(),
            "reasons": [failure_names(codes[layer, t]) for layer, t in cells],
            "auroc": _others_auroc(pred, obs, np.ones(codes.shape, dtype=bool)),
            "auroc_without_flagged": _others_auroc(pred, obs, codes == 0),
        }
    return found


def flag_lines(flags: dict[str, Any]) -> list[str]:
    """Lines naming each instrument's flagged cells and its AUROCs with and without them."""

    def auc(values: list[float | None]) -> str:
        return ", ".join(
            f"layer {layer} {'n/a' if v is None else f'{v:.3f}'}" for layer, v in enumerate(values)
        )

    lines = []
    for name, entry in flags.items():
        cells = [
            f"layer {layer} token {'CLS' if t == entry['T'] else t} ({', '.join(why)})"
            for (layer, t), why in zip(entry["cells"], entry["reasons"], strict=True)
        ]
        lines.append(
            f"{name}: {len(cells)} cell fit(s) failed after restarts (flagged): " + "; ".join(cells)
        )
        lines.append(f"  AUROC with them: {auc(entry['auroc'])}")
        lines.append(f"  AUROC without them: {auc(entry['auroc_without_flagged'])}")
    return lines
