"""Every config switch: forward and backward run, shapes are right, bad values are rejected."""

import dataclasses
import math
import itertools
from typing import get_args

import pytest
import torch
import torch.nn.functional as F

from qalib.nn.attention import attention
from qalib.nn.config import SCALINGS, Activation, EmbedCombine, EmbedScale, Norm, NormPlacement, Positions, QKProjection
from qalib.nn.decoder import DecoderConfig, EncoderDecoder
from qalib.nn.model import ACTIVATIONS, FeedForward, MiniBert, MiniBertConfig, SelfAttention, residual

BASE = MiniBertConfig(vocab_size=40, d_model=32, n_layers=2, n_heads=4, d_ff=64, max_len=24)

SWITCHES = {  # every value of every Literal field: a new value is tested the moment it is added
    "attn_scale": [*SCALINGS, 0.3],
    "pos": list(get_args(Positions)),
    "embed_scale": list(get_args(EmbedScale)),
    "embed_combine": list(get_args(EmbedCombine)),
    "qk": list(get_args(QKProjection)),
    "norm": list(get_args(Norm)),
    "norm_placement": list(get_args(NormPlacement)),
    "residual": [True, False],
    "causal": [True, False],
    "mask_self": [True, False],
    "activation": list(get_args(Activation)),
    "n_kv_heads": [1, 2, 4],  # not a Literal: every divisor of BASE.n_heads (MQA, GQA, MHA)
}
CASES = [(f, v) for f, vs in SWITCHES.items() for v in vs]


