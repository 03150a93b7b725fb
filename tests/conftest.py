"""Shared test fixtures."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture
def one_thread():
    """One torch thread for the test (restored after): the machine is shared, results must
    not depend on the thread count, and subprocesses of some tests use one thread too.
    Use in a module with ``pytestmark = pytest.mark.usefixtures("one_thread")``."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def blank_report_figures():
    """Every report figure of the module written as a tiny blank PNG (tests/quick_reports.py).
    Use in a module that tests the stages around the report, not its figures:
    ``pytestmark = pytest.mark.usefixtures("blank_report_figures")``."""
    from quick_reports import blank_figures

    with blank_figures():
        yield
