"""GPU check (not part of CI): run on a machine with CUDA.

    .venv/bin/python scripts/gpu_check.py [--steps 300]

1. The same MiniBert weights give the same forward output on CPU (float32) and CUDA (float32 and bf16 autocast).
2. The pretrained MiniLM on CUDA matches the CPU.
3. A few hundred training steps on CUDA with bf16 autocast: throughput and the loss curve's end points.
Prints one line per check; exits non-zero if a check fails.
"""

from __future__ import annotations

import argparse
import sys
import time

import torch

from qalib.lab.data import MLMTask
from qalib.nn.model import MiniBert
from qalib.lab.presets import TINY, tiny_language
from qalib.nn.pretrained import minilm
from qalib.lab.train import TrainConfig, evaluate, train


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=300)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("no CUDA device: this script checks the GPU path and has nothing to do here")
        return 2
    ok = True
    print(f"device: {torch.cuda.get_device_name(0)}, torch {torch.__version__}")
    cfg = TINY.replace(d_model=256, n_layers=4, n_heads=8, d_ff=1024, max_len=128)
    torch.manual_seed(0)
    model = MiniBert(cfg).eval()
    ids = torch.randint(5, cfg.vocab_size, (8, 64))
    with torch.no_grad():
        cpu = model(ids).last_hidden_state
        gpu_model = model.to("cuda")
        fp32 = gpu_model(ids.cuda()).last_hidden_state.float().cpu()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            bf16 = gpu_model(ids.cuda()).last_hidden_state.float().cpu()
    d32, d16 = (fp32 - cpu).abs().max().item(), (bf16 - cpu).abs().max().item()
    print(f"forward CPU vs CUDA fp32: max |diff| {d32:.2e}  (expect < 1e-3)")
    print(f"forward CPU vs CUDA bf16: max |diff| {d16:.2e}  (expect < 0.1: bf16 keeps 8 bits of mantissa)")
    ok &= d32 < 1e-3 and d16 < 0.1

    ref, tok = minilm()
    enc = tok(["The strawberries were delicious.", "A second, longer sentence to make padding."])
    with torch.no_grad():
        a = ref(**enc).last_hidden_state
        b = minilm("cuda")[0](**{k: v.cuda() for k, v in enc.items()}).last_hidden_state.cpu()  # minilm() stays on CPU
    keep = enc["attention_mask"].bool()
    dm = (a - b)[keep].abs().max().item()
    print(f"pretrained MiniLM CPU vs CUDA fp32: max |diff| {dm:.2e}  (expect < 1e-3)")
    ok &= dm < 1e-3

    task = MLMTask(tiny_language(), seq_len=126)
    torch.manual_seed(0)
    big = MiniBert(cfg)
    t0 = time.perf_counter()
    hist = train(big, task, TrainConfig(steps=args.steps, batch_size=128, lr=1e-3, warmup=30, device="cuda"))
    torch.cuda.synchronize()
    secs = time.perf_counter() - t0
    tokens = args.steps * 128 * 128
    acc = evaluate(big, task)["accuracy"]
    print(f"bf16 training: {args.steps} steps in {secs:.1f} s ({tokens / secs:,.0f} tokens/s incl. CPU data generation); "
          f"loss {hist.loss[0]:.3f} -> {hist.loss[-1]:.3f}; MLM accuracy {acc:.3f} (chance {1 / 27:.3f})")
    ok &= hist.loss[-1] < hist.loss[0] and acc > 3 / 27
    print("GPU CHECK", "PASSED" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
