"""Every ``infoprobe`` command that README.md, docs/*.md and the ``--help`` epilogs print
works as printed: a printed command that fails fails this suite.

What counts as printed, and what is done with it:

* **blocks**: the ``infoprobe ...`` lines of a fenced code block of a doc (``\\``
  continuations joined, ``# comments`` dropped, ``pip install ... && infoprobe demo`` read
  from ``infoprobe``), and the ``examples:`` lines of one subcommand's epilog. The
  commands of a block run in the order printed, in one fresh folder, through
  :func:`infoprobe.cli.main`, and each must exit 0. An epilog's examples may read files
  that no earlier example writes (a checkpoint, a cache); :data:`PROVIDED` names them, and
  the test puts a small real one there first.
* **inline spans**: `` `infoprobe ...` `` in a doc's prose. A span that names only a
  subcommand must name one that exists; a template (placeholders in capitals, ``...``,
  ``[optional]``, ``a|b``) must name only options the subcommand has; any other span must
  be accepted by the real parser, and the complete ones that read no file (``predict
  --task ...``) are run.
* **parsed only** (:func:`parse_only`): commands that need a GPU or Ray, and those of
  :data:`PARSED_ONLY` (``demo``, ``reproduce`` sweeps: minutes even at their smallest;
  ``rates``, which reads a sweep's results); the real parser must accept them.

Sizes: a size option of :data:`SMALL` printed with a value above its divisor runs with the
value divided by it, rounded up (``--steps 10000`` -> 20, ``--n 8192`` -> 64, ``--n 20000``
-> 157), so sizes that differ in print differ in the run too, as the settings recorded in
the files they write do; :data:`ADDED` options that a command does not print run with
their default divided the same way (``--steps``, ``--n``, ...). Nothing else changes, but for
time: a report's figures are built by every command that writes one but drawn to PNG
only by the README's ``infoprobe report`` (:data:`DRAWN`); elsewhere each PNG is a blank
one (drawing is most of a report's time, and tests/test_report.py checks the figures).
"""

from __future__ import annotations

import argparse
import re
import shlex
import shutil
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from unittest import mock

import pytest
from matplotlib.figure import Figure

import infoprobe.report.build as report_build
from infoprobe.cli import build_parser, main

pytestmark = pytest.mark.usefixtures("one_thread")

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

SMALL = {
    "--steps": 500,
    "--n": 128,
    "--n-cache": 128,
    "--samples": 16,
    "--epochs": 16,
    "--resamples": 2,
    "--directions": 4,
    "--n-val": 64,
    "--n-test": 64,
}
"""Size option -> the divisor of a printed value above it."""
ADDED = {
    "train": ("--steps", "--n-val", "--n-test"),
    "run": ("--steps", "--n-val", "--n-test", "--n-cache"),
    "probe-checkpoint": ("--n-cache",),
    "demo": ("--steps", "--n-cache"),
    "cache": ("--n",),
    "probe": ("--epochs",),
}
"""Subcommand -> size options that run with their default divided as in :data:`SMALL`
when the command does not print them (``cache`` is its write form, not ``cache info``)."""

INPUTS = ("checkpoint", "acts.h5", "acts-random-init.h5", "probes.h5", "flow.h5",
          "flow-random-init.h5", "pred.h5")  # fmt: skip
"""What the :func:`inputs` fixture makes: a checkpoint and the files of one analysis."""
PROVIDED = {
    "cache": {"runs/id-2-2": "checkpoint"},
    "compare": {name: name for name in INPUTS[1:]},
    "influence": {"runs/id": "checkpoint", "runs/id/acts.h5": "acts.h5"},
    "predict": {"runs/x/acts.h5": "acts.h5"},
    "probe": {"acts.h5": "acts.h5", "random-init.h5": "acts-random-init.h5"},
    "probe-checkpoint": {"runs/id-2-2/checkpoint": "checkpoint", "my-ckpt": "checkpoint"},
    "report": {"checkpoint": "checkpoint", **{name: name for name in INPUTS[1:]}},
}
"""Epilog -> {path an example reads that no earlier example writes: input it is}."""
DRAWN = ("README.md code block 3", "report")
"""The block, and the subcommand in it, whose report draws every figure to PNG."""
HEAVY = {"demo", "run", "probe-checkpoint", "report"}
"""Blocks with a command of these run the whole analysis or write a report: marked slow."""

