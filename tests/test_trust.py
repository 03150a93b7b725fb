"""A checkpoint runs none of its code unless the user says so.

Hostile checkpoints are made as a stranger would: a true checkpoint of the hand-set
foreign model (tests/foreign_models.py), its ``checkpoint.json`` edited by hand to name
other code, the weights and their hash left true. Every command that builds a
checkpoint's model refuses them in one line, exit 2, before anything is imported, and no
file of the user's changes; with ``--trust-code`` the standard library and re-exports are
still refused before they are called.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import pytest
from foreign_models import SITES, handset, handset_kwargs
from test_bad_input import one_line_refusal, run_command, snapshot

from infoprobe import load_checkpoint, save_checkpoint
from infoprobe.base.errors import UserError
from infoprobe.compare.sources import checkpoint_history
from infoprobe.foreign import ForeignConfig
from infoprobe.foreign.trust import UntrustedCodeError, locate_module, model_code_sha256
from infoprobe.hooks import open_cache
from infoprobe.pipeline.stages import _training_note
from infoprobe.tasks import make_task

TASK = make_task("intrinsic-dim", T=8, D=2)
FOREIGN_SOURCE = (Path(__file__).parent / "foreign_models.py").read_text()
COMMANDS = ["cache", "influence", "probe-checkpoint"]


@pytest.fixture(scope="module")
def true_checkpoint(tmp_path_factory):
    config = ForeignConfig(factory="foreign_models:build", kwargs=handset_kwargs(TASK.d),
                           sites=SITES, heads=(1,), d_model=2 * TASK.d + 1, n_ctx=TASK.T,
                           d_in=TASK.d)  # fmt: skip
    return save_checkpoint(tmp_path_factory.mktemp("true") / "ckpt", handset(TASK.d), TASK,
                           config=config)  # fmt: skip


def edited(checkpoint: Path, dest: Path, **fields) -> Path:
    """A copy of ``checkpoint`` with ``model_config`` fields replaced (weights and their
    hash unchanged), as someone editing checkpoint.json by hand would make it."""
    dest.mkdir(parents=True)
    meta = json.loads((checkpoint / "checkpoint.json").read_text())
    meta["model_config"].update(fields)
    (dest / "checkpoint.json").write_text(json.dumps(meta))
    (dest / "model.safetensors").write_bytes((checkpoint / "model.safetensors").read_bytes())
    return dest


def argv_for(command: str, ckpt: Path, tmp_path: Path, *extra: str) -> list[str]:
    out = ["--out", str(tmp_path / "out" / "result")]
    if command == "cache":
        return [str(ckpt), *out, "--n", "16", "--quiet", *extra]
    if command == "influence":
        return [str(ckpt), "--cache", str(tmp_path / "acts.h5"), *out, "--quiet", *extra]
    return [str(ckpt), *out, "--n-cache", "600", "--quiet", *extra]


def refused_untouched(monkeypatch, capsys, tmp_path, command, argv, words, watch=()):
    """One line, exit 2, nothing under ``tmp_path`` changed and no ``watch`` file made."""
    (tmp_path / "keep.txt").write_text("untouched")
    before = snapshot(tmp_path)
    line = one_line_refusal(monkeypatch, capsys, command, argv, words)
    assert snapshot(tmp_path) == before
    assert not any(Path(w).exists() for w in watch)
    return line


# --- a function of the standard library, with the kwargs the JSON gives ------------------


def hostile_stdlib(tmp_path: Path) -> dict[str, tuple[dict, list[Path]]]:
    """factory fields -> the files their call would create (none may appear)."""
    marker, victim, script = tmp_path / "ran.txt", tmp_path / "victim", tmp_path / "script.py"
    return {
        "os:system": ({"factory": "os:system", "kwargs": {"command": f"touch {marker}"}}, [marker]),
        "subprocess:getoutput": (
            {"factory": "subprocess:getoutput", "kwargs": {"cmd": f"touch {marker}"}},
            [marker],
        ),
        "subprocess:run": (
            {"factory": "subprocess:run", "kwargs": {"args": f"touch {marker}", "shell": True}},
            [marker],
        ),
        "runpy:run_path": (
            {"factory": "runpy:run_path", "kwargs": {"path_name": str(script)}},
            [marker],
        ),
        "shutil:rmtree": ({"factory": "shutil:rmtree", "kwargs": {"path": str(victim)}}, []),
    }


@pytest.mark.parametrize("trust", [False, True], ids=["untrusted", "trusted"])
@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("name", list(hostile_stdlib(Path())))
def test_a_standard_library_factory_never_runs(
    monkeypatch, capsys, tmp_path, true_checkpoint, command, name, trust
):
    fields, created = hostile_stdlib(tmp_path)[name]
    (tmp_path / "victim").mkdir()
    (tmp_path / "victim" / "precious.txt").write_text("mine")
    marker = tmp_path / "ran.txt"
    (tmp_path / "script.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\n")
    ckpt = edited(true_checkpoint, tmp_path / "ckpt", **fields)
    argv = argv_for(command, ckpt, tmp_path, *(["--trust-code"] if trust else []))
    words = [name, "standard library", "never runs"]
    refused_untouched(monkeypatch, capsys, tmp_path, command, argv, words, created)
    assert (tmp_path / "victim" / "precious.txt").read_text() == "mine"


# --- a module beside checkpoint.json ---------------------------------------------------------


def module_beside(tmp_path: Path, name: str, source: str, *, shape: str = "file") -> Path:
    """A checkpoint whose factory is ``NAME:build``, NAME's code lying beside it as a file,
    a symlink to a file elsewhere, or a package."""
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir(exist_ok=True)
    if shape == "file":
        (ckpt / f"{name}.py").write_text(source)
    elif shape == "symlink":
        elsewhere = tmp_path / "elsewhere" / "code.py"
        elsewhere.parent.mkdir()
        elsewhere.write_text(source)
        (ckpt / f"{name}.py").symlink_to(elsewhere)
    else:
        (ckpt / name).mkdir()
        (ckpt / name / "__init__.py").write_text(source)
    return ckpt


def writes_at_import(marker: Path) -> str:
    return FOREIGN_SOURCE + f"\nopen({str(marker)!r}, 'w').write('imported')\n"


@pytest.mark.parametrize("shape", ["file", "symlink", "package"])
@pytest.mark.parametrize("command", COMMANDS)
def test_a_module_beside_the_checkpoint_is_not_imported_without_trust(
    monkeypatch, capsys, tmp_path, true_checkpoint, command, shape
):
    marker = tmp_path / "imported.txt"
    name = f"beside_{command.replace('-', '_')}_{shape}"
    folder = module_beside(tmp_path, name, writes_at_import(marker), shape=shape)
    ckpt = edited(true_checkpoint, folder / "edit", factory=f"{name}:build")
    for item in folder.iterdir():  # the code lies beside checkpoint.json
        if item.name != "edit":
            item.rename(ckpt / item.name)
    code = locate_module(name, ckpt)
    assert code is not None and code.resolve().is_file()
    digest = hashlib.sha256(code.read_bytes()).hexdigest()
    argv = argv_for(command, ckpt, tmp_path)
    line = refused_untouched(monkeypatch, capsys, tmp_path, command, argv,
                             [f"'{name}:build'", str(code.resolve()), digest[:16],
                              "--trust-code"], [marker])  # fmt: skip
    assert name not in sys.modules, line


def test_with_trust_the_module_beside_it_runs(tmp_path, true_checkpoint):
    """The opt-in is the only gate: with it, the same checkpoint loads (its import ran)."""
    marker = tmp_path / "imported.txt"
    folder = module_beside(tmp_path, "beside_trusted", writes_at_import(marker))
    ckpt = edited(true_checkpoint, folder / "edit", factory="beside_trusted:build")
    (folder / "beside_trusted.py").rename(ckpt / "beside_trusted.py")
    with pytest.raises(UntrustedCodeError):
        load_checkpoint(ckpt)
    assert not marker.exists()
    ck = load_checkpoint(ckpt, trust_code=True)
    assert marker.exists() and type(ck.model.wrapped).__module__ == "beside_trusted"
    assert ck.model_code_sha256 == model_code_sha256("beside_trusted:build", ckpt)


def test_a_re_export_of_a_standard_library_function_is_refused_before_it_is_called(
    monkeypatch, capsys, tmp_path, true_checkpoint
):
    marker = tmp_path / "ran.txt"
    folder = module_beside(tmp_path, "reexport", "from os import system as build\n")
    ckpt = edited(true_checkpoint, folder / "edit", factory="reexport:build",
                  kwargs={"command": f"touch {marker}"})  # fmt: skip
    (folder / "reexport.py").rename(ckpt / "reexport.py")
    argv = argv_for("cache", ckpt, tmp_path, "--trust-code")
    words = ["'reexport:build'", "defined in package 'reexport'", "re-export"]
    refused_untouched(monkeypatch, capsys, tmp_path, "cache", argv, words, [marker])


@pytest.mark.parametrize(
    "statement, word",
    [("raise SystemExit(7)", "SystemExit: 7"), ("raise KeyboardInterrupt", "KeyboardInterrupt")],
)
@pytest.mark.parametrize("where", ["import", "call"])
def test_trusted_code_that_exits_is_one_line_exit_2(
    monkeypatch, capsys, tmp_path, true_checkpoint, statement, word, where
):
    name = f"exits_{where}_{word.split(':')[0].lower()}"
    source = (f"{statement}\n" if where == "import" else "") + (
        f"def build(**kwargs):\n    {statement}\n"
    )
    folder = module_beside(tmp_path, name, source)
    ckpt = edited(true_checkpoint, folder / "edit", factory=f"{name}:build")
    (folder / f"{name}.py").rename(ckpt / f"{name}.py")
    argv = argv_for("cache", ckpt, tmp_path, "--trust-code")
    refused_untouched(monkeypatch, capsys, tmp_path, "cache", argv, [f"'{name}", word])


# --- model code in the provenance ------------------------------------------------------------


def test_a_cache_of_swapped_model_code_is_refused_by_influence_probe_and_compare(
    monkeypatch, capsys, tmp_path, true_checkpoint
):
    """Same weights, other code (the attention's scale edited): every file made from the
    model carries the code's hash, and mixing the two is refused at each stage."""
    ckpt = edited(true_checkpoint, tmp_path / "ckpt", factory="swap_models:build")
    (ckpt / "swap_models.py").write_text(FOREIGN_SOURCE)
    trust, quiet = "--trust-code", "--quiet"

    def ok(command, *argv):
        assert run_command(monkeypatch, command, list(argv)) == 0
        capsys.readouterr()

    acts_a, flow_a = tmp_path / "acts-a.h5", tmp_path / "flow-a.h5"
    ok("cache", str(ckpt), "--out", str(acts_a), "--n", "64", quiet, trust)
    ok("influence", str(ckpt), "--cache", str(acts_a), "--out", str(flow_a), quiet, trust)
    code_a = model_code_sha256("swap_models:build", ckpt)
    swapped = FOREIGN_SOURCE.replace("/ math.sqrt(self.d_head)", "/ (2 * math.sqrt(self.d_head))")
    assert swapped != FOREIGN_SOURCE
    (ckpt / "swap_models.py").write_text(swapped)
    monkeypatch.delitem(sys.modules, "swap_models")  # as a new process would import it
    code_b = model_code_sha256("swap_models:build", ckpt)
    assert code_b != code_a
    acts_b, control_b = tmp_path / "acts-b.h5", tmp_path / "control-b.h5"
    ok("cache", str(ckpt), "--out", str(acts_b), "--n", "64", quiet, trust)
    ok("cache", str(ckpt), "--out", str(control_b), "--n", "64", "--random-init", "1", quiet,
       trust)  # fmt: skip
    with open_cache(acts_a) as a, open_cache(acts_b) as b:
        assert a.checkpoint_sha256 == b.checkpoint_sha256  # the same weights
        assert (a.provenance["model_code_sha256"], b.provenance["model_code_sha256"]) == (
            code_a,
            code_b,
        )
        pattern = "blocks.0.attn.hook_pattern"  # other code, other activations
        assert (a.acts(pattern)[:] != b.acts(pattern)[:]).any()
    words = ["model_code_sha256", code_a[:12], code_b[:12]]
    argv = [str(ckpt), "--cache", str(acts_a), "--out", str(tmp_path / "o" / "f.h5"), trust]
    refused_untouched(monkeypatch, capsys, tmp_path, "influence", argv, words)
    argv = [str(acts_a), "--control", str(control_b), "--out", str(tmp_path / "o" / "p.h5")]
    refused_untouched(monkeypatch, capsys, tmp_path, "probe", argv, words[:1])
    pred_b = tmp_path / "pred-b.h5"
    ok("predict", "--cache", str(acts_b), "--out", str(pred_b))
    argv = [str(pred_b), "--influence", str(flow_a)]
    refused_untouched(monkeypatch, capsys, tmp_path, "compare", argv, words[:1])


# --- what reads a checkpoint's JSON only -------------------------------------------------------


def test_report_checkpoint_names_the_code_and_runs_none_of_it(tmp_path, true_checkpoint):
    marker = tmp_path / "imported.txt"
    folder = module_beside(tmp_path, "beside_report", writes_at_import(marker))
    ckpt = edited(true_checkpoint, folder / "edit", factory="beside_report:build")
    (folder / "beside_report.py").rename(ckpt / "beside_report.py")
    _, prov = checkpoint_history(ckpt)
    assert not marker.exists() and "beside_report" not in sys.modules
    code = prov["model_code"]
    assert code["factory"] == "beside_report:build" and code["run"] is False
    assert code["files"] == [str((ckpt / "beside_report.py").resolve())]
    assert code["model_code_sha256"] == model_code_sha256("beside_report:build", ckpt)


def test_the_training_note_of_a_checkpoint_without_a_test_nmse():
    assert _training_note({"metrics": {"val_nmse": 0.25}}) == (
        "validation NMSE 0.25 (measured by infoprobe's training, in checkpoint.json)"
    )
    # a model of the user's own code: its metrics are the user's word, labelled so
    own = {"metrics": {"val_nmse": 0.0}, "model_config": {"factory": "mine:build"}}
    assert "not measured by infoprobe" in _training_note(own)
    assert _training_note({"metrics": {}}) == "checkpoint without training metrics"


def test_a_checkpoint_of_a_newer_schema_is_refused_by_cache(
    monkeypatch, capsys, tmp_path, true_checkpoint
):
    ckpt = edited(true_checkpoint, tmp_path / "ckpt")
    meta = json.loads((ckpt / "checkpoint.json").read_text())
    meta["schema_version"] = 99
    (ckpt / "checkpoint.json").write_text(json.dumps(meta))
    argv = argv_for("cache", ckpt, tmp_path, "--trust-code")
    refused_untouched(monkeypatch, capsys, tmp_path, "cache", argv, ["99", "upgrade infoprobe"])


def test_rates_on_a_missing_file_is_the_one_line_form(monkeypatch, capsys, tmp_path):
    line = one_line_refusal(monkeypatch, capsys, "rates", [str(tmp_path / "MISSING.json")])
    assert "no such file" in line and "Errno" not in line


# --- with --trust-code, code outside the checkpoint folder: model classes only ------------


def hostile_installed(tmp_path: Path) -> dict[str, tuple[dict, list[str]]]:
    """Factories from installed packages, as a checkpoint of JSON alone would name them:
    factory fields -> words of the refusal."""
    pickle_path = tmp_path / "payload.pkl"
    return {
        "torch:load": (
            {"factory": "torch:load", "kwargs": {"f": str(pickle_path), "weights_only": False}},
            ["'torch:load'", "not in it", "refused before importing it"],
        ),
        "numpy:save": (
            {"factory": "numpy:save", "kwargs": {"file": str(tmp_path / "x.npy"), "arr": 1}},
            ["'numpy:save'", "must be a model class"],
        ),
        "tqdm.std:tqdm": (  # a class, but no model: refused once imported, never called
            {"factory": "tqdm.std:tqdm", "kwargs": {}},
            ["'tqdm.std:tqdm'", "nn.Module subclass", "refused before it is called"],
        ),
    }


@pytest.mark.parametrize("name", list(hostile_installed(Path())))
def test_trust_reaches_the_folder_not_any_installed_function(
    monkeypatch, capsys, tmp_path, true_checkpoint, name
):
    """--trust-code trusts the checkpoint folder's code: a function of an installed package
    (torch:load on a pickle the JSON names) is refused before its module is imported, a
    class that is not an nn.Module once imported; nothing of the user's changes."""
    import pickle

    fields, words = hostile_installed(tmp_path)[name]
    marker = tmp_path / "unpickled.txt"

    class Payload:
        def __reduce__(self):
            return (open, (str(marker), "w"))

    (tmp_path / "payload.pkl").write_bytes(pickle.dumps(Payload()))
    ckpt = edited(true_checkpoint, tmp_path / "ckpt", **fields)
    argv = argv_for("cache", ckpt, tmp_path, "--trust-code")
    refused_untouched(monkeypatch, capsys, tmp_path, "cache", argv, words, watch=[marker])
    with pytest.raises(UserError, match=r"model class|nn\.Module"):
        load_checkpoint(ckpt, trust_code=True)
    assert not marker.exists() and not (tmp_path / "x.npy").exists()


def test_outside_the_folder_a_model_class_builds_and_a_function_does_not(true_checkpoint, tmp_path):
    """The rule's two sides on one module outside the folder (tests/foreign_models.py, on
    sys.path, no copy beside the edited checkpoint): its model class builds the model with
    --trust-code, its function ``build`` is refused."""
    import torch

    ckpt = edited(true_checkpoint, tmp_path / "class", factory="foreign_models:PreLNTransformer")
    assert not list(ckpt.glob("*.py"))
    model = load_checkpoint(ckpt, trust_code=True).model
    expected = handset(TASK.d).state_dict()
    for name, tensor in model.wrapped.state_dict().items():
        assert torch.equal(tensor, expected[name])
    ckpt = edited(true_checkpoint, tmp_path / "function", factory="foreign_models:build")
    with pytest.raises(UntrustedCodeError, match="must be a model class"):
        load_checkpoint(ckpt, trust_code=True)