def _inputs(b=3, t=10, vocab=40, seed=0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, vocab, (b, t), generator=g)
    types = torch.zeros_like(ids)
    types[:, t // 2:] = 1
    mask = torch.ones_like(ids)
    mask[0, -3:] = 0  # one padded sequence
    return ids, types, mask


@pytest.mark.parametrize("field,value", CASES, ids=[f"{f}={v}" for f, v in CASES])
def test_switch_forward_backward(field, value):
    cfg = BASE.replace(**{field: value}) if not (field == "mask_self" and value) else BASE.replace(mask_self=True)
    torch.manual_seed(0)
    model = MiniBert(cfg).train()
    ids, types, mask = _inputs()
    out = model(ids, types, mask, return_internals=True)
    assert out.last_hidden_state.shape == (3, 10, 32)
    assert out.internals["layer1.probs"].shape == (3, 4, 10, 10)
    logits = model.mlm_logits(out.last_hidden_state)
    assert logits.shape == (3, 10, 40)
    loss = logits.logsumexp(-1).mean() + model.class_logits(out.last_hidden_state).pow(2).mean()
    loss.backward()
    grads = [p.grad for p in model.parameters() if p.requires_grad]
    assert all(g is not None and torch.isfinite(g).all() for g in grads)


@pytest.mark.parametrize("field,value", CASES, ids=[f"{f}={v}" for f, v in CASES])
def test_fused_path_equals_manual_path(field, value):
    cfg = BASE.replace(**{field: value})
    torch.manual_seed(1)
    model = MiniBert(cfg).eval()
    ids, types, mask = _inputs(seed=1)
    with torch.no_grad():
        fused = model(ids, types, mask).last_hidden_state
        manual = model(ids, types, mask, return_internals=True).last_hidden_state
    keep = mask.bool()
    assert torch.allclose(fused[keep], manual[keep], atol=1e-5), (fused - manual)[keep].abs().max()


def test_attention_probs_are_before_dropout_and_rows_sum_to_one():
    model = MiniBert(BASE.replace(dropout=0.5)).train()
    ids, types, mask = _inputs()
    p = model(ids, types, mask, return_internals=True).internals["layer0.probs"]
    assert torch.allclose(p.sum(-1), torch.ones(3, 4, 10), atol=1e-5)
    assert (p[0, :, :, -3:] == 0).all(), "padding keys get no attention"


def test_internals_named_values():
    model = MiniBert(BASE)
    ids, types, mask = _inputs()
    inside = model(ids, types, mask, return_internals=True).internals
    for name in ["embeddings.word", "embeddings.segment", "embeddings.position", "embeddings.sum", "embeddings.out",
                 "embeddings.norm.mean", "embeddings.norm.std", "layer0.scores", "layer0.probs", "layer0.hidden",
                 "layer0.attention_norm.mean", "layer1.ffn_norm.std"]:
        assert name in inside, name
    assert torch.allclose(inside["embeddings.sum"], inside["embeddings.word"] + inside["embeddings.segment"] + inside["embeddings.position"])
    assert not model(ids, types, mask).internals, "no internals unless asked"


@pytest.mark.parametrize("placement", ["post", "pre"])
def test_stop_at_layer_is_the_stack_cut_after_that_layer(placement):
    cfg = BASE.replace(n_layers=3, norm_placement=placement)
    model = MiniBert(cfg).eval()
    ids, types, mask = _inputs()
    for n in range(4):
        cut = MiniBert(cfg.replace(n_layers=n)).eval() if n else None
        with torch.no_grad():
            out = model(ids, types, mask, return_internals=True, stop_at_layer=n)
            if cut is not None:  # the same weights in a model built n layers deep
                cut.load_state_dict({k: v for k, v in model.state_dict().items() if k in cut.state_dict()})
                expected = cut(ids, types, mask).last_hidden_state
            else:
                expected = model.final_norm(out.internals["embeddings.out"], mask.bool(), None, "final_norm")
        assert torch.allclose(out.last_hidden_state, expected, atol=1e-6), n
        assert sorted(k for k in out.internals if k.endswith(".hidden")) == [f"layer{i}.hidden" for i in range(n)]
        with torch.no_grad():
            hidden = model(ids, types, mask, output_hidden_states=True, stop_at_layer=n).hidden_states
        assert len(hidden) == n + 1
    with torch.no_grad():
        full = model(ids, types, mask).last_hidden_state
        assert torch.equal(model(ids, types, mask, stop_at_layer=3).last_hidden_state, full)
    for bad in (-1, 4, 1.5, True):
        with pytest.raises(ValueError, match="stop_at_layer"):
            model(ids, types, mask, stop_at_layer=bad)


def test_hidden_states_are_the_internals_residual_stream():
    model = MiniBert(BASE).eval()
    ids, types, mask = _inputs()
    with torch.no_grad():
        inside = model(ids, types, mask, return_internals=True).internals
        out = model(ids, types, mask, output_hidden_states=True)
    expected = [inside["embeddings.out"]] + [inside[f"layer{i}.hidden"] for i in range(BASE.n_layers)]
    keep = mask.bool()
    assert len(out.hidden_states) == len(expected)
    for mine, theirs in zip(out.hidden_states, expected):  # fused vs unfused attention: equal up to rounding
        assert torch.allclose(mine[keep], theirs[keep], atol=1e-5)
    assert out.hidden_states[-1] is out.last_hidden_state  # post-norm: no final norm after the last layer
    assert not out.internals and model(ids, types, mask).hidden_states == ()


def test_shared_qk_scores_are_symmetric():
    model = MiniBert(BASE.replace(qk="shared", pos="none"))
    ids, types, _ = _inputs()
    s = model(ids, types, return_internals=True).internals["layer0.scores"]
    assert torch.allclose(s, s.transpose(-1, -2), atol=1e-5)


def test_causal_mask_blocks_the_future():
    model = MiniBert(BASE.replace(causal=True)).eval()
    ids, types, _ = _inputs(b=1)
    changed = ids.clone()
    changed[0, -1] = 5 if ids[0, -1] != 5 else 6
    a, b = model(ids, types).last_hidden_state, model(changed, types).last_hidden_state
    assert torch.allclose(a[0, :-1], b[0, :-1], atol=1e-6) and not torch.allclose(a[0, -1], b[0, -1])


def test_embed_scale_multiplies_word_embeddings():
    plain = MiniBert(BASE.replace(embed_norm=False))
    scaled = MiniBert(BASE.replace(embed_norm=False, embed_scale="sqrt_d"))
    scaled.load_state_dict(plain.state_dict())
    ids, types, _ = _inputs()
    w0 = plain(ids, types, return_internals=True).internals["embeddings.word"]
    w1 = scaled(ids, types, return_internals=True).internals["embeddings.word"]
    assert torch.allclose(w1, w0 * 32 ** 0.5)


def _parameter_names(pos: str) -> list[str]:
    return [name for name, _ in MiniBert(BASE.replace(pos=pos)).named_parameters()]


@pytest.mark.parametrize("pos", SWITCHES["pos"])
def test_position_parameters_keep_their_names_and_places(pos):
    """Checkpoints (qalib/nn/pretrained.py) and notebooks read these names, and torch.manual_seed gives the
    notebooks' weights only while parameters are created in the same order: the learned table right after the
    segment table, Shaw's tables right after each layer's output projection. No scheme adds a saved buffer."""
    expected = []
    for name in _parameter_names("none"):
        expected.append(name)
        if pos == "learned" and name == "embeddings.token_type_embeddings.weight":
            expected.append("embeddings.position_embeddings.weight")
        if pos in ("shaw", "relative_key_query") and name.endswith(".attention.output.bias"):
            expected.append(name.replace(".output.bias", ".position.distance_embedding.weight"))
        if pos.startswith(("huang", "transformer_xl")) and name.endswith(".attention.output.bias"):
            own = {"huang_unsigned_scalar": ["scalars"], "huang_signed_scalar": ["scalars"], "huang_vector": ["vectors"],
                   "transformer_xl": ["w_r", "u", "v"], "transformer_xl_no_bias": ["w_r"]}[pos]
            expected += [name.replace(".output.bias", f".position.{p}") for p in own]
    assert _parameter_names(pos) == expected
    assert list(MiniBert(BASE.replace(pos=pos)).state_dict()) == expected


def test_concat_has_more_parameters_than_sum():
    assert MiniBert(BASE.replace(embed_combine="concat")).num_parameters() - MiniBert(BASE).num_parameters() == 3 * 32 * 32 + 32


def test_sinusoidal_runs_longer_than_max_len_and_learned_explains_why_not():
    ids = torch.randint(5, 40, (2, BASE.max_len + 8))
    MiniBert(BASE.replace(pos="sinusoidal"))(ids)
    MiniBert(BASE.replace(pos="rotary"))(ids)
    with pytest.raises(ValueError, match="learned position table has no rows"):
        MiniBert(BASE)(ids)


@pytest.mark.parametrize(
    "changes,needle",
    [
        ({"d_model": 30, "n_heads": 4}, "divisible by n_heads"),
        ({"pos": "sinusoidal", "d_model": 33, "n_heads": 1}, "even d_model"),
        ({"pos": "absolute"}, "MiniBertConfig.pos must be one of"),
        ({"norm": "group"}, "MiniBertConfig.norm must be one of"),
        ({"attn_scale": -1.0}, r"attn_scale must be one of \('inv_sqrt_dk', 'none', 'inv_dk'\) or a finite number > 0"),
        ({"attn_scale": "sqrt"}, "attn_scale"),
        ({"dropout": 1.0}, "dropout"),
        ({"n_layers": 0}, "n_layers"),
        ({"vocab_size": 3}, "vocab_size"),
        ({"mask_self": True, "causal": True}, "mask_self"),
        ({"rel_clip": -1}, "rel_clip"),
        ({"pos_base": 0.5}, r"MiniBertConfig.pos_base must be a finite number >= 1, got 0.5"),
        ({"norm_placement": "middle"}, "norm_placement"),
        ({"activation": "swish"}, "MiniBertConfig.activation must be one of"),
        ({"n_kv_heads": 3}, r"n_kv_heads must be None or an int >= 1 that divides n_heads \(4\)"),
        ({"n_kv_heads": 0}, "n_kv_heads"),
        ({"n_kv_heads": 2, "qk": "shared"}, "qk='shared' needs n_kv_heads == n_heads"),
        ({"n_kv_heads": 2, "pos": "relative_key_query"}, "relative_key_query' needs n_kv_heads == n_heads"),
    ],
)
def test_bad_config_names_the_field(changes, needle):
    with pytest.raises(ValueError, match=needle):
        dataclasses.replace(BASE, **changes)


def test_replace_rejects_unknown_field():
    with pytest.raises(ValueError, match="no field"):
        BASE.replace(norm_type="batch")


@pytest.mark.parametrize(
    "kwargs,needle",
    [
        ({"input_ids": torch.tensor([[1, 2, 99]])}, "vocab_size"),
        ({"input_ids": torch.tensor([1, 2, 3])}, r"\(B, T\)"),
        ({"input_ids": torch.zeros(1, 0, dtype=torch.long)}, "empty"),
        ({"input_ids": torch.tensor([[5, 6]]), "attention_mask": torch.tensor([[0, 0]])}, "attention_mask all 0"),
        ({"input_ids": torch.tensor([[5, 6]]), "token_type_ids": torch.tensor([[0, 2]])}, "n_segments"),
    ],
)
def test_bad_inputs_are_named(kwargs, needle):
    with pytest.raises(ValueError, match=needle):
        MiniBert(BASE)(**kwargs)


def test_attention_function_matches_formula_and_masks():
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 5, 8, generator=g) for _ in range(3))
    out, probs, scores = attention(q, k, v)
    ref = torch.softmax(q @ k.transpose(-1, -2) / 8 ** 0.5, -1)
    assert torch.allclose(probs, ref, atol=1e-6) and torch.allclose(out, ref @ v, atol=1e-6)
    mask = torch.zeros(2, 5, 5, dtype=torch.bool)
    mask[0, :, 0] = True  # batch 1: every key masked
    out, probs, _ = attention(q, k, v, mask=mask)
    assert torch.allclose(probs[0, :, 0], torch.ones(5)) and (probs[1] == 0).all() and (out[1] == 0).all()
    assert torch.isfinite(out).all()