PLACEHOLDER = re.compile(r"^[A-Z][A-Z0-9_-]*(\.[a-z0-9]+)?$")


@dataclass
class Block:
    """Commands printed together, run in order in one folder."""

    source: str
    commands: list[list[str]] = field(default_factory=list)
    provided: dict[str, str] = field(default_factory=dict)

    @property
    def heavy(self) -> bool:
        return any(argv[0] in HEAVY for argv in self.commands)


def command_lines(text: str) -> list[str]:
    """The ``infoprobe ...`` commands of a code text, one string each."""
    joined = re.sub(r"\\\n\s*", " ", text)
    out = []
    for line in joined.splitlines():
        line = line.strip().removeprefix("$ ")
        for part in line.split("&&"):
            if part.strip().startswith("infoprobe "):
                out.append(part.strip())
    return out


def argv_of(command: str) -> list[str]:
    """``infoprobe X ...  # note`` -> ``["X", ...]``."""
    words = shlex.split(command, comments=True)
    assert words[0] == "infoprobe", command
    return words[1:]


def doc_blocks() -> tuple[list[Block], list[tuple[str, str]]]:
    """Fenced (and indented) code blocks of every doc, and every doc's inline spans."""
    blocks, spans = [], []
    for path in DOCS:
        name = str(path.relative_to(ROOT))
        text = path.read_text()
        prose = text
        for i, m in enumerate(re.finditer(r"^```[^\n]*\n(.*?)^```", text, re.M | re.S)):
            prose = prose.replace(m.group(0), "")
            commands = [argv_of(c) for c in command_lines(m.group(1))]
            if commands:
                blocks.append(Block(f"{name} code block {i + 1}", commands))
        indented = r"^ {4}(infoprobe [^\n]+(?:\n {8,}[^\n]+)*)$"  # with its continuations
        for m in re.finditer(indented, prose, re.M):
            prose = prose.replace(m.group(0), "")
            spans.append((name, " ".join(m.group(1).split())))
        for m in re.finditer(r"`(infoprobe [^`]+)`", prose):
            spans.append((name, " ".join(m.group(1).split())))
    return blocks, spans


def subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def epilog_blocks() -> list[Block]:
    """The examples of every subcommand's epilog, one block per subcommand."""
    blocks = []
    for name, sub in subparsers(build_parser()).items():
        commands = [argv_of(c) for c in command_lines(sub.epilog or "")]
        if commands:
            blocks.append(Block(f"infoprobe {name} --help", commands, PROVIDED.get(name, {})))
    return blocks


PARSED_ONLY = {
    "demo": "two whole runs in two processes; tests/test_demo.py runs the demo itself",
    "reproduce": "a sweep of trainings (minutes even for the quick profile)",
    "rates": "reads a reproduce sweep's results.json",
}
"""Subcommands whose printed commands are parsed, not run, and why."""


def parse_only(argv: list[str]) -> bool:
    """Commands that are parsed, not run: :data:`PARSED_ONLY`, a GPU, or Ray."""
    return argv[0] in PARSED_ONLY or "cuda" in argv or "ray" in argv


def small(argv: list[str]) -> list[str]:
    """``argv`` with :data:`SMALL` sizes and the :data:`ADDED` options."""
    out = list(argv)
    for i, word in enumerate(out[:-1]):
        if word in SMALL and out[i + 1].isdigit():
            out[i + 1] = str(scaled(word, int(out[i + 1])))
    form = "cache info" if argv[:2] == ["cache", "info"] else argv[0]
    for option in ADDED.get(form, ()):
        if option not in out:
            default = subparsers(build_parser())[form]._option_string_actions[option].default
            out += [option, str(scaled(option, default))]
    return out


