"""The decoder's targets (issue 22), measured on one config and one set of weights:

    1. greedy generation with the KV cache vs without (the whole prefix re-run each step), at prompt + new tokens
       = 128, 512, 1024: the speed-up grows with length and is >= 5x at 1024;
    2. ours vs transformers.GPT2LMHeadModel.generate with its cache, greedy, batch 1 and 8: ours >= 1.0x;
    3. the cache's bytes measured from its tensors vs 2 x layers x kv_heads x d_head x T x batch x bytes: equal.

    python -m qalib.tools.bench --only decoder

Both contenders run on one thread (qalib.lab.device.one_thread): these are small matrices, and on a shared 2-core
machine a second thread spin-waiting made a 128-token forward 30x slower here (10 ms vs 330 ms).
"""

from __future__ import annotations

import torch

from qalib.lab.device import one_thread
from qalib.nn.config import DecoderConfig
from qalib.nn.decoder import DecoderLM
from qalib.nn.generate import generate
from qalib.nn.gpt2 import to_gpt2
from qalib.tools.bench_model import time_interleaved

# GPT-2's layout at a size that generates 1024 tokens in seconds on 2 cores (GPT-2 small: 12 x 768, vocab 50257)
CFG = DecoderConfig(vocab_size=2048, d_model=128, n_layers=4, n_heads=4, d_ff=512, max_len=1024)
LENGTHS = (128, 512, 1024)
NEW = 32                # 1: the last NEW tokens of a sequence of each length are generated
HF_PROMPT, HF_NEW = 16, 240  # 2: prompt + new = 256


def formula_bytes(cfg: DecoderConfig, t: int, batch: int, bytes_per_element: int) -> int:
    """2 (K and V) x layers x kv_heads x d_head x T x batch x bytes per element (FACTS "Decoding and the KV cache")."""
    return 2 * cfg.n_layers * cfg.kv_heads * cfg.d_head * t * batch * bytes_per_element


def _prompt(batch: int, t: int) -> torch.Tensor:
    return torch.randint(0, CFG.vocab_size, (batch, t), generator=torch.Generator().manual_seed(t))


def bench_cache_speedup(model: DecoderLM, repeats: int) -> dict[int, float]:
    print(f"  1. cached vs uncached, batch 1, the last {NEW} tokens of each length, ms per new token with the prompt's "
          "forward included (target: grows, >= 5x at 1024)")
    speedups = {}
    for t in LENGTHS:
        prompt = _prompt(1, t - NEW)
        runs = {"cached": lambda: generate(model, prompt, NEW), "uncached": lambda: generate(model, prompt, NEW, use_cache=False)}
        assert torch.equal(runs["cached"](), runs["uncached"]()), "the cache must not change the tokens"
        times = time_interleaved(runs, repeats)
        speedups[t] = times["uncached"] / times["cached"]
        flag = "ok " if t < LENGTHS[-1] or speedups[t] >= 5 else "SLOW"
        print(f"  {flag} T = {t:4d} ({t - NEW} + {NEW}): cached {times['cached'] * 1e3 / NEW:6.2f} ms/token, uncached "
              f"{times['uncached'] * 1e3 / NEW:6.2f} ms/token, speed-up {speedups[t]:5.1f}x")
    grows = all(a < b for a, b in zip(list(speedups.values()), list(speedups.values())[1:]))
    print(f"  {'ok ' if grows else 'SLOW'} the speed-up grows with length: "
          + " < ".join(f"{s:.1f}x" for s in speedups.values()))
    return speedups


def bench_against_hf(model: DecoderLM, repeats: int) -> dict[int, float]:
    print(f"  2. ours vs GPT2LMHeadModel.generate, greedy, both with a cache, prompt {HF_PROMPT} + {HF_NEW} new "
          "(target >= 1.0x)")
    hf = to_gpt2(model).eval()
    ratios = {}
    for batch in (1, 8):
        prompt = _prompt(batch, HF_PROMPT)
        runs = {"ours": lambda: generate(model, prompt, HF_NEW),
                "HF": lambda: hf.generate(prompt, max_new_tokens=HF_NEW, do_sample=False, use_cache=True)}
        assert torch.equal(runs["ours"](), runs["HF"]()), "ours and HF must generate the same tokens"
        times = time_interleaved(runs, repeats)
        ratios[batch] = times["HF"] / times["ours"]
        print(f"  {'ok ' if ratios[batch] >= 1.0 else 'SLOW'} batch {batch}: ours {times['ours'] * 1e3 / HF_NEW:5.2f} "
              f"ms/token, HF {times['HF'] * 1e3 / HF_NEW:5.2f} ms/token, ratio {ratios[batch]:4.2f}x (same tokens)")
    return ratios


def bench_cache_bytes() -> dict[str, tuple[int, int]]:
    t, batch = LENGTHS[-1], 8
    print(f"  3. cache bytes at T = {t}, batch {batch}: measured from the tensors vs the formula (target: equal)")
    results = {}
    for name, cfg, dtype in (("MHA fp32", CFG, torch.float32), ("MHA bf16 (autocast)", CFG, torch.bfloat16),
                             ("GQA 2 kv heads fp32", CFG.replace(n_kv_heads=2), torch.float32),
                             ("MQA fp32", CFG.replace(n_kv_heads=1), torch.float32)):
        torch.manual_seed(0)
        model = DecoderLM(cfg).eval()
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=dtype == torch.bfloat16):
            cache = model(_prompt(batch, t), use_cache=True, last_only=True).cache
        expected = formula_bytes(cfg, t, batch, dtype.itemsize)
        results[name] = (cache.nbytes, expected)
        print(f"  {'ok ' if cache.nbytes == expected else 'FAIL'} {name:20s} measured {cache.nbytes:>11,d} B "
              f"({cache.nbytes / 2**20:5.1f} MiB), formula 2 x {cfg.n_layers} x {cfg.kv_heads} x {cfg.d_head} x {t} x "
              f"{batch} x {dtype.itemsize} = {expected:,d} B")
    return results


@one_thread()
def bench_decoder(repeats: int = 3) -> dict:
    torch.manual_seed(0)
    model = DecoderLM(CFG).eval()
    print(f"\n== decoder: generation with and without the KV cache, and vs transformers.GPT2LMHeadModel "
          f"({CFG.n_layers} layers, d={CFG.d_model}, {CFG.n_heads} heads, vocab {CFG.vocab_size}, "
          f"{torch.get_num_threads()} threads, same weights, timed in turns, median of {repeats})")
    return {"speedup": bench_cache_speedup(model, repeats), "vs_hf": bench_against_hf(model, repeats),
            "cache_bytes": bench_cache_bytes()}


if __name__ == "__main__":
    bench_decoder()
