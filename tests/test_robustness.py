"""The robustness sweep's pure parts (claim keys, margins in units of their spread, aggregation and notes, the plan
and its validation, resuming), and one run of a tiny synthetic notebook in a real kernel."""

import json
import math

import nbformat
import pytest

from qalib.tools.robustness import execute, plan, summary
from qalib.tools.robustness.plan import Run, SweepConfig, Variant
from qalib.tools.robustness.summary import aggregate, claim_key, margin_in_spread, markdown, normalise, notes

AVX512_T1 = Variant("avx512", 1, forced=False)
AVX2_T1 = Variant("avx2", 1, forced=True)


def claim(text, holds=True, margin=None, cell=3, order=0, printed="0.5", kind="measurement"):
    return {"claim": text, "kind": kind, "holds": holds, "measured": None, "printed": printed, "margin": margin,
            "cell": cell, "order": order}


def result(offset, variant, claims, notebook="07_multi_head", error=None):
    status = "error" if error else ("failed" if any(not c["holds"] for c in claims) else "ok")
    return {"notebook": notebook, "offset": offset, "variant": variant, "scale": 1, "label": f"o{offset}·{variant}",
            "status": status, "error": error, "claims": claims, "seconds": 1.0}


# ---- the same claim across runs

def test_numbers_in_a_claim_do_not_make_it_another_claim():
    a = normalise("loss 0.42 after 200 steps, ratio -1.5e-3 (d_k = 64)")
    assert a == normalise("loss  0.51 after 200 steps, ratio 2e-4 (d_k = 64)") == "loss # after # steps, ratio # (d_k = #)"
    assert claim_key("07", claim("head 3 wins by 0.2")) == claim_key("07", claim("head 5 wins by 0.31"))
    assert claim_key("07", claim("x", order=0)) != claim_key("07", claim("x", order=1))
    assert claim_key("07", claim("x", cell=3)) != claim_key("07", claim("x", cell=4))
    assert normalise("heads differ") != normalise("heads agree")


# ---- margins in units of their spread

def test_the_worst_margin_is_measured_in_standard_deviations():
    m = margin_in_spread([0.3, 0.1, 0.2])
    assert (m.worst, m.n) == (0.1, 3) and m.spread == pytest.approx(0.1) and m.in_spread == pytest.approx(1.0)
    assert margin_in_spread([-0.2, 0.2]).in_spread == pytest.approx(-0.2 / math.sqrt(0.08))


def test_a_margin_without_spread_says_so():
    assert margin_in_spread([]) is None
    one = margin_in_spread([0.4])
    assert (one.worst, one.spread, one.in_spread) == (0.4, None, None)  # one run: no spread to measure
    assert margin_in_spread([0.4, 0.4]).in_spread == math.inf  # the runs did not move it at all
    assert margin_in_spread([-0.4, -0.4]).in_spread == -math.inf
    assert margin_in_spread([0.0, 0.0]).in_spread == 0.0
    assert summary.format_margin(one) == "+0.4 (1 run)"
    assert summary.format_margin(margin_in_spread([0.4, 0.4])) == "+0.4 (no spread)"
    assert summary.format_margin(margin_in_spread([0.3, 0.1, 0.2])) == "+1.0σ (+0.1)"
    assert summary.format_margin(None) == "—"


# ---- aggregation, notes and the table