def scaled(option: str, value: int) -> int:
    """A size divided by its :data:`SMALL` divisor, rounded up, if above it."""
    divisor = SMALL[option]
    return -(-value // divisor) if value > divisor else value


def parse(argv: list[str]) -> argparse.Namespace:
    """The real parser's reading of ``argv``; a refusal fails the test with its message.
    A command for a GPU is parsed as on a machine with one (``--device`` checks that torch
    sees the device)."""
    gpu = "cuda" in argv
    try:
        with (
            mock.patch("torch.cuda.is_available", return_value=True) if gpu else nullcontext(),
            mock.patch("torch.cuda.device_count", return_value=1) if gpu else nullcontext(),
        ):
            return build_parser().parse_args(argv)
    except SystemExit as stop:
        if stop.code == 0 and "--help" in argv:
            return argparse.Namespace(func=None)
        pytest.fail(f"`infoprobe {shlex.join(argv)}` is refused by the parser (exit {stop})")


DOC_BLOCKS, SPANS = doc_blocks()
BLOCKS = DOC_BLOCKS + epilog_blocks()


@pytest.fixture(scope="session")
def inputs(tmp_path_factory) -> Path:
    """A checkpoint and the files of its analysis (all of :data:`INPUTS`), made with the
    CLI at small sizes: what an epilog's examples may read."""
    folder = tmp_path_factory.mktemp("inputs")
    base = ["--task", "intrinsic-dim", "--D", "2", "--T", "16", "--heads", "2,2"]
    steps = [
        ["train", *base, "--steps", "20", "--n-val", "64", "--n-test", "64", "--out",
         "checkpoint", "--quiet"],
        ["cache", "checkpoint", "--n", "64", "--out", "acts.h5", "--quiet"],
        ["cache", "checkpoint", "--n", "64", "--random-init", "1", "--out",
         "acts-random-init.h5", "--quiet"],
        ["probe", "acts.h5", "--control", "acts-random-init.h5", "--out", "probes.h5",
         "--quiet"],
        ["influence", "checkpoint", "--cache", "acts.h5", "--out", "flow.h5", "--quiet"],
        ["influence", "checkpoint", "--cache", "acts.h5", "--random-init", "1", "--out",
         "flow-random-init.h5", "--quiet"],
        ["predict", "--cache", "acts.h5", "--out", "pred.h5"],
    ]  # fmt: skip
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(folder)
        for argv in steps:
            assert main(argv) == 0, argv
    return folder


def run_block(block: Block, folder: Path, inputs: Path | None, capsys) -> None:
    for path, name in block.provided.items():
        src, dst = inputs / name, folder / path
        dst.parent.mkdir(parents=True, exist_ok=True)
        if src.is_dir():
            shutil.copytree(src, dst)
        else:
            shutil.copy2(src, dst)
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(folder)
        for argv in block.commands:
            if is_template(argv):
                check_template(block.source, argv)
                continue
            parse(argv)
            if parse_only(argv):
                continue
            ran = small(argv)
            rc = run_command(ran, drawn=(block.source, argv[0]) == DRAWN)
            captured = capsys.readouterr()
            assert rc == 0, (
                f"{block.source}: `infoprobe {shlex.join(argv)}` (run as "
                f"`infoprobe {shlex.join(ran)}`) exited {rc}:\n{captured.err[-2000:]}"
            )


def run_command(argv: list[str], drawn: bool) -> int:
    """``infoprobe ARGV``'s exit status; reports' PNGs drawn only if ``drawn``."""
    real = report_build.render_png
    blank = real(Figure(figsize=(0.1, 0.1)), dpi=10)
    with pytest.MonkeyPatch.context() as mp:
        if not drawn:
            mp.setattr(report_build, "render_png", lambda fig, dpi=110: blank)
        return main(argv)


def _params(heavy: bool) -> list:
    return [
        pytest.param(b, id=b.source, marks=[pytest.mark.slow] if heavy else [])
        for b in BLOCKS
        if b.heavy == heavy
    ]


@pytest.mark.parametrize("block", _params(False))
def test_printed_block_runs(block, tmp_path, inputs, capsys):
    run_block(block, tmp_path, inputs if block.provided else None, capsys)


@pytest.mark.slow
@pytest.mark.parametrize("block", _params(True))
def test_printed_pipeline_block_runs(block, tmp_path, inputs, capsys):
    run_block(block, tmp_path, inputs if block.provided else None, capsys)


def is_template(argv: list[str]) -> bool:
    """A synopsis rather than a command: placeholders in capitals, ``...``, ``[...]``,
    ``a|b``."""
    return any(
        "..." in w or w.startswith("[") or ("|" in w and "re:" not in w) or PLACEHOLDER.match(w)
        for w in argv[1:]
        if not w.startswith("-")
    )


def check_template(source: str, argv: list[str]) -> None:
    """A synopsis may only name options its subcommand has."""
    commands = subparsers(build_parser())
    assert argv[0] in commands, f"{source}: `infoprobe {' '.join(argv)}`: no such subcommand"
    known = commands[argv[0]]._option_string_actions
    named = re.findall(r"--[a-zA-Z][\w-]*", " ".join(argv))
    unknown = [w for w in named if w not in known]
    assert not unknown, f"{source}: `infoprobe {' '.join(argv)}` names unknown {unknown}"


@pytest.mark.parametrize("source,span", SPANS, ids=[f"{s}: {c}" for s, c in SPANS])
def test_printed_inline_command(source, span, tmp_path, capsys):
    argv = span.replace("...", " ... ").split()[1:]
    if PLACEHOLDER.match(argv[0].rstrip(":")):
        return  # about every subcommand (`infoprobe CMD: error: ...`)
    if argv[0].startswith("-"):  # a top-level option (`infoprobe --version`)
        assert argv[0] in build_parser()._option_string_actions, f"{source}: `{span}`"
        return
    assert argv[0] in subparsers(build_parser()), f"{source}: `{span}`: no such subcommand"
    if len(argv) == 1 or (len(argv) == 2 and argv[1].startswith("--") and argv[1] != "--help"):
        check_template(source, argv)
        return  # a mention of the subcommand or of one of its options
    if is_template(argv):
        check_template(source, argv)
        return
    argv = argv_of(span)
    if parse(argv).func is None:
        return  # --help
    if argv[0] == "predict" and "--task" in argv:
        with pytest.MonkeyPatch.context() as mp:
            mp.chdir(tmp_path)
            assert main(small(argv)) == 0, f"{source}: `{span}` failed"


def test_readme_theory_command_with_grid(tmp_path, capsys):
    """The README's theory command and its --grid form (the README names the flag beside
    the command): the verdict table covers T and the heads as printed."""
    span = next(c for s, c in SPANS if s == "README.md" and c.startswith("infoprobe predict"))
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(tmp_path)
        assert main([*argv_of(span), "--grid"]) == 0
    out = capsys.readouterr().out
    assert "T varies" in out and "64" in out


def documented_sites(method: str) -> str:
    """The ``--sites`` docs/cache-format.md names for a TransformerLens method."""
    text = (ROOT / "docs" / "cache-format.md").read_text()
    row = next(line for line in text.splitlines() if line.startswith(f"| `{method}"))
    cells = row.replace("\\|", "\0").split("|")  # a table cell's "\|" is a literal |
    return cells[-2].strip().strip("`'").replace("\0", "|")


@pytest.mark.parametrize(
    "task", [["--task", "intrinsic-dim", "--D", "2", "--T", "8"],
             ["--task", "fixed-positions", "--T", "6", "--pos-encoding", "learned"]],
    ids=["no positions", "learned positions"],
)  # fmt: skip
def test_documented_sites_serve_transformerlens_decompose_resid(task, tmp_path):
    """With the --sites docs/cache-format.md gives for decompose_resid, TransformerLens's
    decompose_resid works on a cache read from disk, and its components sum to the
    residual stream after the last block (the decomposition is exact). The default sites
    do not serve it, which is why the docs name others."""
    from infoprobe import load_checkpoint
    from infoprobe.hooks import open_cache

    sites = documented_sites("decompose_resid")
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(tmp_path)
        assert main(["train", *task, "--heads", "2,2", "--steps", "5", "--n-val", "16",
                     "--n-test", "16", "--out", "ckpt", "--quiet"]) == 0  # fmt: skip
        for name, given in (("tl.h5", ["--sites", sites]), ("default.h5", [])):
            assert main(["cache", "ckpt", "--n", "16", *given, "--out", name, "--quiet"]) == 0
        model = load_checkpoint("ckpt").model
        with open_cache("tl.h5") as cache:
            act = cache.to_activation_cache(model)
            parts, labels = act.decompose_resid(return_labels=True)
            last = act["resid_post", -1]
        with open_cache("default.h5") as cache, pytest.raises(KeyError, match="mlp_out"):
            cache.to_activation_cache(model).decompose_resid()
    embeds = ["embed", "pos_embed"] if "--pos-encoding" in task else ["embed"]
    assert labels == [*embeds, "0_attn_out", "0_mlp_out", "1_attn_out", "1_mlp_out"]
    assert parts.shape == (len(labels), 16, last.shape[1], model.cfg.d_model)
    assert (parts.sum(0) - last).abs().max().item() < 1e-5


def test_every_block_was_found():
    """The extraction sees what a reader sees: the README's three jobs, every epilog with
    examples, and the README's theory command."""
    sources = {b.source for b in BLOCKS}
    readme = next(b for b in BLOCKS if b.source == "README.md code block 3")
    assert [argv[0] for argv in readme.commands].count("cache") == 4
    for name in ("train", "run", "predict", "cache", "probe", "influence", "compare", "report"):
        assert f"infoprobe {name} --help" in sources
    assert any(c.startswith("infoprobe predict --task") for _, c in SPANS)


def test_small_scales_sizes_and_keeps_them_apart():
    assert small(["cache", "ckpt", "--n", "20000", "--out", "a.h5"]) == [
        "cache", "ckpt", "--n", "157", "--out", "a.h5"]  # fmt: skip
    assert small(["cache", "ckpt", "--n", "8192", "--out", "a.h5"])[3] == "64"
    assert small(["report", "p.h5", "--samples", "3", "--out", "r"]) == [
        "report", "p.h5", "--samples", "3", "--out", "r"]  # fmt: skip
    assert small(["cache", "info", "a.h5"]) == ["cache", "info", "a.h5"]


def all_parsers() -> dict[str, argparse.ArgumentParser]:
    """Every subcommand's parser, nested ones (``cache info``) included, by prog."""
    found, todo = {}, list(subparsers(build_parser()).values())
    while todo:
        parser = todo.pop()
        found[parser.prog] = parser
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                todo += list(dict.fromkeys(action._name_parser_map.values()))
    return found


def test_every_help_ends_with_the_exit_status():
    """Each command's --help ends with the same exit-status table (every status of
    infoprobe.cli.EXIT_STATUS, 0, 1, 2 and 130 among them); status 1 says what fails for
    the commands whose result can fail; the commands with a time budget list its status."""
    from infoprobe.cli import EXIT_STATUS
    from infoprobe.commands import reproduce, train
    from infoprobe.train.budget import BUDGET_EXIT

    parsers = all_parsers()
    assert "infoprobe cache info" in parsers and {0, 1, 2, 130} <= set(EXIT_STATUS)
    budgeted = {"infoprobe train", "infoprobe run", "infoprobe reproduce"}
    for prog, parser in parsers.items():
        assert "exit status:" in parser.format_help(), prog
        tail = parser.format_help().split("exit status:\n")[-1]
        codes = [line.split()[0] for line in tail.splitlines() if not line.startswith("      ")]
        expected = set(EXIT_STATUS) | ({BUDGET_EXIT} if prog in budgeted else set())
        assert codes == [str(code) for code in sorted(expected)], prog
        command = prog.split()[1]
        assert f"`infoprobe {command}: error: ...`" in tail, prog
    for module, prog in ((train, "infoprobe train"), (reproduce, "infoprobe reproduce")):
        words = " ".join(parsers[prog].format_help().split("exit status:")[-1].split())
        assert " ".join(module.EXIT_FAILURE.split()) in words


def test_run_help_lists_every_stage_in_order(tmp_path):
    """run --help names the stages a run folder goes through, flow and its control
    included, in the order the pipeline runs them."""
    text = " ".join(all_parsers()["infoprobe run"].format_help().split())
    order = ["train (checkpoint/)", "cache (acts.h5)", "control (acts-random-init.h5)",
             "probe (probes.h5)", "flow (flow.h5)", "flow-control (flow-random-init.h5)",
             "predict (pred.h5)", "compare (comparison.json, report/)"]  # fmt: skip
    assert " -> ".join(order) in text


def test_predict_numbers_heads_from_zero(capsys):
    """predict's program numbers the heads of each layer 0, 1, ... as compare, the
    reports and TransformerLens do (docs/conventions.md)."""
    assert (
        main(["predict", "--task", "intrinsic-dim", "--D", "2", "--T", "8", "--heads", "2,2"]) == 0
    )
    out = capsys.readouterr().out
    per_layer = [re.findall(r"^  head (\d+):", part, re.M) for part in out.split("\nlayer ")[1:]]
    assert per_layer == [["0", "1"], ["0", "1"]]
