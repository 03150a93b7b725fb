"""Command-line options for the model architecture and training (shared by commands)."""

from __future__ import annotations

import argparse

from infoprobe.commands.argtypes import (
    device,
    non_negative_float,
    non_negative_int,
    positive_float,
    positive_int,
)
from infoprobe.errors import UsageError
from infoprobe.model import POS_ENCODINGS, ModelConfig
from infoprobe.train import TrainConfig

DEFAULT_MODEL = ModelConfig(d_in=1, n_ctx=1)
DEFAULT_TRAIN = TrainConfig()


def parse_heads(text: str) -> tuple[int, ...]:
    """``"2,3"`` → (2, 3): heads per layer; the list's length is the depth L."""
    try:
        heads = tuple(int(h) for h in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"--heads expects comma-separated head counts per layer like 2,2; got {text!r}"
        ) from None
    if not heads or min(heads) < 1:
        raise argparse.ArgumentTypeError(f"--heads needs >= 1 head per layer, got {text!r}")
    return heads


def add_model_arguments(parser: argparse.ArgumentParser) -> None:
    """Architecture options; T, d and d_out come from the task."""
    g = parser.add_argument_group("model", "architecture (T, d and d_out come from the task)")
    g.add_argument(
        "--heads",
        type=parse_heads,
        default=DEFAULT_MODEL.heads,
        metavar="H1,H2,..",
        help="heads per layer; the number of entries is the depth L (default: 2,2)",
    )
    g.add_argument(
        "--layers",
        type=positive_int,
        default=None,
        metavar="L",
        help="depth; only as a check against the length of --heads",
    )
    g.add_argument(
        "--E",
        "--d-model",
        dest="d_model",
        type=positive_int,
        default=DEFAULT_MODEL.d_model,
        help="residual width E = n*h (default: %(default)s)",
    )
    g.add_argument(
        "--d-head",
        type=positive_int,
        default=None,
        help="per-head dimension n (default: E / h of each layer)",
    )
    g.add_argument(
        "--pos-encoding",
        choices=POS_ENCODINGS,
        default=None,
        help="positional encoding (default: learned if the task needs positions, else none)",
    )
    g.add_argument(
        "--no-residual",
        dest="residual",
        action="store_false",
        help="remove the residual connections",
    )
    g.add_argument("--layer-norm", action="store_true", help="pre-LayerNorm (default: off)")
    g.add_argument(
        "--d-mlp",
        type=non_negative_int,
        default=DEFAULT_MODEL.d_mlp,
        help="FFN width per block, 0 removes it (default: %(default)s)",
    )
    g.add_argument(
        "--d-readout",
        type=positive_int,
        default=DEFAULT_MODEL.d_readout,
        help="hidden width of the CLS readout MLP (default: %(default)s)",
    )
    g.add_argument(
        "--init-gain",
        type=positive_float,
        default=DEFAULT_MODEL.init_gain,
        help="weights start N(0, (gain/sqrt(fan_in))^2); 0.577 matches PyTorch's "
        "nn.Linear default scale (default: %(default)s)",
    )


def model_config_from_args(args: argparse.Namespace, task) -> ModelConfig:
    """The :class:`ModelConfig` for ``task`` from parsed options."""
    if args.layers is not None and args.layers != len(args.heads):
        raise UsageError(
            f"--layers {args.layers} but --heads {','.join(map(str, args.heads))} "
            f"lists {len(args.heads)} layer(s); give one head count per layer"
        )
    pos = args.pos_encoding or ("learned" if task.needs_positions else "none")
    return ModelConfig(
        d_in=task.d,
        n_ctx=task.T,
        d_model=args.d_model,
        heads=args.heads,
        d_head=args.d_head,
        pos_encoding=pos,
        residual=args.residual,
        layer_norm=args.layer_norm,
        d_mlp=args.d_mlp,
        d_readout=args.d_readout,
        d_out=task.d_out,
        init_gain=args.init_gain,
    )


def add_train_arguments(parser: argparse.ArgumentParser) -> None:
    """Optimisation options (defaults are the paper's, except where noted)."""
    d = DEFAULT_TRAIN
    g = parser.add_argument_group("training", "AdamW with warm-up + cosine decay")
    g.add_argument(
        "--steps", type=positive_int, default=d.steps, help="optimiser steps (default: %(default)s)"
    )
    g.add_argument(
        "--batch-size", type=positive_int, default=d.batch_size, help="default: %(default)s"
    )
    g.add_argument(
        "--lr", type=positive_float, default=d.lr, help="peak learning rate (default: %(default)s)"
    )
    g.add_argument(
        "--weight-decay",
        type=non_negative_float,
        default=d.weight_decay,
        help="default: %(default)s",
    )
    g.add_argument(
        "--warmup",
        type=non_negative_int,
        default=d.warmup,
        help="warm-up steps (default: %(default)s)",
    )
    g.add_argument(
        "--grad-clip",
        type=non_negative_float,
        default=d.grad_clip,
        help="max gradient norm, 0 = off (default: %(default)s)",
    )
    g.add_argument(
        "--seed",
        type=non_negative_int,
        default=d.seed,
        help="model init and data streams (default: %(default)s)",
    )
    g.add_argument(
        "--n-train",
        type=positive_int,
        default=None,
        help="fixed training-set size (default: fresh samples every step)",
    )
    g.add_argument("--n-val", type=positive_int, default=d.n_val, help="default: %(default)s")
    g.add_argument("--n-test", type=positive_int, default=d.n_test, help="default: %(default)s")
    g.add_argument(
        "--eval-every", type=positive_int, default=d.eval_every, help="default: %(default)s"
    )
    g.add_argument(
        "--patience",
        type=positive_int,
        default=None,
        help="early stopping after this many evaluations without improvement",
    )
    g.add_argument(
        "--device", type=device, default="cpu", help="cpu, cuda or cuda:N (default: %(default)s)"
    )
    g.add_argument("--threads", type=positive_int, default=None, help="torch CPU threads")
    g.add_argument(
        "--dtype",
        choices=("float32", "float64"),
        default=d.dtype,
        help="weights and arithmetic; float64 checks numerical limits (default: %(default)s)",
    )
    g.add_argument(
        "--compile",
        action="store_true",
        help="torch.compile the training step: tens of seconds to compile once, then "
        "faster steps (pays off from a few thousand steps; falls back to eager with a "
        "warning where compiling fails)",
    )


def train_config_from_args(args: argparse.Namespace) -> TrainConfig:
    return TrainConfig(
        steps=args.steps,
        batch_size=args.batch_size,
        lr=args.lr,
        weight_decay=args.weight_decay,
        warmup=args.warmup,
        grad_clip=args.grad_clip,
        seed=args.seed,
        n_train=args.n_train,
        n_val=args.n_val,
        n_test=args.n_test,
        eval_every=args.eval_every,
        patience=args.patience,
        device=args.device,
        dtype=args.dtype,
        compile=args.compile,
    )
