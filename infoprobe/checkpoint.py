"""Checkpoints: a folder with ``model.safetensors`` and ``checkpoint.json`` (no pickle).

``checkpoint.json`` holds the header of docs/conventions.md (``format``,
``schema_version``, ``created``, ``infoprobe_version``, ``axes``), the model config, the
task spec (with its seed), the training config, the metrics history, package versions
and the SHA-256 of the weights file, so a checkpoint is self-describing and its weights
are verified on load. Schema 1 checkpoints (version in ``format_version``) are still read.

The model is infoprobe's :class:`InfoFlowTransformer` (``model_config`` holds its
:class:`ModelConfig`) or one built by the user's own code: then ``model_config`` names a
factory (:class:`infoprobe.foreign.ForeignConfig`, docs/own-model.md) and the weights are
that module's ``state_dict``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from safetensors.torch import load_file
from transformer_lens import HookedRootModule

from infoprobe.base import formats
from infoprobe.base.atomic import atomic_output, save_tensors, usual_mode
from infoprobe.base.digest import file_sha256
from infoprobe.base.errors import UsageError, UserError
from infoprobe.base.header import MODEL_IDENTITY, check_header, make_header, read_json_object
from infoprobe.base.versions import package_versions
from infoprobe.foreign.check import check_foreign_model
from infoprobe.foreign.config import ForeignConfig, build_model, config_from_dict, weights_module
from infoprobe.foreign.errors import ForeignModelError
from infoprobe.foreign.trust import check_trusted, copy_factory_module, model_code_sha256
from infoprobe.model import InfoFlowTransformer, ModelConfig

if TYPE_CHECKING:  # hub → pillar; imported at run time only where needed
    from infoprobe.tasks import Task

FORMAT = formats.CHECKPOINT
SCHEMA_VERSION = 3
"""3: ``model_config`` may name a factory (a model built by the user's code); 2: the
common header (``schema_version``, UTC ``created``, ``axes``); schema 1 kept its version in
``format_version`` and a local ``created``, and is still read."""
READABLE = range(1, SCHEMA_VERSION + 1)
WEIGHTS = "model.safetensors"
META = "checkpoint.json"
REQUIRED_FIELDS = ("format", "model_config", "weights_sha256")
HEX = frozenset("0123456789abcdef")
MAX_WEIGHT = 1e6
"""Largest magnitude a stored weight may have. A trained model of this project's sizes has
weights of order 1; one of 1e6 already pushes a few layers' activations past float32's
range (~3e38 after six products), so a larger value is a damaged or foreign file."""
NO_TASK_HINT = (
    "this checkpoint does not say which task it was trained on; pass --task NAME and its "
    "parameters (Python: task=make_task(...)), or cache inputs from a file with "
    "`infoprobe cache CKPT --inputs X.npy` (Python: inputs=...)"
)


class CheckpointError(UserError):
    """A checkpoint folder is missing, truncated, foreign or inconsistent."""


@dataclass
class Checkpoint:
    """A loaded checkpoint; unpacks as ``model, task = load_checkpoint(path)``."""

    path: Path
    model: InfoFlowTransformer | HookedRootModule
    task: Task | None
    """None for a checkpoint saved without one (its inputs come from a file)."""
    model_config: ModelConfig | ForeignConfig
    meta: dict = field(repr=False)
    model_code_sha256: str | None = None
    """A foreign model's code (:func:`infoprobe.foreign.trust.model_code_sha256`: the
    factory module's file and every ``.py`` file in the folder); None for infoprobe's own
    model, whose code is this package's version."""

    @property
    def weights_sha256(self) -> str:
        return self.meta["weights_sha256"]

    @property
    def model_identity(self) -> dict[str, str | None]:
        """The :data:`MODEL_IDENTITY` fields of this model: weights and (foreign) code."""
        return dict(zip(MODEL_IDENTITY, (self.weights_sha256, self.model_code_sha256), strict=True))

    @property
    def history(self) -> list[dict]:
        return self.meta.get("history", [])

    def __iter__(self) -> Iterator[Any]:
        return iter((self.model, self.task))


def save_checkpoint(
    path: str | Path,
    model: torch.nn.Module,
    task: Task | None,
    *,
    config: ForeignConfig | None = None,
    train_config: dict | None = None,
    history: list[dict] | None = None,
    metrics: dict | None = None,
    overwrite: bool = False,
) -> Path:
    """Write ``model`` (weights), ``task`` (spec) and training records to folder ``path``.

    ``model`` is an :class:`InfoFlowTransformer`, or a model built by the user's code with
    its ``config`` (:class:`ForeignConfig`: the factory that builds it, its sites and
    architecture; the model is checked against it on two samples of ``task``). ``task``
    None saves a checkpoint of no task: T, d and d_out are the config's, the model is
    checked on standard normal inputs, and its data come from a file (``infoprobe cache
    --inputs``). The folder is assembled under a temporary name and renamed into place, so
    a crash never leaves a half checkpoint. Refuses an existing ``path`` unless
    ``overwrite``.
    """
    path = Path(path)
    if config is None and not isinstance(model, InfoFlowTransformer):
        raise UsageError(
            f"save_checkpoint: {type(model).__name__} is not infoprobe's model; pass "
            "config=ForeignConfig(factory=..., sites=..., heads=..., ...) (docs/own-model.md)"
        )
    cfg = model.cfg if config is None else config
    if task is not None:
        check_task_fits(task, cfg, path)
    module = weights_module(model)
    state = {k: v.detach().contiguous().cpu() for k, v in module.state_dict().items()}
    with torch.random.fork_rng(devices=[]):  # a fresh model's tensors, the RNG untouched
        try:
            fresh = build_model(cfg)
        except ForeignModelError as err:
            raise CheckpointError(f"model to save as {path}: {err}") from None
    expected = weights_module(fresh).state_dict()
    names = (sorted(set(expected) - set(state)), sorted(set(state) - set(expected)))
    if any(names):
        raise CheckpointError(
            f"model to save as {path}: its tensors differ from those the factory "
            f"{getattr(cfg, 'factory', 'InfoFlowTransformer')!r} builds: missing {names[0]}, "
            f"unexpected {names[1]}"
        )
    check_tensors(state, expected, f"model to save as {path}")
    if isinstance(cfg, ForeignConfig):
        weights_module(fresh).load_state_dict(state)
        try:
            check_foreign_model(fresh, cfg, task)
        except ForeignModelError as err:
            raise CheckpointError(f"model to save as {path}: {err}") from None
    with atomic_output(
        path, overwrite=overwrite, directory=True, what="checkpoint", kind=FORMAT
    ) as tmp:
        save_tensors(state, tmp / WEIGHTS, name=Path(path) / WEIGHTS)
        usual_mode(tmp / WEIGHTS)
        if isinstance(cfg, ForeignConfig):
            copy_factory_module(cfg.factory, tmp)
        meta = {
            **make_header(FORMAT, SCHEMA_VERSION),
            "model_config": cfg.to_dict(),
            **({} if task is None else {"task": task.to_dict()}),
            "train_config": train_config or {},
            "history": history or [],
            "metrics": metrics or {},
            "versions": package_versions(),
            "weights_sha256": file_sha256(tmp / WEIGHTS),
        }
        (tmp / META).write_text(json.dumps(meta, indent=2, sort_keys=True))
    return path


def read_checkpoint_meta(path: str | Path, *, require_task: bool = True) -> dict:
    """Read and validate ``checkpoint.json`` of checkpoint folder ``path``.

    ``require_task=False`` accepts a checkpoint without a ``task`` field (one made outside
    infoprobe's training), for callers that supply the task themselves.
    """
    path = Path(path)
    meta_path = path / META
    if not path.is_dir():
        raise CheckpointError(f"checkpoint {path} is not a folder (expected {META} + {WEIGHTS})")
    if not meta_path.is_file():
        raise CheckpointError(f"checkpoint {path}: missing {META}")
    meta = read_json_object(meta_path, CheckpointError)
    missing = [name for name in REQUIRED_FIELDS if name not in meta]
    if missing:
        hint = ""
        if "weights_sha256" in missing and (path / WEIGHTS).is_file():
            hint = f" (the SHA-256 of {WEIGHTS} here is {file_sha256(path / WEIGHTS)})"
        raise CheckpointError(f"{meta_path}: missing field(s) {missing}{hint}")
    if require_task and "task" not in meta:
        raise CheckpointError(f"{meta_path}: missing field(s) ['task']: {NO_TASK_HINT}")
    if meta["format"] != FORMAT:
        raise CheckpointError(
            f"{meta_path}: field 'format' is {meta['format']!r}, expected {FORMAT!r}"
        )
    check_header(
        meta,
        meta_path,
        fmt=FORMAT,
        readable=READABLE,
        error=CheckpointError,
        legacy_version="format_version",
    )
    _check_meta_types(meta, meta_path)
    return meta


def _check_meta_types(meta: dict, meta_path: Path) -> None:
    """Refuse fields of ``checkpoint.json`` with the wrong JSON type, naming the field."""

    def bad(name: str, expected: str) -> CheckpointError:
        value = meta[name]
        shown = repr(value) if len(repr(value)) <= 80 else repr(value)[:77] + "..."
        return CheckpointError(
            f"{meta_path}: field {name!r} is {shown} ({type(value).__name__}), expected {expected}"
        )

    sha = meta["weights_sha256"]
    if not (isinstance(sha, str) and len(sha) == 64 and all(c in HEX for c in sha.lower())):
        raise bad("weights_sha256", "64 hex digits (the SHA-256 of the weights file)")
    for name in ("model_config", "task", "train_config", "metrics", "versions"):
        if name in meta and not isinstance(meta[name], dict):
            raise bad(name, "a JSON object")
    history = meta.get("history", [])
    if not isinstance(history, list):
        raise bad("history", "a list of evaluation records")
    if not all(isinstance(h, dict) for h in history):
        raise bad("history", "a list of objects (one per evaluation)")
    for i, record in enumerate(history):
        for key, value in record.items():
            number = isinstance(value, int | float) and not isinstance(value, bool)
            if not (number or value is None):
                raise CheckpointError(
                    f"{meta_path}: field 'history' entry {i} key {key!r} is {value!r} "
                    f"({type(value).__name__}), expected a number"
                )


def load_checkpoint(
    path: str | Path,
    device: str | torch.device = "cpu",
    *,
    task: Task | None = None,
    trust_code: bool = False,
    allow_no_task: bool = True,
) -> Checkpoint:
    """Load a checkpoint folder: model (eval mode, on ``device``), task spec and metadata.

    The result's ``.model`` is the model, ``.task`` its task (None for a checkpoint saved
    without one, ``save_checkpoint(..., task=None)``), ``.meta`` the checkpoint.json; it
    unpacks as ``model, task = load_checkpoint(path)``. Verifies the weights file against
    the recorded SHA-256, so a truncated or swapped weights file is reported instead of
    loaded. ``task`` supplies the task of a checkpoint whose ``checkpoint.json`` has none
    (it must agree with a recorded one); ``allow_no_task=False`` refuses a checkpoint
    without a task (for callers that draw samples from it).

    A checkpoint whose ``model_config`` names a factory (a model built by someone's code)
    is refused with :class:`~infoprobe.foreign.trust.UntrustedCodeError` before anything is
    imported, unless ``trust_code`` (docs/own-model.md, "Trust"); infoprobe's own model
    runs no code of the checkpoint's and needs no trust.
    """
    from infoprobe.tasks import task_from_dict  # hub → pillar, imported where needed

    for name, value in (("trust_code", trust_code), ("allow_no_task", allow_no_task)):
        if not isinstance(value, bool):  # "no" is truthy: only a bool may grant trust
            raise UsageError(f"load_checkpoint: {name}: expected True or False, got {value!r}")
    try:
        device = torch.device(device)
    except (RuntimeError, TypeError, ValueError):
        raise UsageError(
            f"load_checkpoint: device: expected a torch device such as 'cpu', 'cuda' or "
            f"'cuda:0', got {device!r}"
        ) from None
    path = Path(path)
    meta = read_checkpoint_meta(path, require_task=task is None and not allow_no_task)
    if task is not None and "task" in meta and meta["task"] != task.to_dict():
        raise CheckpointError(
            f"{path / META}: field 'task' is {meta['task']}, but the task given is "
            f"{task.to_dict()}; leave the task out to use the checkpoint's own"
        )
    weights = path / WEIGHTS
    if not weights.is_file():
        raise CheckpointError(f"checkpoint {path}: missing {WEIGHTS}")
    actual = file_sha256(weights)
    if actual != meta["weights_sha256"]:
        raise CheckpointError(
            f"{weights}: SHA-256 {actual[:12]}… does not match checkpoint.json field "
            f"'weights_sha256' {meta['weights_sha256'][:12]}… (truncated or replaced file)"
        )
    cfg = _model_config(meta, path / META)
    code_sha = None
    if isinstance(cfg, ForeignConfig):
        check_trusted(cfg.factory, path, str(path / META), trust_code=trust_code)
        code_sha = model_code_sha256(cfg.factory, path)
    try:
        model = build_model(cfg, folder=path)
    except ForeignModelError as err:
        raise CheckpointError(f"{path / META}: {err}") from None
    module = weights_module(model)
    module.load_state_dict(_read_weights(weights, module, path / META))
    model.to(device).eval()
    if task is None and "task" in meta:
        try:
            task = task_from_dict(meta["task"])
        except (ValueError, TypeError, KeyError) as err:
            raise CheckpointError(
                f"{path / META}: field 'task' is not a valid task: {err}"
            ) from None
    if task is not None:
        check_task_fits(task, cfg, path / META)
    if isinstance(cfg, ForeignConfig):
        try:
            check_foreign_model(model, cfg, task)
        except ForeignModelError as err:
            raise CheckpointError(f"{path / META}: {err}") from None
    meta = {**meta, **({} if task is None else {"task": task.to_dict()})}
    return Checkpoint(path, model, task, cfg, meta, code_sha)


def as_checkpoint(
    checkpoint: str | Path | Checkpoint, trust_code: bool = False, allow_no_task: bool = True
) -> Checkpoint:
    """``checkpoint`` itself when loaded, else :func:`load_checkpoint` of the folder."""
    if isinstance(checkpoint, Checkpoint):
        return checkpoint
    return load_checkpoint(checkpoint, trust_code=trust_code, allow_no_task=allow_no_task)


def check_task_fits(task: Task, cfg: ModelConfig | ForeignConfig, where: Path) -> None:
    """Refuse a task whose inputs or targets do not fit the model (T, d, d_out)."""
    pairs = (("T", "n_ctx", task.T), ("d", "d_in", task.d), ("d_out", "d_out", task.d_out))
    wrong = [
        f"task {name}={value} but model_config field '{field}' is {getattr(cfg, field)}"
        for name, field, value in pairs
        if value != getattr(cfg, field)
    ]
    if wrong:
        raise CheckpointError(
            f"{where}: task {task.name!r} does not fit the model: " + "; ".join(wrong)
        )


def _model_config(meta: dict, meta_path: Path) -> ModelConfig | ForeignConfig:
    try:
        return config_from_dict(meta["model_config"])
    except (ValueError, TypeError) as err:
        raise CheckpointError(f"{meta_path}: field 'model_config' is invalid: {err}") from None


def _read_weights(weights: Path, model: torch.nn.Module, meta_path: Path) -> dict:
    """The tensors of ``weights``, checked against the parameters ``model`` expects."""
    try:
        state = load_file(str(weights))
    except Exception as err:  # safetensors raises its own SafetensorError (an Exception)
        raise CheckpointError(
            f"{weights}: not a safetensors file ({' '.join(str(err).split())}); infoprobe "
            "never loads pickles"
        ) from None
    expected = model.state_dict()
    missing = sorted(set(expected) - set(state))
    unexpected = sorted(set(state) - set(expected))
    if missing or unexpected:
        raise CheckpointError(
            f"{weights}: tensor names do not match checkpoint.json field 'model_config' "
            f"({meta_path}): missing {missing}, unexpected {unexpected}"
        )
    for name, tensor in expected.items():
        if tuple(state[name].shape) != tuple(tensor.shape):
            raise CheckpointError(
                f"{weights}: tensor {name!r} has shape {list(state[name].shape)}, but "
                f"field 'model_config' of {meta_path} gives {list(tensor.shape)}"
            )
    check_tensors(state, expected, str(weights))
    return state


def check_tensors(
    state: dict[str, torch.Tensor], expected: dict[str, torch.Tensor], where: str
) -> None:
    """Refuse tensors of another kind of dtype than the model's (integer weights where it
    has floating ones: never cast silently; float64 weights of a model trained in double
    precision are floating and load as the model's float32), or holding NaN, inf or a
    magnitude above :data:`MAX_WEIGHT`, naming the tensor (``where``: the file or model)."""
    for name, want in expected.items():
        tensor = state[name]
        floating = want.is_floating_point() and tensor.is_floating_point()
        if tensor.dtype != want.dtype and not floating:
            raise CheckpointError(
                f"{where}: tensor {name!r} has dtype {str(tensor.dtype).removeprefix('torch.')}"
                f", expected {str(want.dtype).removeprefix('torch.')} (no silent cast)"
            )
        if not tensor.is_floating_point() or tensor.numel() == 0:
            continue
        finite = torch.isfinite(tensor)
        if not bool(finite.all()):
            index = tuple(int(i) for i in torch.nonzero(~finite)[0])
            raise CheckpointError(
                f"{where}: tensor {name!r} holds {tensor[index].item()} at index {index}, "
                "expected finite weights (a diverged or damaged model)"
            )
        largest = float(tensor.abs().max())
        if largest > MAX_WEIGHT:
            raise CheckpointError(
                f"{where}: tensor {name!r} has a weight of magnitude {largest:.3g}, expected "
                f"at most {MAX_WEIGHT:.0e} (a damaged or foreign model)"
            )


def with_task(
    source: str | Path, dest: str | Path, task: Task, *, trust_code: bool = False
) -> Path:
    """Copy checkpoint ``source`` to ``dest`` with ``task`` recorded in its JSON.

    For checkpoints made outside infoprobe's training that lack a task spec; the
    weights are copied byte for byte (same hash), the copy is written atomically.
    ``trust_code`` as in :func:`load_checkpoint`.
    """
    ck = load_checkpoint(source, task=task, trust_code=trust_code)
    meta = {k: v for k, v in ck.meta.items() if k != "format_version"}  # schema 1's version
    meta.update(make_header(FORMAT, SCHEMA_VERSION))  # a new file: this schema's header
    with atomic_output(dest, overwrite=True, directory=True, what="checkpoint", kind=FORMAT) as tmp:
        (tmp / WEIGHTS).write_bytes((Path(source) / WEIGHTS).read_bytes())
        for code in Path(source).rglob("*.py"):  # the model's code kept beside it
            copy = tmp / code.relative_to(source)
            copy.parent.mkdir(parents=True, exist_ok=True)
            copy.write_bytes(code.read_bytes())
        (tmp / META).write_text(json.dumps(meta, indent=2, sort_keys=True))
    return Path(dest)
