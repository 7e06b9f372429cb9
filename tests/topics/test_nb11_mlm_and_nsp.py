"""Notebook 11 (masked-LM and NSP): closed forms, sampled masking shares, pairs, segment effects, the experiment, demos."""

import math

import matplotlib
import numpy as np
import pytest

from qalib.lab.stats import binomial_tolerance
import torch

matplotlib.use("Agg")

from qalib.lab.data import CLS, SEP, SyntheticLanguage  # noqa: E402
from qalib.nn.model import MiniBert  # noqa: E402
from qalib.tools.testing import finite_values  # noqa: E402
from qalib.topics.nb11_mlm_and_nsp import compute as pt  # noqa: E402
from qalib.topics.nb11_mlm_and_nsp import experiment as ex  # noqa: E402
from qalib.topics.nb11_mlm_and_nsp import demos as demos  # noqa: E402


# -- the masking rule ---------------------------------------------------------------------------
def test_expected_fractions_closed_form():
    e = pt.expected_fractions(0.15, 0.8, 0.1)
    assert e["mask"] == pytest.approx(0.12) and e["random"] == pytest.approx(0.015) and e["keep"] == pytest.approx(0.015)
    assert e["mask"] + e["random"] + e["keep"] == pytest.approx(e["predicted"])
    e27 = pt.expected_fractions(0.15, 0.8, 0.1, n_random_choices=27)
    assert e27["keep"] == pytest.approx(0.015 + 0.015 / 27) and e27["random"] == pytest.approx(0.015 * 26 / 27)
    assert pt.expected_fractions(0.5, 1.0, 0.0)["mask"] == 0.5


def test_expected_fractions_bad_input():
    with pytest.raises(ValueError, match="mlm_prob"):
        pt.expected_fractions(1.5)
    with pytest.raises(ValueError, match="mask_frac \\+ random_frac"):
        pt.expected_fractions(0.15, 0.8, 0.3)
    with pytest.raises(ValueError, match="n_random_choices"):
        pt.expected_fractions(0.15, 0.8, 0.1, n_random_choices=0)


def test_binomial_tolerance():
    assert binomial_tolerance(0.5, 100, z=1) == pytest.approx(0.05)
    with pytest.raises(ValueError, match="n must"):
        binomial_tolerance(0.5, 0)


def test_sampled_fractions_match_closed_form():
    r = pt.sampled_fractions(n_tokens=50_000, vocab_size=12, seed=3)
    for k, m in r["measured"].items():
        assert abs(m - r["expected"][k]) <= r["tolerance"][k]
    assert r["expected"]["keep"] == pytest.approx(0.015 + 0.015 / 7)   # 7 content tokens
    assert sum(r["of_chosen"].values()) == pytest.approx(1.0)
    r1 = pt.sampled_fractions(n_tokens=1000, mlm_prob=1.0, mask_frac=1.0, random_frac=0.0)
    assert r1["measured"]["mask"] == 1.0
    with pytest.raises(ValueError, match="vocab_size"):
        pt.sampled_fractions(vocab_size=5)


def test_visible_token_trust():
    t = pt.visible_token_trust()
    assert t["wrong"] == pytest.approx(0.015 / 0.88) and t["visible"] == pytest.approx(0.88)
    assert pt.visible_token_trust(0.15, 1.0, 0.0)["wrong"] == 0
    assert "note" in pt.visible_token_trust(1.0, 1.0, 0.0)


# -- the real tokenizer -------------------------------------------------------------------------
def test_mask_wordpiece_never_touches_specials_and_uses_real_mask_id():
    tok = pt.cached_tokenizer()
    ids = torch.tensor(tok.encode("a b c d e f g h").ids)[None].expand(500, -1)
    corrupted, labels = pt.mask_wordpiece(ids, tok, torch.Generator().manual_seed(0), 0.5, 1.0, 0.0)
    assert (corrupted[:, 0] == tok.cls_id).all() and (corrupted[:, -1] == tok.sep_id).all()
    assert ((corrupted == tok.mask_id) == (labels != -100)).all() and not (corrupted == 4).any()


