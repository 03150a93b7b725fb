"""The provenance chain: a finished run folder with any one input swapped for another run's
file or a random-init control's is refused by `run`, `compare` and `report`; a control is
accepted only where one is asked for; probe results record the rows and inputs they were
computed on."""

import shutil

import h5py
import numpy as np
import pytest
from test_bad_input import one_line_refusal, run_command, snapshot

from infoprobe.probes.results import ProbeResults

pytestmark = pytest.mark.usefixtures("blank_report_figures")  # not the figures under test

TRAIN = ["--task", "intrinsic-dim", "--D", "2", "--T", "4", "--steps", "5", "--quiet"]
RUN = [*TRAIN, "--n-cache", "200", "--cache-batch", "100", "--no-rollout"]
FILES = (
    "checkpoint",
    "acts.h5",
    "acts-random-init.h5",
    "probes.h5",
    "flow.h5",
    "flow-random-init.h5",
    "pred.h5",
    "comparison.json",
)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Run A; run B (another training seed: another checkpoint); files of A's control."""
    root = tmp_path_factory.mktemp("chain")
    mp = pytest.MonkeyPatch()
    try:
        for name, seed in (("A", "0"), ("B", "1")):
            assert run_command(mp, "run", [*RUN, "--seed", seed, "--out", str(root / name)]) == 0
        control = root / "control"
        control.mkdir()
        ri = str(root / "A" / "acts-random-init.h5")
        assert run_command(mp, "probe", [ri, "--out", str(control / "probes.h5")]) == 0
        assert run_command(mp, "predict", ["--cache", ri, "--out", str(control / "pred.h5")]) == 0
    finally:
        mp.undo()
    return root


def sources(runs, name: str, origin: str):
    """The file that replaces ``name``: B's, or the random-init control's of run A."""
    if origin == "B":
        return runs / "B" / name
    return {
        "acts.h5": runs / "A" / "acts-random-init.h5",
        "flow.h5": runs / "A" / "flow-random-init.h5",
        "probes.h5": runs / "control" / "probes.h5",
        "pred.h5": runs / "control" / "pred.h5",
    }[name]


def swapped(runs, tmp_path, name: str, origin: str):
    folder = tmp_path / "run"
    shutil.copytree(runs / "A", folder)
    target, source = folder / name, sources(runs, name, origin)
    if target.is_dir():
        shutil.rmtree(target)
        shutil.copytree(source, target)
    else:
        shutil.copyfile(source, target)
    return folder


SWAPS = [(name, "B") for name in FILES] + [
    (name, "control") for name in ("acts.h5", "flow.h5", "probes.h5", "pred.h5")
]


refused = one_line_refusal


def test_the_untouched_run_resumes_and_compares(runs, monkeypatch, capsys, tmp_path):
    """The baseline of every refusal below: the same commands on run A succeed."""
    folder = tmp_path / "run"
    shutil.copytree(runs / "A", folder)
    assert run_command(monkeypatch, "run", [*RUN, "--seed", "0", "--out", str(folder)]) == 0
    assert run_command(monkeypatch, "compare", compare_argv(folder)) == 0
    out = str(tmp_path / "report")
    argv = [*compare_argv(folder), "--checkpoint", str(folder / "checkpoint"), "--out", out]
    assert run_command(monkeypatch, "report", argv) == 0


@pytest.mark.parametrize("name, origin", SWAPS)
def test_run_refuses_a_swapped_output(runs, monkeypatch, capsys, tmp_path, name, origin):
    folder = swapped(runs, tmp_path, name, origin)
    before = snapshot(folder)
    refused(
        monkeypatch,
        capsys,
        "run",
        [*RUN, "--seed", "0", "--out", str(folder)],
        [name, "replaced or edited", "--overwrite"],
    )
    assert snapshot(folder) == before


def test_run_does_not_rebuild_from_a_foreign_cache(runs, monkeypatch, capsys, tmp_path):
    folder = swapped(runs, tmp_path, "acts.h5", "B")
    (folder / "pred.h5").unlink()
    refused(
        monkeypatch,
        capsys,
        "run",
        [*RUN, "--seed", "0", "--out", str(folder)],
        ["acts.h5", "checkpoint_sha256"],
    )
    assert not (folder / "pred.h5").exists()


def test_run_overwrite_redoes_a_swapped_output(runs, monkeypatch, capsys, tmp_path):
    folder = swapped(runs, tmp_path, "probes.h5", "B")
    argv = [*RUN, "--seed", "0", "--out", str(folder), "--overwrite"]
    assert run_command(monkeypatch, "run", argv) == 0
    redone, original = (ProbeResults.read(f / "probes.h5") for f in (folder, runs / "A"))
    assert redone.provenance == original.provenance
    np.testing.assert_array_equal(redone.test_index, original.test_index)


def compare_argv(folder, **swap) -> list[str]:
    path = {n: str(swap.get(n, folder / n)) for n in FILES}
    return [
        path["pred.h5"],
        path["probes.h5"],
        "--influence",
        path["flow.h5"],
        "--influence",
        path["flow-random-init.h5"],
        "--cache",
        path["acts.h5"],
    ]


READ_BY_COMPARE = [
    s
    for s in SWAPS
    if s[0] in ("acts.h5", "probes.h5", "flow.h5", "flow-random-init.h5", "pred.h5")
]


