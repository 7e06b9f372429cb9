"""Train S models of one config at once: one batched computation with a seed axis on every weight (torch.func).

    run = train_seeds(cfg, task, seeds=[0, 1, 2], cfg=TrainConfig(steps=200))
    run.models[i], run.histories[i], run.seeds[i]    # ordinary MiniBerts (eval mode), History as qalib.lab.train's

Member i is the solo run of its seed,

    torch.manual_seed(seed); model = MiniBert(cfg); history = train(model, task, train_cfg.replace(seed=seed))

with the same initial weights (built exactly so), the same batches (its own generator seeded with `seed`, drawn
with task.batch as train draws them), the same AdamW with decay / no-decay groups and warm-up, and its own
gradient clipping (its own global gradient norm, clip_grad_norm_'s formula). The S forward passes run as one
through torch.func.vmap over the stacked weights (qalib.lab.stacked: stack_module_state + functional_call), with
MiniBert's unchecked forward: the batch is checked once per step, for all members, on the host (MiniBert.check_inputs).

What differs from the solo runs, all of it float rounding (tests/test_train_batched.py measures it):
  - the batched kernels sum in another order (a bmm over members instead of one mm each; on the CPU attention
    runs on torch's math kernel, whose matmul + softmax vmap batches, instead of the fused flash kernel that
    vmap would run once per member);
  - a token task's loss is each member's masked sum over its labelled positions divided by their number, where
    train takes the mean of the selected positions (members have different numbers of labelled positions);
  - with a padded task where some members' batches have no padding, those members still get a mask (all True).
The runs therefore agree to float tolerance, not bit for bit, and drift apart slowly over many steps as any two
float orders do. With dropout > 0 each member draws its own masks (vmap randomness="different"), so the masks
are not the solo run's (the same distribution).

Not supported (ValueError): BatchNorm (its running statistics are updated in place) and the
attention-entropy log (TrainConfig.entropy_every): train them with qalib.lab.train.train.

Speed: see `python -m qalib.tools.bench --only train`; the README's Library section has the numbers measured here.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from qalib.lab.data import IGNORE, Batch
from qalib.lab.device import get_device
from qalib.lab.stacked import StackedModules, clip_per_member
from qalib.nn.config import MiniBertConfig
from qalib.nn.model import MiniBert
from qalib.lab.train import (History, TrainConfig, grad_norm_group, is_log_step, make_optimizer, raise_if_not_finite,
                         training_threads)
from qalib.nn.validate import seed_list

__all__ = ["SeedBatch", "train_seeds"]

UNSUPPORTED_NORMS = ("batch", "batch_masked")


@dataclass
class SeedBatch:
    """The outcome of train_seeds: member i is seed seeds[i]'s model and training history."""

    seeds: list[int]
    models: list[MiniBert]      # ordinary MiniBerts on the training device, in eval mode
    histories: list[History]


def train_seeds(model: MiniBertConfig | Callable[[], MiniBert], task, seeds: Sequence[int],
                cfg: TrainConfig = TrainConfig()) -> SeedBatch:
    """Train one model per seed as one batched computation (see the module doc for what equals the solo runs).

    model: a MiniBertConfig, or a function of no arguments returning a MiniBert, called right after
    torch.manual_seed(seed) for each seed (as a solo experiment builds its model). cfg.seed is not used: each
    member trains with its own seed, as train(model, task, cfg.replace(seed=seed)) would."""
    seeds = seed_list("seeds", seeds)
    factory = (lambda: MiniBert(model)) if isinstance(model, MiniBertConfig) else model
    if not callable(factory):
        raise TypeError(f"train_seeds needs a MiniBertConfig or a function returning a MiniBert, got {type(model).__name__}")
    if cfg.entropy_every:
        raise ValueError("train_seeds does not log attention entropy (TrainConfig.entropy_every must be 0): "
                         "use qalib.lab.train.train for that run")
    members = []
    for seed in seeds:
        torch.manual_seed(seed)  # the solo run's init: torch.manual_seed(seed); model = MiniBert(cfg)
        member = factory()
        if not isinstance(member, MiniBert):
            raise TypeError(f"the model function must return a MiniBert, got {type(member).__name__}")
        members.append(member.train())
    model_cfg = members[0].cfg
    if any(m.cfg != model_cfg for m in members):
        raise ValueError("every member must have the same MiniBertConfig: the seeds train as one batched computation")
    if model_cfg.norm in UNSUPPORTED_NORMS:
        raise ValueError(f"train_seeds does not support norm={model_cfg.norm!r} (BatchNorm updates its running "
                         "statistics in place): use qalib.lab.train.train")
    device = get_device(cfg.device)
    with training_threads(cfg, device):
        histories = _train_stacked(members, seeds, task, cfg, device)
    return SeedBatch(seeds, members, histories)


