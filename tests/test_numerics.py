"""Numerical care where it teaches: each edge case gives the mathematically right answer or a clear message."""

import pytest
import torch

from qalib.nn.attention import attention, entropy
from qalib.nn.model import MiniBert, MiniBertConfig
from qalib.nn.norms import LayerNorm, RMSNorm, TokenBatchNorm


def test_softmax_of_huge_logits_is_one_hot_not_nan():
    q = torch.tensor([[1e4, 0.0]])
    k = torch.tensor([[1e4, 0.0], [0.0, 1e4], [-1e4, 0.0]])
    _, probs, scores = attention(q, k, k, scale=1.0)
    assert torch.isfinite(scores).all() and torch.equal(probs, torch.tensor([[1.0, 0.0, 0.0]]))
    assert entropy(probs).item() == 0.0  # 0 log 0 = 0, not NaN


def test_batchnorm_with_one_sentence_uses_its_positions_and_one_token_is_refused():
    bn = TokenBatchNorm(4).train()
    x = torch.randn(1, 6, 4)
    y = bn(x)
    assert torch.allclose(y.reshape(-1, 4).mean(0), torch.zeros(4), atol=1e-5)
    with pytest.raises(ValueError, match="at least 2"):
        bn(torch.randn(1, 1, 4))
    masked = TokenBatchNorm(4, masked=True).train()
    with pytest.raises(ValueError, match="non-padding"):
        masked(torch.randn(2, 3, 4), keep=torch.tensor([[True, False, False], [False, False, False]]))


def test_layernorm_of_a_constant_vector_is_beta():
    ln = LayerNorm(8, eps=1e-12)
    with torch.no_grad():
        ln.bias.fill_(0.25)
    out = ln(torch.full((1, 2, 8), 3.0))
    assert torch.isfinite(out).all() and torch.allclose(out, torch.full_like(out, 0.25))
    assert torch.equal(RMSNorm(8)(torch.zeros(1, 1, 8)), torch.zeros(1, 1, 8))


def test_all_padding_sequence_is_a_clear_error():
    model = MiniBert(MiniBertConfig(vocab_size=10, d_model=8, n_heads=2, d_ff=8))
    with pytest.raises(ValueError, match=r"sequence\(s\) \[1\] have attention_mask all 0"):
        model(torch.tensor([[5, 6], [7, 8]]), attention_mask=torch.tensor([[1, 1], [0, 0]]))
