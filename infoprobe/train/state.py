"""A training run's resumable state: one safetensors file beside the run's output.

Every ``Resume.every`` steps a run writes everything it needs to go on exactly where it
was: the weights, the optimiser's moments, the scheduler, every random generator in play
(torch's, numpy's data stream, Python's), the step, the history, the early-stopping bests
and the best weights so far. The file is ``safetensors`` (the tensors) with a JSON
document in its metadata (the rest), so opening it runs nothing. It is written under a
temporary name and moved over the previous state in one ``os.replace``, under the
output's lock: a kill during the write leaves the previous state intact.

The same command, run again, continues from the state; the finished run equals one never
interrupted, bit for bit, on the same threads and device. A state whose ``settings``
(task, model, training recipe, seeds, format version) differ from the run's is refused
in one line naming the first differing field (:class:`StateMismatchError`);
``restart`` starts over on purpose. With a budget (``deadline``) the run stops at its
first state after the deadline, raising :class:`BudgetStop` (the CLI's exit status
:data:`BUDGET_EXIT`). A finished run removes its state.
"""

from __future__ import annotations

import json
import os
import random
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors import safe_open

from infoprobe.base import formats
from infoprobe.base.atomic import (
    output_lock,
    remove_stale_temps,
    save_tensors,
    temp_name,
    usual_mode,
)
from infoprobe.base.errors import UserError
from infoprobe.base.jsonable import jsonable
from infoprobe.train.budget import BudgetStop, Resume

FORMAT = formats.TRAIN_STATE
SCHEMA_VERSION = 1
MARKER = f"infoprobe-format={FORMAT}"
SUFFIX = ".state.safetensors"


class StateMismatchError(UserError):
    """A state file was written by a run with other settings, or is not a state."""


MAX_HEADER = 100 << 20
"""The largest safetensors header read when telling whether a file is a state."""


def is_state_file(path: str | os.PathLike) -> bool:
    """Whether ``path`` is a regular file (not a link) whose safetensors header names this
    format: read as bytes and JSON, nothing of it executed, no tensor loaded."""
    path = Path(path)
    if path.is_symlink() or not path.is_file():
        return False
    try:
        with open(path, "rb") as f:
            size = int.from_bytes(f.read(8), "little")
            if not 0 < size <= MAX_HEADER:
                return False
            header = json.loads(f.read(size))
    except (OSError, ValueError):
        return False
    metadata = header.get("__metadata__") if isinstance(header, dict) else None
    return isinstance(metadata, dict) and metadata.get("format") == FORMAT


def state_path(output: str | os.PathLike) -> Path:
    """Where the state of a run writing ``output`` lies: ``OUTPUT.state.safetensors``."""
    output = Path(output)
    return output.with_name(output.name + SUFFIX)


def _first_difference(found: Any, wanted: Any, prefix: str = "") -> str | None:
    """The dotted name of the first field (in ``wanted``'s order) in which two JSON
    values differ, or None."""
    if isinstance(found, dict) and isinstance(wanted, dict):
        for key in [*wanted, *(k for k in found if k not in wanted)]:
            where = f"{prefix}.{key}" if prefix else str(key)
            if key not in found or key not in wanted:
                return where
            inner = _first_difference(found[key], wanted[key], where)
            if inner is not None:
                return inner
        return None
    return None if found == wanted else (prefix or "settings")


def _get(document: Any, dotted: str) -> Any:
    for key in dotted.split("."):
        document = document.get(key, "(absent)") if isinstance(document, dict) else "(absent)"
    return document