def test_one_row_per_claim_with_its_pass_rate_margins_and_failed_runs():
    runs = [result(0, "avx512-t1", [claim("acc 0.97 > 0.95", margin=0.02), claim("identity", kind="identity", order=1)]),
            result(100, "avx512-t1", [claim("acc 0.93 > 0.95", False, margin=-0.02), claim("identity", kind="identity", order=1)]),
            result(0, "avx2-t1", [claim("acc 0.99 > 0.95", margin=0.04), claim("identity", kind="identity", order=1)])]
    first, second = aggregate(runs)
    assert (first.passed, len(first.runs), first.failed, first.margins) == (2, 3, ["o100·avx512-t1"], [0.02, -0.02, 0.04])
    assert first.margin.worst == -0.02 and first.margin.in_spread < 0
    assert (second.kind, second.passed, second.margin) == ("identity", 3, None)
    table = markdown(runs)
    assert "| 07 [3] | acc 0.97 > 0.95 | 2/3 | " in table and "| o100·avx512-t1 |" in table
    assert "| 07 [3] | ≡ identity | 3/3 | — |  |" in table
    assert "3 runs of 1 notebook = 2 seed offsets (0, 100) x 2 CPU variants (avx2-t1, avx512-t1); 2 ok, 1 with a failed claim" in table


def test_runs_that_disagree_on_their_claims_are_reported():
    boom = {"type": "ValueError", "message": "shapes do\nnot match", "traceback": "..."}
    runs = [result(0, "avx512-t1", [claim("a"), claim("b", order=1)]),
            result(100, "avx512-t1", [claim("a"), claim("b", order=1)]),
            result(200, "avx512-t1", [claim("a")], error=boom)]
    rows = aggregate(runs)
    assert [(r.text, len(r.runs), r.notebook_runs) for r in rows] == [("a", 3, 3), ("b", 2, 3)]
    found = notes(runs, rows)
    assert "07: runs disagree on the number of claims: 2 in 2 runs; 1 in o200·avx512-t1" in found
    assert any("o200·avx512-t1: stopped by ValueError: shapes do not match" in line for line in found)
    assert "| 2/2 of 3 |" in markdown(runs)


def test_a_claim_whose_words_change_between_runs_is_flagged():
    runs = [result(0, "avx512-t1", [claim("rotary wins")], ), result(100, "avx512-t1", [claim("alibi wins")])]
    assert any("claim #1 of this cell differs in more than its numbers (2 texts)" in line
               for line in notes(runs, aggregate(runs)))


def test_seeds_that_did_not_move_are_reported():
    same = [claim("a", printed="0.5")]
    runs = [result(0, "avx512-t1", same), result(100, "avx512-t1", same),
            result(0, "avx2-t1", [claim("a", printed="0.5001")]), result(100, "avx2-t1", [claim("a", printed="0.5001")])]
    found = notes(runs, aggregate(runs))
    assert any("07: the seed offsets changed no printed value (its seeds do not follow QALIB_SEED_OFFSET" in line
               for line in found)
    moved = runs[:1] + [result(100, "avx512-t1", [claim("a", printed="0.6")])]
    assert not any("changed no printed value" in line for line in notes(moved, aggregate(moved)))


def test_a_notebook_with_fixed_seeds_shows_its_margins_in_its_own_units():
    """Its runs differ only by the kernels' rounding: a spread of 1e-8 would make every margin look like millions of
    spreads, so the table gives the raw margin and says why."""
    runs = [result(o, v, [claim("a", margin=0.2 + d, printed="0.5")]) for o in (0, 100)
            for v, d in (("avx512-t1", 0.0), ("avx2-t1", 1e-8))]
    for run in runs:
        run["claims"][0]["printed"] = run["variant"]
    assert summary.seeds_fixed(runs) == {"07_multi_head"}
    table = markdown(runs)
    assert "| +0.2 (seeds fixed) |" in table and "σ" not in table.split("Per claim:")[1]
    assert "| 07_multi_head | 4 / 0 / 0 | 1 + 0 | 0 | seeds fixed |" in table


