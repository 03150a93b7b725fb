"""Refuse to compare files that were not made from the same task, data and model; the
provenance fields each kind of input (predicted sets, caches, probe results) gives."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

import numpy as np

from infoprobe.base.errors import UserError
from infoprobe.base.header import MODEL_IDENTITY
from infoprobe.base.jsonable import jsonable
from infoprobe.infoflow import SetsFile
from infoprobe.infoflow.store import inputs_hash
from infoprobe.probes.results import ProbeResults

PROVENANCE_REQUIRED = ("task", "data_seed", "n")
"""Provenance fields both inputs of a comparison must carry and agree on."""

PROVENANCE_OPTIONAL = ("T", "n_layers", "cache", *MODEL_IDENTITY, "inputs_sha256")
"""Provenance fields compared when both inputs carry them."""


PROVENANCE_NONE_BY_DEFAULT = ("random_init_seed",)
"""Provenance fields whose absence means None (trained weights): always compared."""


class ProvenanceError(UserError):
    """Predicted and observed sets do not come from the same data, model or task."""


def refuse_control(prov: Mapping[str, Any], source: str) -> None:
    """Refuse a file computed from a random-init control where the trained model's is
    expected (its provenance's ``random_init_seed`` is set)."""
    seed = prov.get("random_init_seed")
    if seed is not None:
        raise ProvenanceError(
            f"{source}: provenance field 'random_init_seed' is {seed!r}, expected None (the "
            "trained model's file): it was computed from a random-init control, which enters "
            "only where a control is asked for (`infoprobe probe --control`, `infoprobe "
            "influence --random-init`)"
        )


def _canonical(key: str, value: Any) -> str:
    if key == "cache" and isinstance(value, str | os.PathLike):
        return os.path.realpath(os.fspath(value))
    return json.dumps(jsonable(value), sort_keys=True, default=str)


def _same(key: str, a: Any, b: Any) -> bool:
    """Equal provenance values; a task given by name alone matches a task dict's name."""
    if key == "task" and (isinstance(a, str) or isinstance(b, str)):
        names = [v if isinstance(v, str) else dict(v).get("name") for v in (a, b)]
        return names[0] == names[1]
    return _canonical(key, a) == _canonical(key, b)


def check_provenance(
    pred_prov: Mapping[str, Any],
    probe_prov: Mapping[str, Any],
    *,
    pred_source: str = "predicted sets",
    probe_source: str = "probe results",
) -> None:
    """Refuse to compare sets that were not made from the same task, data and model.

    Both dicts must hold :data:`PROVENANCE_REQUIRED` (``task`` dict, ``data_seed``, ``n``
    samples); the fields of :data:`PROVENANCE_OPTIONAL` (``T``, ``n_layers``, ``cache``
    path, ``checkpoint_sha256`` and ``model_code_sha256`` of the model, ``inputs_sha256`` of
    the input samples) are compared when
    both have them; ``random_init_seed`` (absent: None, trained weights) is always compared;
    a ``task`` given by name alone is compared with the other's name.
    pred_source / probe_source name the files in the messages.
    Raises ProvenanceError naming every missing or mismatched field with both values.
    """
    # samples from an inputs file have no task and no data seed: the file's hash names them
    from_file = "inputs_file" in pred_prov and "inputs_file" in probe_prov
    required = ("inputs_file", "n") if from_file else PROVENANCE_REQUIRED
    missing = [
        f"{source} lacks field {key!r}"
        for source, prov in ((pred_source, pred_prov), (probe_source, probe_prov))
        for key in required
        if key not in prov
    ]
    if missing:
        raise ProvenanceError(
            "cannot check that predicted and observed sets match: "
            + "; ".join(missing)
            + f" (required: {', '.join(required)})"
        )
    defaults = dict.fromkeys(PROVENANCE_NONE_BY_DEFAULT)
    pred_prov, probe_prov = {**defaults, **pred_prov}, {**defaults, **probe_prov}
    mismatched = [
        f"field {key!r}: {pred_source} has {pred_prov[key]!r}, {probe_source} has "
        f"{probe_prov[key]!r}"
        for key in PROVENANCE_REQUIRED
        + PROVENANCE_OPTIONAL
        + PROVENANCE_NONE_BY_DEFAULT
        + ("inputs_file",)
        if key in pred_prov
        and key in probe_prov
        and not _same(key, pred_prov[key], probe_prov[key])
    ]
    if mismatched:
        raise ProvenanceError(
            "predicted and observed sets come from different data or models: "
            + "; ".join(mismatched)
            + ". Recompute the predicted sets on the samples of the probes' cache."
        )


def _without_none(d: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in d.items() if v is not None}


def inputs_file(spec: Mapping[str, Any] | None) -> str | None:
    """The SHA-256 of the inputs file a cache's samples came from (None: a task's)."""
    inputs = (spec or {}).get("inputs")
    return inputs.get("sha256") if isinstance(inputs, Mapping) else None


def predicted_provenance(sets: SetsFile) -> dict[str, Any]:
    """Provenance fields of a predicted-sets file, named as in :func:`check_provenance`."""
    prov = sets.provenance
    return _without_none(
        {
            "task": sets.task,
            "data_seed": prov.get("data_seed"),
            "n": int(sets.x.shape[0]),
            "T": int(sets.x.shape[1]),
            "n_layers": int(sets.sets.shape[0]) - 1,
            **{key: prov.get(key) for key in MODEL_IDENTITY},
            "random_init_seed": prov.get("random_init_seed"),
            "inputs_sha256": inputs_hash(sets.x),
            "inputs_file": inputs_file(prov.get("data_spec")),
        }
    )


def cache_provenance_fields(
    cache_prov: Mapping[str, Any], T: int, n_layers: int, x: np.ndarray | None = None
) -> dict[str, Any]:
    """Provenance fields of anything computed from an activation cache (its provenance,
    data spec and, when at hand, its inputs x [N, T, d])."""
    spec = cache_prov.get("data_spec") or {}
    seeds = (cache_prov.get("data_seed"), spec.get("data_seed"), spec.get("seed"))
    return _without_none(
        {
            "task": cache_prov.get("task", spec.get("task")),
            "data_seed": next((s for s in seeds if s is not None), None),
            "n": cache_prov.get("n", spec.get("n")),
            "T": T,
            "n_layers": n_layers,
            **{key: cache_prov.get(key) for key in MODEL_IDENTITY},
            "random_init_seed": cache_prov.get("random_init_seed"),
            "inputs_file": inputs_file(spec),
            "inputs_sha256": None if x is None else inputs_hash(x),
        }
    )


def probe_provenance(results: ProbeResults, x: np.ndarray | None = None) -> dict[str, Any]:
    """Provenance fields of probe results (from their cache's provenance and data spec;
    ``inputs_sha256`` the recorded hash of the cache's inputs unless ``x`` is given)."""
    fields = cache_provenance_fields(
        results.provenance or {}, results.T, len(results.layers) - 1, x
    )
    if x is None and results.inputs_sha256 is not None:
        fields["inputs_sha256"] = results.inputs_sha256
    return fields