def test_mask_sentence_shares_and_messages():
    r = pt.mask_sentence("The quick brown fox jumps over the lazy dog.", seed=1, n_redraws=4000)
    assert r["tokens"][0] == "[CLS]" and len(r["shown"]) == len(r["tokens"]) == len(r["kind"])
    n = r["n_maskable"] * r["n_redraws"]
    for k in ("mask", "random", "keep", "predicted"):
        assert abs(r["redraw_fraction"][k] - r["expected"][k]) <= binomial_tolerance(r["expected"][k], n)
    for orig, shown, kind in zip(r["tokens"], r["shown"], r["kind"]):
        assert (shown == "[MASK]") == (kind == "mask") and (kind != "-" or shown == orig)
    assert "none of" in pt.mask_sentence("hello", mlm_prob=0.0)["note"]
    with pytest.raises(ValueError, match="text"):
        pt.mask_sentence("   ")
    with pytest.raises(ValueError, match="seed"):
        pt.mask_sentence("hi", seed=-1)
    long = pt.mask_sentence("the cat sat on the mat " * 40, n_redraws=10)
    assert len(long["tokens"]) == len(long["shown"]) == 128 and long["tokens"][-1] == "[SEP]"  # BERT keeps [SEP]


def test_split_word_leak():
    r = pt.split_word_leak("strawberries and cream", n_draws=2000)
    assert r["pieces"][1:3] == ["straw", "##berries"] and r["n_split_pieces"] == 2
    # two pieces chosen independently with p = 0.15: the sibling is visible with probability 0.85
    assert abs(r["leak"] - 0.85) < 4 * (0.85 * 0.15 / r["n_split_chosen"]) ** 0.5
    assert pt.split_word_leak("cat", n_draws=10)["n_split_pieces"] == 0
    with pytest.raises(ValueError, match="text"):
        pt.split_word_leak("")


# -- NSP pairs ----------------------------------------------------------------------------------
def test_pair_stats_layout_and_shortcut():
    lang = SyntheticLanguage(20, 2, 4, 0.0, seed=0)
    r = pt.pair_stats(lang, half_len=6, n=3000)
    assert r["types_ok"] and abs(r["label_rate"] - 0.5) <= binomial_tolerance(0.5, 3000)
    assert r["allowed_if_next"] == 1.0 and r["allowed_if_random"] < 0.5
    # the rule is right on every true pair and on the random pairs it rejects
    assert r["rule_accuracy"] == pytest.approx(r["label_rate"] + (1 - r["label_rate"]) * (1 - r["allowed_if_random"]), abs=1e-9)
    assert r["example"][0] == CLS and r["example"][7] == SEP
    with pytest.raises(ValueError, match="half_len"):
        pt.pair_stats(lang, half_len=0)


# -- segment ids in the real model --------------------------------------------------------------
def test_segment_effect(minilm):
    model, tok = minilm
    enc = tok("The cat sat.", "It slept.")
    z = pt.segment_effect(model, enc, "zero")
    n_b = int(enc["token_type_ids"].sum())
    assert z["changed"].sum() == n_b and z["rel_change"].shape == (7, enc["input_ids"].shape[1])
    assert z["mean_unchanged"][0] == 0 and z["mean_changed"][0] > 0.05      # the embedding of A is untouched
    assert z["mean_unchanged"][-1] > 0                                       # ... but attention carries the change
    s = pt.segment_effect(model, enc, "swap")
    assert s["changed"].all() and np.isnan(s["mean_unchanged"]).sum() == 0
    same = pt.segment_effect(model, tok("Only one sentence."), "zero")
    assert (same["rel_change"] == 0).all()
    with pytest.raises(ValueError, match="mode"):
        pt.segment_effect(model, enc, "random")
    assert "nothing changes" in pt.segment_view("One sentence.", "", "zero", 3)["note"]
    with pytest.raises(ValueError, match="layer"):
        pt.segment_view(layer=9)


