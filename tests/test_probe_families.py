"""Probe families are one module each, known through their registry entry: a family
written here alone (a linear map trained by the engine) runs through `probe`, `compare`
and `report`, and no code outside a family's module asks for a family by name."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from distribution import installed_distribution
from handset import handset_model, true_sets

from infoprobe.probes.batched_training import BatchedProbes, TrainingBudget, init_params
from infoprobe.probes.chunked_fit import BatchedProbeFit, ProbeDesign, ProbeShape, fit_batched
from infoprobe.probes.errors import ProbeInputError
from infoprobe.probes.families import FAMILY_NAMES, ProbeFamily, family, register

ROOT = Path(__file__).resolve().parents[1]
T, D, POSITION, OFFSET, N = 8, 2, 5, 3, 2100


class BatchedLinear(BatchedProbes):
    """One linear map ``E -> k`` per (cell, position), trained by the engine (autograd)."""

    def __init__(self, cells, n_targets, d_in, d_out, *, seed=0, arrays=None):
        super().__init__()
        shapes = {"w": (n_targets, d_out, d_in), "b": (n_targets, d_out)}
        init_params(self, cells, shapes, {"w": d_in, "b": d_in}, seed, arrays)
        self.probe_shape = (len(cells), n_targets)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.einsum("cske,cbe->cskb", self.w, x) + self.b.unsqueeze(-1)


class LinearFit(BatchedProbeFit):
    probe = "toy-linear"


def fit_linear_sets(datasets, train_idx, val_idx, test_idx, *, hidden, budget, device,
                    progress):  # fmt: skip
    def design(shape: ProbeShape) -> ProbeDesign:
        S, k, E = shape.n_targets, shape.d_out, shape.d_in
        return ProbeDesign(
            make_module=lambda cells, arrays: BatchedLinear(
                cells, S, E, k, seed=budget.seed, arrays=arrays
            ),
            bytes_per_cell=4 * (5 * S * k * (E + 1) + shape.n * E + 4 * budget.batch_size * S * k),
            activation_bytes_per_cell=4 * budget.batch_size * S * k,
            desc="toy linear probes",
        )

    held = fit_batched(datasets, (train_idx, val_idx, test_idx), design, budget,
                       device=device, max_memory_bytes=2**30, progress=progress)  # fmt: skip
    return [LinearFit(**h.fields(budget, hidden)) for h in held]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """A cache of the hand-set model (no task: inputs from a file) and its true sets."""
    from infoprobe.hooks import write_cache
    from infoprobe.pipeline.given_sets import sets_for_cache

    root = tmp_path_factory.mktemp("families")
    x = np.random.default_rng(0).standard_normal((N, T, D)).astype(np.float32)
    model = handset_model(T=T, d=D, position=POSITION, offset=OFFSET)
    spec = {"n": N, "task": None, "inputs": {"file": "x.npy", "sha256": "0" * 64}}
    write_cache(root / "acts.h5", model,
                lambda b, size: (x[b * 700 : b * 700 + size], np.zeros((size, 1))),
                n=N, batch_size=700, sites="residual", progress=False,
                provenance={"model_config": model.cfg.to_dict(), "data_spec": spec})  # fmt: skip
    np.save(root / "true.npy", true_sets(x, position=POSITION, offset=OFFSET)[..., :T])
    sets_for_cache(root / "true.npy", root / "acts.h5", root / "pred.h5")
    return root


def test_a_family_from_this_file_alone_runs_through_probe_compare_and_report(files, capsys):
    from infoprobe.cli import main
    from infoprobe.probes.results import ProbeResults

    name = "toy-linear"
    budget = TrainingBudget(lr=1e-2, epochs=30)
    register(ProbeFamily(name, "a linear map trained by Adam", "regression",
                         fit_sets=fit_linear_sets, budget=budget))  # fmt: skip
    try:
        assert name in FAMILY_NAMES and family(name).trained
        toy, ridge = files / "toy.h5", files / "ridge.h5"
        for probe, out in ((name, toy), ("linear", ridge)):
            argv = ["probe", str(files / "acts.h5"), "--probe", probe, "--quiet", "--threads",
                    "1", "--out", str(out)]  # fmt: skip
            assert main(argv) == 0
        printed = capsys.readouterr().out
        assert f"{name} probes, positions targets" in printed
        results = ProbeResults.read(toy)
        assert results.settings["probe"] == name and results.settings["mlp_lr"] == 1e-2
        # a linear map fitted by Adam reads what the closed-form ridge reads
        ours, closed = results.score("r2", probe=name), ProbeResults.read(ridge).score("r2")
        readable = closed > 0.5
        assert readable.sum() >= 10
        assert np.abs(ours[readable] - closed[readable]).max() < 0.05
        assert results.score("r2", probe=name, control="shuffled").max() < 0.1

        out = files / "comparison.json"
        argv = ["compare", str(files / "pred.h5"), str(toy), "--out", str(out)]
        assert main(argv) == 0
        printed = capsys.readouterr().out
        assert f"decodability ({name} probe) AUROC" in printed
        # the fixed-position head's copies are linear: every always-predicted position
        # is decodable at layer 1; nothing never predicted is at layer 0
        assert "layer 1 (aggregate): 100.0% of always-predicted positions decodable" in printed
        assert "0.0% of never-predicted positions decodable" in printed
        assert list(json.loads(out.read_text())["comparisons"]) == ["decodability"]
        report = files / "report"
        assert main(["report", str(files / "pred.h5"), str(toy), "--out", str(report)]) == 0
        summary = (report / "summary.json").read_text()
        assert name in summary and (report / "report.html").is_file()
    finally:
        from infoprobe.probes import families

        families._FAMILIES.pop(name, None)
    with pytest.raises(ProbeInputError, match=name):
        family(name)


def test_no_code_outside_a_family_module_asks_for_a_family_by_name():
    """The pipeline, compare, report and the commands ask the registry what a family is;
    only the families' own modules (and the registry) name them."""
    own = {"probes/mlp.py", "probes/query.py", "probes/critic.py", "probes/families.py"}
    pattern = re.compile(
        r"""[!=]=\s*["'](critic|mlp|query)["']|["'](critic|mlp|query)["']\s*[!=]="""
    )
    found = []
    for path in sorted(ROOT.glob("*/**/*.py")):
        relative = path.relative_to(ROOT).as_posix()
        if relative.startswith((".venv", "tests/", "bench/", "studies/")) or relative in own:
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if pattern.search(line):
                found.append(f"{relative}:{number}: {line.strip()}")
    assert not found, "\n".join(found)


