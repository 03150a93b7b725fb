"""Build an activation cache from a checkpoint: the hub glue around ``infoprobe.hooks``.

The data come from the checkpoint's own task: batch b of a cache is
``task.sample(size_b, numpy.random.default_rng([data_seed, b]))`` (docs/conventions.md),
so a resumed or repeated run regenerates exactly the same samples. The default data
seed is the training seed + :data:`DATA_SEED_OFFSET`, which keeps the cached samples
apart from the training, validation and test streams (``default_rng([seed, 0|1|2])``).

A *random-init control* caches the same samples through a model of the same
architecture whose weights are freshly initialised from a seed: the probes stage fits
the same probes on it to show what an untrained network already makes decodable.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from transformer_lens import HookedRootModule

from infoprobe.base.atomic import remove_stale_temps
from infoprobe.checkpoint import Checkpoint, as_checkpoint
from infoprobe.foreign.config import ForeignConfig, build_model
from infoprobe.hooks import CacheError, CachePlan, CacheSummary, plan_cache, write_cache
from infoprobe.hooks.writer import BatchFn
from infoprobe.model import ModelConfig
from infoprobe.pipeline.cache_settings import (
    DATA_SEED_OFFSET,
    SAMPLER,
    CacheSettings,
)
from infoprobe.pipeline.inputs import read_inputs
from infoprobe.tasks import Task


def default_data_seed(checkpoint: Checkpoint) -> int:
    """Training seed of ``checkpoint`` (0 if unrecorded) + :data:`DATA_SEED_OFFSET`."""
    return int(checkpoint.meta.get("train_config", {}).get("seed", 0)) + DATA_SEED_OFFSET


def data_spec(task: Task, *, n: int, batch_size: int, data_seed: int) -> dict[str, Any]:
    """The JSON description of a cache's samples: everything needed to regenerate them."""
    return {
        "task": task.to_dict(),
        "n": n,
        "batch_size": batch_size,
        "data_seed": data_seed,
        "sampler": SAMPLER,
    }


def task_batch_fn(task: Task, data_seed: int) -> BatchFn:
    """``batch_fn(b, size)`` drawing batch b of the task from ``default_rng([data_seed, b])``."""

    def batch_fn(index: int, size: int) -> tuple[np.ndarray, np.ndarray]:
        return task.sample(size, np.random.default_rng([data_seed, index]))

    return batch_fn


class TrainedControlError(CacheError):
    """A random-init control came out equal to the trained model."""


def random_init_model(
    config: ModelConfig | ForeignConfig, seed: int, trained: HookedRootModule | None = None
) -> HookedRootModule:
    """A model of the same architecture with weights freshly initialised from ``seed``
    (a foreign model: its factory's own initialisation under torch seed ``seed``).

    With ``trained`` (the checkpoint's model), a control whose weights all equal the
    trained ones is refused: a factory that builds its model with trained weights set
    gives no random-init control, and the control's scores would equal the model's."""
    model = build_model(config, seed=seed)
    if trained is not None and same_weights(model, trained):
        raise TrainedControlError(
            f"random-init control (seed {seed}): every weight equals the trained model's; "
            f"the factory {getattr(config, 'factory', 'of this model')!s} returns trained "
            "weights, so there is no random-init control to compare with (build the model "
            "with freshly initialised weights in the factory and load trained ones after)"
        )
    return model


def same_weights(a: HookedRootModule, b: HookedRootModule) -> bool:
    """Whether two models hold the same tensors under the same names."""
    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(
        sa[k].shape == sb[k].shape and torch.equal(sa[k].cpu(), sb[k].cpu()) for k in sa
    )