def _member_loss(model: MiniBert, input_ids, token_type_ids, keep, targets, positions, labelled, n_labelled):
    """One member's loss and accuracy on its batch: what StackedModules maps over the stacked weights.
    input_ids, token_type_ids (B, T); keep (B, T) bool or None. A class task: targets (B,), positions None. A token
    task: positions (N,) the flat indices into B * T of this member's labelled tokens, padded to the most any member
    has; targets (N,) their labels (0 in the padding), labelled (N,) bool, False in the padding; n_labelled () this
    member's number of labelled tokens (float). -> loss (), accuracy ()."""
    hidden = model.forward_unchecked(input_ids, token_type_ids, keep).last_hidden_state  # (B, T, d)
    if positions is None:
        logits = model.class_logits(hidden)  # (B, C)
        loss = F.cross_entropy(logits.float(), targets)
        accuracy = (logits.argmax(-1) == targets).float().mean()
        return loss, accuracy
    tokens = hidden.reshape(-1, hidden.shape[-1])[positions]  # (B, T, d) -> (B*T, d) -> (N, d)
    logits = model.mlm_logits(tokens)                         # (N, V): the vocabulary only where there is a loss
    # where, not a product: a padding row's loss is dropped even if it is inf
    per_token = torch.where(labelled, F.cross_entropy(logits.float(), targets, reduction="none"), 0.0)  # (N,)
    correct = (logits.argmax(-1) == targets) & labelled                                                 # (N,)
    return per_token.sum() / n_labelled, correct.float().sum() / n_labelled


@dataclass
class _StackedBatch:
    """One step's batches of all members, stacked and moved to the device (the arguments of _MemberLoss)."""

    input_ids: torch.Tensor             # (S, B, T)
    token_type_ids: torch.Tensor        # (S, B, T)
    keep: torch.Tensor | None           # (S, B, T) bool, or None when no member's batch has padding
    targets: torch.Tensor               # (S, B) class labels, or (S, N) labels at the gathered positions
    positions: torch.Tensor | None      # (S, N) flat token indices (token tasks), else None
    labelled: torch.Tensor | None       # (S, N) bool
    n_labelled: torch.Tensor | None     # (S,) float

    def args(self) -> tuple:
        return (self.input_ids, self.token_type_ids, self.keep, self.targets, self.positions, self.labelled,
                self.n_labelled)

    def in_dims(self) -> tuple:
        """vmap's in_dims for args(): the member axis 0 of each tensor (None for the absent ones)."""
        return tuple(None if a is None else 0 for a in self.args())


def stack_batches(batches: list[Batch], checker: MiniBert, device: torch.device) -> _StackedBatch:
    """The members' batches of one step as one _StackedBatch, checked once on the host by MiniBert.check_inputs."""
    kinds = {b.kind for b in batches}
    shapes = {tuple(b.input_ids.shape) for b in batches}
    if len(kinds) != 1 or len(shapes) != 1:
        raise ValueError(f"every member's batch must have the same kind and shape, got kinds {sorted(kinds)} and "
                         f"shapes {sorted(shapes)}: train_seeds stacks them")
    s, (b, t) = len(batches), batches[0].input_ids.shape
    input_ids = torch.stack([x.input_ids for x in batches])              # (S, B, T)
    token_type_ids = torch.stack([x.token_type_ids for x in batches])    # (S, B, T)
    attention_mask = torch.stack([x.attention_mask for x in batches])    # (S, B, T)
    # the members' checks in one call: their B rows each, side by side -> (S*B, T)
    token_type_ids, keep = checker.check_inputs(input_ids.reshape(s * b, t), token_type_ids.reshape(s * b, t),
                                                attention_mask.reshape(s * b, t))
    token_type_ids = token_type_ids.reshape(s, b, t)                     # (S*B, T) -> (S, B, T)
    keep = None if keep is None else keep.reshape(s, b, t)               # (S*B, T) -> (S, B, T)
    labels = torch.stack([x.labels for x in batches])                    # (S, B, T) token or (S, B) class labels
    positions = labelled = n_labelled = None
    targets = labels
    if batches[0].kind == "token":
        flat = labels.reshape(s, b * t)                                   # (S, B*T)
        is_labelled = flat != IGNORE                                      # (S, B*T)
        counts = is_labelled.sum(dim=1)                                   # (S,)
        if int(counts.min()) == 0:
            raise ValueError(f"seed member(s) {(counts == 0).nonzero().flatten().tolist()} have no labelled "
                             "token in this batch: the loss would be 0 / 0")
        n_max = int(counts.max())
        # a stable sort puts each member's labelled positions first, in the order train's boolean index reads them
        positions = torch.sort(is_labelled.to(torch.uint8), dim=1, descending=True, stable=True).indices[:, :n_max]  # (S, N)
        labelled = torch.arange(n_max)[None, :] < counts[:, None]         # (S, N)
        targets = torch.gather(flat, 1, positions).masked_fill(~labelled, 0)  # (S, N): 0, a valid class, in padding
        n_labelled = counts.float()
    move = lambda x: None if x is None else x.to(device)  # noqa: E731
    return _StackedBatch(move(input_ids), move(token_type_ids), move(keep), move(targets), move(positions),
                         move(labelled), move(n_labelled))


