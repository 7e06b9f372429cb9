"""The cheat sheet: built offline from the catalog and the drills, every question on it, on one sheet of A4 in readable type."""

import os
import re
from pathlib import Path

import pytest

from qalib.notebook.catalog import CATALOG
from qalib.tools import cheatsheet


def test_every_catalog_entry_has_a_formula_that_mathtext_draws_and_a_number():
    for entry in CATALOG:
        assert entry.formula and entry.number, f"{entry.file}: the cheat sheet needs a formula and a number"
        assert cheatsheet.formula_svg(entry.formula).startswith("<svg")


def test_a_bad_formula_names_itself():
    with pytest.raises(ValueError, match=r"formula '\$\\\\frac\{1\$' is not valid mathtext"):
        cheatsheet.formula_svg(r"$\frac{1$")


def test_latex_in_follow_ups_reads_as_text():
    assert cheatsheet.latex_as_text(r"Why $q\cdot k$ in $d\times d_k$ and $W_qW_k^\top$?") == "Why q·k in d×d_k and W_qW_kᵀ?"
    assert cheatsheet.latex_as_text("no math, 5$ only") == "no math, 5$ only"


def test_the_page_holds_every_question_and_fetches_nothing(tmp_path):
    (path,) = cheatsheet.build(tmp_path, pdf=False)
    text = path.read_text()
    for entry in (e for e in CATALOG if e.exists):
        assert entry.question.replace("'", "&#x27;") in text or entry.question in text
        assert f"notebooks/{entry.file}" in text
    assert text.count("<svg") == sum(e.exists for e in CATALOG)
    assert "@page" in text and "@media screen" in text  # print styles
    external = [u for u in re.findall(r"""(?:src|href)=['"]([^'"]+)""", text) if re.match(r"[a-z]+:", u)]
    assert external == [], f"the cheat sheet links outside itself: {external[:3]}"


@pytest.mark.skipif(not Path(cheatsheet.CHROMIUM).exists() and not os.environ.get("CI"),
                    reason="Chromium is not installed (make setup installs it as root); on CI this test runs")
def test_the_pdf_is_one_sheet_in_readable_type(tmp_path):
    html_path, pdf = cheatsheet.build(tmp_path)
    pages, size = cheatsheet.pdf_pages(pdf), cheatsheet.font_size(html_path)
    assert pdf.read_bytes().startswith(b"%PDF")
    # one side at 6.6 pt or more, else both sides at 6.2 pt or more: a larger collection needs a new layout
    assert (pages == 1 and size >= 6.6) or (pages == 2 and size >= 6.2), f"{pages} pages at {size} pt"
