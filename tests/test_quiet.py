"""The quiet form of a statement: one line on the page, the details one click away, every text escaped."""

import pytest

from qalib.notebook.claims import FAILED, IDENTITY, TICK, CheckedClaim
from qalib.notebook.quiet import SHORT_VALUE, claim_html, identities_html, show


def test_a_short_value_sits_on_the_line_without_a_click():
    out = claim_html(CheckedClaim("accuracy above 0.9", 0.93))
    assert out.startswith("<div") and "<details" not in out
    assert f"{TICK} accuracy above 0.9" in out and "0.93" in out


def test_a_long_value_goes_behind_the_click():
    values = list(range(40))
    out = claim_html(CheckedClaim("every seed learned", values))
    summary = out[out.index("<summary"):out.index("</summary>")]
    assert "<details" in out and "every seed learned" in summary and "39" not in summary
    assert "measured: [0, 1, 2" in out


def test_typed_text_is_escaped():
    out = claim_html(CheckedClaim("a <script>alert(1)</script> & b", {"<k>": "x" * (SHORT_VALUE + 1)}))
    assert "<script>" not in out and "&lt;script&gt;" in out and "&amp; b" in out and "&lt;k&gt;" in out


def test_a_failed_claim_shows_its_cross():
    assert claim_html(CheckedClaim("x", 1, holds=False)).count(FAILED) == 1


def test_identities_of_a_cell_collapse_to_one_line():
    results = [CheckedClaim(f"identity {i}", i, kind="identity") for i in range(3)]
    out = identities_html(results)
    summary = out[out.index("<summary"):out.index("</summary>")]
    assert f"{IDENTITY} 3 derivations checked" in summary and "identity 0" not in summary
    assert all(f"identity {i} — checked: {i}" in out for i in range(3))
    assert identities_html(results[:1]) == claim_html(results[0])
    with pytest.raises(ValueError, match="at least one"):
        identities_html([])


def test_outside_a_kernel_the_full_line_is_printed(capsys):
    show(CheckedClaim("two is more than one", 2))
    assert capsys.readouterr().out == f"{TICK} two is more than one — measured: 2\n"


def test_a_list_of_arrays_reads_as_numbers_not_as_reprs():
    from qalib.notebook.claims import format_value
    import numpy as np

    assert format_value([np.array([1.0, 1.0]), np.array([0.5, 0.25])]) == "[[1., 1.], [0.5 , 0.25]]"


def test_tools_read_a_quiet_claim_as_its_full_line():
    """A notebook executed in a kernel holds display_data outputs: the counts, the robustness logs' partners and the
    slides read their plain text, which is the full line."""
    import nbformat

    from qalib.notebook.quiet import CLAIM_METADATA
    from qalib.tools.nbtools import statement_lines, ticks
    from qalib.tools.slides import slim_outputs

    line = f"{TICK} accuracy above 0.9 — measured: 0.93"
    ident = f"{IDENTITY} identity: one — checked: 1\n{IDENTITY} identity: two — checked: 2"
    cell = nbformat.v4.new_code_cell("check(...)")
    cell.outputs = [nbformat.v4.new_output("display_data", data={"text/plain": line, "text/html": "<div>x</div>"},
                                           metadata=CLAIM_METADATA),
                    nbformat.v4.new_output("display_data", data={"text/plain": ident, "text/html": "<div>y</div>"},
                                           metadata=CLAIM_METADATA),
                    nbformat.v4.new_output("display_data", data={"text/plain": f"{TICK} not a claim: no marker"})]
    nb = nbformat.v4.new_notebook(cells=[cell])
    assert statement_lines(nb) == [line] + ident.splitlines() and ticks(nb) == 1
    slim_outputs(cell)
    assert [o.output_type for o in cell.outputs] == ["stream", "stream"]
    assert cell.outputs[0].text == line + "\n"