def test_batch_norm_variants_differ_only_with_padding():
    ids, types, mask = _inputs()
    torch.manual_seed(0)
    a = MiniBert(BASE.replace(norm="batch")).train()
    b = MiniBert(BASE.replace(norm="batch_masked")).train()
    b.load_state_dict(a.state_dict())
    full = torch.ones_like(mask)
    assert torch.allclose(a(ids, types, full).last_hidden_state, b(ids, types, full).last_hidden_state, atol=1e-5)
    assert not torch.allclose(a(ids, types, mask).last_hidden_state, b(ids, types, mask).last_hidden_state, atol=1e-3)


def test_all_pairs_of_positions_and_norms_build():
    for pos, norm in itertools.product(SWITCHES["pos"], SWITCHES["norm"]):
        MiniBert(BASE.replace(pos=pos, norm=norm))(torch.randint(5, 40, (2, 6)))


def test_activation_registry_matches_the_literal_and_the_formulas():
    assert set(ACTIVATIONS) == set(get_args(Activation))
    x = torch.linspace(-4, 4, 101)
    tanh_gelu = 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))  # GPT-2's gelu_new
    expected = {"gelu": 0.5 * x * (1 + torch.erf(x / math.sqrt(2))), "gelu_tanh": tanh_gelu, "relu": x.clamp(min=0)}
    for name, formula in expected.items():
        ffn = FeedForward(BASE.replace(activation=name))
        with torch.no_grad():
            ffn.intermediate.weight.copy_(torch.ones(64, 32) / 32)
            ffn.intermediate.bias.zero_()
        assert torch.allclose(ffn.activation(x), formula, atol=1e-6), name
        h = torch.ones(1, 101, 32) * x[None, :, None]  # each token's intermediate units all equal x
        assert torch.allclose(ffn(h), ffn.output(formula[None, :, None].expand(1, 101, 64)), atol=1e-5), name


