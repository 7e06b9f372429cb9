"""Every notebook executes top to bottom in a fresh kernel, and is committed without outputs; each topic
notebook's run is also built into its slide deck, which is measured (artifacts/decks/).

Each notebook runs twice in the suite, each time in a fresh kernel: once here, headless, and once in JupyterLab
(tests/browser). Both runs must print the same claims with the same measured values (conftest.record_claims),
which checks that every result is seeded, at no cost beyond the two runs the suite needs anyway.
"""

import os
import re
from pathlib import Path

import nbformat
import pytest
import torch

from qalib.tools import slides
from qalib.tools.nbtools import execute, has_outputs, is_topic, notebook_paths, statement_lines, tick_lines

from conftest import record_claims, record_notebook_time

PATHS = notebook_paths()
README = Path(__file__).resolve().parent.parent / "README.md"
DECKS = Path(__file__).resolve().parent.parent / "artifacts" / "decks"  # each run's deck, kept to look at


def readme_measurements(name: str) -> int | None:
    """The measurement count the README's table gives for a notebook (its third column), or None."""
    for line in README.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 3 and f"({'notebooks/' + name})" in cells[1]:
            return int(cells[2]) if re.fullmatch(r"\d+", cells[2]) else None
    return None


def test_there_are_notebooks():
    assert any(p.name.startswith("00_") for p in PATHS), "notebooks/00_start_here.ipynb is missing"


@pytest.mark.parametrize("path", PATHS, ids=[p.stem for p in PATHS])
def test_committed_without_outputs(path):
    nb = nbformat.read(path, as_version=4)
    assert not has_outputs(nb), f"{path.name} carries outputs; run `make strip`"
    assert "widgets" not in nb.metadata, f"{path.name} carries widget state; run `make strip`"


@pytest.mark.notebook
@pytest.mark.timeout(600)
@pytest.mark.parametrize("path", PATHS, ids=[p.stem for p in PATHS])
def test_notebook_executes_and_checks_its_claims(path):
    """Top to bottom in a fresh kernel; every claim check passes (a failed one raises in its cell)."""
    nb, seconds = execute(path, timeout=300, store_widget_state=True)  # the widget state: the deck's demo figures
    measurements = tick_lines(nb)
    record_notebook_time(path.name, seconds, len(measurements))
    if is_topic(path):
        assert len(measurements) >= 5, (f"{path.name} made only {len(measurements)} measurements; every topic "
                                        "notebook verifies its claims")
    if is_topic(path) and not torch.cuda.is_available():  # the README counts the CPU run
        assert readme_measurements(path.name) == len(measurements), (
            f"README.md's table gives {readme_measurements(path.name)} measurements for {path.name}; the run made "
            f"{len(measurements)}")
    record_claims(path.name, "headless", statement_lines(nb))
    if is_topic(path):
        check_deck(nb, path)


def check_deck(nb, path) -> None:
    """`make slides` on this run: every '##' section has a slide, no slide shows a raw check line (only a badge;
    the lines go to the speaker notes), and, where Chromium is installed, every slide fits 1280 x 720."""
    deck = slides.write_deck(nb, path.stem, DECKS)
    page = deck.read_text(encoding="utf-8")
    shown = re.sub(r"(?s)<aside class=\"notes\">.*?</aside>", "", page)
    sections = [m.group(1) for c in nbformat.read(path, as_version=4).cells if c.cell_type == "markdown"
                for m in re.finditer(r"^## (?:\d+\s*[·.]\s*)?(.+?)\s*$", c.source, re.M) if m.group(1) != "Set-up"]
    titles = [re.sub(r"<[^>]+>", "", h) for h in re.findall(r"(?s)<h2[^>]*>(.*?)</h2>", shown)]
    plain = lambda t: re.sub(r"[^a-z0-9]", "", t.split("$")[0].lower())  # noqa: E731  (formulas are typeset later)
    missing = [t for t in sections if not any(plain(t) in plain(h) for h in titles)]
    assert not missing, f"{path.name}: no slide for the sections {missing}"
    raw = re.findall(r"[✓≡❝] (?!\d+ (?:measured|derived|quoted))[^<]{0,60}", shown)
    assert not raw, f"{path.name}: check lines on the slides themselves: {raw[:3]}"
    if slides.CHROMIUM.exists():
        too_full = slides.measure([deck])[deck.name]
        assert not too_full, f"{path.name}: slides that do not fit 1280 x 720:\n" + "\n".join(too_full)
    elif os.environ.get("CI"):
        raise RuntimeError(f"{slides.CHROMIUM} is missing on CI: `make setup` should have installed it")


def test_two_runs_that_print_different_values_fail(monkeypatch, tmp_path):
    """The reproducibility check itself: the second run recorded is compared with the first."""
    monkeypatch.setattr("conftest.RECORDS", tmp_path)
    record_claims("x.ipynb", "headless", ["✓ a — measured: 1.0", "✓ b — measured: 2"])
    record_claims("x.ipynb", "JupyterLab", ["✓ a — measured: 1.0", "✓ b — measured: 2"])  # the same: passes
    record_claims("y.ipynb", "headless", ["✓ a — measured: 1.0"])
    with pytest.raises(AssertionError, match="not reproducible"):
        record_claims("y.ipynb", "JupyterLab", ["✓ a — measured: 1.1"])
    record_claims("z.ipynb", "headless", ["✓ a — measured: 1.0"])
    with pytest.raises(AssertionError, match="checked 1 claims, the JupyterLab run 0"):
        record_claims("z.ipynb", "JupyterLab", [])


def test_the_suite_runs_the_practice_notebook_but_not_as_a_topic():
    assert "practice_exercises.ipynb" in [p.name for p in PATHS]
    names = ("00_start_here.ipynb", "07_multi_head.ipynb", "practice_exercises.ipynb")
    assert [is_topic(Path(n)) for n in names] == [False, True, False]
