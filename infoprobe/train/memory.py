"""Memory estimates: activations one sample keeps alive in a pass of the model, the
evaluation batch that fits a budget, the device's memory, and the refusal of a training
batch that cannot fit in it.
"""

from __future__ import annotations

import os

import torch

from infoprobe.model import ModelConfig
from infoprobe.train.config import TrainConfig, TrainingError

EVAL_BATCH = 4096
"""Samples per evaluation forward pass, unless one pass would exceed the budget below."""
EVAL_BUDGET_BYTES = 1 << 30
"""Activation memory one evaluation pass may take (smaller batches for long contexts)."""


def activation_floats(cfg: ModelConfig, *, training: bool) -> int:
    """About how many float32 activations one sample keeps alive in a pass of the model.

    Per block: attention scores and pattern ``2·h·(T+1)²``, q, k, v, z ``4·(T+1)·h·n``,
    residual stream states ``4·(T+1)·E`` and the FFN ``2·(T+1)·d_mlp``. Training keeps
    every block's activations for the backward pass, which needs as many again; inference
    holds one block at a time. An estimate for refusing sizes that cannot fit, not a
    measurement.
    """
    p = cfg.n_ctx + 1
    blocks = [
        2 * h * p * p + 4 * p * h * cfg.d_head_of(b) + 4 * p * cfg.d_model + 2 * p * cfg.d_mlp
        for b, h in enumerate(cfg.heads)
    ]
    inputs = p * cfg.d_in
    return 2 * sum(blocks) + inputs if training else max(blocks) + inputs


def eval_batch_size(cfg: ModelConfig) -> int:
    """Samples per evaluation pass: :data:`EVAL_BATCH`, fewer if one pass would take more
    than :data:`EVAL_BUDGET_BYTES` (long contexts: attention grows as (T+1)²)."""
    per_sample = 4 * activation_floats(cfg, training=False)
    return max(1, min(EVAL_BATCH, EVAL_BUDGET_BYTES // per_sample))


def device_memory_bytes(device: str | torch.device) -> int | None:
    """Total memory of ``device`` (physical RAM for the CPU); None where unknown."""
    dev = torch.device(device)
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            return None
        return int(torch.cuda.get_device_properties(dev.index or 0).total_memory)
    if dev.type == "cpu":
        try:
            return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
        except (AttributeError, ValueError, OSError):
            return None
    return None


def _gb(nbytes: float) -> str:
    return f"{nbytes / 1e9:.3g} GB"


def check_memory_fits(model_cfg: ModelConfig, cfg: TrainConfig, members: int = 1) -> None:
    """Raise :class:`TrainingError` if one training batch plus the held data sets cannot
    fit in the memory of ``cfg.device`` (see :func:`activation_floats`), instead of
    failing with an out-of-memory error part-way. ``members``: models trained together
    as one batched ensemble (each with its own batch and data sets)."""
    limit = device_memory_bytes(cfg.device)
    if limit is None:
        return
    batch = 4 * members * cfg.batch_size * activation_floats(model_cfg, training=True)
    samples = members * (cfg.n_val + cfg.n_test + (cfg.n_train or 0) + cfg.batch_size)
    data = 4 * samples * (model_cfg.n_ctx * model_cfg.d_in + model_cfg.d_out)
    evaluation = 4 * eval_batch_size(model_cfg) * activation_floats(model_cfg, training=False)
    if batch + data + evaluation > limit:
        raise TrainingError(
            f"TrainConfig.batch_size: {members} training batch(es) of {cfg.batch_size} samples at "
            f"T={model_cfg.n_ctx} with heads {list(model_cfg.heads)} needs about "
            f"{_gb(batch)} (attention keeps [batch, heads, T+1, T+1] per layer) plus "
            f"{_gb(data + evaluation)} for the data sets and evaluation, more than the "
            f"{_gb(limit)} of memory of device {cfg.device!r}; lower T, the batch size, "
            "n_val/n_test or the heads"
        )
