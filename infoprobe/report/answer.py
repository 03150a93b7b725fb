"""What a report leads with: ROC curves per predictor, where violations come from, what
the fixed threshold passes.

Every function works on the arrays of :class:`~infoprobe.compare.observations.Observations` and the
predicted sets, in the conventions of docs/conventions.md (layer, sample, token t,
position s; CLS = token T). Own positions s = t are left out everywhere, as in the
comparison.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from infoprobe.attention.program import NO_PROGRAM
from infoprobe.base.jsonable import jsonable
from infoprobe.compare.observations import Observations, scope_masks
from infoprobe.compare.predictors import INFOFLOW, sets_phrase
from infoprobe.compare.verdicts import percent


def roc_curve(scores: np.ndarray, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """False- and true-positive rates of ``scores`` (higher = positive) against bool
    ``labels`` (both flat ``[m]``), one point per distinct score from the highest down,
    starting at (0, 0) and ending at (1, 1); ties move both rates at once, so the
    trapezoid area equals the tie-aware AUROC. Returns (fpr, tpr), float64 ``[k+1]``."""
    scores = np.asarray(scores, dtype=np.float64).ravel()
    labels = np.asarray(labels, dtype=bool).ravel()
    if scores.shape != labels.shape:
        raise ValueError(f"roc_curve: scores {scores.shape} and labels {labels.shape} differ")
    n_pos, n_neg = int(labels.sum()), int((~labels).sum())
    if n_pos == 0 or n_neg == 0:
        raise ValueError(f"roc_curve: need positives and negatives, got {n_pos} and {n_neg}")
    order = np.argsort(-scores, kind="stable")
    ordered, hits = scores[order], labels[order]
    last = np.append(ordered[1:] != ordered[:-1], True)  # the last item of each tie run
    tp = np.cumsum(hits)[last]
    fp = np.cumsum(~hits)[last]
    return np.append(0.0, fp / n_neg), np.append(0.0, tp / n_pos)


def layer_scores(
    obs: Observations, predicted: np.ndarray, layer: int
) -> tuple[np.ndarray, np.ndarray] | None:
    """One layer's per-sample scores (signed: higher = more observed) and predicted
    labels over every (sample, token, position s ≠ t) cell, flat; None without scores.
    predicted: bool [L+1, n, T+1, T+1] (or [..., T])."""
    signed = obs.signed_sample_score()
    if signed is None:
        return None
    T = signed.shape[-1]
    others = np.broadcast_to(scope_masks(T)["others"], signed.shape[1:])
    return signed[layer][others], np.asarray(predicted)[layer, ..., :T][others]


# ----------------------------------------------------------------------------- violations


@dataclass(frozen=True)
class ViolationSources:
    """Where one instrument's violations of a predictor's per-sample sets come from.

    A violation is a cell (layer l, sample, token t, position s ≠ t) observed and not
    predicted. ``per_token``: int [L+1, T+1], violations by token t, pooled over samples
    and positions. ``new``: int [L+1, T+1], those that were not a violation at layer l-1
    in the same (sample, token, position): they entered token t's state in block l-1
    (layer 0: all). ``by_head``: int [L+1, T+1, H] (H = the most heads of any block; row
    0 and heads a block lacks are 0) or None without attention patterns: each new
    violation counted for the head of block l-1 that moves the most attention from query t
    onto keys carrying x(s) at layer l-1 (the keys whose observed set at l-1 holds s, and
    key s itself); ties go to the lower head.
    """

    per_token: np.ndarray
    new: np.ndarray
    by_head: np.ndarray | None

    @property
    def total(self) -> np.ndarray:
        """Violations per layer [L+1]."""
        return self.per_token.sum(axis=1)

    def to_dict(self) -> dict[str, Any]:
        return jsonable(
            {"total": self.total, "per_token": self.per_token, "new": self.new,
             "by_head": self.by_head}
        )  # fmt: skip


def violation_sources(
    predicted: np.ndarray, observed: np.ndarray, patterns: Sequence[np.ndarray] | None = None
) -> ViolationSources:
    """Count violations by token, by the layer they appear in and by the head that moved
    them (see :class:`ViolationSources`).

    predicted: bool [L+1, n, T+1, T+1] (or [..., T]); observed: bool [L+1, n, T+1, T]
    per-sample observed sets; patterns: per block b, float [n, h_b, T+1, T+1] attention
    (query, key) on the same samples, or None.
    """
    observed = np.asarray(observed, dtype=bool)
    layers, n, tokens, T = observed.shape
    pred = np.asarray(predicted, dtype=bool)[..., :T]
    if pred.shape != observed.shape:
        raise ValueError(
            f"predicted {pred.shape[:-1]}+[T] and observed {observed.shape}: not the same sets"
        )
    others = scope_masks(T)["others"]
    violation = observed & ~pred & others  # [L+1, n, T+1, T]
    per_token = violation.sum(axis=(1, 3))
    new = per_token.copy()
    new[1:] = (violation[1:] & ~violation[:-1]).sum(axis=(1, 3))
    by_head = None
    if patterns is not None:
        if len(patterns) != layers - 1:
            raise ValueError(f"patterns: expected {layers - 1} blocks, got {len(patterns)}")
        heads = max(np.asarray(p).shape[1] for p in patterns)
        by_head = np.zeros((layers, tokens, heads), dtype=np.int64)
        own = np.eye(tokens, T, dtype=bool)
        for block, pattern in enumerate(patterns):
            p = np.asarray(pattern, dtype=np.float64)
            if p.shape[0] != n or p.shape[2:] != (tokens, tokens):
                raise ValueError(
                    f"patterns[{block}]: expected [{n}, h, {tokens}, {tokens}], got {p.shape}"
                )
            carriers = (observed[block] | own).astype(np.float64)  # [n, k, s]
            mass = np.einsum("nhtk,nks->nhts", p, carriers)
            mover = mass.argmax(axis=1)  # [n, t, s]
            fresh = violation[block + 1] & ~violation[block]
            for head in range(p.shape[1]):
                by_head[block + 1, :, head] = (fresh & (mover == head)).sum(axis=(0, 2))
    return ViolationSources(per_token=per_token, new=new, by_head=by_head)


def _group_ops(heads: Mapping[str, Any] | None) -> dict[tuple[int, int], dict[str, Any]]:
    """(block, head) → its entry of the observed program's dict (``ObservedProgram.to_dict``)."""
    if not heads:
        return {}
    return {(int(h["block"]), int(h["head"])): h for h in heads.get("heads", [])}


