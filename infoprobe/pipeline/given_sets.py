"""Your own sets to compare with: per-sample sets over a cache's samples, written in the
predicted-sets format so ``compare`` and ``report`` take them unchanged.

``infoprobe sets SETS.npy --cache acts.h5 --out pred.h5``. SETS is bool ``[L+1, n, T+1,
T]`` (data positions) or ``[L+1, n, T+1, T+1]`` (with the CLS position) over the cache's n
samples, layers 0..L, tokens 0..T (CLS = T): the sets your own theory gives (``.npy``
without pickle, or the dataset ``sets`` of an ``.h5`` file). Given with data positions
only, the CLS position is added as each CLS token's own position (CLS is in its own set
and in no other, as in InfoFlow's sets). The file records the sets file's SHA-256 and
the cache's provenance, so the comparison refuses other samples or another model.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from infoprobe.base.digest import file_sha256
from infoprobe.base.errors import UserError
from infoprobe.base.header import MODEL_IDENTITY
from infoprobe.foreign.config import config_from_dict
from infoprobe.hooks import open_cache
from infoprobe.infoflow import as_architecture, predict
from infoprobe.infoflow.store import write_given_sets
from infoprobe.pipeline.inputs import read_array
from infoprobe.tasks import task_from_dict


class GivenSetsError(UserError):
    """A sets file does not fit the cache it is given for."""


def read_given_sets(path: str | os.PathLike, L: int, n: int, T: int) -> np.ndarray:
    """The sets of ``path`` as bool [L+1, n, T+1, T+1] (module doc), refused in one line
    naming the file and the shape when they do not fit a cache of L blocks, n samples, T."""
    path = Path(path)
    sets = read_array(path, "sets")
    if sets.dtype != np.bool_:
        if not (np.issubdtype(sets.dtype, np.integer) and np.isin(sets, (0, 1)).all()):
            raise GivenSetsError(
                f"{path}: sets have dtype {sets.dtype}, expected bool (or integers 0 and 1)"
            )
        sets = sets.astype(bool)
    shapes = [(L + 1, n, T + 1, T), (L + 1, n, T + 1, T + 1)]
    if tuple(sets.shape) not in shapes:
        raise GivenSetsError(
            f"{path}: sets have shape {list(sets.shape)}, expected [L+1={L + 1}, n={n}, "
            f"T+1={T + 1}, T={T}] or [..., T+1={T + 1}] (layer, sample, token, position) for "
            "the cache's samples"
        )
    if sets.shape[-1] == T:
        cls = np.zeros((*sets.shape[:-1], 1), dtype=bool)
        cls[:, :, T] = True  # CLS's own position
        sets = np.concatenate([sets, cls], axis=-1)
    return sets


def sets_for_cache(
    sets_path: str | os.PathLike,
    cache_path: str | os.PathLike,
    out: str | os.PathLike,
    *,
    overwrite: bool = False,
) -> Path:
    """Write the sets of ``sets_path`` over the samples of the cache at ``cache_path`` to
    ``out`` (predicted-sets format); with the cache's task, the file also carries
    InfoFlow's verdict and exponent for its task and architecture."""
    with open_cache(cache_path) as cache:
        spec, x, config = cache.spec, cache.x[:], cache.model_config
        provenance: dict[str, Any] = {
            "data_seed": spec.get("data_seed"),
            "n": spec["n"],
            "cache": str(cache_path),
            **{key: cache.provenance.get(key) for key in MODEL_IDENTITY},
            "random_init_seed": cache.provenance.get("random_init_seed"),
            "data_spec": spec,
        }
        L, T = cache.n_blocks, x.shape[1]
    sets = read_given_sets(sets_path, L, len(x), T)
    arch = as_architecture(config_from_dict(config))
    provenance["given_sets"] = {"file": str(Path(sets_path).resolve()),
                                "sha256": file_sha256(sets_path)}  # fmt: skip
    task = None if spec.get("task") is None else task_from_dict(spec["task"])
    summary: dict[str, Any] = {"verdict": "not InfoFlow's: sets given by the user",
                               "exponent": "n/a", "orientation": None}  # fmt: skip
    if task is not None:  # InfoFlow's word on the task and architecture, beside
        engine = predict(task, arch, search_min_heads=False)
        summary["infoflow"] = {"verdict": engine.verdict, "exponent": str(engine.exponent)}
    meta = {
        "task": None if task is None else task.to_dict(),
        "arch": arch.to_dict(),
        "provenance": provenance,
        "prediction": summary,
    }
    program = f"sets given by the user: {Path(sets_path).resolve()}"
    return write_given_sets(out, sets, x, meta, program, overwrite=overwrite)
