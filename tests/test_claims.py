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


# Conditions: the verdict and the margin of a threshold comparison, worked out once (the threshold is written once).

def verdict(condition: claims.Condition) -> tuple:
    return condition.holds, condition.margin


def test_each_comparison_holds_and_gives_its_margin_in_the_values_units():
    assert verdict(claims.above(0.97, 0.95)) == (True, pytest.approx(0.02))
    assert claims.at_least(0.97, 0.95).margin == pytest.approx(0.02)
    assert verdict(claims.below(0.3, 0.5)) == (True, pytest.approx(0.2))
    assert claims.at_most(0.3, 0.5).margin == pytest.approx(0.2)
    assert verdict(claims.above(0.9, 0.95)) == (False, pytest.approx(-0.05))  # negative when it fails
    assert verdict(claims.below(3, 2)) == (False, -1.0)                        # ints give a float margin
    assert verdict(claims.between(0.8, 0.5, 1)) == (True, pytest.approx(0.2))  # the nearer bound: 1 - 0.8
    assert claims.between(0.55, 0.5, 1).margin == pytest.approx(0.05)                 # the nearer bound: 0.55 - 0.5
    assert not claims.between(1.2, 0.5, 1).holds and claims.between(1.2, 0.5, 1).margin == pytest.approx(-0.2)


def test_equality_holds_for_at_least_and_at_most_only_with_margin_zero():
    for strict, inclusive in ((claims.above, claims.at_least), (claims.below, claims.at_most)):
        assert strict(0.5, 0.5) == claims.Condition(False, 0.0)
        assert inclusive(0.5, 0.5) == claims.Condition(True, 0.0)
    assert not claims.between(0.5, 0.5, 1).holds and not claims.between(1.0, 0.5, 1).holds


def test_an_array_or_tensor_holds_when_every_element_does_with_the_worst_elements_margin():
    acc = np.array([0.97, 0.99, 0.96])
    assert verdict(claims.above(acc, 0.95)) == (True, pytest.approx(0.01))
    assert verdict(claims.below(acc, 0.98)) == (False, pytest.approx(-0.01))
    assert claims.between(acc, 0.9, 1.0).margin == pytest.approx(0.01)
    t = torch.tensor([[0.2, 0.4], [0.3, 0.5]])
    assert verdict(claims.above(t, 0.1)) == (True, pytest.approx(0.1))
    assert verdict(claims.at_most(t.requires_grad_(), 0.45)) == (False, pytest.approx(-0.05))
    assert claims.below(np.array([1.0, 2.0]), np.array([1.5, 2.2])).margin == pytest.approx(0.2)  # element by element
    assert claims.above(torch.tensor([1.0, 2.0]), np.array([0.5, 1.9])).margin == pytest.approx(0.1)
    assert claims.above([0.5, 0.7], 0.4).margin == pytest.approx(0.1)                             # a list of numbers


def test_the_comparison_and_the_margin_are_worked_out_in_the_values_own_type():
    """float32 compares as `acc > 0.95` does, and its margin is `acc.min() - 0.95`, to the last bit."""
    acc = np.array([0.95, 0.97], dtype=np.float32)
    assert claims.above(acc, 0.95).holds == bool((acc > 0.95).all())
    assert claims.above(acc, 0.94).margin == float(acc.min() - 0.94)
    t = torch.tensor([0.96, 0.99])
    assert claims.at_least(t, 0.95).margin == float(t.min() - 0.95)
    assert claims.below(t, 1).margin == float(1 - t.max())


def test_nan_never_holds_and_has_no_margin():
    nan = float("nan")
    for condition in (claims.above(nan, 0.0), claims.at_least(nan, 0.0), claims.below(nan, 1.0),
                      claims.at_most(nan, 1.0), claims.between(nan, 0.0, 1.0), claims.above(np.array([0.5, nan]), 0.1),
                      claims.below(torch.tensor([nan, 0.5]), 1.0), claims.above(1.0, nan)):
        assert verdict(condition) == (False, None)
    assert verdict(claims.above(float("inf"), 0.0)) == (True, None)  # holds, but no finite margin


def test_two_conditions_combine_with_and():
    a, b = claims.above(0.9, 0.5), claims.below(0.2, 0.3)
    assert verdict(a & b) == (True, pytest.approx(0.1))
    assert verdict(a & claims.above(0.4, 0.5)) == (False, pytest.approx(-0.1))
    assert verdict(a & claims.above(float("nan"), 0.5)) == (False, None)
    with pytest.raises(TypeError, match="& combines two Conditions"):
        a & True
    with pytest.raises(TypeError, match="& combines two Conditions"):
        True & a
    with pytest.raises(TypeError, match="not a bool"):
        a and b  # `and` would drop a's verdict


def test_a_check_takes_a_condition_and_logs_its_margin(claim_log, capsys, no_shell):
    acc = np.array([0.97, 0.99])
    result = check("every seed above 0.95", claims.above(acc, 0.95), acc)
    assert result.holds and capsys.readouterr().out == f"{TICK} every seed above 0.95 — measured: [0.97, 0.99]\n"
    assert claim_log()[0]["margin"] == pytest.approx(0.02)
    with pytest.raises(ClaimFailed, match="claim does not hold: every seed above 0.98"):
        check("every seed above 0.98", claims.above(acc, 0.98), acc)
    assert claim_log()[-1]["margin"] == pytest.approx(-0.01) and not claim_log()[-1]["holds"]
    with pytest.raises(TypeError, match="the condition already gives the margin"):
        check("margin twice", claims.above(acc, 0.95), acc, margin=0.02)


def test_check_all_takes_conditions_with_the_worst_margin(claim_log):
    check_all("every variant above its floor", [claims.above(0.92, 0.9), claims.below(0.1, 0.5)], [0.92, 0.1])
    assert claim_log()[0]["margin"] == pytest.approx(0.02)
    with pytest.raises(TypeError, match="every condition as a Condition"):
        check_all("mixed", [claims.above(0.92, 0.9), True])
    with pytest.raises(TypeError, match="goes to check"):
        check_all("one condition", claims.above(np.array([0.92, 0.95]), 0.9))
    with pytest.raises(TypeError, match="the condition already gives the margin"):
        check_all("margin twice", [claims.above(0.92, 0.9)], margin=0.02)


def test_a_condition_names_what_is_wrong_with_its_inputs():
    for bad, match in ((True, "got bool .a comparison already made"), ("0.5", "got str"), (None, "got NoneType"),
                       (np.array([True, False]), "real numbers"), (torch.tensor([True]), "real numbers"),
                       ([[1.0], [2.0, 3.0]], "ragged"), (1 + 2j, "got complex")):
        with pytest.raises(TypeError, match=match):
            claims.above(bad, 0.5)
    with pytest.raises(TypeError, match="above: threshold must be"):
        claims.above(0.5, "0.4")
    for empty in (np.array([]), torch.tensor([])):
        with pytest.raises(ValueError, match="at_least: value is empty"):
            claims.at_least(empty, 0.5)
    with pytest.raises(ValueError, match="do not match"):
        claims.below(np.zeros(3), np.zeros(2))
    with pytest.raises(ValueError, match="do not match"):
        claims.below(torch.zeros(3), torch.zeros(2))
    with pytest.raises(ValueError, match="low must be below high"):
        claims.between(0.5, 1, 0.5)
    with pytest.raises(TypeError, match="Condition.holds must be a bool"):
        claims.Condition(1, 0.5)


def test_the_conditions_are_exported_next_to_check():
    import qalib

    assert all(getattr(qalib, name) is getattr(claims, name) for name in ("above", "at_least", "below", "at_most", "between"))
