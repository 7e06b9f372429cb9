"""The wall-clock statements the notebooks make, checked here rather than in the notebooks.

A timing on a shared 2-core machine moves with whatever else runs, so a notebook only prints what its run measured,
and `make bench` (a quiet machine, several repeats) judges the statement:

    07: attention with 8 heads is not faster than with 1 head at the same d_model (the FLOPs are equal, and 8
        softmaxes over T^2 entries cost more than one);
    10: full attention's time grows with an exponent of about 2 in T (1.6-3.2: above 2 once the T x T tensors leave
        the cache), Linformer's (fixed k = 64) below 1.5, and at T = 2048 Linformer is more than 4x faster;
    19: from n = 1024 to 2048 a ±32 window's time grows less than 3x (linear: 2x) and naive full attention's more
        than 3x (quadratic: 4x, more once the scores leave the cache);
    20: a training step with pixels as tokens (65 tokens) takes over twice the time of one with 2x2 patches (17).
"""

from __future__ import annotations

import numpy as np


def bench_timings(rounds: int = 5) -> dict[str, bool]:
    """Each statement over `rounds` independent measurements; it holds if it holds in the median round."""
    from qalib.topics.nb10_residuals_ffn_masks.compute import cost_curve
    from qalib.topics.nb07_multi_head.compute import time_attention
    from qalib.topics.nb19_long_context.compute import attention_costs
    from qalib.topics.nb20_patches_as_tokens.compute import ViTConfig, step_ms

    print("\n== the notebooks' timing statements (median of", rounds, "rounds)")
    ratios = [time_attention(8) / time_attention(1) for _ in range(rounds)]
    heads = float(np.median(ratios)) >= 1.0
    print(f"  {'ok ' if heads else 'FAIL'} 07 8 heads / 1 head, d=256 T=128 batch 8: time ratio "
          f"median {np.median(ratios):.2f} (rounds {min(ratios):.2f}-{max(ratios):.2f}), statement: >= 1")
    curves = [cost_curve((128, 256, 512, 1024, 2048), heads=1, d_head=32, k_proj=64, repeats=3, seed=r)
              for r in range(rounds)]
    full = float(np.median([c["exp_time_full"] for c in curves]))
    lin = float(np.median([c["exp_time_lin"] for c in curves]))
    speedup = float(np.median([c["time_full"][-1] / c["time_lin"][-1] for c in curves]))
    results = {"07 heads": heads, "10 exponent full": 1.6 < full < 3.2, "10 exponent Linformer": lin < 1.5,
               "10 speed-up at 2048": speedup > 4}
    pixels = float(np.median([step_ms(ViTConfig(patch=1), seed=r) / step_ms(ViTConfig(patch=2), seed=r)
                              for r in range(rounds)]))
    results["20 pixels vs 2x2 patches"] = pixels > 2
    costs = [attention_costs([1024, 2048], radius=32, heads=4, d_head=32, repeats=3, seed=r) for r in range(rounds)]
    window = float(np.median([c["band_ms"][1] / c["band_ms"][0] for c in costs]))
    naive = float(np.median([c["naive_ms"][1] / c["naive_ms"][0] for c in costs]))
    results["19 window, 2x the length"], results["19 naive, 2x the length"] = window < 3, naive > 3
    for what, value, statement in (("10 exponent full", full, "in (1.6, 3.2)"),
                                   ("10 exponent Linformer", lin, "< 1.5"),
                                   ("10 speed-up at 2048", speedup, "> 4"),
                                   ("20 pixels vs 2x2 patches", pixels, "> 2"),
                                   ("19 window, 2x the length", window, "< 3"),
                                   ("19 naive, 2x the length", naive, "> 3")):
        print(f"  {'ok ' if results[what] else 'FAIL'} {what:24s} median {value:6.2f}, statement: {statement}")
    return results