@dataclass(frozen=True)
class CacheJob:
    """Everything :func:`write_cache` needs, planned (sizes known) but not yet written."""

    model: HookedRootModule
    batch_fn: BatchFn
    provenance: dict[str, Any]
    plan: CachePlan
    sites: str

    def run(
        self,
        out: str | os.PathLike,
        *,
        overwrite: bool = False,
        progress: bool = True,
        durable: bool = False,
    ) -> CacheSummary:
        """Write (or resume) the cache at ``out`` (``durable``: fsync every batch); temp
        files a killed earlier run left beside ``out`` are removed first."""
        remove_stale_temps(Path(out))
        return write_cache(
            out,
            self.model,
            self.batch_fn,
            n=self.plan.n,
            batch_size=self.plan.batch_size,
            sites=self.sites,
            provenance=self.provenance,
            dtype=self.plan.dtype,
            overwrite=overwrite,
            progress=progress,
            plan=self.plan,
            durable=durable,
        )


def checkpoint_cache_job(
    checkpoint: str | os.PathLike | Checkpoint,
    *,
    n: int = CacheSettings.n,
    sites: str = CacheSettings.sites,
    batch_size: int = CacheSettings.batch_size,
    dtype: str = CacheSettings.dtype,
    data_seed: int | None = None,
    random_init_seed: int | None = None,
    device: str | torch.device = CacheSettings.device,
    trust_code: bool = False,
    inputs: str | os.PathLike | None = None,
    targets: str | os.PathLike | None = None,
) -> CacheJob:
    """Plan the cache of a checkpoint on ``n`` fresh samples of its task, or on the first
    ``n`` rows of an inputs file.

    Args:
        checkpoint: checkpoint folder (or a loaded :class:`Checkpoint`).
        n, sites, batch_size, dtype, data_seed, random_init_seed, device: as in
            :class:`CacheSettings` (its defaults; ``data_seed`` None:
            :func:`default_data_seed`).
        trust_code: run the code a foreign checkpoint names (:func:`load_checkpoint`).
        inputs, targets: files of x [n, T, d] and y [n] or [n, d_out]
            (:mod:`infoprobe.pipeline.inputs`): the cache holds their first ``min(n,
            rows)`` rows instead of the task's samples; a checkpoint saved without a task
            needs them.

    The provenance records the checkpoint's weights hash, a foreign model's code hash,
    its model config, the data spec and ``random_init_seed`` (None for the trained
    weights).
    """
    ckpt = as_checkpoint(checkpoint, trust_code, allow_no_task=inputs is not None)
    if random_init_seed is None:
        model = ckpt.model
    else:
        model = random_init_model(ckpt.model_config, int(random_init_seed), ckpt.model)
    model = model.to(device)
    if inputs is None:
        seed = default_data_seed(ckpt) if data_seed is None else int(data_seed)
        batch_fn = task_batch_fn(ckpt.task, seed)
        spec = data_spec(ckpt.task, n=n, batch_size=batch_size, data_seed=seed)
    else:
        cfg = ckpt.model_config
        found = read_inputs(inputs, targets, T=cfg.n_ctx, d=cfg.d_in, d_out=cfg.d_out)
        n = min(n, len(found.x))
        batch_fn, spec = found.batch_fn(batch_size), found.spec(n, batch_size)
    provenance = {
        **ckpt.model_identity,
        "model_config": ckpt.model_config.to_dict(),
        "data_spec": spec,
        "random_init_seed": random_init_seed,
    }
    plan = plan_cache(model, batch_fn, n=n, batch_size=batch_size, sites=sites, dtype=dtype)
    return CacheJob(model, batch_fn, provenance, plan, sites)


def cache_checkpoint(
    checkpoint: str | os.PathLike | Checkpoint,
    out: str | os.PathLike,
    *,
    overwrite: bool = False,
    progress: bool = True,
    durable: bool = False,
    **options: Any,
) -> CacheSummary:
    """Cache a checkpoint's activations to ``out`` (resuming an interrupted run).

    ``options`` are those of :func:`checkpoint_cache_job` (n, sites, batch_size, dtype,
    data_seed, random_init_seed, device, trust_code, inputs, targets). Returns the
    :class:`CacheSummary`.
    """
    job = checkpoint_cache_job(checkpoint, **options)
    return job.run(Path(out), overwrite=overwrite, progress=progress, durable=durable)
