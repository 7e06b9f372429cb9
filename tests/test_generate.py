"""Generation: the sampling filters (unit and property tests), the strategies, reproducibility, and named errors."""

import itertools
import math

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import count_case
from qalib.nn.config import DecoderConfig
from qalib.nn.decoder import DecoderLM, EncoderDecoder
from qalib.nn.generate import generate, sampling_distribution, top_k_filter, top_p_filter
from test_decoder import randomise

SMALL = DecoderConfig(vocab_size=24, d_model=32, n_layers=2, n_heads=4, d_ff=64, max_len=32)
SETTINGS = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.fixture(scope="module")
def model():
    # next-token entropy about 1.9 nats of log(24) = 3.2: peaked enough that the strategies differ, spread enough
    # that sampling varies (the init's std 0.02 gives a near-uniform distribution)
    return randomise(DecoderLM(SMALL))


def _prompt(b=3, t=4, seed=0):
    return torch.randint(0, SMALL.vocab_size, (b, t), generator=torch.Generator().manual_seed(seed))


# ---------------------------------------------------------------------------------------------
# The filters
# ---------------------------------------------------------------------------------------------
def test_top_k_keeps_the_k_largest_and_ties_with_the_kth():
    logits = torch.tensor([[3.0, 1.0, 2.0, 0.0], [1.0, 2.0, 2.0, 0.0]])
    kept = top_k_filter(logits, 2).isfinite()
    assert kept.tolist() == [[True, False, True, False], [False, True, True, False]]
    assert top_k_filter(logits, 1).isfinite().tolist() == [[True, False, False, False], [False, True, True, False]]
    assert torch.equal(top_k_filter(logits, 4), logits)


def test_top_p_keeps_the_smallest_set_reaching_p():
    logits = torch.tensor([0.5, 0.3, 0.15, 0.05]).log()
    for p, n_kept in ((0.3, 1), (0.5, 1), (0.75, 2), (0.85, 3), (0.99, 4), (1.0, 4)):
        kept = top_p_filter(logits, p).isfinite()
        assert kept.tolist() == [True] * n_kept + [False] * (4 - n_kept), p
    shuffled = logits[[2, 0, 3, 1]]  # vocabulary order is kept: the same tokens survive wherever they sit
    assert top_p_filter(shuffled, 0.75).isfinite().tolist() == [False, True, False, True]


def test_temperature_sharpens_and_flattens():
    logits = torch.tensor([2.0, 1.0, 0.0])
    torch.testing.assert_close(sampling_distribution(logits, 1.0), logits.softmax(-1))
    assert sampling_distribution(logits, 0.05)[0] > 0.999  # T -> 0: greedy
    assert sampling_distribution(logits, 100.0).max() - sampling_distribution(logits, 100.0).min() < 0.01  # T -> inf


_logits = st.integers(1, 40).flatmap(lambda n: st.lists(st.floats(-30, 30), min_size=n, max_size=n))


def _is_distribution(probs):
    return bool(torch.isfinite(probs).all() and (probs >= 0).all() and abs(float(probs.sum()) - 1) < 1e-5)


@SETTINGS
@given(values=_logits, k_frac=st.floats(0, 1))
def test_top_k_property_a_distribution_with_the_most_likely_token(values, k_frac):
    count_case("sampling filters")
    logits = torch.tensor(values, dtype=torch.float64)
    k = 1 + int(k_frac * (len(values) - 1))
    filtered = top_k_filter(logits, k)
    kept = filtered.isfinite()
    assert _is_distribution(filtered.softmax(-1))
    assert kept[logits.argmax()]
    assert kept.sum() >= k and torch.equal(filtered[kept], logits[kept])  # survivors keep their logits
    if (~kept).any():
        assert logits[kept].min() > logits[~kept].max()  # everything kept beats everything removed


@SETTINGS
@given(values=_logits, p=st.floats(1e-6, 1.0))
def test_top_p_property_a_distribution_with_the_most_likely_token(values, p):
    count_case("sampling filters")
    logits = torch.tensor(values, dtype=torch.float64)
    filtered = top_p_filter(logits, p)
    kept = filtered.isfinite()
    assert _is_distribution(filtered.softmax(-1))
    assert kept[logits.argmax()]
    probs = logits.softmax(-1)
    mass = float(probs[kept].sum())
    assert mass >= p - 1e-9  # the set reaches p ...
    assert mass - float(probs[kept].min()) < p + 1e-9  # ... and is the smallest that does
    if (~kept).any():
        assert logits[kept].min() >= logits[~kept].max()


