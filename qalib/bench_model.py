"""MiniBert against transformers.BertForMaskedLM: identical configuration, weights and batch, side by side."""

from __future__ import annotations

import statistics
import time

import torch
import torch.nn.functional as F

from qalib.config import MiniBertConfig
from qalib.data import IGNORE, mask_tokens
from qalib.model import MiniBert
from qalib.pretrained import minibert_to_checkpoint

CFG = MiniBertConfig(vocab_size=8192, d_model=256, n_layers=4, n_heads=4, d_ff=1024, max_len=128, dropout=0.1)
BATCH, SEQ = 16, 128


def matmul_gflops(n: int = 1024, repeats: int = 20) -> float:
    a, b = torch.randn(n, n), torch.randn(n, n)
    for _ in range(3):
        a @ b
    t0 = time.perf_counter()
    for _ in range(repeats):
        a @ b
    return 2 * n**3 * repeats / (time.perf_counter() - t0) / 1e9


def train_flops_per_token(cfg: MiniBertConfig, t: int) -> float:
    """6 x (non-embedding matmul parameters + tied decoder) + attention's 2 x 2 x T x d per layer, x3 for backward."""
    d, f, layer = cfg.d_model, cfg.d_ff, 4 * cfg.d_model**2 + 2 * cfg.d_model * cfg.d_ff
    matmul_params = cfg.n_layers * layer + d * d + d * cfg.vocab_size
    return 6 * matmul_params + 3 * cfg.n_layers * 4 * t * d


def _hf_model(cfg: MiniBertConfig, ours: MiniBert):
    import transformers

    hf_cfg = transformers.BertConfig(
        vocab_size=cfg.vocab_size, hidden_size=cfg.d_model, num_hidden_layers=cfg.n_layers,
        num_attention_heads=cfg.n_heads, intermediate_size=cfg.d_ff, max_position_embeddings=cfg.max_len,
        type_vocab_size=cfg.n_segments, hidden_dropout_prob=cfg.dropout, attention_probs_dropout_prob=cfg.dropout,
        layer_norm_eps=cfg.layer_norm_eps, hidden_act="gelu")
    model = transformers.BertForMaskedLM._from_config(hf_cfg, attn_implementation="sdpa")
    missing, unexpected = model.load_state_dict(minibert_to_checkpoint(ours.state_dict(), cfg.n_layers), strict=False)
    unexpected = [u for u in unexpected if not u.startswith("bert.pooler")]  # BertForMaskedLM has no pooler
    if [m for m in missing if "position_ids" not in m] or unexpected:
        raise RuntimeError(f"weight transfer to HF failed: missing {missing}, unexpected {unexpected}")
    return model


def _time(fn, repeats: int) -> float:
    fn()
    fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def bench_model(repeats: int = 8) -> dict[str, float]:
    torch.manual_seed(0)
    ours = MiniBert(CFG)
    hf = _hf_model(CFG, ours)
    g = torch.Generator().manual_seed(0)
    ids, labels = mask_tokens(torch.randint(5, CFG.vocab_size, (BATCH, SEQ), generator=g), CFG.vocab_size, g)
    tokens = BATCH * SEQ

    def ours_loss():
        logits = ours.mlm_logits(ours(ids).last_hidden_state)
        return F.cross_entropy(logits.view(-1, CFG.vocab_size), labels.view(-1), ignore_index=IGNORE)

    def hf_loss():
        return hf(input_ids=ids, labels=labels).loss

    ours.eval(), hf.eval()
    with torch.no_grad():
        same = abs(float(ours_loss()) - float(hf_loss()))
        inf_ours = _time(ours_loss, repeats)
        inf_hf = _time(hf_loss, repeats)
    results = {"loss_abs_diff_eval": same}
    opt_o = torch.optim.AdamW(ours.parameters(), lr=1e-4)
    opt_h = torch.optim.AdamW(hf.parameters(), lr=1e-4)
    ours.train(), hf.train()

    def step(loss_fn, opt):
        def run():
            opt.zero_grad(set_to_none=True)
            loss_fn().backward()
            opt.step()
        return run

    train_ours = _time(step(ours_loss, opt_o), repeats)
    train_hf = _time(step(hf_loss, opt_h), repeats)
    peak = matmul_gflops()
    flops = train_flops_per_token(CFG, SEQ)
    results.update(
        inference_tok_s_ours=tokens / inf_ours, inference_tok_s_hf=tokens / inf_hf,
        train_tok_s_ours=tokens / train_ours, train_tok_s_hf=tokens / train_hf,
        matmul_gflops=peak,
        train_fraction_of_matmul_ours=tokens / train_ours * flops / 1e9 / peak,
        train_fraction_of_matmul_hf=tokens / train_hf * flops / 1e9 / peak,
    )
    print(f"\n== model: MiniBert vs transformers.BertForMaskedLM ({CFG.n_layers} layers, d={CFG.d_model}, "
          f"vocab {CFG.vocab_size}, batch {BATCH}x{SEQ}, {torch.get_num_threads()} threads, same weights)")
    print(f"  eval loss |ours - HF|            {same:.2e}")
    print(f"  inference tokens/s   ours {results['inference_tok_s_ours']:9.0f}   HF {results['inference_tok_s_hf']:9.0f}"
          f"   ratio {inf_hf / inf_ours:5.2f}  (target >= 1.0)")
    print(f"  training  tokens/s   ours {results['train_tok_s_ours']:9.0f}   HF {results['train_tok_s_hf']:9.0f}"
          f"   ratio {train_hf / train_ours:5.2f}  (target >= 1.0)")
    print(f"  matmul peak {peak:.1f} GFLOP/s; training step reaches {results['train_fraction_of_matmul_ours']:.0%} (ours), "
          f"{results['train_fraction_of_matmul_hf']:.0%} (HF)")
    return results


if __name__ == "__main__":
    bench_model()
