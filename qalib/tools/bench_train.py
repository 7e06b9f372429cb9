"""`make bench ONLY=train`: the seed-batched trainer against the runs one after another, and qalib.lab.train's step
against a bare PyTorch loop over the same modules, at d = 32, 64 and 128 (2 layers, 4 heads, d_ff = 4d, batches
of 32 x 20 tokens: the notebooks' experiments' size), in one run on this machine.

    1. 12 seeds: qalib.lab.train_batched.train_seeds against 12 calls of qalib.lab.train.train, one after another
       (each as an experiment runs it: the model built after torch.manual_seed(seed), then trained).
       Goal at d = 32: >= 5x. Larger d shows where batching stops paying.
    2. one model: qalib.lab.train.train against a bare loop (task.batch, forward, loss, backward, clip_grad_norm_,
       AdamW foreach, the warm-up schedule: the same numbers, nothing else). Goal: <= 1.2x.

    3. the decoder experiments (qalib.tools.stacked_decoders.train_stacked): notebook 12's decoder LM (d 32, batch 32 x 23) and
       notebook 14's encoder-decoder (d 32, post-norm, batch 64 x 8 -> 8), 3 and 8 seeds stacked against the same
       models trained one after another by a plain loop (same loss function, AdamW, clipping).

Batching the seeds can save only a step's fixed cost (Python, dispatch, the optimizer's per-tensor loop), not
its arithmetic: the benchmark prints one model's step at batch 1 beside batch 32 to show that share.

Every contender is timed in turns (a, b, a, b, ...), the median of the repeats is printed: on a shared machine the
load changes while it runs, and affects every contender alike.
"""

from __future__ import annotations


import torch
import torch.nn.functional as F

from qalib.lab.data import IGNORE, ProbeTask
from qalib.lab.train import TrainConfig, train
from qalib.tools.stacked_decoders import lm_logits_unchecked, seq2seq_logits_unchecked, train_stacked
from qalib.lab.train_batched import train_seeds
from qalib.nn.config import MiniBertConfig
from qalib.nn.model import MiniBert
from qalib.tools.bench_model import time_interleaved

SEEDS = list(range(12))
WIDTHS = (32, 64, 128)
BATCH = 32
TASK = ProbeTask("previous", vocab_size=32, seq_len=19)  # [CLS] + 19 tokens = 20
BATCHED_GOAL, OVERHEAD_GOAL = 5.0, 1.2


def config(d: int) -> MiniBertConfig:
    return MiniBertConfig(vocab_size=32, d_model=d, n_layers=2, n_heads=4, d_ff=4 * d, max_len=24)


def _sequential(cfg: MiniBertConfig, tc: TrainConfig) -> None:
    for seed in SEEDS:
        torch.manual_seed(seed)
        train(MiniBert(cfg), TASK, tc.replace(seed=seed))


def _batched(cfg: MiniBertConfig, tc: TrainConfig) -> None:
    train_seeds(cfg, TASK, SEEDS, tc)


def _one_model(cfg: MiniBertConfig, tc: TrainConfig) -> None:
    torch.manual_seed(0)
    train(MiniBert(cfg), TASK, tc)


def plain_training_loop(model: MiniBert, task, tc: TrainConfig) -> list[torch.Tensor]:
    """What qalib.lab.train computes for a token task, written as a plain PyTorch loop and nothing else (no history, no
    checks beyond the module's own forward): the benchmark's bare loop, and the reference tests/test_train.py holds
    train to bit for bit. -> the loss of every step, detached (read them after the loop: no host sync per step)."""
    model.train()
    torch.manual_seed(tc.seed)  # as train: dropout masks
    data_gen = torch.Generator().manual_seed(tc.seed)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": tc.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}], lr=tc.lr, foreach=True)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / tc.warmup))
    losses = []
    previous = torch.get_num_threads()
    torch.set_num_threads(tc.threads)  # as train does: another thread count sums in another order
    try:
        for _ in range(tc.steps):
            batch = task.batch(tc.batch_size, data_gen)
            hidden = model(**batch.model_inputs()).last_hidden_state
            keep = batch.labels != IGNORE
            loss = F.cross_entropy(model.mlm_logits(hidden[keep]), batch.labels[keep])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), tc.clip)
            opt.step()
            sched.step()
            losses.append(loss.detach())
    finally:
        torch.set_num_threads(previous)
    return losses


def _bare_loop(cfg: MiniBertConfig, tc: TrainConfig) -> None:
    torch.manual_seed(0)
    plain_training_loop(MiniBert(cfg), TASK, tc)


def _data_only(tc: TrainConfig) -> None:
    for seed in SEEDS:
        gen = torch.Generator().manual_seed(seed)
        for _ in range(tc.steps):
            TASK.batch(tc.batch_size, gen)


