"""The decoders equal their references (GPT-2, torch.nn.Transformer), the cache equals no cache, and bad input is named."""

from typing import get_args

import pytest
import torch
from torch import nn

from qalib.nn.config import DecoderConfig, DecoderPositions
from qalib.nn.decoder import DecoderLM, EncoderDecoder
from qalib.nn.kv_cache import KVCache, LayerKV
from qalib.nn.positions import ABSOLUTE_POSITIONS

SMALL = DecoderConfig(vocab_size=48, d_model=32, n_layers=2, n_heads=4, d_ff=64, max_len=32)
VASWANI = SMALL.replace(norm_placement="post", activation="relu", pos="sinusoidal", embed_scale="sqrt_d",
                        final_norm=False)


def randomise(model: nn.Module, seed: int = 0) -> nn.Module:
    """Weights well away from the init (norm gains and biases too), so that a wrong wiring shows in the logits."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=g) * 0.3
            p.copy_(1 + noise if name.endswith("norm.weight") else noise)
    return model.eval()


def _ids(b, t, seed=0, vocab=48):
    return torch.randint(0, vocab, (b, t), generator=torch.Generator().manual_seed(seed))


def _step_by_step(model, ids, prefix, memory=None):
    """Logits of every position, computed one new token at a time after a prefill of `prefix` tokens."""
    run = model if memory is None else (lambda x, cache=None, **kw: model.decode(x, memory if cache is None else None,
                                                                                   cache, **kw))
    out = run(ids[:, :prefix], use_cache=True)
    logits, cache = [out.logits], out.cache
    for t in range(prefix, ids.shape[1]):
        out = run(ids[:, t:t + 1], cache=cache, use_cache=True)
        logits.append(out.logits)
        cache = out.cache
    return torch.cat(logits, dim=1), cache


def test_decoder_positions_are_the_absolute_schemes():
    assert set(get_args(DecoderPositions)) == set(ABSOLUTE_POSITIONS)


# ---------------------------------------------------------------------------------------------
# Reference 1: transformers.GPT2LMHeadModel with the same weights
# ---------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def gpt2_pair():
    from qalib.nn.gpt2 import to_gpt2

    torch.manual_seed(0)
    ours = randomise(DecoderLM(SMALL))
    return ours, to_gpt2(ours).eval()


def test_logits_and_every_cached_key_and_value_equal_gpt2(gpt2_pair):
    ours, hf = gpt2_pair
    ids = _ids(3, 11)
    with torch.no_grad():
        mine = ours(ids[:, :7], use_cache=True)
        theirs = hf(ids[:, :7], use_cache=True)
        mine_step = ours(ids[:, 7:], cache=mine.cache, use_cache=True)     # 4 more positions through the cache
        theirs_step = hf(ids[:, 7:], cache=theirs.cache, use_cache=True)
    assert mine.logits.abs().max() > 1, "the logits must be large enough for atol 1e-5 to mean something"
    torch.testing.assert_close(mine.logits, theirs.logits, atol=1e-5, rtol=0)
    torch.testing.assert_close(mine_step.logits, theirs_step.logits, atol=1e-5, rtol=0)
    hf_cache = theirs_step.cache  # a DynamicCache (transformers 5)
    for i, kv in enumerate(mine_step.cache.layers):
        assert kv.k.shape == (3, 4, 11, 8)
        torch.testing.assert_close(kv.k, hf_cache.layers[i].keys, atol=1e-5, rtol=0)
        torch.testing.assert_close(kv.v, hf_cache.layers[i].values, atol=1e-5, rtol=0)


@pytest.mark.parametrize("strategy,num_beams", [("greedy", 1), ("beam", 3)])
def test_generation_with_cache_equals_gpt2_generate(gpt2_pair, strategy, num_beams):
    from qalib.nn.generate import generate

    ours, hf = gpt2_pair
    prompt = _ids(4, 5, seed=1)
    mine = generate(ours, prompt, 20, strategy=strategy, num_beams=num_beams)
    theirs = hf.generate(prompt, max_new_tokens=20, do_sample=False, num_beams=num_beams, use_cache=True)
    assert torch.equal(mine, theirs)


def test_gpt2_config_names_what_gpt2_cannot_express():
    from qalib.nn.gpt2 import gpt2_config

    with pytest.raises(ValueError, match="norm_placement.*'post'"):
        gpt2_config(SMALL.replace(norm_placement="post"))
    with pytest.raises(ValueError, match="n_kv_heads"):
        gpt2_config(SMALL.replace(n_kv_heads=2))


# ---------------------------------------------------------------------------------------------
# Reference 2: torch.nn.Transformer with the same weights, both norm placements
# ---------------------------------------------------------------------------------------------
def _copy_attention(ours, theirs: nn.MultiheadAttention):
    theirs.in_proj_weight.copy_(ours.qkv.weight)  # both [W_q | W_k | W_v], heads contiguous
    theirs.in_proj_bias.copy_(ours.qkv.bias)
    theirs.out_proj.load_state_dict(ours.output.state_dict())


def _copy_ffn_and_norms(ours_layer, theirs_layer, norms):
    theirs_layer.linear1.load_state_dict(ours_layer.ffn.intermediate.state_dict())
    theirs_layer.linear2.load_state_dict(ours_layer.ffn.output.state_dict())
    for ours_name, theirs_name in norms.items():
        getattr(theirs_layer, theirs_name).load_state_dict(getattr(ours_layer, ours_name).state_dict())


def _torch_transformer(model: EncoderDecoder) -> nn.Transformer:
    cfg = model.cfg
    ref = nn.Transformer(d_model=cfg.d_model, nhead=cfg.n_heads, num_encoder_layers=cfg.n_layers,
                         num_decoder_layers=cfg.n_layers, dim_feedforward=cfg.d_ff, dropout=0.0, activation="relu",
                         layer_norm_eps=cfg.layer_norm_eps, batch_first=True, norm_first=cfg.norm_placement == "pre")
    with torch.no_grad():
        for ours, theirs in zip(model.encoder, ref.encoder.layers):
            _copy_attention(ours.attention, theirs.self_attn)
            _copy_ffn_and_norms(ours, theirs, {"attention_norm": "norm1", "ffn_norm": "norm2"})
        for ours, theirs in zip(model.decoder.layers, ref.decoder.layers):
            _copy_attention(ours.attention, theirs.self_attn)
            _copy_attention(ours.cross_attention, theirs.multihead_attn)
            _copy_ffn_and_norms(ours, theirs, {"attention_norm": "norm1", "cross_attention_norm": "norm2",
                                               "ffn_norm": "norm3"})
        ref.encoder.norm.load_state_dict(model.encoder_norm.state_dict())
        ref.decoder.norm.load_state_dict(model.decoder.final_norm.state_dict())
    return ref.eval()


@pytest.mark.filterwarnings("ignore:enable_nested_tensor is True")
@pytest.mark.parametrize("placement", ["post", "pre"])
def test_encoder_decoder_equals_torch_transformer(placement):
    # torch.nn.Transformer ends both stacks with a LayerNorm in either placement: final_norm=True says the same
    cfg = VASWANI.replace(norm_placement=placement, final_norm=True)
    torch.manual_seed(0)
    model = randomise(EncoderDecoder(cfg))
    ref = _torch_transformer(model)
    src, tgt = _ids(3, 9, seed=2), _ids(3, 7, seed=3)
    with torch.no_grad():
        src_x, tgt_x = model.embeddings(src), model.embeddings(tgt)  # the same embeddings go into both
        causal = nn.Transformer.generate_square_subsequent_mask(7)
        memory = ref.encoder(src_x)
        hidden = ref.decoder(tgt_x, memory, tgt_mask=causal, tgt_is_causal=True)
        ours = model(src, tgt)
    torch.testing.assert_close(model.encode(src), memory, atol=1e-5, rtol=0)
    torch.testing.assert_close(ours.logits, model.logits(hidden), atol=1e-5, rtol=0)


# ---------------------------------------------------------------------------------------------
# The cache: equal to no cache at every step; its shapes, bytes and checks
# ---------------------------------------------------------------------------------------------
CACHE_CASES = {
    "gpt2": {},
    "gqa": {"n_kv_heads": 2},
    "mqa": {"n_kv_heads": 1},
    "vaswani post-norm": dict(VASWANI.__dict__),
    "untied rms": {"tie_embeddings": False, "norm": "rms"},
    "no positions, no residual": {"pos": "none", "residual": False},
}


@pytest.mark.parametrize("case", CACHE_CASES)
def test_cached_logits_equal_uncached_at_every_step(case):
    torch.manual_seed(0)
    model = randomise(DecoderLM(SMALL.replace(**CACHE_CASES[case])))
    ids = _ids(2, 14, seed=4)
    with torch.no_grad():
        full = model(ids).logits
        stepped, cache = _step_by_step(model, ids, prefix=3)
        manual, _ = _step_by_step(lambda x, **kw: model(x, return_internals=True, **kw), ids, prefix=3)
    torch.testing.assert_close(stepped, full, atol=1e-5, rtol=0)
    torch.testing.assert_close(manual, full, atol=1e-5, rtol=0)  # the unfused attention path, with the cache
    assert cache.length == 14


def test_encoder_decoder_cached_equals_uncached():
    torch.manual_seed(0)
    model = randomise(EncoderDecoder(VASWANI.replace(n_kv_heads=2)))
    src, tgt = _ids(2, 6, seed=5), _ids(2, 10, seed=6)
    with torch.no_grad():
        full = model(src, tgt).logits
        stepped, cache = _step_by_step(model, tgt, prefix=1, memory=model.encode(src))
    torch.testing.assert_close(stepped, full, atol=1e-5, rtol=0)
    assert len(cache.cross) == 2 and cache.cross[0].k.shape == (2, 2, 6, 8)  # (B, H_kv, S, d_head)


def test_gqa_with_as_many_kv_heads_as_heads_is_mha_exactly():
    ids = _ids(2, 9)
    outs = []
    for n_kv in (None, SMALL.n_heads):
        torch.manual_seed(0)
        model = DecoderLM(SMALL.replace(n_kv_heads=n_kv)).eval()
        outs.append((model(ids, use_cache=True), [p.detach() for p in model.parameters()]))
    (mha, mha_params), (gqa, gqa_params) = outs
    assert all(torch.equal(a, b) for a, b in zip(mha_params, gqa_params))
    assert torch.equal(mha.logits, gqa.logits)
    assert all(torch.equal(a.k, b.k) and torch.equal(a.v, b.v) for a, b in zip(mha.cache.layers, gqa.cache.layers))


def test_gqa_equals_mha_whose_heads_share_keys_and_values_in_groups():
    """Query heads 2j and 2j+1 read kv head j: an MHA model with those K/V heads duplicated computes the same."""
    torch.manual_seed(0)
    gqa = randomise(DecoderLM(SMALL.replace(n_kv_heads=2)))
    mha = DecoderLM(SMALL).eval()
    state = gqa.state_dict()
    d, dh = SMALL.d_model, SMALL.d_head
    for i in range(SMALL.n_layers):
        for kind in ("weight", "bias"):
            key = f"decoder.layers.{i}.attention.qkv.{kind}"
            q, k, v = state[key].split([d, 2 * dh, 2 * dh])
            repeat = lambda x: x.view(2, dh, *x.shape[1:]).repeat_interleave(2, dim=0).reshape(d, *x.shape[1:])  # noqa: E731
            state[key] = torch.cat([q, repeat(k), repeat(v)])
    mha.load_state_dict(state)
    ids = _ids(2, 9)
    with torch.no_grad():
        torch.testing.assert_close(gqa(ids).logits, mha(ids).logits, atol=1e-5, rtol=0)


@pytest.mark.parametrize("n_kv", [1, 2, 4])
def test_cache_shapes_and_bytes_follow_the_formula(n_kv):
    model = DecoderLM(SMALL.replace(n_kv_heads=n_kv)).eval()
    cache = model(_ids(3, 10), use_cache=True).cache
    assert all(kv.k.shape == kv.v.shape == (3, n_kv, 10, SMALL.d_head) for kv in cache.layers)
    # 2 (k and v) x layers x kv_heads x d_head x T x batch x bytes per element
    assert cache.nbytes == 2 * SMALL.n_layers * n_kv * SMALL.d_head * 10 * 3 * 4
    assert model.decoder.layers[0].attention.qkv.weight.shape == (SMALL.d_model + 2 * n_kv * SMALL.d_head, SMALL.d_model)


def test_a_cache_from_another_batch_or_model_is_named():
    model = DecoderLM(SMALL).eval()
    cache = model(_ids(2, 4), use_cache=True).cache
    with pytest.raises(ValueError, match="cache batch size 2 != input batch size 3"):
        model(_ids(3, 1), cache=cache)
    deeper = DecoderLM(SMALL.replace(n_layers=3)).eval()
    with pytest.raises(ValueError, match="cache has 2 layers but the model has n_layers=3"):
        deeper(_ids(2, 1), cache=cache)
    with pytest.raises(ValueError, match=r"\(kv_heads, d_head\) = \(4, 8\)"):
        DecoderLM(SMALL.replace(n_kv_heads=1))(_ids(2, 1), cache=cache)
    with pytest.raises(TypeError, match="KVCache"):
        model(_ids(2, 1), cache=[(kv.k, kv.v) for kv in cache.layers])
    with pytest.raises(ValueError, match="every layer's"):
        KVCache((cache.layers[0], LayerKV(cache.layers[1].k[:, :, :2], cache.layers[1].v[:, :, :2])))


def test_the_learned_table_ends_at_max_len_through_the_cache_too():
    model = DecoderLM(SMALL.replace(max_len=8)).eval()
    cache = model(_ids(1, 8), use_cache=True).cache
    with pytest.raises(ValueError, match="sequence length 9 exceeds max_len=8"):
        model(_ids(1, 1), cache=cache)


def test_encoder_decoder_needs_memory_or_cache_not_both():
    model = EncoderDecoder(VASWANI).eval()
    memory = model.encode(_ids(2, 5))
    out = model.decode(_ids(2, 3), memory, use_cache=True)
    with pytest.raises(ValueError, match="pass memory"):
        model.decode(_ids(2, 1), memory, cache=out.cache)
    with pytest.raises(ValueError, match="pass memory"):
        model.decode(_ids(2, 1))
    with pytest.raises(ValueError, match="memory must be"):
        model.decode(_ids(3, 1), memory)
    with pytest.raises(ValueError, match="cross"):
        DecoderLM(VASWANI)(_ids(2, 1), cache=out.cache)


# ---------------------------------------------------------------------------------------------
# The model: causal mask, internals, tied head, config checks, training
# ---------------------------------------------------------------------------------------------
def test_causal_decoder_never_sees_the_future_and_the_ablation_does():
    ids = _ids(2, 10)
    later = ids.clone()
    later[:, 6:] = (later[:, 6:] + 1) % 48
    for causal in (True, False):
        torch.manual_seed(0)
        model = randomise(DecoderLM(SMALL.replace(causal=causal)))
        with torch.no_grad():
            a, b = model(ids).logits, model(later).logits
        same_past = torch.allclose(a[:, :6], b[:, :6], atol=1e-6)
        assert same_past == causal


def test_internals_are_named_values():
    torch.manual_seed(0)
    model = DecoderLM(SMALL).eval()
    out = model(_ids(2, 6), use_cache=True, return_internals=True)
    probs = out.internals["layer0.probs"]
    assert probs.shape == (2, 4, 6, 6)
    assert (probs.triu(1) == 0).all() and torch.allclose(probs.sum(-1), torch.ones(2, 4, 6))
    assert out.internals["layer1.k"] is out.cache.layers[1].k  # the cache tensors are the internals'
    assert {"embeddings.word", "embeddings.position", "layer0.scores", "layer1.hidden", "final_norm.mean"} <= set(out.internals)

    ed = EncoderDecoder(VASWANI).eval()
    out = ed(_ids(2, 5), _ids(2, 6), return_internals=True)
    cross = out.internals["layer1.cross.probs"]
    assert cross.shape == (2, 4, 6, 5) and torch.allclose(cross.sum(-1), torch.ones(2, 4, 6))
    assert out.internals["layer0.cross.k"].shape == (2, 4, 5, 8)  # K from the source (S = 5), not the target
    assert out.internals["encoder.layer0.probs"].shape == (2, 4, 5, 5)
    assert (out.internals["layer0.probs"].triu(1) == 0).all()
    assert (out.internals["encoder.layer0.probs"].triu(1) > 0).any(), "the encoder is not masked"


def test_cross_attention_reads_the_source():
    torch.manual_seed(0)
    model = randomise(EncoderDecoder(VASWANI))
    tgt = _ids(2, 4)
    with torch.no_grad():
        a, b = model(_ids(2, 5, seed=1), tgt).logits, model(_ids(2, 5, seed=2), tgt).logits
    assert not torch.allclose(a, b, atol=1e-3)


def test_tied_head_is_the_word_embedding_and_untied_has_its_own():
    tied, untied = DecoderLM(SMALL), DecoderLM(SMALL.replace(tie_embeddings=False))
    assert tied.lm_head is None and untied.lm_head.weight.shape == (48, 32)
    assert sum(p.numel() for p in untied.parameters()) - sum(p.numel() for p in tied.parameters()) == 48 * 32
    h = torch.randn(1, 3, 32)
    torch.testing.assert_close(tied.logits(h), h @ tied.embeddings.word_embeddings.weight.T)


@pytest.mark.parametrize(
    "changes,needle",
    [({"n_kv_heads": 3}, r"DecoderConfig.n_kv_heads must be None or an int >= 1 that divides n_heads \(4\)"),
     ({"pos": "rotary"}, "DecoderConfig.pos must be one of"),
     ({"qk": "shared"}, "DecoderConfig.qk must be 'separate'"),
     ({"mask_self": True, "causal": False}, "DecoderConfig.mask_self"),
     ({"embed_combine": "concat"}, "DecoderConfig.embed_combine"),
     ({"tie_embeddings": 1}, "DecoderConfig.tie_embeddings must be a bool"),
     ({"final_norm": None}, "DecoderConfig.final_norm must be a bool"),
     ({"activation": "swish"}, "DecoderConfig.activation must be one of")],
)
def test_bad_decoder_config_names_the_field(changes, needle):
    with pytest.raises(ValueError, match=needle):
        SMALL.replace(**changes)


def test_models_need_a_decoder_config():
    from qalib.nn.config import MiniBertConfig

    with pytest.raises(TypeError, match="DecoderConfig"):
        DecoderLM(MiniBertConfig())


@pytest.mark.parametrize("cls", [DecoderLM, EncoderDecoder])
def test_training_step_has_finite_gradients(cls):
    torch.manual_seed(0)
    model = cls(SMALL.replace(dropout=0.1)).train()
    ids = _ids(3, 8)
    logits = model(ids).logits if cls is DecoderLM else model(_ids(3, 5), ids).logits
    loss = nn.functional.cross_entropy(logits[:, :-1].reshape(-1, 48), ids[:, 1:].reshape(-1))
    loss.backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.parameters())


def test_bf16_autocast_fills_a_bf16_cache_of_half_the_bytes():
    model = DecoderLM(SMALL).eval()
    ids = _ids(2, 6)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        cache = model(ids, use_cache=True).cache
        stepped, _ = _step_by_step(model, ids, prefix=2)
    assert cache.layers[0].k.dtype == torch.bfloat16
    assert cache.nbytes == 2 * SMALL.n_layers * SMALL.n_heads * SMALL.d_head * 6 * 2 * 2
    assert torch.isfinite(stepped).all()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_on_cuda_cached_equals_uncached_and_matches_cpu():
    torch.manual_seed(0)
    model = randomise(DecoderLM(SMALL.replace(n_kv_heads=2)))
    ids = _ids(2, 12)
    with torch.no_grad():
        cpu = model(ids).logits
        model.to("cuda")
        stepped, cache = _step_by_step(model, ids.cuda(), prefix=4)
    assert cache.layers[0].k.device.type == "cuda"
    torch.testing.assert_close(stepped.cpu(), cpu, atol=1e-4, rtol=0)
