"""Every unfinished run's state checked before any run of a sweep starts.

A state is an input (:mod:`infoprobe.train.state_check`): one that was edited must be
refused before the sweep trains anything or rewrites results.json, not after the runs
before it have finished. A state of one run is checked whole against the model,
optimiser and schedule its settings build; a batched group's state is checked against the
group's settings here and in whole when the group resumes.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence

from safetensors import safe_open

from infoprobe.reproduce.grid import RunSpec
from infoprobe.reproduce.runs import GROUP_STATE, RunStore, group_state
from infoprobe.train.loop import setup_training
from infoprobe.train.state_check import check_run_state

__all__ = ["check_states"]


def _state_runs(path) -> list | None:
    """The run ids a state's settings name, read from its header as JSON (None when
    unreadable: the full check then names what is wrong)."""
    try:
        with safe_open(str(path), framework="pt") as f:
            runs = json.loads((f.metadata() or {}).get("state", "{}"))["settings"]["runs"]
    except Exception:  # safetensors raises its own class; any damage is named later
        return None
    return runs if isinstance(runs, list) else None


def check_states(pending: Sequence[RunSpec], store: RunStore) -> None:
    """Refuse (:class:`~infoprobe.train.state.StateMismatchError`, one line naming the
    file and the field) any state in the run folders of ``pending`` that its runs would
    not take."""
    by_id = {spec.run_id: spec for spec in pending}
    for spec in pending:
        path = store.run_dir(spec.run_id) / GROUP_STATE
        if spec.resume is None or spec.store is None or spec.resume.restart:
            continue
        if not os.path.lexists(path):
            continue
        group = [by_id.get(r) for r in _state_runs(path) or [spec.run_id]]
        group = [spec] if None in group or group[0] is not spec else group
        saved = group_state(group).load()  # format and settings, as the run will
        if saved is None or len(group) > 1:  # a group's contents: when it resumes
            continue
        cfg = spec.train_config()
        model, opt, sched = setup_training(spec.point.build_task(), spec.point.model_config(), cfg)
        check_run_state(path, saved, model, opt, sched, cfg)
