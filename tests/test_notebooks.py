"""Every notebook executes top to bottom in a fresh kernel, and is committed without outputs."""

import nbformat
import pytest

from qalib.nbtools import execute, has_outputs, notebook_paths, ticks

from conftest import NOTEBOOK_TIMES

PATHS = notebook_paths()


def test_there_are_notebooks():
    assert any(p.name.startswith("00_") for p in PATHS), "notebooks/00_start_here.ipynb is missing"


@pytest.mark.parametrize("path", PATHS, ids=[p.stem for p in PATHS])
def test_committed_without_outputs(path):
    nb = nbformat.read(path, as_version=4)
    assert not has_outputs(nb), f"{path.name} carries outputs; run `make strip`"
    assert "widgets" not in nb.metadata, f"{path.name} carries widget state; run `make strip`"


@pytest.mark.notebook
@pytest.mark.timeout(900)
@pytest.mark.parametrize("path", PATHS, ids=[p.stem for p in PATHS])
def test_notebook_executes(path):
    nb, seconds = execute(path, timeout=300)
    n = ticks(nb)
    NOTEBOOK_TIMES[path.name] = (seconds, n)
    if not path.name.startswith("00_"):
        assert n >= 5, f"{path.name} checked only {n} claims; every topic notebook verifies its claims"