def test_segment_view_of_a_pair_longer_than_its_128_word_pieces():
    r = pt.segment_view("the cat sat " * 40, "on the mat " * 40, "swap", 3)
    assert len(r["tokens"]) == r["rel_change"].shape[1] == 128
    assert r["tokens"][0] == "[CLS]" and r["tokens"].count("[SEP]") == 2 and r["tokens"][-1] == "[SEP]"


# -- the experiment -----------------------------------------------------------------------------
def test_bayes_accuracy_and_transition_matrix():
    lang = ex.experiment_language()
    A = ex.transition_matrix(lang)
    assert torch.allclose(A.sum(1), torch.ones(lang.n_content, dtype=torch.float64))
    acc = ex.bayes_mlm_accuracy(lang, n=500)
    assert 1 / lang.branching < acc <= 1.0       # both neighbours beat the left one alone
    with pytest.raises(ValueError, match="p_lag"):
        ex.bayes_mlm_accuracy(SyntheticLanguage(20, 2, 4, 0.5))


def test_probe_unmasked_untrained_model_is_near_chance():
    lang = ex.experiment_language()
    torch.manual_seed(0)
    r = ex.probe_unmasked(MiniBert(ex.experiment_config(16)), lang, n=64)
    assert set(r) >= {"own_token", "masked_acc", "repair_acc", "probe_own", "probe_previous", "probe_next"}
    assert r["masked_acc"] < 0.3 and 0 <= r["p_own"] <= 1


def test_run_experiment_tiny():
    r = ex.run_experiment(seeds=(0,), steps=4, d_model=16, batch_size=8, n_probe=32)
    assert r["variants"] == ["100/0/0", "80/10/10"] and r["curves"]["80/10/10"].shape == (1, len(r["log_steps"]))
    assert finite_values(r["metrics"]) and 0 < r["chance"] < r["bayes"] <= 1
    with pytest.raises(ValueError, match="variants"):
        ex.run_experiment(variants=("50/50/0",))
    with pytest.raises(ValueError, match="steps"):
        ex.run_experiment(steps=0)


# -- demos --------------------------------------------------------------------------------------


def test_masking_demo_rejects_impossible_shares():
    demo = demos.masking_demo()
    demo.set(mask_frac=0.9, random_frac=0.5)
    assert demo.error and "mask_frac + random_frac" in demo.error
    demo.set(random_frac=0.1)
    assert demo.error is None and math.isclose(demo.result["expected"]["mask"], 0.15 * 0.9)


def test_word_pieces_the_font_cannot_draw_are_escaped():
    assert pt._drawable("élan##s") == "élan##s"
    assert pt._drawable("川") == "\\u5ddd"  # CJK: not in DejaVu Sans Mono, shown as an escape, not a box


def test_the_one_neighbour_level_and_the_gate():
    from qalib.topics.nb11_mlm_and_nsp.experiment import experiment_language, mlm_gate, one_neighbour_accuracy
    lang = experiment_language()
    assert one_neighbour_accuracy(lang) == pytest.approx(0.5)  # two successors, equally likely, all distinct
    assert mlm_gate(0.61, lang).passed and not mlm_gate(0.59, lang).passed


def test_one_reference_seed_of_the_masking_rules_and_its_summary():
    from qalib.lab.reference import Reference, RungResult
    from qalib.topics.nb11_mlm_and_nsp.experiment import VARIANTS, reference_seed, summarize_reference
    runs = [reference_seed(seed, steps=4, lr=3e-3) for seed in (0, 1)]
    assert set(runs[0]) == {"untrained", *VARIANTS} and len(runs[0]["80/10/10"]["loss"]) >= 2
    ref = Reference("11_mlm_and_nsp", "masking", {}, {"live": RungResult("live", {"steps": 4, "lr": 3e-3}, [0, 1], runs)}, {})
    (rung,) = summarize_reference(ref)
    assert rung.values("untrained", "probe_own").shape == (2,) and not rung.learned().any()
    d = rung.paired("masked_acc", only_learned=False)
    assert d.n == 2 and d.low <= d.mean <= d.high