def violation_lines(
    sources: ViolationSources,
    heads: Mapping[str, Any] | None = None,
    word: str = "observed",
    predictor: str = INFOFLOW,
) -> list[str]:
    """One sentence per layer with violations: how many sit at CLS and at data tokens
    (and which data token most), how many entered in the block before, and the head that
    moved most of those, with its observed mode at that query and the operation InfoFlow's
    program gives it (from ``heads``, ``ObservedProgram.to_dict()``); ``predictor``: whose
    sets were compared (``infoflow`` or ``your_sets``)."""
    ops = _group_ops(heads)
    lines = []
    tokens = sources.per_token.shape[1]
    nothing = (
        "InfoFlow predicts nothing"
        if predictor == INFOFLOW
        else f"{sets_phrase(predictor)} have nothing"
    )
    for layer in range(sources.per_token.shape[0]):
        total = int(sources.total[layer])
        if total == 0:
            continue
        parts = []
        groups = (("CLS", [tokens - 1], "cls"), ("data tokens", list(range(tokens - 1)), "data"))
        ranked = sorted(groups, key=lambda g: -int(sources.per_token[layer, g[1]].sum()))
        for label, index, group in ranked:
            count = int(sources.per_token[layer, index].sum())
            if count == 0:
                continue
            text = f"{count} ({percent(count, total, 0)}) at {label}"
            if group == "data":
                top = int(np.argmax(sources.per_token[layer, index]))
                text += f" (most at token {top}: {int(sources.per_token[layer, top])})"
            if layer > 0:
                fresh = int(sources.new[layer, index].sum())
                text += f", {fresh} of them new in block {layer - 1}"
                if sources.by_head is not None and fresh:
                    per_head = sources.by_head[layer, index].sum(axis=0)
                    head = int(np.argmax(per_head))
                    text += f", {int(per_head[head])} moved by head {head}"
                    entry = ops.get((layer - 1, head))
                    if entry is not None:
                        g = entry[group]
                        where = label if group == "cls" else "data"
                        program = "" if g["operation"] == NO_PROGRAM else (
                            f", where InfoFlow's program has: {g['operation']}"
                        )  # fmt: skip
                        text += f" (observed at the {where} queries: {g['mode']}{program})"
            else:
                text += " (layer 0: the embedding, before any block)"
            parts.append(text)
        lines.append(
            f"layer {layer}: {total} violations ({word} where {nothing}): " + "; ".join(parts)
        )
    return lines


