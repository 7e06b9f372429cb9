"""Decoders trained as one stacked computation, for the benchmark (`make bench ONLY=train`) and its tests; no
notebook trains this way (on 2 CPU cores the decoders' solo runs side by side were faster).

    losses = train_stacked(models, member_loss, next_batch, steps, make_optimizer, clip=1.0)   # the whole loop
    lm_logits_unchecked(model, ids)                      # DecoderLM's logits without the host-side id check
    seq2seq_logits_unchecked(model, source, target)      # EncoderDecoder's teacher-forced logits, likewise

torch.func.vmap cannot trace the models' argument checks (they read the ids' values on the host), so a member's
loss calls these unchecked forwards: the same computation as the models' forward for whole sequences, no cache.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import nn

from qalib.lab.stacked import StackedModules, clip_per_member
from qalib.nn.decoder import DecoderLM, EncoderDecoder


def lm_logits_unchecked(model: DecoderLM, input_ids: torch.Tensor) -> torch.Tensor:
    """DecoderLM's logits (B, T, vocab) for whole sequences (no cache, no internals), without the argument check."""
    hidden, _ = model.decoder(model.embeddings(input_ids))  # (B, T, d)
    return model.logits(hidden)


def seq2seq_logits_unchecked(model: EncoderDecoder, source_ids: torch.Tensor, target_ids: torch.Tensor) -> torch.Tensor:
    """EncoderDecoder's teacher-forced logits (B, T, vocab), without the argument checks."""
    memory = model.embeddings(source_ids, 0, None, "encoder.embeddings")  # (B, S, d)
    for layer in model.encoder:
        memory = layer(memory, None)
    memory = model.encoder_norm(memory, None)
    hidden, _ = model.decoder(model.embeddings(target_ids), None, memory)  # (B, T, d)
    return model.logits(hidden)


def train_stacked(members: Sequence[nn.Module], member_loss: Callable, next_batch: Callable[[int], tuple],
                  steps: int, make_optimizer: Callable[[list[torch.Tensor]], tuple], clip: float | None = None,
                  device: torch.device | str = "cpu") -> torch.Tensor:
    """Train the members side by side, each as its own solo loop would:

        for step in range(steps):
            loss = member_loss(model, *batch_i); zero_grad; loss.backward(); clip_grad_norm_(clip); opt.step(); sched.step()

    next_batch(step) -> a tuple of (S, ...) tensors, member i's batch in slice i (on any device);
    make_optimizer(params) -> (optimizer, scheduler or None) over the stacked weights (elementwise optimizers only:
    Adam, AdamW, SGD; their state is per element, so per member). The members get their trained weights back.
    -> (S, steps) float training losses, read from the device once, at the end (no host sync per step).
    FloatingPointError naming the member and step if a loss is NaN or inf."""
    device = torch.device(device)
    stacked = StackedModules(members, device)
    opt, sched = make_optimizer(stacked.param_list())
    losses = []
    for step in range(steps):
        batch = tuple(x.to(device) for x in next_batch(step))
        loss = stacked.map(member_loss, *batch)  # (S,)
        losses.append(loss.detach())
        opt.zero_grad(set_to_none=True)
        loss.sum().backward()
        if clip:
            clip_per_member(stacked.grads(), clip)
        opt.step()
        if sched is not None:
            sched.step()
    stacked.unstack_into(members)
    history = torch.stack(losses, dim=1).float().cpu() if losses else torch.zeros(len(members), 0)  # (S, steps)
    bad = (~torch.isfinite(history)).nonzero()
    if len(bad):
        member, step = (int(v) for v in bad[0])
        raise FloatingPointError(f"the loss of member {member} became {float(history[member, step])} at step {step}")
    return history
