"""Flow on exactly the samples of an activation cache: checkpoint + cache glue.

The scores are computed on the cache's ``/inputs/x`` (rows 0..n-1), through the
checkpoint's trained weights or, as a control, through the same architecture initialised
from a seed (:func:`infoprobe.pipeline.caching.random_init_model`). The cache must come from this
checkpoint (its ``checkpoint_sha256`` and model config), which a random-init control cache
of the checkpoint also satisfies (it records the checkpoint it controls).
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import numpy as np
import torch

from infoprobe.base.atomic import locked_output
from infoprobe.base.header import MODEL_IDENTITY
from infoprobe.checkpoint import Checkpoint, as_checkpoint
from infoprobe.hooks import CacheFile, open_cache
from infoprobe.influence.errors import InfluenceError
from infoprobe.influence.file import BlockCallback, InfluenceFile
from infoprobe.influence.settings import InfluenceSettings
from infoprobe.influence.store import preflight, write_influence
from infoprobe.pipeline.caching import random_init_model


def model_state_sha256(model: torch.nn.Module) -> str:
    """SHA-256 of a model's state dict (names, dtypes, shapes and bytes, sorted by name)."""
    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        t = tensor.detach().cpu().contiguous()
        digest.update(f"{name}|{t.dtype}|{list(t.shape)}|".encode())
        digest.update(t.numpy().tobytes())
    return digest.hexdigest()


def _check_alignment(cache: CacheFile, cache_path: Path, ckpt: Checkpoint) -> None:
    actual, expected = cache.checkpoint_sha256, ckpt.weights_sha256
    if actual != expected:
        raise InfluenceError(
            f"cache {cache_path}: provenance field 'checkpoint_sha256' is "
            f"{(actual or '(none)')[:12]}…, expected {expected[:12]}… (the weights of "
            f"checkpoint {ckpt.path}); the cache was made from another checkpoint: cache "
            "this checkpoint with `infoprobe cache CHECKPOINT --out FILE`"
        )
    code, want = cache.provenance.get("model_code_sha256"), ckpt.model_code_sha256
    if code != want:
        raise InfluenceError(
            f"cache {cache_path}: provenance field 'model_code_sha256' is "
            f"{(code or '(none)')[:12]}…, expected {(want or '(none)')[:12]}… (the model code "
            f"of checkpoint {ckpt.path}); the cache was made by other model code: cache this "
            "checkpoint again with `infoprobe cache CHECKPOINT --trust-code --out FILE`"
        )
    config = ckpt.model_config.to_dict()
    if cache.model_config and cache.model_config != config:
        diff = sorted(k for k in config if cache.model_config.get(k) != config[k])
        raise InfluenceError(
            f"cache {cache_path}: provenance field 'model_config' differs from checkpoint "
            f"{ckpt.path} in {diff}: cache has {[cache.model_config.get(k) for k in diff]}, "
            f"checkpoint has {[config[k] for k in diff]}"
        )


@locked_output("out")
def influence_for_cache(
    checkpoint: str | os.PathLike | Checkpoint,
    cache_path: str | os.PathLike,
    out: str | os.PathLike,
    *,
    settings: InfluenceSettings | None = None,
    random_init_seed: int | None = None,
    n: int | None = None,
    rows: np.ndarray | None = None,
    device: str | torch.device = "cpu",
    overwrite: bool = False,
    progress: bool = True,
    on_block: BlockCallback | None = None,
    trust_code: bool = False,
) -> InfluenceFile:
    """Flow scores of a checkpoint on the samples of its activation cache, written to ``out``.

    Args:
        checkpoint: checkpoint folder or a loaded :class:`Checkpoint`.
        cache_path: complete activation cache of this checkpoint (``infoprobe cache``);
            its ``/inputs/x`` [N, T, d] are the samples.
        out: influence file to write (or resume).
        settings: :class:`InfluenceSettings` (defaults if None).
        random_init_seed: score a random-init control: the same architecture with weights
            initialised from this seed, on the same samples.
        n: use the first n cache samples (default all).
        rows: use these cache rows instead (sorted, distinct; e.g. the probes' test
            split, so flow and decodability score the same samples).
        device: torch device of the forwards.
        overwrite: replace an existing influence file at ``out``.
        progress: tqdm bars (False: quiet).
        on_block: called with ``n_committed`` after each committed block.
        trust_code: run the code a foreign checkpoint names (:func:`load_checkpoint`).

    Returns:
        :class:`InfluenceFile` with scores float32 [L+1, n, T+1, T].

    Raises:
        InfluenceError: the cache belongs to another checkpoint or architecture, bad n,
            and everything :func:`write_influence` raises. CacheError: unreadable cache.
    """
    out, cache_path = Path(out), Path(cache_path)
    ckpt = as_checkpoint(checkpoint, trust_code, allow_no_task=True)  # x: the cache's
    preflight(out, overwrite)  # refuse a foreign or complete --out before any work
    with open_cache(cache_path) as cache:
        _check_alignment(cache, cache_path, ckpt)
        total = cache.n
        if rows is not None:
            if n is not None:
                raise InfluenceError("give either n (the first n cache samples) or rows, not both")
            rows = np.asarray(rows, dtype=np.int64)
            if rows.ndim != 1 or rows.size == 0 or (np.diff(rows) <= 0).any():
                raise InfluenceError(f"rows: expected sorted, distinct cache rows, got {rows!r}")
            if rows[0] < 0 or rows[-1] >= total:
                raise InfluenceError(
                    f"rows: expected cache rows in 0..{total - 1} of cache {cache_path}, "
                    f"got {int(rows[0])}..{int(rows[-1])}"
                )
        else:
            n = total if n is None else int(n)
            if not 1 <= n <= total:
                raise InfluenceError(
                    f"n must be between 1 and the {total} samples of cache {cache_path}, got {n}"
                )
            rows = np.arange(n)
        x = cache.x[rows]
        cache_provenance = cache.provenance
    if random_init_seed is None:
        model = ckpt.model
    else:
        model = random_init_model(ckpt.model_config, int(random_init_seed), ckpt.model)
    model = model.to(device).eval()
    provenance = {
        "cache_path": str(cache_path.resolve()),
        "checkpoint_path": str(Path(ckpt.path).resolve()),
        "cache": {
            key: cache_provenance.get(key)
            for key in (*MODEL_IDENTITY, "model_config", "data_spec", "random_init_seed")
        },
        **ckpt.model_identity,
        "model_config": ckpt.model_config.to_dict(),
        "model_state_sha256": model_state_sha256(model),
        "random_init_seed": None if random_init_seed is None else int(random_init_seed),
        "sample_rows": {
            "count": int(rows.size),
            "sha256": hashlib.sha256(rows.astype(np.int64).tobytes()).hexdigest(),
        },
    }
    return write_influence(
        out,
        model,
        x,
        settings,
        provenance,
        overwrite=overwrite,
        progress=progress,
        on_block=on_block,
        sample_index=rows,
    )
