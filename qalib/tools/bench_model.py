"""MiniBert against transformers.BertForMaskedLM: identical configuration, weights and batch, side by side."""

from __future__ import annotations

import statistics
import time

import torch
import torch.nn.functional as F

from qalib.lab.data import IGNORE, mask_tokens
from qalib.nn.config import MiniBertConfig
from qalib.nn.model import MiniBert
from qalib.nn.pretrained import minibert_to_checkpoint

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
    missing, unexpected = model.load_state_dict(minibert_to_checkpoint(ours.state_dict()), strict=False)
    unexpected = [u for u in unexpected if not u.startswith("bert.pooler")]  # BertForMaskedLM has no pooler
    if [m for m in missing if "position_ids" not in m] or unexpected:
        raise RuntimeError(f"weight transfer to HF failed: missing {missing}, unexpected {unexpected}")
    return model


def time_interleaved(fns: dict, repeats: int, warmup: int = 2) -> dict[str, float]:
    """Median seconds per call of each function, measured in turns (a, b, c, a, b, c, ...) so that a change in
    the machine's load during the benchmark affects every contender alike, after `warmup` calls of each
    (allocator, autograd graph, optimizer state)."""
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    return {name: statistics.median(ts) for name, ts in times.items()}


def bench_model(repeats: int = 8) -> dict[str, float]:
    """Throughput of three ways to compute the same masked-LM loss on the same weights and batch:
    HF BertForMaskedLM; MiniBert with vocabulary logits at every position (HF's computation); and MiniBert as
    qalib.lab.train uses it, with the vocabulary projection only at the labelled positions (the loss is identical:
    cross-entropy ignores unlabelled positions; fairseq's RoBERTa head does the same)."""
    torch.manual_seed(0)
    ours = MiniBert(CFG)
    hf = _hf_model(CFG, ours)
    g = torch.Generator().manual_seed(0)
    ids, labels = mask_tokens(torch.randint(5, CFG.vocab_size, (BATCH, SEQ), generator=g), CFG.vocab_size, g)
    keep = labels != IGNORE
    tokens = BATCH * SEQ

    def ours_all_positions():
        logits = ours.mlm_logits(ours(ids).last_hidden_state)  # (B, T, V)
        return F.cross_entropy(logits.view(-1, CFG.vocab_size), labels.view(-1), ignore_index=IGNORE)

    def ours_labelled():
        logits = ours.mlm_logits(ours(ids).last_hidden_state[keep])  # (N_labelled, V)
        return F.cross_entropy(logits, labels[keep])

    def hf_loss():
        return hf(input_ids=ids, labels=labels).loss

    losses = {"ours (all positions)": ours_all_positions, "ours (labelled, as qalib.lab.train)": ours_labelled, "HF": hf_loss}
    ours.eval(), hf.eval()
    with torch.no_grad():
        reference = float(hf_loss())
        diffs = {name: abs(float(fn()) - reference) for name, fn in losses.items()}
        inference = time_interleaved(losses, repeats)
    opt_o = torch.optim.AdamW(ours.parameters(), lr=1e-4)
    opt_h = torch.optim.AdamW(hf.parameters(), lr=1e-4)
    ours.train(), hf.train()

    def step(loss_fn, opt):
        def run():
            opt.zero_grad(set_to_none=True)
            loss_fn().backward()
            opt.step()
        return run

    training = time_interleaved({name: step(fn, opt_h if name == "HF" else opt_o) for name, fn in losses.items()},
                                 repeats)
    peak = matmul_gflops()
    flops = train_flops_per_token(CFG, SEQ)
    print(f"\n== model: MiniBert vs transformers.BertForMaskedLM ({CFG.n_layers} layers, d={CFG.d_model}, "
          f"vocab {CFG.vocab_size}, batch {BATCH}x{SEQ}, {torch.get_num_threads()} threads, same weights, "
          f"timed in turns, median of {repeats})")
    results: dict[str, float] = {"matmul_gflops": peak}
    for name in losses:
        key = name.split(" ")[0] + ("_labelled" if "labelled" in name else "_all" if "all" in name else "")
        results |= {f"loss_abs_diff_{key}": diffs[name], f"inference_tok_s_{key}": tokens / inference[name],
                    f"train_tok_s_{key}": tokens / training[name],
                    f"train_fraction_of_matmul_{key}": tokens / training[name] * flops / 1e9 / peak}
        ratio = "" if name == "HF" else (f"   ratio vs HF: inference {inference['HF'] / inference[name]:4.2f}, "
                                         f"training {training['HF'] / training[name]:4.2f}  (target >= 1.0)")
        print(f"  {name:32s} eval loss diff {diffs[name]:.1e}  inference {tokens / inference[name]:7.0f} tok/s  "
              f"training {tokens / training[name]:6.0f} tok/s{ratio}")
    print(f"  matmul peak {peak:.1f} GFLOP/s; a training step with all-position logits is {flops / 1e6:.1f} MFLOP/token: "
          f"ours {results['train_fraction_of_matmul_ours_all']:.0%}, HF {results['train_fraction_of_matmul_HF']:.0%} of peak")
    return results


if __name__ == "__main__":
    bench_model()