# ----------------------------------------------------------------------------- thresholds


@dataclass(frozen=True)
class ThresholdCheck:
    """What a per-sample threshold passes, per layer [L+1], own positions left out:
    ``pass_predicted`` / ``pass_other``: share of predicted / other cells observed at the
    fixed τ; ``median_predicted`` / ``median_other``: the median raw score of each (the
    value the threshold is applied to)."""

    tau: float
    member_when: str
    score_name: str
    pass_predicted: np.ndarray
    pass_other: np.ndarray
    median_predicted: np.ndarray
    median_other: np.ndarray

    def to_dict(self) -> dict[str, Any]:
        return jsonable({k: getattr(self, k) for k in self.__dataclass_fields__})


def threshold_check(obs: Observations, predicted: np.ndarray) -> ThresholdCheck | None:
    """:class:`ThresholdCheck` of one instrument, or None without per-sample scores and τ."""
    if obs.sample_score is None or obs.tau_sample is None or obs.per_sample is None:
        return None
    layers = obs.sample_score.shape[0]
    T = obs.sample_score.shape[-1]
    others = np.broadcast_to(scope_masks(T)["others"], obs.sample_score.shape[1:])
    pred = np.asarray(predicted, dtype=bool)[..., :T]
    out: dict[str, list[float]] = {k: [] for k in ("pp", "po", "mp", "mo")}
    for layer in range(layers):
        raw, passed = obs.sample_score[layer][others], obs.per_sample[layer][others]
        labels = pred[layer][others]
        for key, part in (("p", labels), ("o", ~labels)):
            out["p" + key].append(float(passed[part].mean()) if part.any() else float("nan"))
            out["m" + key].append(float(np.median(raw[part])) if part.any() else float("nan"))
    return ThresholdCheck(
        float(obs.tau_sample),
        obs.member_when,
        obs.sample_score_name,
        *(np.asarray(out[k]) for k in ("pp", "po", "mp", "mo")),
    )


def threshold_line(
    check: ThresholdCheck,
    layer: int,
    auroc: float,
    word: str,
    interval: tuple[float, float] | None = None,
) -> str:
    """Why the share at the fixed τ and the AUROC can tell different stories, in numbers:
    the share counts cells that clear τ, the AUROC only compares the two groups' scores.
    ``interval``: the AUROC's bootstrap interval, printed beside it when given."""
    relation = "<" if check.member_when == "below" else "≥"
    median = check.median_predicted[layer]
    text = (
        f"layer {layer}: at the fixed threshold ({check.score_name} {relation} {check.tau:.3g}) "
        f"{100 * check.pass_predicted[layer]:.1f}% of predicted positions and "
        f"{100 * check.pass_other[layer]:.1f}% of the others are {word}; the median "
        f"{check.score_name} is {median:.3g} at predicted positions and "
        f"{check.median_other[layer]:.3g} at the others."
    )
    clears = median < check.tau if check.member_when == "below" else median >= check.tau
    if np.isfinite(median) and not clears:
        text += (
            " The typical predicted position does not clear τ, so the share stays small "
            "however the positions rank."
        )
    shown = (
        "" if interval is None or None in interval else f" [{interval[0]:.3f}, {interval[1]:.3f}]"
    )
    text += f" AUROC {auroc:.3f}{shown} compares the two groups without a threshold"
    if auroc > 0.55 and check.pass_predicted[layer] < 0.05:
        text += (
            ": predicted positions score better than the others more often than not, but "
            "almost none clear the threshold, so the share is near 0 while the AUROC is not"
        )
    return text + "."
