"""Controls beside every probe score, and the selectivity they define.

- **Shuffled pairing**: the identical probe fitted on (state, target) pairs whose target
  comes from another sample of the same split. Any R² above ≈ 0 is an artefact.
- **Random-init model**: the identical probe on a cache made by a freshly initialised model
  of the same architecture on the same samples (``check_control_compatible`` guards this).
- **Conditional baseline (role targets)**: a role position is chosen by content that
  depends on the token's own input, so x(role) is partly predictable from x(t) alone. The
  baseline is the same probe fitted from the token's layer-0 state h(t, 0).

Selectivity = score − control, with control = max(shuffled, random-init) for positions and
max(conditional baseline, random-init) for role targets.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from infoprobe.probes.errors import ControlMismatchError, ProbeInputError


def shuffled_pairing(split: np.ndarray, seed: int = 0) -> np.ndarray:
    """A permutation that pairs each sample with another sample of the same split.

    Args:
        split: split label of each sample ``[n]``.
        seed: seed of the local generator.

    Returns:
        int64 ``perm [n]``; the shuffled target of sample i is ``target[perm[i]]`` and
        ``split[perm] == split``.
    """
    rng = np.random.default_rng(seed)
    labels = np.asarray(split)
    perm = np.arange(labels.shape[0])
    for value in np.unique(labels):
        members = np.flatnonzero(labels == value)
        perm[members] = members[rng.permutation(members.shape[0])]
    return perm


def _stack_max(controls: list[np.ndarray]) -> np.ndarray:
    return np.fmax.reduce(np.stack(controls), axis=0)


def control_level(*controls: np.ndarray | None) -> np.ndarray:
    """Elementwise maximum of the controls that are present (NaN ignored)."""
    present = [np.asarray(c, dtype=np.float64) for c in controls if c is not None]
    if not present:
        raise ProbeInputError("control_level: expected at least one control array, got none")
    return _stack_max(present)


def conditional_baseline(role_scores: np.ndarray) -> np.ndarray:
    """The layer-0 row of role scores broadcast to every layer.

    Args:
        role_scores: ``[L+1, T+1, R]`` (layer, token, role) scores of the role probes.

    Returns:
        ``[L+1, T+1, R]``: the probe from h(t, 0) beside every layer.
    """
    arr = np.asarray(role_scores, dtype=np.float64)
    return np.broadcast_to(arr[:1], arr.shape).copy()


def selectivity(score: np.ndarray, *controls: np.ndarray | None) -> np.ndarray:
    """Score minus the largest control present: ``[...]`` like ``score``."""
    return np.asarray(score, dtype=np.float64) - control_level(*controls)


ARCHITECTURE_FIELDS = (
    "d_in",
    "n_ctx",
    "d_model",
    "heads",
    "d_head",
    "pos_encoding",
    "residual",
    "layer_norm",
    "d_mlp",
    "d_readout",
    "d_out",
    "init_gain",
)
# Fields added after the first cache format: a config without one had this value.
FIELD_DEFAULTS = {"init_gain": 1.0}


def check_control_compatible(
    main_config: dict[str, Any],
    control_config: dict[str, Any],
    main_spec: dict[str, Any],
    control_spec: dict[str, Any],
    main_name: str,
    control_name: str,
) -> None:
    """Refuse a control cache of another architecture or data spec.

    Args:
        main_config, control_config: model configuration dicts of the two caches.
        main_spec, control_spec: data spec dicts (task, n, data seed, ...).
        main_name, control_name: file names for the message.

    Raises:
        ControlMismatchError: naming the first differing field and both values.
    """
    for key in ARCHITECTURE_FIELDS:
        default = FIELD_DEFAULTS.get(key)
        a, b = main_config.get(key, default), control_config.get(key, default)
        if _normalise(a) != _normalise(b):
            raise ControlMismatchError(
                f"{control_name}: model config field '{key}' expected {a!r} "
                f"(as in {main_name}), got {b!r}; a control must share the architecture"
            )
    for key in sorted(set(main_spec) | set(control_spec)):
        a, b = main_spec.get(key), control_spec.get(key)
        if _normalise(a) != _normalise(b):
            raise ControlMismatchError(
                f"{control_name}: data spec field '{key}' expected {a!r} "
                f"(as in {main_name}), got {b!r}; a control must use the same samples"
            )


def _normalise(value: Any) -> Any:
    """Lists and tuples compare equal (JSON round trips turn tuples into lists)."""
    if isinstance(value, (list, tuple)):
        return tuple(_normalise(v) for v in value)
    if isinstance(value, dict):
        return {k: _normalise(v) for k, v in value.items()}
    return value