def test_the_overview_has_one_line_per_notebook_with_its_tightest_margin():
    runs = [result(0, "v", [claim("a", margin=0.3, printed="1"), claim("b", margin=0.5, order=1, printed="1")]),
            result(100, "v", [claim("a", margin=0.1, printed="2"), claim("b", margin=0.4, order=1, printed="2")]),
            result(0, "v", [claim("c", False, margin=-0.1, printed="1")], notebook="11_mlm_and_nsp"),
            result(100, "v", [claim("c", margin=0.1, printed="2")], notebook="11_mlm_and_nsp")]
    lines = markdown(runs).splitlines()
    assert "| 07_multi_head | 2 / 0 / 0 | 2 + 0 | 0 | +0.7σ (+0.1) |" in lines  # a: 0.1 / 0.141; b: 0.4 / 0.071
    assert "| 11_mlm_and_nsp | 1 / 1 / 0 | 1 + 0 | 1 | -0.7σ (-0.1) |" in lines


def test_a_margin_whose_sign_contradicts_the_verdict_is_reported():
    runs = [result(0, "avx512-t1", [claim("a", True, margin=-0.1)]), result(100, "avx512-t1", [claim("a", True, margin=0.1)])]
    assert any("the margin's sign contradicts the verdict in o0·avx512-t1" in line for line in notes(runs, aggregate(runs)))


def test_the_table_stays_one_line_per_claim():
    long = "a claim with | a pipe " + "and many words " * 10
    line = next(l for l in markdown([result(0, "avx512-t1", [claim(long)])]).splitlines() if l.startswith("| 07 ["))
    assert "\\|" in line and "…" in line and len(line) < 140


# ---- the plan: what runs, validated in one place

def test_offsets_are_a_count_or_a_list_far_enough_apart():
    assert plan.parse_offsets("3") == (0, 100, 200)
    assert plan.parse_offsets("0,300,1000") == (0, 300, 1000) and plan.parse_offsets("300,") == (300,)
    for bad, message in (("0", "number of offsets must be"), ("ten", "offsets must be a count"),
                         ("0,50", "at least 100 apart"), ("0,-100", r"offsets\[1\] must be an int"), ("", "a count")):
        with pytest.raises(ValueError, match=message):
            plan.parse_offsets(bad)


def test_topics_and_variants_are_named_or_refused(tmp_path):
    books = [tmp_path / "01_scaled_attention.ipynb", tmp_path / "07_multi_head.ipynb"]
    assert plan.select_notebooks(["07"], books) == (books[1],)
    assert plan.select_notebooks([], books) == tuple(books)
    with pytest.raises(ValueError, match="topic must name a topic notebook .* got '99'.*07_multi_head"):
        plan.select_notebooks(["99"], books)
    assert plan.select_variants(["avx2-t1"], (AVX512_T1, AVX2_T1)) == (AVX2_T1,)
    with pytest.raises(ValueError, match=r"variant must be one of \['avx512-t1', 'avx2-t1'\], got 'avx2-t4'"):
        plan.select_variants(["avx2-t4"], (AVX512_T1, AVX2_T1))


def test_a_sweep_config_checks_its_fields(tmp_path):
    nb = tmp_path / "07_multi_head.ipynb"
    nb.write_text("{}")
    cfg = SweepConfig((nb,), (0, 100), (AVX512_T1, AVX2_T1), scale=4, out=tmp_path)
    assert [(r.offset, r.variant.name) for r in cfg.runs()] == [(0, "avx512-t1"), (0, "avx2-t1"), (100, "avx512-t1"),
                                                                 (100, "avx2-t1")]
    for kwargs, message in (({"scale": 0}, "scale must be an int in"), ({"jobs": 0}, "jobs must be an int"),
                            ({"notebooks": (tmp_path / "missing.ipynb",)}, "existing notebook files"),
                            ({"variants": (AVX2_T1, AVX2_T1)}, "distinct variants"), ({"offsets": (0, 10)}, "apart")):
        with pytest.raises(ValueError, match=message):
            SweepConfig(**{"notebooks": (nb,), "offsets": (0,), "variants": (AVX512_T1,), **kwargs})


