"""One error base for bad input: every ValueError infoprobe defines is a UserError, which the
command line prints as one line (no traceback)."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest
import torch
from test_bad_input import fake_command

import infoprobe
from infoprobe import cli
from infoprobe.base.errors import UserError
from infoprobe.cli import main
from infoprobe.model import InfoFlowTransformer, ModelConfig, ModelInputError

PACKAGES = ("infoprobe", "infoprobe.hooks", "infoprobe.probes", "infoprobe.tasks")
"""The hub and the pillars (which install under infoprobe but live in their own folders)."""


def infoprobe_modules() -> list[str]:
    names = set()
    for package in PACKAGES:
        module = importlib.import_module(package)
        names.add(package)
        for info in pkgutil.walk_packages(module.__path__, package + "."):
            if not info.name.endswith(".__main__"):  # runs the command line on import
                names.add(info.name)
    return sorted(names)


def defined_errors() -> dict[str, type]:
    """Every exception class defined in an infoprobe module: ``module.Name`` -> class."""
    found = {}
    for name in infoprobe_modules():
        try:
            module = importlib.import_module(name)
        except ImportError as err:  # an optional dependency (a browser, ray) is missing
            if (err.name or "").split(".")[0] == "infoprobe":
                raise
            continue
        for value in vars(module).values():
            if (
                inspect.isclass(value)
                and issubclass(value, BaseException)
                and value.__module__ == name
            ):
                found[f"{name}.{value.__qualname__}"] = value
    return found


def test_every_value_error_of_infoprobe_is_a_user_error():
    errors = defined_errors()
    value_errors = {
        k: v for k, v in errors.items() if k.endswith("Error") and issubclass(v, ValueError)
    }
    assert len(value_errors) >= 18, sorted(value_errors)  # the walk found the modules
    assert "infoprobe.model.ModelInputError" in value_errors
    assert "infoprobe.hooks.errors.CacheError" in value_errors
    strays = sorted(k for k, v in value_errors.items() if not issubclass(v, UserError))
    assert strays == [], f"derive these from infoprobe.base.errors.UserError: {strays}"


def test_user_error_is_a_value_error():
    assert issubclass(UserError, ValueError)
    assert infoprobe.base.errors.UserError is UserError


def test_the_cli_prints_a_model_input_shape_error_as_one_line(monkeypatch, capsys):
    cfg = ModelConfig(d_in=2, n_ctx=4, d_model=8, heads=(2,), d_mlp=8, d_readout=4)
    model = InfoFlowTransformer(cfg, seed=0)

    def action(args):
        model(torch.zeros(3, 5, 2))  # T = 5, the model takes 4
        return 0

    with pytest.raises(ModelInputError, match=r"shape \[batch, T=4, d=2\], got \[3, 5, 2\]"):
        action(None)
    monkeypatch.setattr(cli, "command_modules", lambda: [fake_command("boom", action)])
    assert main(["boom"]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith("infoprobe boom: error: input x must have shape"), err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert "[3, 5, 2]" in err


def test_a_plain_value_error_of_infoprobe_code_keeps_its_traceback(monkeypatch):
    def action(args):
        raise ValueError("a bug, not bad input")

    monkeypatch.setattr(cli, "command_modules", lambda: [fake_command("boom", action)])
    with pytest.raises(ValueError, match="a bug"):
        main(["boom"])
