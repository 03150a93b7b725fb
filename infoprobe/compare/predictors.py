"""The names of the set predictors a comparison scores instruments against: InfoFlow's
sets, the user's own sets (``infoprobe sets``) in their place, and attention rollout.
One key per predictor in every comparison (``comparisons[instrument][predictor]``) and
in comparison.json and summary.json; the words the console and the report show for it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

INFOFLOW = "infoflow"
YOUR_SETS = "your_sets"
ROLLOUT = "rollout"
DISPLAY_NAMES = {INFOFLOW: "InfoFlow", YOUR_SETS: "your sets", ROLLOUT: "attention rollout"}
"""How each predictor is named where results are shown."""
SETS_PHRASES = {INFOFLOW: "InfoFlow's sets", YOUR_SETS: "your sets", ROLLOUT: "rollout's sets"}
"""How each predictor's sets are called in a sentence ("AUROC against InfoFlow's sets")."""


def predictor_of(provenance: Mapping[str, Any]) -> str:
    """The predictor of a predicted-sets file, from its provenance: :data:`YOUR_SETS` for
    sets the user gave (``given_sets``), else :data:`INFOFLOW`."""
    return YOUR_SETS if provenance.get("given_sets") else INFOFLOW


def primary(by_predictor: Mapping[str, Any]) -> str:
    """The predicted sets' key among a comparison's predictors (not rollout)."""
    for name in (INFOFLOW, YOUR_SETS):
        if name in by_predictor:
            return name
    raise KeyError(f"no predicted sets among the predictors {sorted(by_predictor)}")


def display_name(name: str) -> str:
    """How a predictor's name is shown (``infoflow`` → ``InfoFlow``)."""
    return DISPLAY_NAMES.get(name, name)


def sets_phrase(name: str) -> str:
    """A predictor's sets in a sentence (``your_sets`` → ``your sets``)."""
    return SETS_PHRASES.get(name, f"{display_name(name)}'s sets")
