import math

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from qalib.lab.data import N_SPECIAL  # noqa: E402
from qalib.nn.decoder import DecoderLM  # noqa: E402
from qalib.nn.generate import sampling_distribution  # noqa: E402
from qalib.tools.testing import finite_values  # noqa: E402
from qalib.lab import language_truth as lt  # noqa: E402
from qalib.topics.nb12_decoding import compute as dc  # noqa: E402


@pytest.fixture(scope="module")
def lang():
    return dc.decoding_language()


def test_the_truth_is_a_distribution_and_matches_the_sampler(lang):
    ids = lang.sample(4000, 10, torch.Generator().manual_seed(0))
    p = lt.true_next_probs(lang, ids)
    assert p.shape == (4000, 10, 32) and torch.allclose(p.sum(-1), torch.ones(4000, 10, dtype=torch.float64))
    assert (p[..., :N_SPECIAL] == 0).all()
    assert torch.isfinite(lt.true_logprobs(lang, ids, 1)).all()  # the sampler never draws an impossible token
    # empirical frequency of token 5 given the context equals the truth's probability, on average
    nxt = ids[:, 6]
    emp = (nxt[:, None] == torch.arange(32)).double().mean(0)
    assert torch.allclose(emp, p[:, 5].mean(0), atol=0.02)


def test_the_truth_by_hand(lang):
    ids = lang.sample(1, 6, torch.Generator().manual_seed(3))
    p = lt.true_next_probs(lang, ids)[0]
    succ = lang.successors[ids[0, 0] - N_SPECIAL] + N_SPECIAL
    assert torch.allclose(p[0, succ], torch.full((4,), 0.25, dtype=torch.float64))  # before the lag: successors only
    copy = lang.lag_map[ids[0, 1] - N_SPECIAL] + N_SPECIAL  # predicting token 5 copies token 1
    assert p[4, copy] >= 0.5


def test_special_ids_get_a_defined_truth(lang):
    ids = torch.tensor([[5, 6, 0, 7, 8, 9]])
    p = lt.true_next_probs(lang, ids)
    assert torch.allclose(p.sum(-1), torch.ones(1, 6, dtype=torch.float64))
    assert torch.isinf(lt.true_logprobs(lang, ids, 1)[0, 1])  # the special id itself is impossible
    with pytest.raises(ValueError, match="ids"):
        lt.true_next_probs(lang, torch.tensor([[5, 40]]))


def test_entropy_rate_lies_between_the_two_kinds_of_context(lang):
    h = lt.entropy_rate(lang, n=512, length=24)
    assert math.log(4) * 0.7 < h < math.log(4)  # ln 4 before the lag, 1.04-1.39 after it


def test_text_statistics():
    loop = torch.tensor([[5, 6, 5, 6, 5, 6, 5, 6]])
    assert lt.distinct_n(loop, 2) == pytest.approx(2 / 7)
    assert lt.distinct_n(torch.arange(5, 13)[None], 3) == 1.0
    ref = torch.randint(5, 32, (64, 20), generator=torch.Generator().manual_seed(0))
    assert lt.unigram_kl(ref, ref, 32) == pytest.approx(0.0, abs=1e-12)
    assert lt.unigram_kl(torch.full((4, 20), 5), ref, 32) > 1.0
    with pytest.raises(ValueError, match="n"):
        lt.distinct_n(loop, 9)


def test_attention_entries_count_one_row_with_the_cache_and_the_square_without():
    model = DecoderLM(dc.decoder_config()).eval()
    prompt = torch.full((1, 3), 5)
    cached = dc.attention_entries(model, prompt, 4, use_cache=True)
    uncached = dc.attention_entries(model, prompt, 4, use_cache=False)
    t = np.arange(3, 7)
    assert np.array_equal(cached[1:], 2 * 4 * t[1:]) and cached[0] == 2 * 4 * 9  # the prompt's forward is T x T
    assert np.array_equal(uncached, 2 * 4 * t ** 2)


def test_cache_bytes_formula_matches_the_tensors():
    for kv in (None, 2, 1):
        cfg = dc.decoder_config(n_kv_heads=kv)
        cache = DecoderLM(cfg)(torch.full((3, 7), 5), use_cache=True).cache
        assert cache.nbytes == dc.cache_bytes_formula(cfg, 7, 3, 4)


def test_fit_exponent():
    x = np.array([16, 32, 64, 128])
    assert dc.fit_exponent(x, 3 * x ** 2.0, robust=True) == pytest.approx(2.0)
    with pytest.raises(ValueError):
        dc.fit_exponent([1], [1])