@SETTINGS
@given(values=_logits, temperature=st.floats(0.05, 20), k_frac=st.floats(0, 1), p=st.floats(1e-3, 1.0))
def test_sampling_distribution_property(values, temperature, k_frac, p):
    count_case("sampling filters")
    logits = torch.tensor(values)
    probs = sampling_distribution(logits, temperature, 1 + int(k_frac * (len(values) - 1)), p)
    assert _is_distribution(probs) and probs[logits.argmax()] == probs.max()


# ---------------------------------------------------------------------------------------------
# The strategies
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("strategy,kwargs", [("greedy", {}), ("sample", {"temperature": 0.7, "top_k": 8, "top_p": 0.9}),
                                             ("beam", {"num_beams": 3})])
def test_cache_changes_the_time_not_the_tokens(model, strategy, kwargs):
    prompt = _prompt()
    cached = generate(model, prompt, 12, strategy=strategy, seed=5, **kwargs)
    assert cached.shape == (3, 16) and torch.equal(cached[:, :4], prompt)
    assert torch.equal(cached, generate(model, prompt, 12, strategy=strategy, seed=5, use_cache=False, **kwargs))


def test_a_seed_reproduces_sampling_and_another_seed_differs(model):
    prompt = _prompt()
    runs = [generate(model, prompt, 15, strategy="sample", seed=s) for s in (1, 1, 2)]
    assert torch.equal(runs[0], runs[1]) and not torch.equal(runs[0], runs[2])


def test_top_k_of_one_is_greedy(model):
    prompt = _prompt()
    assert torch.equal(generate(model, prompt, 10, strategy="sample", top_k=1, seed=0), generate(model, prompt, 10))


def test_samples_follow_the_sampling_distribution(model):
    """4000 one-token continuations of one prompt: the token frequencies match the probabilities."""
    prompt = _prompt(1, 4).expand(4000, 4)
    draws = generate(model, prompt, 1, strategy="sample", temperature=2.0, top_p=0.95, seed=0)[:, -1]
    with torch.no_grad():
        probs = sampling_distribution(model(prompt[:1]).logits[0, -1], 2.0, None, 0.95)
    freq = torch.bincount(draws, minlength=SMALL.vocab_size).double() / 4000
    assert (freq[probs == 0] == 0).all()  # nothing outside the nucleus
    assert (freq - probs).abs().max() < 4 * math.sqrt(0.25 / 4000)  # 4 standard errors at worst


def test_beam_search_with_every_token_as_a_beam_finds_the_best_two_token_continuation(model):
    prompt = _prompt(2, 3)
    best = generate(model, prompt, 2, strategy="beam", num_beams=SMALL.vocab_size)
    with torch.no_grad():  # exhaustive: every pair (a, b) of next tokens
        pairs = torch.tensor(list(itertools.product(range(SMALL.vocab_size), repeat=2)))  # (V^2, 2)
        for row in range(2):
            seqs = torch.cat([prompt[row].expand(len(pairs), 3), pairs], dim=1)
            logp = model(seqs).logits.log_softmax(-1)[:, 2:4].gather(-1, seqs[:, 3:, None]).squeeze(-1).sum(-1)
            assert torch.equal(best[row, 3:], pairs[logp.argmax()])


def test_beam_of_one_is_greedy_and_zero_new_tokens_is_the_prompt(model):
    prompt = _prompt()
    assert torch.equal(generate(model, prompt, 9, strategy="beam", num_beams=1), generate(model, prompt, 9))
    for strategy in ("greedy", "sample", "beam"):
        assert torch.equal(generate(model, prompt, 0, strategy=strategy), prompt)


def test_gqa_and_mqa_generate_the_same_with_and_without_cache():
    for n_kv in (1, 2):
        m = randomise(DecoderLM(SMALL.replace(n_kv_heads=n_kv)))
        assert torch.equal(generate(m, _prompt(), 10), generate(m, _prompt(), 10, use_cache=False))


def test_encoder_decoder_generates_from_its_source():
    ed = randomise(EncoderDecoder(SMALL))
    start, source = torch.zeros(4, 1, dtype=torch.long), _prompt(4, 6)
    for strategy, kwargs in (("greedy", {}), ("beam", {"num_beams": 3})):
        out = generate(ed, start, 8, strategy=strategy, source_ids=source, **kwargs)
        assert out.shape == (4, 9)
        assert torch.equal(out, generate(ed, start, 8, strategy=strategy, source_ids=source, use_cache=False, **kwargs))
    greedy, manual = generate(ed, start, 8, source_ids=source), start
    with torch.no_grad():  # the argmax of the teacher-forced logits, one token at a time
        for _ in range(8):
            manual = torch.cat([manual, ed(source, manual).logits[:, -1].argmax(-1, keepdim=True)], dim=1)
    assert torch.equal(greedy, manual)
    assert len({tuple(row) for row in greedy.tolist()}) > 1  # each row continues from its own source


