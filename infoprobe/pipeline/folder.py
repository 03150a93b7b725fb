"""The run-folder engine: a folder of one output per stage and a manifest ``run.json``.

Each stage has a *key*: everything that determines its output (its settings and the keys of
the stages it reads). A stage whose output exists and whose key equals the manifest's is
skipped, so re-running the same command resumes where it stopped; an existing folder made
with other settings is refused (naming the stage and the fields that differ) unless
``overwrite``. Before any stage runs, every recorded output is checked against the identity
recorded when it was built (:mod:`infoprobe.pipeline.chain`).
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from infoprobe.base import formats
from infoprobe.base.atomic import atomic_output, refuse_existing
from infoprobe.base.header import check_header, make_header, read_json_object, with_header
from infoprobe.base.jsonable import json_sha256
from infoprobe.pipeline.errors import RunFolderError

MANIFEST = "run.json"
FORMAT = formats.RUN
SCHEMA_VERSION = 3
"""3: each stage records the ``identity`` of its outputs (infoprobe.pipeline.chain). 2: the common
header of docs/conventions.md. run.json of schema 1 and 2 is still read (the identities are
recorded at the next run), and rewritten with the new header at the next stage."""


STAGE_FIELDS = {"key_sha": str, "key": dict, "output": str}
"""Fields every stage entry of run.json holds, and their JSON types."""


def read_manifest(path: Path) -> dict:
    """Read and validate ``run.json``: its header, ``stages`` an object of stage entries,
    each with ``key_sha``, ``key``, ``output`` (and ``identity``, an object, when recorded).
    Raises RunFolderError naming the file and the field."""
    fix = "restore it from a copy, or choose another --out"
    manifest = read_json_object(path, RunFolderError, fix)
    check_header(manifest, path, fmt=FORMAT, error=RunFolderError,
                 readable=range(1, SCHEMA_VERSION + 1), unversioned=1)  # fmt: skip
    stages = manifest.get("stages")
    if not isinstance(stages, dict):
        raise RunFolderError(
            f"{path}: field 'stages' is {stages!r}, expected an object of stage entries; {fix}"
        )
    for name, entry in stages.items():
        fields = {**STAGE_FIELDS, "identity": dict} if isinstance(entry, dict) else {}
        wrong = [
            f for f, kind in fields.items() if f in entry and not isinstance(entry[f], kind)
        ] + [f for f in STAGE_FIELDS if f not in fields or f not in entry]
        if not isinstance(entry, dict) or wrong:
            raise RunFolderError(
                f"{path}: field 'stages.{name}' is {str(entry)[:80]!r}, expected an object with "
                f"{', '.join(f'{f!r} ({k.__name__})' for f, k in STAGE_FIELDS.items())}; {fix}"
            )
    return manifest


def key_sha(key: dict) -> str:
    """Stable hash of a stage key (JSON with sorted keys)."""
    return json_sha256(key)


@dataclass
class RunStage:
    """One step of a run: ``build(path)`` writes ``output`` (atomically) from ``key``."""

    name: str
    output: str
    key: dict
    build: Callable[[Path], Any]
    resumable: bool = False  # build() itself resumes a partial output (the cache)
    also_writes: tuple[str, ...] = ()  # further outputs: up to date only if all exist
    kinds: dict[str, str] = field(default_factory=dict)
    """Output name -> the format marker it must carry to be replaced (infoprobe.base.atomic)."""

    def complete(self, folder: Path) -> bool:
        """Whether every output of the stage exists in ``folder``."""
        return all((folder / name).exists() for name in (self.output, *self.also_writes))


class RunFolder:
    """A run folder and its manifest; runs stages, skipping those that are up to date."""

    def __init__(
        self,
        path: str | os.PathLike,
        *,
        overwrite: bool = False,
        progress: bool = True,
        log: Callable[[str], None] | None = None,
    ):
        self.path = Path(path)
        self.overwrite = overwrite
        self.progress = progress  # tqdm bars inside stages
        self.log = log if log is not None else (print if progress else None)
        self.manifest_path = self.path / MANIFEST
        self.manifest = self._read_manifest()
        self.skipped: list[str] = []

    def _read_manifest(self) -> dict:
        if not self.path.exists():
            return {**make_header(FORMAT, SCHEMA_VERSION), "stages": {}}
        if not self.manifest_path.is_file():
            if any(self.path.iterdir()):
                raise RunFolderError(
                    f"{self.path} exists and is not an infoprobe run folder (no {MANIFEST}); "
                    "choose another --out (--overwrite only redoes stages of a run folder)"
                )
            return {**make_header(FORMAT, SCHEMA_VERSION), "stages": {}}
        return read_manifest(self.manifest_path)

    def _write_manifest(self) -> None:
        with atomic_output(self.manifest_path, overwrite=True, kind=FORMAT) as tmp:
            self.manifest = with_header(self.manifest, FORMAT, SCHEMA_VERSION)
            tmp.write_text(json.dumps(self.manifest, indent=1, sort_keys=True, default=str))

    def run(self, stages: list[RunStage]) -> None:
        stale = self._check_chain(stages)
        self._check_replacements(stages, stale)
        self.path.mkdir(parents=True, exist_ok=True)
        if not self.manifest_path.is_file():  # a run folder from its first moment on
            self._write_manifest()
        for i, stage in enumerate(stages, 1):
            label = f"[{i}/{len(stages)}] {stage.name:<9}"
            target = self.path / stage.output
            sha = key_sha(stage.key)
            recorded = self.manifest["stages"].get(stage.name)
            if stage.name in stale:  # --overwrite: a replaced or edited output is redone
                self._remove_outputs(stage)
            elif stage.complete(self.path) and recorded and recorded["key_sha"] == sha:
                self.skipped.append(stage.name)
                self._say(f"{label} up to date: {target}")
                continue
            if target.exists() and recorded and recorded["key_sha"] == sha:
                pass  # recorded with this key, an output missing: rebuild in place
            elif target.exists() and not stage.resumable:
                self._replace_or_refuse(stage, target, recorded)
            elif target.exists() and recorded and recorded["key_sha"] != sha:
                self._replace_or_refuse(stage, target, recorded)
            self._say(f"{label} running ...")
            start = time.perf_counter()
            stage.build(target)
            seconds = time.perf_counter() - start
            self.manifest["stages"][stage.name] = {
                "key_sha": sha,
                "key": stage.key,
                "output": stage.output,
                "seconds": round(seconds, 1),
                "identity": self._identity(stage),
            }
            self._write_manifest()
            self._say(f"{label} done in {seconds:.0f} s: {target}")

    def _identity(self, stage: RunStage) -> dict[str, Any]:
        """What each output of ``stage`` was made from (infoprobe.pipeline.chain)."""
        from infoprobe.pipeline.chain import output_identity

        return {n: output_identity(self.path / n) for n in (stage.output, *stage.also_writes)}

    def _check_chain(self, stages: list[RunStage]) -> set[str]:
        """Check every recorded, up-to-date output against the identity run.json recorded
        when it was built, before any stage runs; return the stages to redo (--overwrite)
        or raise naming the first output that was replaced or edited. Outputs recorded by
        an infoprobe that kept no identity get theirs recorded now."""
        stale, legacy = set(), False
        for stage in stages:
            recorded = self.manifest["stages"].get(stage.name)
            if not (recorded and recorded["key_sha"] == key_sha(stage.key)):
                continue
            if not stage.complete(self.path):
                continue
            try:
                found = self._identity(stage)
            except (ValueError, OSError) as err:  # a damaged output: the reader's line
                if self.overwrite:
                    stale.add(stage.name)
                    continue
                raise RunFolderError(
                    f"{' '.join(str(err).split())}; pass --overwrite to redo stage {stage.name!r}"
                ) from None
            legacy = legacy or "identity" not in recorded
            expected = recorded.setdefault("identity", found)
            if found == expected:
                continue
            if not self.overwrite:
                from infoprobe.hooks.hdf5 import json_differences

                lines = json_differences(expected, found, "identity")[:4]
                why = "; ".join(lines).replace("file has", f"{MANIFEST} records")
                why = why.replace("this run has", "the file has")
                changed = next((n for n in found if found[n] != expected.get(n)), stage.output)
                raise RunFolderError(
                    f"{self.path / changed} is not the output stage {stage.name!r} "
                    f"recorded in {MANIFEST} ({why}): it was replaced or edited; restore it, "
                    "or pass --overwrite to redo the stage"
                )
            stale.add(stage.name)
        if legacy and self.manifest_path.is_file():
            self._write_manifest()
        return stale

    def _remove_outputs(self, stage: RunStage) -> None:
        for name in (stage.output, *stage.also_writes):
            target = self.path / name
            self._check_kind(stage, name)
            if target.is_dir():
                shutil.rmtree(target)
            elif target.exists():
                target.unlink()

    def _check_replacements(self, stages: list[RunStage], stale: set[str]) -> None:
        """Before any stage runs, refuse every output a stage would replace that may not be
        replaced (without --overwrite, or not infoprobe's own output of the stage's kind),
        so that a refusal leaves the folder as it was."""
        for stage in stages:
            target = self.path / stage.output
            recorded = self.manifest["stages"].get(stage.name)
            same = bool(recorded) and recorded["key_sha"] == key_sha(stage.key)
            if stage.name in stale:
                names = [stage.output, *stage.also_writes]
            elif not target.exists() or same or (stage.resumable and not recorded):
                continue  # up to date, rebuilt in place, built new, or resumed
            else:
                self._refuse_without_overwrite(stage, target, recorded)
                names = [stage.output]
            for name in names:
                self._check_kind(stage, name)

    def _check_kind(self, stage: RunStage, name: str) -> None:
        """Refuse (OutputExistsError) to replace ``name`` unless it is infoprobe's own
        output of the kind ``stage`` writes there."""
        kind = stage.kinds.get(name)
        if kind is None:
            raise RunFolderError(f"stage {stage.name!r}: no format marker known for {name}")
        refuse_existing(self.path / name, True, f"output of stage {stage.name!r}", kind=kind)

    def _replace_or_refuse(self, stage: RunStage, target: Path, recorded: dict | None) -> None:
        self._refuse_without_overwrite(stage, target, recorded)
        self._check_kind(stage, stage.output)
        if target.is_dir():
            shutil.rmtree(target)
        else:
            target.unlink()

    def _refuse_without_overwrite(
        self, stage: RunStage, target: Path, recorded: dict | None
    ) -> None:
        if not self.overwrite:
            from infoprobe.hooks.hdf5 import json_differences

            why = (
                "; ".join(json_differences(recorded["key"], stage.key)[:6])
                if recorded
                else "it is not recorded in run.json (an interrupted or foreign output)"
            )
            raise RunFolderError(
                f"{target} was made with other settings ({why}); pass --overwrite to redo "
                f"stage {stage.name!r}, or choose another --out"
            )

    def _say(self, line: str) -> None:
        if self.log is not None:
            self.log(line)
