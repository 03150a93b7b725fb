"""Every seed of a ``run --seeds`` folder analysed alike, so the spread over training seeds
is one command whichever seed trained best.

``infoprobe run ... --seeds S1,S2,.. --out RUN`` trains every seed (``RUN/seeds/seed-S``),
analyses the best one in RUN itself and records the analysis settings in
``RUN/seeds/analysis.json`` (:func:`record_analysis`).
:func:`~infoprobe.pipeline.run.analyse_seeds` runs the same
stages with the same settings on each other seed's checkpoint, into
``RUN/seeds/analysis/seed-S`` (resumable stage by stage, as ``probe-checkpoint``), and
returns the folders of every seed, the best one's (RUN) first.
"""

from __future__ import annotations

import json
from pathlib import Path

from infoprobe.base import formats
from infoprobe.base.atomic import atomic_output
from infoprobe.base.errors import UsageError
from infoprobe.base.header import check_header, make_header, read_json_object
from infoprobe.pipeline.settings import RunSettings
from infoprobe.train.seeds import SCHEMA_VERSION as SEEDS_SCHEMA

SEEDS_FOLDER = "seeds"
"""Where ``run --seeds`` keeps every seed's checkpoint."""
ANALYSIS = "analysis.json"
"""The analysis settings of a ``run --seeds`` folder (in ``RUN/seeds/``)."""
ANALYSES_FOLDER = "analysis"
"""Where the other seeds' analyses go (``RUN/seeds/analysis/seed-S``)."""
SCHEMA_VERSION = 1


def record_analysis(run: Path, settings: RunSettings) -> Path:
    """Write ``RUN/seeds/analysis.json``: the settings the best seed was analysed with."""
    path = Path(run) / SEEDS_FOLDER / ANALYSIS
    document = {
        **make_header(formats.SEED_ANALYSIS, SCHEMA_VERSION),
        "settings": settings.to_dict(),
    }
    with atomic_output(path, overwrite=True, kind=formats.SEED_ANALYSIS) as tmp:
        tmp.write_text(json.dumps(document, indent=1, sort_keys=True))
    return path


def is_seeds_run(path: str | Path) -> bool:
    """Whether ``path`` is a run folder made by ``run --seeds`` (it has ``seeds/``)."""
    return (Path(path) / SEEDS_FOLDER / "summary.json").is_file()


def analysis_settings(run: Path) -> RunSettings:
    """The settings ``run --seeds`` analysed its best seed with (``RUN/seeds/analysis.json``)."""
    path = run / SEEDS_FOLDER / ANALYSIS
    if not path.is_file():
        raise UsageError(
            f"{path}: missing: the folder was made before the analysis settings were "
            "recorded; run the same `infoprobe run --seeds` command again (finished stages "
            "are skipped) to record them"
        )
    document = read_json_object(path, UsageError)
    check_header(document, path, fmt=formats.SEED_ANALYSIS,
                 readable=range(1, SCHEMA_VERSION + 1), error=UsageError)  # fmt: skip
    return RunSettings.from_dict(document.get("settings"))


def seeds_to_analyse(run: Path) -> list[int]:
    """The seeds of the ``run --seeds`` folder ``run`` other than the best, in seed order,
    from ``RUN/seeds/summary.json``; a seed that did not finish training is refused."""
    seeds = run / SEEDS_FOLDER
    summary = read_json_object(seeds / "summary.json", UsageError)
    check_header(summary, seeds / "summary.json", fmt=formats.SEEDS,
                 readable=range(1, SEEDS_SCHEMA + 1), error=UsageError)  # fmt: skip
    best = summary.get("best_seed")
    members = summary.get("members")
    if not isinstance(members, dict) or not isinstance(best, int):
        raise UsageError(
            f"{seeds / 'summary.json'}: fields 'members' and 'best_seed' expected (a finished "
            "`infoprobe run --seeds`)"
        )
    unfinished = sorted(int(s) for s, m in members.items() if m is None)
    if unfinished:
        raise UsageError(
            f"{run}: seed(s) {unfinished} did not finish training; run the same `infoprobe "
            "run --seeds` command to finish them first"
        )
    return sorted(int(s) for s in members if int(s) != best)