class StateFile:
    """The state of one run at ``path``, written by a run with ``settings`` (JSON)."""

    def __init__(self, path: str | os.PathLike, settings: Mapping[str, Any], resume: Resume):
        self.path, self.resume = Path(path), resume
        self.settings = json.loads(json.dumps(jsonable(dict(settings))))
        self._loaded: Any = None

    def due(self, done: int, steps: int) -> bool:
        """Whether a state is written after ``done`` steps of ``steps``."""
        return done % self.resume.every == 0 and done < steps

    def load(self) -> tuple[dict[str, torch.Tensor], dict[str, Any]] | None:
        """The tensors and JSON document of the state, or None when there is none (or
        ``restart``, which removes it). Raises :class:`StateMismatchError` for a file that
        is not a state, of another schema, or of other settings. Read once: later calls
        give the first call's answer."""
        if self._loaded is None:
            self._loaded = (self._read(),)
        return self._loaded[0]

    def _read(self) -> tuple[dict[str, torch.Tensor], dict[str, Any]] | None:
        if self.resume.restart:
            self.remove()
            return None
        if not os.path.lexists(self.path):
            return None
        if not self.path.is_file():  # a FIFO, a device, a folder, a dangling link
            raise StateMismatchError(
                f"{self.path}: not a regular file, so not a training state; move it away "
                "(infoprobe replaces or removes only its own states)"
            )
        try:
            with safe_open(str(self.path), framework="pt") as f:
                metadata = f.metadata() or {}
                tensors = {k: f.get_tensor(k) for k in f.keys()}
            document = json.loads(metadata.get("state", "null"))
        except Exception as err:  # safetensors raises its own error class
            raise StateMismatchError(
                f"{self.path}: not a readable training state ({' '.join(str(err).split())}); "
                "pass --restart to start over"
            ) from None
        if metadata.get("format") != FORMAT:
            raise StateMismatchError(
                f"{self.path}: field 'format' is {metadata.get('format')!r}, expected "
                f"{FORMAT!r}; pass --restart to start over"
            )
        if not isinstance(document, dict):
            raise StateMismatchError(
                f"{self.path}: field 'state' is not a JSON object (got "
                f"{type(document).__name__}); pass --restart to start over"
            )
        version = metadata.get("schema_version")
        if version != str(SCHEMA_VERSION):
            raise StateMismatchError(
                f"{self.path}: field 'schema_version' is {version!r}, expected "
                f"'{SCHEMA_VERSION}' (a state of another infoprobe); pass --restart to start "
                "over"
            )
        found = document.get("settings")
        differ = _first_difference(found, self.settings)
        if differ is not None:
            raise StateMismatchError(
                f"{self.path}: a state of other settings: field {differ!r} is "
                f"{_get(found, differ)!r} in the state, {_get(self.settings, differ)!r} in "
                "this run; run the command that made it, or pass --restart to start over"
            )
        return tensors, document

    def save(self, tensors: Mapping[str, torch.Tensor], document: Mapping[str, Any]) -> None:
        """Write the state: under a temporary name, then ``os.replace`` over the last."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        payload = {"settings": self.settings, **jsonable(dict(document))}
        metadata = {
            "format": FORMAT,
            "marker": MARKER,
            "schema_version": str(SCHEMA_VERSION),
            "state": json.dumps(payload, sort_keys=True),
        }
        flat = {k: v.detach().cpu().contiguous() for k, v in tensors.items()}
        with output_lock(self.path):
            remove_stale_temps(self.path)
            tmp = temp_name(self.path)
            try:
                save_tensors(flat, tmp, metadata, name=self.path)
                usual_mode(tmp)
                os.replace(tmp, self.path)
            except BaseException:
                tmp.unlink(missing_ok=True)
                raise

    def remove(self) -> None:
        """Remove the state: only a file that is provably one (:func:`is_state_file`);
        anything else at its path is refused, never deleted."""
        if not os.path.lexists(self.path):
            return
        if not is_state_file(self.path):
            raise StateMismatchError(
                f"{self.path}: not a training state (no {FORMAT!r} header): refusing to "
                "delete it; move it away and run the command again"
            )
        self.path.unlink()

    def stop(self, done: int, steps: int) -> None:
        """Raise :class:`BudgetStop` when the budget is spent (after a state was written)."""
        if self.resume.expired():
            raise BudgetStop(done, steps, self.resume.minutes or 0.0, self.path)


# --- random generators -----------------------------------------------------------------------


def rng_document(rng: np.random.Generator) -> dict[str, Any]:
    """The JSON state of every generator of a run: its numpy data stream, Python's."""
    return {
        "numpy": rng.bit_generator.state,
        "python": [random.getstate()[0], list(random.getstate()[1]), random.getstate()[2]],
    }


def restore_rngs(document: Mapping[str, Any], rng: np.random.Generator) -> None:
    """Set the generators to the state :func:`rng_document` recorded."""
    rng.bit_generator.state = document["numpy"]
    version, internal, gauss = document["python"]
    random.setstate((version, tuple(internal), gauss))


def prefixed(prefix: str, tensors: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {f"{prefix}{k}": v for k, v in tensors.items()}


def unprefixed(prefix: str, tensors: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {k[len(prefix) :]: v for k, v in tensors.items() if k.startswith(prefix)}


def optimiser_tensors(opt: torch.optim.Optimizer) -> tuple[dict[str, torch.Tensor], list]:
    """An optimiser's state as tensors ``opt.<param>.<key>`` and its JSON param groups."""
    state = opt.state_dict()
    tensors = {
        f"opt.{index}.{key}": value if torch.is_tensor(value) else torch.tensor(value)
        for index, entries in state["state"].items()
        for key, value in entries.items()
    }
    return tensors, state["param_groups"]


def restore_optimiser(
    opt: torch.optim.Optimizer, tensors: Mapping[str, torch.Tensor], groups: list
) -> None:
    entries: dict[int, dict[str, torch.Tensor]] = {}
    for name, value in unprefixed("opt.", tensors).items():
        index, key = name.split(".", 1)
        entries.setdefault(int(index), {})[key] = value
    for group in groups:
        if "betas" in group:
            group["betas"] = tuple(group["betas"])
    opt.load_state_dict({"state": entries, "param_groups": groups})
