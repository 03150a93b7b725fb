"""What a run folder's output was made from: the identity ``run.json`` records per stage.

The identity of an output is a small dict read from the file itself: the model's weights
and code (``checkpoint_sha256``, ``model_code_sha256``), whether they were a random-init
control (``random_init_seed``), the inputs (``inputs_sha256``) and rows
(``test_index_sha256``) it was computed on, or the bytes of a JSON file or folder. A stage
records its output's identity when it is built; before any stage is skipped or built the
run checks every recorded output against its identity, so a file swapped for another
run's, a control's, or an edited one is refused instead of being read by the stages after
it (docs/pipeline.md, "Resuming").
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from infoprobe.base.header import MODEL_IDENTITY
from infoprobe.checkpoint import META, WEIGHTS, file_sha256, read_checkpoint_meta
from infoprobe.hooks import open_cache
from infoprobe.influence import read_influence
from infoprobe.infoflow import read_sets
from infoprobe.infoflow.store import inputs_hash
from infoprobe.probes.results import FORMAT as RESULTS_FORMAT
from infoprobe.probes.results import ProbeResults, rows_sha256


def _model_fields(prov: dict[str, Any]) -> dict[str, Any]:
    return {k: prov.get(k) for k in (*MODEL_IDENTITY, "random_init_seed")}


def _folder_sha256(path: Path) -> str:
    """SHA-256 over every file of a folder (relative names and bytes, sorted)."""
    digest = hashlib.sha256()
    for item in sorted(p for p in path.rglob("*") if p.is_file()):
        digest.update(str(item.relative_to(path)).encode() + b"\0")
        digest.update(file_sha256(item).encode())
    return digest.hexdigest()


def output_identity(path: str | Path) -> dict[str, Any]:
    """The identity of one run-folder output (see the module docstring).

    Checkpoint folders: ``weights_sha256`` (and the weights file's actual hash); other
    folders and non-HDF5 files: the SHA-256 of their bytes; activation caches, probe
    results, influence and predicted-sets files: the weights, control seed, inputs and
    rows they record. Raises the reader's error for a damaged file.
    """
    path = Path(path)
    if path.is_dir():
        if (path / META).is_file():
            meta = read_checkpoint_meta(path, require_task=False)
            weights = path / WEIGHTS
            actual = file_sha256(weights) if weights.is_file() else None
            return {"weights_sha256": meta["weights_sha256"], "weights_file_sha256": actual}
        return {"folder_sha256": _folder_sha256(path)}
    if not h5py.is_hdf5(path):
        return {"file_sha256": file_sha256(path)}
    with h5py.File(path, "r") as f:
        fmt = f.attrs.get("format")
        fmt = fmt.decode() if isinstance(fmt, bytes) else fmt
    if fmt == RESULTS_FORMAT:
        res = ProbeResults.read(path)
        return {
            **_model_fields(res.provenance),
            "control": _model_fields(res.control_provenance or {}),
            "inputs_sha256": res.inputs_sha256,
            "test_index_sha256": rows_sha256(res.test_index),
        }
    if fmt == "infoprobe.predicted-sets":
        sets = read_sets(path)
        return {**_model_fields(sets.provenance), "inputs_sha256": inputs_hash(sets.x)}
    if fmt == "infoprobe.influence":
        inf = read_influence(path, allow_incomplete=True)
        prov = inf.provenance or {}
        return {
            "cache": _model_fields(prov.get("cache") or {}),
            "random_init_seed": prov.get("random_init_seed"),
            "inputs_sha256": prov.get("inputs_sha256"),
            "rows_sha256": rows_sha256(np.asarray(inf.sample_index)),
            "n_committed": inf.n_committed,
        }
    with open_cache(path) as cache:
        return {
            **_model_fields(cache.provenance),
            "inputs_sha256": inputs_hash(np.asarray(cache.x[()])),
            "n": int(cache.n),
        }