TOY = ProbeFamily(
    "toy-installed", "a linear map trained by Adam", "regression", fit_sets=fit_linear_sets
)
"""An installed family: the entry point of the distribution below names it."""


@pytest.fixture
def installed(tmp_path):
    """A distribution 'toy-probes' on sys.path: entry point 'toy-installed' (a family), one
    that fails to import ('broken') and one claiming a built-in name ('critic')."""
    from infoprobe.probes.families import GROUP, discover_families

    toy = "test_probe_families:TOY"
    entries = {"toy-installed": toy, "broken": "toy_probes_missing:FAMILY", "critic": toy}
    try:
        with installed_distribution(tmp_path, "toy-probes", "0.1", GROUP, entries):
            yield discover_families(refresh=True)
    finally:
        discover_families(refresh=True)
        assert "toy-installed" not in FAMILY_NAMES


def test_an_installed_family_is_found_and_a_broken_one_blocks_only_its_name(installed):
    assert family("toy-installed") is TOY and "toy-installed" in FAMILY_NAMES
    assert set(installed) == {"broken", "critic"}
    assert family("critic").kind == "density"  # the built-in keeps its name
    with pytest.raises(ProbeInputError, match="entry point 'broken = toy_probes_missing"):
        family("broken")
    from infoprobe.pipeline.probe_settings import ProbeSettings

    assert ProbeSettings(probe="toy-installed").probe == "toy-installed"


def test_a_new_process_offers_an_installed_family_on_the_command_line(installed):
    """The `infoprobe` command itself (a fresh process) lists the installed family among
    --probe's choices."""
    import os
    import subprocess

    site = next(p for p in sys.path if (Path(p) / "toy_probes-0.1.dist-info").is_dir())
    path = os.pathsep.join([site, str(ROOT / "tests"), os.environ.get("PYTHONPATH", "")])
    done = subprocess.run([sys.executable, "-m", "infoprobe", "probe", "--help"],
                          capture_output=True, text=True, env={**os.environ, "PYTHONPATH": path},
                          check=True)  # fmt: skip
    assert "{linear,mlp,query,critic,toy-installed}" in " ".join(done.stdout.split())