def test_sampling_view_matches_generate_and_reports_cut_tokens(lang):
    torch.manual_seed(0)
    logits = torch.randn(32)
    truth = lt.true_next_probs(lang, torch.tensor([[5, 6, 7, 8, 9]]))[0, -1]
    r = dc.sampling_view(logits, truth, 0.7, 5, 0.9)
    assert np.allclose(r["probs"], sampling_distribution(logits, 0.7, 5, 0.9)[N_SPECIAL:].double().numpy())
    assert r["kept"] <= 5
    greedy = dc.sampling_view(logits, truth, 1.0, 1, 1.0)
    assert greedy["kept"] == 1 and greedy["kl_truth"] is None and "note" in greedy
    full = dc.sampling_view(truth.log().float(), truth, 1.0, 27, 1.0)  # the truth's own logits: KL 0
    assert full["kl_truth"] == pytest.approx(0.0, abs=1e-6)
    with pytest.raises(ValueError, match="temperature"):
        dc.sampling_view(logits, truth, 0.0)
    with pytest.raises(ValueError, match="top_p"):
        dc.sampling_view(logits, truth, 1.0, 5, 0.0)


def test_attention_view_is_zero_above_the_diagonal_with_the_mask():
    torch.manual_seed(0)
    models = {True: DecoderLM(dc.decoder_config()).eval(), False: DecoderLM(dc.decoder_config(causal=False)).eval()}
    ids = torch.randint(5, 32, (1, 10), generator=torch.Generator().manual_seed(0))
    masked, open_ = dc.attention_view(models, ids, True, 1, 3), dc.attention_view(models, ids, False, 0, 0)
    assert masked["future"].max() == 0.0 and open_["future"][:-1].min() > 0
    assert np.allclose(masked["probs"].sum(1), 1) and finite_values(open_)
    fig = plt.figure()
    update = dc.plot_attention_view(fig, masked)
    assert update(open_) is None
    plt.close(fig)
    with pytest.raises(ValueError, match="head"):
        dc.attention_view(models, ids, True, 0, 4)


def test_future_attention_is_zero_under_the_mask():
    model = DecoderLM(dc.decoder_config()).eval()
    assert dc.future_attention(model, torch.full((2, 6), 5)).max() == 0.0


def test_truth_greedy_follows_the_argmax_and_paired_interval_brackets_the_mean():
    from qalib.lab.stats import paired_interval
    from qalib.lab.language_truth import true_logprobs, truth_greedy
    from qalib.topics.nb12_decoding.compute import decoding_language
    lang = decoding_language()
    prompt = lang.sample(8, 8, torch.Generator().manual_seed(0))
    ids = truth_greedy(lang, prompt, 6)
    assert ids.shape == (8, 14) and torch.equal(ids[:, :8], prompt)
    assert torch.isfinite(true_logprobs(lang, ids, 8)).all()   # the argmax is always a possible token
    r = paired_interval([1.0, 2.0, 3.0], [0.5, 1.0, 2.5])
    assert r["low"] < r["mean"] < r["high"] and abs(r["mean"] - 2 / 3) < 1e-12
    with pytest.raises(ValueError):
        paired_interval([1.0], [0.0])


def test_a_planted_error_is_impossible_and_changes_nothing_before_it():
    from qalib.lab.language_truth import true_next_probs
    from qalib.nn.decoder import DecoderLM
    from qalib.topics.nb12_decoding.compute import decoder_config, decoding_language, planted_error

    lang = decoding_language()
    text = lang.sample(16, 24, torch.Generator().manual_seed(0))
    torch.manual_seed(0)
    model = DecoderLM(decoder_config()).eval()
    r = planted_error(lang, model, text, 8, torch.Generator().manual_seed(1))
    assert r["edited"].shape == r["clean"].shape == (24 - 1 - 8,) and r["near"].shape == r["forgotten"].shape == (16,)
    assert np.isfinite(r["edited"]).all() and (r["edited"] >= 0).all()
    with pytest.raises(ValueError, match="position"):
        planted_error(lang, model, text, 24, torch.Generator().manual_seed(1))


def test_the_kv_reference_unit_and_its_baseline():
    from qalib.lab.reference import load
    from qalib.topics.nb12_decoding import experiment as E

    lang = E.decoding_language()
    ids = lang.sample(64, E.SEQ_LEN, torch.Generator().manual_seed(0))
    u = E.unigram_loss(lang, ids)
    assert 0 < u <= np.log(27) + 1e-9  # a context-free guess: at most the uniform one over the 27 tokens
    out = E.reference_seed(0, steps=2)
    assert set(out) == {"H", "unigram", *E.VARIANTS} and all(out[v]["loss"] > 0 for v in E.VARIANTS)
    ex = E.reference_excess(load("12_decoding", "kv_heads"))
    assert set(ex) == {"live", "4x", "16x", "d_head 16"} and ex["16x"]["MQA, 1 kv head"].shape == (8,)