def test_sinusoidal_positions_generate_past_max_len():
    m = DecoderLM(SMALL.replace(pos="sinusoidal", max_len=8)).eval()
    assert generate(m, _prompt(1, 4), 20).shape == (1, 24)


def test_bf16_autocast_generation(model):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = generate(model, _prompt(), 8, strategy="sample", top_p=0.9, seed=0)
    assert out.shape == (3, 12) and out.min() >= 0 and out.max() < SMALL.vocab_size


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_on_cuda_seeded_sampling_reproduces_and_greedy_matches_cpu():
    torch.manual_seed(0)
    m = DecoderLM(SMALL).eval()
    cpu = generate(m, _prompt(), 10)
    m.to("cuda")
    assert torch.equal(generate(m, _prompt(), 10).cpu(), cpu)
    runs = [generate(m, _prompt(), 10, strategy="sample", seed=3) for _ in range(2)]
    assert runs[0].device.type == "cuda" and torch.equal(*runs)


# ---------------------------------------------------------------------------------------------
# Bad input: a ValueError naming the argument
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "kwargs,needle",
    [({"strategy": "sample", "temperature": 0.0}, r"temperature must be a finite number > 0, got 0.0"),
     ({"strategy": "sample", "temperature": -1.0}, "temperature"),
     ({"strategy": "sample", "temperature": float("nan")}, "temperature"),
     ({"strategy": "sample", "top_p": 0.0}, r"top_p must be a finite number in \(0.0, 1.0\], got 0.0"),
     ({"strategy": "sample", "top_p": 1.5}, "top_p"),
     ({"strategy": "sample", "top_k": 0}, r"top_k must be an int in \[1, 24\], got 0"),
     ({"strategy": "sample", "top_k": 25}, "top_k"),
     ({"max_new_tokens": -1}, "max_new_tokens must be an int >= 0, got -1"),
     ({"max_new_tokens": 29}, r"prompt length 4 \+ max_new_tokens 29 = 33 exceeds max_len=32"),
     ({"prompt_ids": torch.zeros(2, 0, dtype=torch.long)}, "prompt_ids is empty"),
     ({"prompt_ids": torch.tensor([1, 2])}, r"prompt_ids must be a \(B, T\) long tensor"),
     ({"prompt_ids": torch.tensor([[1, 24]])}, r"prompt_ids must lie in \[0, vocab_size=24\)"),
     ({"strategy": "nucleus"}, "strategy must be one of"),
     ({"temperature": 0.5}, "strategy='greedy' does not sample"),
     ({"strategy": "beam", "top_k": 3}, "strategy='beam' does not sample"),
     ({"num_beams": 2}, "num_beams applies to strategy='beam'"),
     ({"strategy": "beam", "num_beams": 0}, "num_beams must be an int in"),
     ({"strategy": "sample", "seed": -1}, r"seed must be an int in \[0, 4294967295\], got -1"),
     ({"source_ids": torch.zeros(3, 2, dtype=torch.long)}, "source_ids is for an EncoderDecoder")],
)
def test_bad_arguments_are_named(model, kwargs, needle):
    args = {"prompt_ids": _prompt(), "max_new_tokens": 5, **kwargs}
    with pytest.raises(ValueError, match=needle):
        generate(model, args.pop("prompt_ids"), args.pop("max_new_tokens"), **args)


def test_bad_models_and_sources_are_named():
    with pytest.raises(TypeError, match="DecoderLM or EncoderDecoder"):
        generate(torch.nn.Linear(2, 2), _prompt(), 3)
    with pytest.raises(ValueError, match="use_cache=True needs a causal model"):
        generate(DecoderLM(SMALL.replace(causal=False)), _prompt(), 3)
    assert generate(DecoderLM(SMALL.replace(causal=False)).eval(), _prompt(), 3, use_cache=False).shape == (3, 7)
    ed = EncoderDecoder(SMALL)
    with pytest.raises(ValueError, match="pass source_ids"):
        generate(ed, _prompt(), 3)
    with pytest.raises(ValueError, match="one source per prompt"):
        generate(ed, _prompt(3), 3, source_ids=_prompt(2))