def test_grouped_kv_heads_shrink_the_projection_and_the_internals():
    for n_kv in (1, 2):
        model = MiniBert(BASE.replace(n_kv_heads=n_kv))
        assert model.layers[0].attention.qkv.weight.shape == (32 + 2 * n_kv * 8, 32)  # [q | k | v], d_head = 8
        internals = model(torch.randint(5, 40, (2, 6)), return_internals=True).internals
        assert internals["layer0.q"].shape == (2, 4, 6, 8)
        assert internals["layer0.k"].shape == internals["layer0.v"].shape == (2, n_kv, 6, 8)
        assert internals["layer0.probs"].shape == (2, 4, 6, 6)  # one pattern per query head


# -- SelfAttention's views of the fused projection: w_q, w_k, w_v, b_q, b_k, b_v, split_qkv -------------------------
@pytest.mark.parametrize("n_kv", [4, 2, 1])  # MHA, GQA, MQA: K and V narrower than Q below 4
def test_qkv_views_are_the_rows_of_the_fused_projection(n_kv):
    torch.manual_seed(0)
    att = SelfAttention(BASE.replace(n_kv_heads=n_kv))
    w, b = att.qkv.weight, att.qkv.bias
    assert att.w_q.shape == (32, 32) and att.w_k.shape == att.w_v.shape == (n_kv * 8, 32)  # d_head = 8
    assert att.b_q.shape == (32,) and att.b_k.shape == att.b_v.shape == (n_kv * 8,)
    assert torch.equal(torch.cat([att.w_q, att.w_k, att.w_v]), w)
    assert torch.equal(torch.cat([att.b_q, att.b_k, att.b_v]), b)
    for view, rows, full in ((att.w_q, 0, w), (att.w_k, 32, w), (att.w_v, 32 + n_kv * 8, w),
                             (att.b_q, 0, b), (att.b_k, 32, b), (att.b_v, 32 + n_kv * 8, b)):
        assert view._base is full and view.data_ptr() == full[rows:].data_ptr()  # a view: no copy
    with torch.no_grad():
        w[32:33].fill_(7.0)  # a change to qkv.weight shows through the view: shared storage
    assert (att.w_k[0] == 7.0).all()
    # what project() computes is the views' projections
    x = torch.randn(2, 5, 32)
    q, k, v = att.project(x)
    for got, w_, b_ in ((q, att.w_q, att.b_q), (k, att.w_k, att.b_k), (v, att.w_v, att.b_v)):
        assert torch.allclose(got, att.split_heads(F.linear(x, w_, b_)), atol=1e-6)
    with pytest.raises(AttributeError):
        att.w_q = torch.zeros(32, 32)  # read-only: the parameter is qkv.weight


