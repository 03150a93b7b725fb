"""What a finished run prints (:class:`RunSummary`), read back from its folder."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from infoprobe.attention.orientation import recorded_orientation
from infoprobe.checkpoint import read_checkpoint_meta
from infoprobe.compare.files import read_comparisons
from infoprobe.foreign.config import config_from_dict
from infoprobe.infoflow import predict, read_sets
from infoprobe.pipeline.folder import RunFolder
from infoprobe.tasks import task_from_dict


@dataclass
class RunSummary:
    """What a finished run prints: model quality, verdict, agreement, where the report is."""

    out: Path
    task: dict | None
    heads: list[int]
    val_nmse: float | None
    test_nmse: float | None
    verdict: str
    exponent: str
    layer_verdicts: list[str]
    report: Path
    skipped: list[str] = field(default_factory=list)
    seed_val_nmse: dict[int, float] = field(default_factory=dict)
    """Every trained seed's best validation NMSE when several seeds were trained (the
    analysed model is the best of them); empty for one seed."""
    orientation: str = ""
    """The orientation of the comparisons InfoFlow's sets were predicted in, in words."""
    rate: str = ""
    """InfoFlow's α at the run's T and E in words, and whether the law predicts the same
    rate as the minimum heads there (:meth:`infoprobe.infoflow.Prediction.rate_note`)."""
    observed_heads: list[str] = field(default_factory=list)
    """Each head's observed program in one line (its mode for data and CLS queries and the
    keys it reads), from the comparison's attention analysis; empty without it."""

    def lines(self) -> list[str]:
        nmse = "n/a" if self.val_nmse is None else f"{self.val_nmse:.3g}"
        test = "n/a" if self.test_nmse is None else f"{self.test_nmse:.3g}"
        seeds = ", ".join(f"seed {s}: {v:.3g}" for s, v in self.seed_val_nmse.items())
        task = "no task" if self.task is None else f"task {self.task['name']} {self.task['params']}"
        return [
            f"{task}, heads per layer {self.heads}",
            *([f"  seeds trained together (best analysed): {seeds}"] if seeds else []),
            f"  trained model: validation NMSE {nmse}, test NMSE {test}",
            f"  sets compared: {self.verdict}"
            if self.exponent == "n/a"
            else f"  InfoFlow: {self.verdict} (cost exponent {self.exponent})",
            *([f"  rate: {self.rate}"] if self.rate else []),
            *([f"  orientation: {self.orientation}"] if self.orientation else []),
            *[f"  {line}" for line in self.layer_verdicts],
            *(["  observed program (from attention alone):"] if self.observed_heads else []),
            *[f"    {line}" for line in self.observed_heads],
            f"  report: {self.report}",
        ]


def run_summary(folder: RunFolder, ckpt_dir: Path) -> RunSummary:
    meta = read_checkpoint_meta(ckpt_dir, require_task=False)
    comparison = read_comparisons(folder.path / "comparison.json")
    sets = read_sets(folder.path / "pred.h5")
    metrics = meta.get("metrics", {})
    task = meta.get("task")
    given = bool(sets.provenance.get("given_sets"))
    return RunSummary(
        out=folder.path,
        task=task,
        heads=meta["model_config"]["heads"],
        val_nmse=metrics.get("val_nmse"),
        test_nmse=metrics.get("test_nmse"),
        verdict=sets.prediction["verdict"],
        exponent=sets.prediction["exponent"],
        layer_verdicts=list(comparison.get("headline", [])),
        observed_heads=head_lines(comparison.get("heads")),
        report=folder.path / "report" / "report.html",
        skipped=folder.skipped,
        orientation="" if given else recorded_orientation(sets.provenance.get("orientation")),
        rate=""
        if task is None or given
        else predict(
            task_from_dict(task),
            config_from_dict(meta["model_config"]),
            kth_law=sets.prediction.get("kth_law", "tail"),
        ).rate_note(),
    )


def head_lines(heads: dict | None) -> list[str]:
    """One line per head of a comparison's observed program (``comparison.json``'s
    ``heads``): block, head, then for data and CLS queries the mode (and the keys it
    reads where they say more than the mode)."""
    if not heads:
        return []
    lines = []
    for row in heads.get("heads", []):
        groups = []
        for key, name in (("data", "data queries"), ("cls", "CLS")):
            group = row.get(key)
            if group:
                reads = "" if group["reads"] == group["mode"] else f", {group['reads']}"
                groups.append(f"{name}: {group['mode']}{reads}")
        lines.append(f"block {row['block']} head {row['head']}: " + "; ".join(groups))
    return lines