def test_a_run_sets_the_kernels_seed_offset_scale_and_float_path(tmp_path):
    run = Run(tmp_path / "07_multi_head.ipynb", 300, AVX2_T1, 4)
    assert Run.from_json(run.to_json()) == run
    env = execute.kernel_env(run, tmp_path / "log.jsonl")
    assert {k: env[k] for k in ("QALIB_SEED_OFFSET", "QALIB_SCALE", "QALIB_WORKERS", "ATEN_CPU_CAPABILITY",
                                "OMP_NUM_THREADS", "QALIB_CLAIMS_KEEP_GOING", "QALIB_DEVICE")} == \
        {"QALIB_SEED_OFFSET": "300", "QALIB_SCALE": "4", "QALIB_WORKERS": "1", "ATEN_CPU_CAPABILITY": "avx2",
         "OMP_NUM_THREADS": "1", "QALIB_CLAIMS_KEEP_GOING": "1", "QALIB_DEVICE": "cpu"}
    assert env["PYTHONPATH"].split(":")[0] == str(execute.ROOT)


def test_the_default_kernel_unsets_a_forced_capability(tmp_path, monkeypatch):
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "avx2")
    env = execute.kernel_env(Run(tmp_path / "x.ipynb", 0, AVX512_T1, 1), tmp_path / "log.jsonl")
    assert "ATEN_CPU_CAPABILITY" not in env


# ---- resuming

def synthetic_notebook(path, *sources):
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(s) for s in sources]), path)
    return path


def test_a_rerun_skips_finished_runs_and_redoes_stale_or_broken_ones(tmp_path):
    nb = synthetic_notebook(tmp_path / "07_multi_head.ipynb", "x = 1")
    runs = [Run(nb, offset, AVX512_T1, 1) for offset in (0, 100, 200)]
    finished = {"notebook": nb.stem, "notebook_digest": plan.notebook_digest(nb), "claims": []}
    for run in runs[:2]:
        run.result_path(tmp_path).parent.mkdir(parents=True, exist_ok=True)
        run.result_path(tmp_path).write_text(json.dumps(finished))
    todo, done = plan.pending(runs, tmp_path)
    assert todo == runs[2:] and len(done) == 2
    runs[1].result_path(tmp_path).write_text('{"notebook": "07_mu')  # cut short by a crash: done again
    assert plan.pending(runs, tmp_path)[0] == runs[1:]
    synthetic_notebook(nb, "x = 2")  # the notebook changed: every result is of its old version
    assert plan.pending(runs, tmp_path)[0] == runs


# ---- one run in a real kernel

@pytest.mark.notebook
def test_a_run_records_every_claim_and_the_error_that_stopped_it(tmp_path):
    nb = synthetic_notebook(
        tmp_path / "99_synthetic.ipynb",
        "import qalib\nseeds = qalib.seeds(2)",
        "qalib.check(f'the seeds start at {seeds[0]}', seeds[0] == 0, seeds, margin=0.5 - seeds[0])\n"
        "qalib.identity('one is one', True, 1)",
        "qalib.check('runs after a failed claim', True, 1.0)",
        "raise ValueError('a bug in the notebook')",
        "qalib.check('never reached', True, 1.0)")
    run = Run(nb, 100, AVX512_T1, 1)
    out = execute.execute_run(run, tmp_path / "out", timeout=60)
    assert json.loads(run.result_path(tmp_path / "out").read_text()) == out
    assert not run.result_path(tmp_path / "out").with_suffix(".claims.jsonl").exists()
    assert [(c["claim"], c["holds"], c["margin"], c["cell"], c["order"]) for c in out["claims"]] == [
        ("the seeds start at 100", False, -99.5, 2, 0), ("one is one", True, None, 2, 1),
        ("runs after a failed claim", True, None, 3, 0)]
    assert out["status"] == "error" and out["error"]["type"] == "ValueError"
    assert "a bug in the notebook" in out["error"]["traceback"]
    assert out["env"]["QALIB_SEED_OFFSET"] == "100" and out["label"] == "o100·avx512-t1"