def test_gradients_through_the_views_reach_qkv_weight_and_split_qkv_splits_them():
    torch.manual_seed(0)
    att = SelfAttention(BASE.replace(n_kv_heads=2))
    x = torch.randn(3, 32)
    (x @ att.w_k.T).sum().backward()  # only W_k is used: the gradient is on W_k's rows of qkv.weight alone
    g_q, g_k, g_v = att.split_qkv(att.qkv.weight.grad)
    assert g_q.shape == (32, 32) and g_k.shape == g_v.shape == (16, 32)
    assert not g_q.any() and not g_v.any()
    assert torch.equal(g_k, x.sum(0).expand(16, 32))  # d/dW_k of sum(x W_k^T): every row is sum_i x_i
    assert g_k._base is att.qkv.weight.grad  # views of the gradient too
    assert att.qkv.bias.grad is None

    att.zero_grad()
    q, k, v = att.project(torch.randn(2, 5, 32))
    (q.sum() + 2 * k.pow(2).sum() + v.sin().sum()).backward()
    parts = att.split_qkv(att.qkv.weight.grad)
    assert torch.equal(torch.cat(parts), att.qkv.weight.grad)
    assert [p.shape[0] for p in att.split_qkv(att.qkv.bias.grad)] == [32, 16, 16]
    with pytest.raises(ValueError, match="split_qkv"):
        att.split_qkv(torch.zeros(48, 32))  # rows of a (q + k) weight, not of qkv