@pytest.mark.parametrize("name, origin", READ_BY_COMPARE)
@pytest.mark.parametrize("command", ["compare", "report"])
def test_compare_and_report_refuse_a_swapped_input(
    runs, monkeypatch, capsys, tmp_path, command, name, origin
):
    folder = runs / "A"
    argv = compare_argv(folder, **{name: sources(runs, name, origin)})
    if command == "report":
        argv += ["--checkpoint", str(folder / "checkpoint"), "--out", str(tmp_path / "rep")]
    refused(monkeypatch, capsys, command, argv)
    assert not (tmp_path / "rep").exists()


def test_report_refuses_another_runs_checkpoint(runs, monkeypatch, capsys, tmp_path):
    argv = [*compare_argv(runs / "A"), "--checkpoint", str(runs / "B" / "checkpoint")]
    refused(
        monkeypatch, capsys, "report", [*argv, "--out", str(tmp_path / "rep")], ["weights_sha256"]
    )


# --- a random-init control is accepted only where a control is asked for ---------------


@pytest.mark.parametrize(
    "command, pred, probes",
    [
        ("compare", "A/pred.h5", "control/probes.h5"),  # probe ri.h5; compare pred.h5 p.h5
        ("report", "A/pred.h5", "control/probes.h5"),  # report --checkpoint CKPT likewise
        ("compare", "control/pred.h5", "A/probes.h5"),  # predict --cache ri.h5; compare
    ],
)
def test_control_files_are_refused_without_cache(
    runs, monkeypatch, capsys, tmp_path, command, pred, probes
):
    argv = [str(runs / pred), str(runs / probes)]
    if command == "report":
        argv += ["--checkpoint", str(runs / "A" / "checkpoint"), "--out", str(tmp_path / "r")]
    refused(monkeypatch, capsys, command, argv, ["random_init_seed", "12345"])


def test_the_random_init_flow_control_is_still_accepted_as_a_control(runs, monkeypatch, capsys):
    folder = runs / "A"
    argv = [str(folder / "pred.h5"), "--influence", str(folder / "flow-random-init.h5")]
    assert run_command(monkeypatch, "compare", argv) == 0
    assert "flow (random-init)" in capsys.readouterr().out


# --- probe results record their rows and inputs ------------------------------------------


def edited_probes(runs, tmp_path, edit):
    path = tmp_path / "probes.h5"
    shutil.copyfile(runs / "A" / "probes.h5", path)
    with h5py.File(path, "r+") as f:
        edit(f)
    return path


def test_a_shifted_test_index_is_refused(runs, monkeypatch, capsys, tmp_path):
    def shift(f):
        rows = f["split/test_index"][()]
        f["split/test_index"][...] = rows + 1

    path = edited_probes(runs, tmp_path, shift)
    argv = [str(runs / "A" / "pred.h5"), str(path)]
    refused(monkeypatch, capsys, "compare", argv, ["test_index", "re-run `infoprobe probe`"])


def test_a_missing_rows_hash_counts_as_a_mismatch(runs, monkeypatch, capsys, tmp_path):
    """The test rows shifted and their hash deleted: a missing integrity field is not a
    pass, the file is refused as edited (a schema-4 file always has the hash)."""

    def shift_and_hide(f):
        rows = f["split/test_index"][()]
        f["split/test_index"][...] = rows + 1
        del f.attrs["test_index_sha256"]

    path = edited_probes(runs, tmp_path, shift_and_hide)
    argv = [str(runs / "A" / "pred.h5"), str(path)]
    refused(monkeypatch, capsys, "compare", argv, ["'test_index_sha256' is missing", "edited"])


def test_probe_results_record_the_hash_of_their_rows_and_inputs(runs):
    from infoprobe.hooks import open_cache
    from infoprobe.infoflow.store import inputs_hash

    with h5py.File(runs / "A" / "probes.h5", "r") as f:
        rows = f["split/test_index"][()]
        attrs = dict(f.attrs)
    import hashlib

    assert attrs["test_index_sha256"] == hashlib.sha256(rows.astype("<i8").tobytes()).hexdigest()
    with open_cache(runs / "A" / "acts.h5") as cache:
        assert attrs["inputs_sha256"] == inputs_hash(np.asarray(cache.x[()]))


def test_probe_results_without_hashes_are_refused_by_name(runs, monkeypatch, capsys, tmp_path):
    def old(f):
        for name in ("inputs_sha256", "test_index_sha256"):
            del f.attrs[name]
        f.attrs["schema_version"] = 2

    path = edited_probes(runs, tmp_path, old)
    assert ProbeResults.read(path).inputs_sha256 is None  # an older file stays readable
    refused(
        monkeypatch,
        capsys,
        "compare",
        [str(runs / "A" / "pred.h5"), str(path)],
        ["inputs_sha256", "re-run `infoprobe probe`"],
    )


def truncate_comparison(folder):
    path = folder / "comparison.json"
    path.write_text(path.read_text()[:200])


def damage_probes(folder):
    with h5py.File(folder / "probes.h5", "r+") as f:
        f.attrs["provenance"] = "{bad"


@pytest.mark.parametrize(
    "edit, words",
    [
        (truncate_comparison, ["comparison.json", "replaced or edited"]),
        (damage_probes, ["probes.h5", "'provenance'", "--overwrite", "'probe'"]),
    ],
)
def test_run_refuses_an_edited_output(runs, monkeypatch, capsys, tmp_path, edit, words):
    folder = tmp_path / "run"
    shutil.copytree(runs / "A", folder)
    edit(folder)
    before = snapshot(folder)
    refused(monkeypatch, capsys, "run", [*RUN, "--seed", "0", "--out", str(folder)], words)
    assert snapshot(folder) == before