@torch.no_grad()
def member_grad_norms(named_grads: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """qalib.lab.train.layer_grad_norms for every member at once: {group: (S,) L2 norms}, on the device."""
    squares: dict[str, torch.Tensor] = {}
    for name, g in named_grads.items():
        key = grad_norm_group(name)
        if key is not None:
            square = g.float().pow(2).reshape(g.shape[0], -1).sum(dim=1)  # (S, ...) -> (S, n) -> (S,)
            squares[key] = squares[key] + square if key in squares else square
    return {key: sq.sqrt() for key, sq in squares.items()}


class StackedMembers:
    """The members' weights stacked, {name: (S, *shape)} leaves that require grad (buffers likewise), and their
    batched loss: losses(batch) -> (S,) losses and (S,) accuracies, member i computed with slice i."""

    def __init__(self, members: list[MiniBert], device: torch.device) -> None:
        self._stack = StackedModules(members, device, randomness="different" if members[0].cfg.dropout > 0 else "error")
        self.params, self.buffers = self._stack.params, self._stack.buffers
        self._checker = members[0]  # check_inputs reads only its config

    def losses(self, batch: _StackedBatch) -> tuple[torch.Tensor, torch.Tensor]:
        return self._stack.map(_member_loss, *batch.args(), in_dims=batch.in_dims())

    def check_and_stack(self, batches: list[Batch], device: torch.device) -> _StackedBatch:
        return stack_batches(batches, self._checker, device)

    def unstack_into(self, members: list[MiniBert]) -> None:
        """Member i gets slice i of every weight and buffer."""
        self._stack.unstack_into(members)


def _train_stacked(members: list[MiniBert], seeds: list[int], task, cfg: TrainConfig,
                   device: torch.device) -> list[History]:
    n = len(members)
    stacked = StackedMembers(members, device)
    params = stacked.params
    torch.manual_seed(seeds[0])  # dropout masks, if any (they are not the solo runs': see the module doc)
    data_gens = [torch.Generator().manual_seed(seed) for seed in seeds]  # each member's own data stream
    # AdamW is elementwise (its step count is shared, like the members' steps), so AdamW on the stacked weights is
    # each member's AdamW on its slice; decay as in train: weights of >= 2 dims, i.e. >= 3 with the member axis
    decay = [p for p in params.values() if p.dim() >= 3]
    no_decay = [p for p in params.values() if p.dim() < 3]
    opt, sched = make_optimizer(decay, no_decay, cfg)
    autocast = (torch.autocast("cuda", dtype=torch.bfloat16) if device.type == "cuda" else contextlib.nullcontext())
    histories = [History() for _ in members]
    unread_losses: list[torch.Tensor] = []  # (S,) per step since the last log step, detached, on the device
    for step in tqdm(range(cfg.steps), disable=not cfg.progress, desc=f"training {n} seeds", leave=False):
        batch = stacked.check_and_stack([task.batch(cfg.batch_size, g) for g in data_gens], device)
        with autocast:
            losses, accuracies = stacked.losses(batch)  # (S,) each
        unread_losses.append(losses.detach())
        opt.zero_grad(set_to_none=True)
        # the members share no weight, so the gradient of the sum is each member's own gradient, in its slice
        losses.sum().backward()
        log = is_log_step(step, cfg)
        with_grad = {name: p.grad for name, p in params.items() if p.grad is not None}
        if log:
            window = torch.stack(unread_losses).T.tolist()  # (steps, S) -> S lists, one transfer
            unread_losses.clear()
            for seed, member_losses in zip(seeds, window):
                raise_if_not_finite(member_losses, step - len(member_losses) + 1, f" for seed {seed}")
            grad_norms = {k: v.tolist() for k, v in member_grad_norms(with_grad).items()}  # before clipping, as train
        if cfg.clip:
            clip_per_member(list(with_grad.values()), cfg.clip)
        opt.step()
        sched.step()
        if log:
            for i, (hist, accuracy) in enumerate(zip(histories, accuracies.tolist())):
                hist.step.append(step)
                hist.loss.append(window[i][-1])
                hist.step_loss += window[i]
                hist.accuracy.append(accuracy)
                for k, v in grad_norms.items():
                    hist.grad_norm.setdefault(k, []).append(v[i])
    stacked.unstack_into(members)
    for member in members:
        member.eval()
    return histories
