"""The three kinds of statement print three different marks, and only measurements count as ticks; the sweep's
record-and-keep-going mode (QALIB_CLAIMS_LOG, QALIB_CLAIMS_KEEP_GOING) changes nothing unless it is switched on."""

import json
import types

import nbformat
import numpy as np
import pytest
import torch

from qalib.notebook import claims
from qalib.notebook.claims import FAILED, IDENTITY, QUOTE, TICK, ClaimFailed, check, check_all, identity, identity_close, quote
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


# The record-and-keep-going mode the robustness sweep runs the notebooks in (QALIB_CLAIMS_LOG, QALIB_CLAIMS_KEEP_GOING).

@pytest.fixture
def claim_log(tmp_path, monkeypatch):
    """The log file a run writes, read back as records; the statement order starts afresh, as in a new kernel."""
    path = tmp_path / "claims.jsonl"
    monkeypatch.setenv(claims.LOG_ENV, str(path))
    monkeypatch.setattr(claims, "_order", {})
    return lambda: [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_without_the_variables_nothing_changes(capsys, tmp_path, monkeypatch):
    monkeypatch.delenv(claims.LOG_ENV, raising=False)
    monkeypatch.delenv(claims.KEEP_GOING_ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    check("holds", True, 0.5, margin=0.25)
    assert capsys.readouterr().out == f"{TICK} holds — measured: 0.5\n"
    with pytest.raises(ClaimFailed, match="claim does not hold: fails — measured: 2"):
        check("fails", False, 2, margin=-1.0)
    assert capsys.readouterr().out == "" and list(tmp_path.iterdir()) == []


@pytest.fixture
def no_shell(monkeypatch):
    """Outside IPython, whatever an earlier test left behind: an ipywidgets Output widget in another test creates
    IPython's InteractiveShell singleton in this process (pytest-xdist decides which tests share it)."""
    IPython = pytest.importorskip("IPython")
    monkeypatch.setattr(IPython, "get_ipython", lambda: None)


def test_the_log_has_one_line_per_check_and_identity(claim_log, capsys, no_shell):
    check("accuracy above 0.95", True, torch.tensor([0.97, 0.99]), margin=torch.tensor(0.02))
    identity("a + b = b + a", True, 5)
    quote("a figure", "a paper, Table 1")  # nothing is checked, so nothing is logged
    first, second = claim_log()
    assert first == {"claim": "accuracy above 0.95", "kind": "measurement", "holds": True,
                     "measured": [pytest.approx(0.97), pytest.approx(0.99)], "printed": "[0.97, 0.99]",
                     "margin": pytest.approx(0.02), "cell": None, "order": 0}
    assert (second["kind"], second["measured"], second["margin"], second["order"]) == ("identity", 5, None, 1)
    assert capsys.readouterr().out.count("\n") == 3  # the printed lines are the ones without a log


def test_in_a_kernel_the_log_names_the_running_cell_and_counts_per_cell(claim_log, monkeypatch):
    IPython = pytest.importorskip("IPython")
    shell = types.SimpleNamespace(execution_count=4)  # In [4]: the 4th cell run, cell index 3
    monkeypatch.setattr(IPython, "get_ipython", lambda: shell)
    check("first", True, 1.0)
    check("second", True, 1.0)
    shell.execution_count = 5
    check("next cell", True, 1.0)
    assert [(r["cell"], r["order"]) for r in claim_log()] == [(3, 0), (3, 1), (4, 0)]


def test_logging_alone_still_stops_at_a_failed_claim(claim_log):
    with pytest.raises(ClaimFailed):
        check("fails", False, 2.0, margin=-0.5)
    assert [(r["claim"], r["holds"], r["margin"]) for r in claim_log()] == [("fails", False, -0.5)]


def test_keep_going_prints_a_cross_and_runs_the_next_claim(claim_log, capsys, monkeypatch):
    monkeypatch.setenv(claims.KEEP_GOING_ENV, "1")
    result = check("fails", False, 2.0)
    identity("a bug", False, 0.0)
    check("holds", True, 1.0)
    assert not result.holds
    assert capsys.readouterr().out.splitlines() == [f"{FAILED} fails — measured: 2", f"{FAILED} identity: a bug — checked: 0",
                                                    f"{TICK} holds — measured: 1"]
    assert [r["holds"] for r in claim_log()] == [False, False, True]


def test_check_all_passes_its_margin_on(claim_log):
    check_all("every seed above 0.9", [True, True], [0.92, 0.95], margin=min(0.92, 0.95) - 0.9)
    assert claim_log()[0]["margin"] == pytest.approx(0.02)


def test_a_margin_is_a_number(claim_log):
    for bad in ("0.1", [0.1, 0.2], np.array([0.1, 0.2]), True):
        with pytest.raises(TypeError, match="margin must be"):
            check("holds", True, 1.0, margin=bad)
    result = check("holds", True, 1.0, margin=np.float32(np.inf))  # an undefined margin stops nothing
    assert result.holds and claim_log()[-1]["margin"] is None


def test_measured_values_are_logged_as_json():
    assert claims.jsonable(torch.tensor([1.0, float("nan")])) == [1.0, "nan"]
    assert claims.jsonable({"a": np.float64(0.5), 3: (1, 2)}) == {"a": 0.5, "3": [1, 2]}
    assert claims.jsonable(np.zeros(100)).startswith("[0., 0.")  # too long: its printed form
    assert claims.jsonable(object()).startswith("<object")


def test_keep_going_is_0_or_1(monkeypatch):
    monkeypatch.setenv(claims.KEEP_GOING_ENV, "yes")
    with pytest.raises(ValueError, match="QALIB_CLAIMS_KEEP_GOING must be 0 or 1"):
        check("fails", False, 1.0)
