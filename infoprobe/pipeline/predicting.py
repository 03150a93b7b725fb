"""The predict stage's glue: InfoFlow's sets on exactly the samples of an activation cache."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from infoprobe.attention.orientation import choose_orientation
from infoprobe.base.errors import UsageError
from infoprobe.base.header import MODEL_IDENTITY
from infoprobe.foreign.config import config_from_dict
from infoprobe.hooks import open_cache
from infoprobe.infoflow import as_architecture, predict, write_sets
from infoprobe.probes.validate import check_finite
from infoprobe.tasks import task_from_dict


def predict_for_cache(
    cache_path: str | os.PathLike,
    out: str | os.PathLike,
    *,
    orientation: str | Sequence[str] = "auto",
    overwrite: bool = False,
) -> Path:
    """InfoFlow's predicted sets on exactly the samples of an activation cache.

    The task and architecture are read from the cache's provenance, the samples from its
    ``/inputs/x``; the sets file records the cache's data seed, N and checkpoint hash so
    the comparison can refuse mismatched files. ``orientation``: "auto" (the orientation
    of each comparison the model's heads implement, read from the cached attention
    patterns by :func:`infoprobe.attention.orientation.choose_orientation`; all declared when the
    cache holds no patterns), "declared", "mirrored" (every comparison that has a mirror),
    or one of those two per comparison.
    """
    with open_cache(cache_path) as cache:
        spec, x = cache.spec, cache.x[:]
        if spec.get("task") is None:
            raise UsageError(
                f"{cache_path}: data spec field 'task' is null (inputs from "
                f"{(spec.get('inputs') or {}).get('file', 'a file')}): InfoFlow's sets are "
                "derived from a task's structure; cache a task's samples to predict them"
            )
        task = task_from_dict(spec["task"])
        arch = config_from_dict(cache.model_config)
        names = [f"blocks.{b}.attn.hook_pattern" for b in range(cache.n_blocks)]
        has_patterns = all(name in cache.hook_names for name in names)
        patterns = [cache.acts(name)[:] for name in names] if has_patterns else None
        check_finite(x, f"{cache_path}:/inputs/x")
        for name, pattern in zip(names, patterns or [], strict=False):
            check_finite(pattern, f"{cache_path}:acts/{name}")
        provenance = {
            "data_seed": spec["data_seed"],
            "n": spec["n"],
            "cache": str(cache_path),
            **{key: cache.provenance.get(key) for key in MODEL_IDENTITY},
            "random_init_seed": cache.provenance.get("random_init_seed"),
            "data_spec": spec,
        }
    if orientation == "auto" and patterns is None:
        orientation = None
        provenance["orientation"] = "declared: the cache holds no attention patterns"
    elif orientation == "auto":
        choices = choose_orientation(task, as_architecture(arch), x, patterns)
        orientation = [c.chosen for c in choices]
        provenance["orientation"] = [c.to_dict() for c in choices]
    prediction = predict(task, arch, orientation=orientation)
    provenance.setdefault("orientation", "given: " + ", ".join(prediction.orientation))
    return write_sets(out, prediction, x, provenance, overwrite=overwrite)
