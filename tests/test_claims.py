"""The three kinds of statement print three different marks, and only measurements count as ticks."""

import nbformat
import pytest

from qalib.claims import IDENTITY, QUOTE, TICK, ClaimFailed, check, identity, identity_close, quote
from qalib.tools.nbtools import statement_lines, tick_lines, ticks


def test_an_identity_prints_its_own_mark_and_the_word(capsys):
    identity("a + b = b + a", 2 + 3 == 3 + 2, 5)
    assert capsys.readouterr().out.strip() == f"{IDENTITY} identity: a + b = b + a — checked: 5"


def test_an_identity_that_fails_is_reported_as_a_bug():
    with pytest.raises(ClaimFailed, match="identity does not hold"):
        identity_close("two ways of computing pi agree", 3.0, 3.14159, rtol=1e-6)


def test_a_quote_names_its_source(capsys):
    quote("BERT-base has 110M parameters", "Devlin et al. 2019, sec. 3")
    assert capsys.readouterr().out.strip() == f"{QUOTE} quoted: BERT-base has 110M parameters — Devlin et al. 2019, sec. 3"
    with pytest.raises(TypeError, match="source"):
        quote("a figure", " ")


def test_only_measurements_count_as_ticks(capsys):
    check("measured", True, 1.0)
    identity("by construction", True, 0.0)
    quote("a figure", "a paper, Table 1")
    printed = capsys.readouterr().out
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(
        "", outputs=[nbformat.v4.new_output("stream", name="stdout", text=printed)])])
    assert [line[0] for line in statement_lines(nb)] == [TICK, IDENTITY, QUOTE]
    assert tick_lines(nb) == [printed.splitlines()[0]] and ticks(nb) == 1
