"""Which runs can train together as one batched ensemble (:mod:`infoprobe.train.ensemble`):
the settings every member of a group shares (the others, seed and learning rate among
them, each member may have its own). Plain data,
so a sweep's plan is made without loading torch."""

from __future__ import annotations

from dataclasses import replace

from infoprobe.model_config import ModelConfig

SHARED_FIELDS = ("batch_size", "n_train", "n_val", "n_test", "eval_every", "device", "dtype")
"""TrainConfig fields every member of a group must share (``compile`` is the group's)."""


def shape_of(model_cfg: ModelConfig) -> ModelConfig:
    """The part of a model config members must share: all of it but ``init_gain``."""
    return replace(model_cfg, init_gain=1.0)
