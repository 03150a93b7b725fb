"""The comparison in words: one verdict per layer (:func:`layer_verdicts`) and the
headline across instruments (:func:`headline`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from infoprobe.compare.agreement import SetAgreement
from infoprobe.compare.predictors import INFOFLOW

if TYPE_CHECKING:
    from infoprobe.compare.scopes import AggregateScope, SampleScope, SetComparison


def percent(num: Any, den: Any, digits: int = 1) -> str:
    """``num`` of ``den`` as a percentage with ``digits`` decimals ("n/a" when ``den`` is 0)."""
    num, den = int(num), int(den)
    return "n/a" if den == 0 else f"{100.0 * num / den:.{digits}f}%"


def interval_text(interval: Any, digits: int = 2) -> str:
    """`` [lo, hi]`` of an interval (lo, hi), "" when there is none (None or NaN)."""
    if interval is None or not np.isfinite(np.asarray(interval, dtype=float)).all():
        return ""
    lo, hi = (float(v) for v in interval)
    return f" [{lo:.{digits}f}, {hi:.{digits}f}]"


def _auroc_text(value: np.ndarray | None, layer: int, interval: np.ndarray | None) -> str:
    if value is None or not np.isfinite(value[layer]):
        return ""
    bounds = None if interval is None else interval[layer]
    return f"; AUROC {float(value[layer]):.3f}" + interval_text(bounds, 3)


def _own_text(own: SetAgreement | None, layer: int, word: str) -> str:
    if own is None or int(own.n_predicted[layer]) == 0:
        return ""
    agree, n_pred = int(own.agree[layer]), int(own.n_predicted[layer])
    return f"; own position {word} in {percent(agree, n_pred)}"


def layer_verdicts(
    per_sample: Mapping[str, SampleScope] | None,
    aggregate: Mapping[str, AggregateScope] | None,
    n_layers: int,
    word: str = "observed",
) -> tuple[str, ...]:
    """One sentence per layer 0..L about the other positions (own position apart), from
    the per-sample agreement, else the aggregate one."""
    verdicts = []
    for layer in range(n_layers + 1):
        sample = per_sample["others"] if per_sample else None
        agg = aggregate["others"] if aggregate else None
        if sample is not None and sample.per_layer is not None:
            a = sample.per_layer
            text = (
                f"layer {layer}: {percent(a.agree[layer], a.n_predicted[layer])} of "
                f"predicted positions {word} ({int(a.agree[layer])} of "
                f"{int(a.n_predicted[layer])}, per sample), "
                f"{percent(a.violations[layer], a.n_not_predicted[layer])} of the "
                f"rest ({int(a.violations[layer])} of {int(a.n_not_predicted[layer])})"
                + _auroc_text(sample.auroc_per_layer, layer, sample.auroc_per_layer_interval)
                + _own_text(per_sample["own"].per_layer, layer, word)
            )
        elif agg is not None and agg.per_layer is not None:
            a = agg.per_layer
            some_obs = int(agg.sometimes_observed[layer])
            some_all = some_obs + int(agg.sometimes_unobserved[layer])
            text = (
                f"layer {layer} (aggregate): "
                f"{percent(a.agree[layer], a.n_predicted[layer])} of always-predicted "
                f"positions {word} ({int(a.agree[layer])} of {int(a.n_predicted[layer])}); "
                f"{percent(a.violations[layer], a.n_not_predicted[layer])} of "
                f"never-predicted positions {word} ({int(a.violations[layer])} of "
                f"{int(a.n_not_predicted[layer])}); {some_obs} of {some_all} "
                f"sometimes-predicted positions {word}"
                + _auroc_text(agg.auroc_per_layer, layer, agg.auroc_per_layer_interval)
                + _own_text(aggregate["own"].per_layer, layer, word)
            )
        else:
            source = sample if sample is not None else agg
            text = f"layer {layer}: no thresholded sets" + (
                ""
                if source is None
                else _auroc_text(source.auroc_per_layer, layer, source.auroc_per_layer_interval)
            )
        verdicts.append(text)
    return tuple(verdicts)


def headline(
    comparisons: Mapping[str, Mapping[str, SetComparison]], predictor: str = INFOFLOW
) -> tuple[str, ...]:
    """One line per layer leading with every instrument's AUROC against ``predictor``
    (controls in brackets), then the primary instrument's set agreement (own positions
    left out), each AUROC with its bootstrap interval, e.g. ``layer 1: flow AUROC 0.97
    [0.96, 0.98] (random-init 0.38 [0.33, 0.43]); decodability (linear probe) AUROC 0.61
    [0.58, 0.64]; 61% of predicted positions carried, 3% of the rest``.

    comparisons: instrument → predictor → :class:`~infoprobe.compare.scopes.SetComparison`;
    the first instrument that is not a control is the primary one.
    """
    ours = {k: v[predictor] for k, v in comparisons.items() if predictor in v}
    if not ours:
        return ()
    main = [k for k, c in ours.items() if c.observations.control_of is None]
    controls = {c.observations.control_of: c for c in ours.values() if c.observations.control_of}
    n_layers = next(iter(ours.values())).n_layers
    lines = []
    for layer in range(n_layers + 1):
        parts = []
        for name in main:
            title = ours[name].observations.label or name
            text = f"{title} AUROC {_fmt_ci(ours[name], layer)}"
            if name in controls:
                control = controls[name]
                label = control.instrument.removeprefix(name).strip(" ()") or "control"
                text += f" ({label} {_fmt_ci(control, layer)})"
            parts.append(text)
        if main:
            primary = ours[main[0]]
            scope = (primary.per_sample or primary.aggregate or {}).get("others")
            if scope is not None and scope.per_layer is not None:
                a, word = scope.per_layer, primary.observations.word
                rest = f"{percent(a.violations[layer], a.n_not_predicted[layer], 0)} of the rest"
                if int(a.n_predicted[layer]) == 0:  # e.g. layer 0: I(t, 0) = {t}
                    parts = [f"nothing predicted besides each token's own position; {rest} {word}"]
                else:
                    parts.append(
                        f"{percent(a.agree[layer], a.n_predicted[layer], 0)} of predicted "
                        f"positions {word}, {rest}"
                    )
        lines.append(f"layer {layer}: " + "; ".join(parts))
    return tuple(lines)


def _fmt_ci(comparison: SetComparison, layer: int) -> str:
    value = comparison.auroc(layer)
    if not np.isfinite(value):
        return "n/a"
    return f"{value:.2f}" + interval_text(comparison.auroc_interval(layer))