def bench_train(steps: int = 20, repeats: int = 3) -> dict[str, float]:
    tc = TrainConfig(steps=steps, batch_size=BATCH, device="cpu")
    s = len(SEEDS)
    print(f"\n== train: {s} seeds batched (qalib.lab.train_batched) vs one after another (qalib.lab.train), and qalib.lab.train vs "
          f"a bare loop; 2 layers, 4 heads, batch {BATCH}x{TASK.seq_len + 1}, {steps} steps, {tc.threads} thread, "
          f"median of {repeats} in turns (a shared machine: compare the ratios, not the times)")
    results: dict[str, float] = {}
    for d in WIDTHS:
        cfg = config(d)
        seeds = time_interleaved({"sequential": lambda: _sequential(cfg, tc), "batched": lambda: _batched(cfg, tc),
                                "data": lambda: _data_only(tc)}, repeats, warmup=1)
        # batch 1 is the step's fixed cost (Python, dispatch, the optimizer's loop), what batching the seeds can save
        solo = time_interleaved({"train": lambda: _one_model(cfg, tc), "bare": lambda: _bare_loop(cfg, tc),
                               "batch 1": lambda: _one_model(cfg, tc.replace(batch_size=1))}, max(repeats, 5), warmup=1)
        per = {k: v / (s * steps) * 1e3 for k, v in seeds.items()}   # ms per model-step
        one = {k: v / steps * 1e3 for k, v in solo.items()}          # ms per step
        speedup, overhead = per["sequential"] / per["batched"], one["train"] / one["bare"]
        results |= {f"d{d}_sequential_ms": per["sequential"], f"d{d}_batched_ms": per["batched"],
                    f"d{d}_data_ms": per["data"], f"d{d}_batched_speedup": speedup,
                    f"d{d}_train_ms": one["train"], f"d{d}_bare_ms": one["bare"], f"d{d}_train_overhead": overhead,
                    f"d{d}_batch1_ms": one["batch 1"]}
        goal = f"goal >= {BATCHED_GOAL:.0f}x: {'met' if speedup >= BATCHED_GOAL else 'NOT met'}" if d == 32 else "(no goal)"
        print(f"  d={d:3d}  {s} seeds: one after another {per['sequential']:6.2f} ms per model-step, batched "
              f"{per['batched']:6.2f} ms ({speedup:4.2f}x, {goal}); of which drawing the batches {per['data']:4.2f} ms")
        print(f"         one model: qalib.lab.train {one['train']:6.2f} ms/step, bare loop {one['bare']:6.2f} ms/step "
              f"({overhead:4.2f}x, goal <= {OVERHEAD_GOAL}x: {'met' if overhead <= OVERHEAD_GOAL else 'NOT met'}); "
              f"at batch 1 {one['batch 1']:6.2f} ms/step: the fixed cost is {one['batch 1'] / one['train']:.0%} of a step")
    return results


def _lm_loss(model, ids):
    logits = lm_logits_unchecked(model, ids[:, :-1])  # (B, T-1, V)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1))


def _seq2seq_loss(model, source, decoder_in, labels):
    logits = seq2seq_logits_unchecked(model, source, decoder_in)  # (B, T, V)
    return F.cross_entropy(logits.flatten(0, 1), labels.flatten())


def _decoder_cases():
    """{name: (model factory, loss, one member's batch: a tuple of tensors)} for notebooks 12 and 14's models."""
    from qalib.nn.decoder import DecoderLM, EncoderDecoder
    from qalib.topics.nb14_cross_attention.compute import ReversalTask, reversal_config
    from qalib.topics.nb12_decoding.compute import decoder_config, decoding_language

    g = torch.Generator().manual_seed(0)
    reversal = ReversalTask()
    return {"12 decoder LM": (lambda: DecoderLM(decoder_config(True, None)), _lm_loss,
                              (decoding_language().sample(32, 24, g),)),
            "14 encoder-decoder": (lambda: EncoderDecoder(reversal_config(True, reversal.vocab_size)), _seq2seq_loss,
                                   tuple(reversal.batch(64, g)))}


def _stacked_run(factory, loss, batch, n: int, steps: int) -> None:

    models = [factory() for _ in range(n)]
    stacked_batch = tuple(x.expand(n, *x.shape) for x in batch)  # (S, ...): the same batch for every member
    train_stacked(models, loss, lambda step: stacked_batch, steps,
                  lambda p: (torch.optim.AdamW(p, lr=1e-3, foreach=True), None), clip=1.0)


def _one_after_another(factory, loss, batch, n: int, steps: int) -> None:
    for _ in range(n):
        model = factory()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=True)
        for _ in range(steps):
            value = loss(model, *batch)
            opt.zero_grad(set_to_none=True)
            value.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()


def bench_decoders(steps: int = 20, repeats: int = 3) -> dict[str, float]:
    """Section 3 of the module doc: ms per model-step, stacked and one after another, and their ratio."""
    print(f"\n== train: notebooks 12 and 14's models, seeds stacked (qalib.tools.stacked_decoders) vs one after another, {steps} "
          f"steps, 1 thread, median of {repeats} in turns")
    results: dict[str, float] = {}
    previous = torch.get_num_threads()
    torch.set_num_threads(1)  # as the notebooks' runs (one per core)
    try:
        for name, (factory, loss, batch) in _decoder_cases().items():
            for n in (3, 8):
                t = time_interleaved({"stacked": lambda: _stacked_run(factory, loss, batch, n, steps),
                                      "loop": lambda: _one_after_another(factory, loss, batch, n, steps)}, repeats,
                                     warmup=1)
                per = {k: v / (n * steps) * 1e3 for k, v in t.items()}
                key = name.split()[0]
                results |= {f"{key}_s{n}_stacked_ms": per["stacked"], f"{key}_s{n}_loop_ms": per["loop"],
                            f"{key}_s{n}_speedup": per["loop"] / per["stacked"]}
                print(f"  {name:18s} {n} seeds: one after another {per['loop']:6.2f} ms per model-step, stacked "
                      f"{per['stacked']:6.2f} ms ({per['loop'] / per['stacked']:4.2f}x)")
    finally:
        torch.set_num_threads(previous)
    return results


if __name__ == "__main__":
    bench_train()
    bench_decoders()