def test_shared_qk_views_have_w_k_equal_w_q():
    att = SelfAttention(BASE.replace(qk="shared"))
    assert att.qkv.weight.shape == (64, 32)  # rows [q | v]
    assert att.w_k.data_ptr() == att.w_q.data_ptr() and torch.equal(att.w_k, att.w_q)
    assert torch.equal(att.w_v, att.qkv.weight[32:]) and torch.equal(att.b_k, att.b_q)
    q, k, v = att.split_qkv(att.qkv.weight)
    assert k is q and v.shape == (32, 32)


def test_qkv_bias_views_are_none_without_a_bias():
    att = SelfAttention(BASE)
    att.qkv = torch.nn.Linear(32, 96, bias=False)
    assert att.b_q is None and att.b_k is None and att.b_v is None
    assert att.w_v.shape == (32, 32)


# -- residual: every sublayer's wiring ----------------------------------------------------------------------------
class _RecordingNorm(torch.nn.Module):
    """Adds 100 and records what it was called with: where the norm sits is visible in the numbers."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = []

    def forward(self, x, keep=None, internals=None, name=""):
        self.calls.append((keep, name))
        if internals is not None:
            internals[name] = x
        return x + 100


def test_residual_formulas():
    x = torch.arange(6.0).view(1, 2, 3)
    f = lambda h: 3 * h  # noqa: E731
    dropout = lambda h: -h  # noqa: E731  (a stand-in whose place shows in the sign)
    keep = torch.tensor([[True, False]])
    expected = {("post", True): (x + -f(x)) + 100, ("pre", True): x + -f(x + 100),
                ("post", False): -f(x) + 100, ("pre", False): -f(x + 100)}
    for (placement, add_input), want in expected.items():
        norm, internals = _RecordingNorm(), {}
        got = residual(x, f, norm, dropout=dropout, placement=placement, add_input=add_input, keep=keep,
                       internals=internals, name="layer3.ffn_norm")
        assert torch.equal(got, want), (placement, add_input)
        assert norm.calls == [(keep, "layer3.ffn_norm")] and list(internals) == ["layer3.ffn_norm"]
        # the norm's input: the residual sum in post-norm, the sublayer's input in pre-norm
        assert torch.equal(internals["layer3.ffn_norm"], want - 100 if placement == "post" else x)


@pytest.mark.parametrize("placement", ["post", "pre"])
def test_encoder_and_decoder_layers_are_the_residual_formulas(placement):
    torch.manual_seed(0)
    x, keep = torch.randn(2, 5, 32), torch.tensor([[True] * 5, [True] * 3 + [False] * 2])
    layer = MiniBert(BASE.replace(norm_placement=placement, norm="batch_masked")).layers[0].eval()
    n1 = lambda h: layer.attention_norm(h, keep)  # noqa: E731
    n2 = lambda h: layer.ffn_norm(h, keep)  # noqa: E731
    att = lambda h: layer.attention(h, keep)  # noqa: E731
    with torch.no_grad():
        if placement == "post":
            h = n1(x + att(x))
            want = n2(h + layer.ffn(h))
        else:
            h = x + att(n1(x))
            want = h + layer.ffn(n2(h))
        assert torch.equal(layer(x, keep), want)

    model = EncoderDecoder(DecoderConfig(vocab_size=40, d_model=32, n_layers=1, n_heads=4, d_ff=64, max_len=16,
                                         norm_placement=placement)).eval()
    dec = model.decoder.layers[0]
    memory_kv = dec.cross_attention.memory_kv(torch.randn(2, 4, 32))
    sa = lambda h: dec.attention(h)[0]  # noqa: E731
    ca = lambda h: dec.cross_attention(h, memory_kv)  # noqa: E731
    with torch.no_grad():
        y = x
        for f, norm in ((sa, dec.attention_norm), (ca, dec.cross_attention_norm), (dec.ffn, dec.ffn_norm)):
            y = norm(y + f(y)) if placement == "post" else y + f(norm(y))
        out, present = dec(x, None, memory_kv)
        assert torch.equal(out, y)
        assert torch.equal(present.k, dec.attention(dec.attention_norm(x) if placement == "pre" else x)[1].k)
