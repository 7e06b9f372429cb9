"""The one training loop of the collection: AdamW, linear warm-up (then constant or a linear decay), gradient
clipping, logging, and what a learned-or-not gate reads.

    history = fit(model, loss_fn, batches, TrainConfig(steps=300))   # any model: loss_fn(model, batch) -> loss
    history = train(model, task, TrainConfig(steps=300, seed=0))     # a MiniBert on a qalib.lab.data task
    history.loss, history.accuracy, history.grad_norm["layer0"], history.step_loss, history.attn_entropy

Every experiment trains through `fit` (or, many seeds of one MiniBert as one computation, through
qalib.lab.train_batched.train_seeds); no experiment steps an optimizer itself. Same seed on CPU -> identical loss
curve (the caller seeds the weights and the batches; `train` does both from cfg.seed).
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import partial
from typing import Literal, get_args

import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from qalib.lab.data import IGNORE, Batch
from qalib.lab.device import get_device
from qalib.nn.attention import entropy
from qalib.nn.model import MiniBert

# How AdamW steps: "foreach" (one call for all tensors), "fused" (one kernel: faster on the CPU, but its arithmetic
# differs, ~2e-6 after 100 steps), or "default" (torch's choice: one tensor at a time on the CPU, foreach on CUDA).
AdamKernel = Literal["foreach", "fused", "default"]
# The learning rate after the warm-up: held ("constant") or falling linearly to 0 at the last step ("linear", BERT's).
Decay = Literal["constant", "linear"]


@dataclass(frozen=True)
class TrainConfig:
    steps: int = 300
    batch_size: int = 64
    lr: float = 3e-3
    warmup: int = 30
    weight_decay: float = 0.01
    clip: float = 1.0            # max global gradient norm; 0 disables clipping
    seed: int = 0
    log_every: int = 10          # record loss/accuracy/grad norms every N steps
    entropy_every: int = 0       # record attention entropy every N steps (0: never; costs an extra forward)
    progress: bool = False
    device: str | torch.device | None = None  # None: qalib.get_device()
    # CPU threads while training. The notebooks' models are tiny: on 2 cores one thread is several times
    # faster than two under any other load (OpenMP's spin-waiting), and never much slower. None: torch's setting.
    threads: int | None = 1
    # AdamKernel above. fused: on the CPU here its step takes ~0.26 ms instead of foreach's ~1.3 ms (d = 32, 2
    # layers), but the notebooks' printed numbers would move, so foreach is the default.
    kernel: AdamKernel = "foreach"
    eps: float = 1e-8            # Adam's epsilon (BERT's fine-tuning recipe uses 1e-6)
    decay: Decay = "constant"    # the learning rate after the warm-up

    def __post_init__(self):
        for name in ("steps", "batch_size", "log_every"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ValueError(f"TrainConfig.{name} must be an int >= 1, got {v!r}")
        for name in ("warmup", "entropy_every"):
            v = getattr(self, name)
            if not isinstance(v, int) or v < 0:
                raise ValueError(f"TrainConfig.{name} must be an int >= 0, got {v!r}")
        if not (isinstance(self.lr, (int, float)) and 0 < self.lr < 1):
            raise ValueError(f"TrainConfig.lr must be in (0, 1), got {self.lr!r}")
        if self.threads is not None and (not isinstance(self.threads, int) or self.threads < 1):
            raise ValueError(f"TrainConfig.threads must be None or an int >= 1, got {self.threads!r}")
        for name, kind in (("kernel", AdamKernel), ("decay", Decay)):
            if getattr(self, name) not in get_args(kind):
                raise ValueError(f"TrainConfig.{name} must be one of {list(get_args(kind))}, got {getattr(self, name)!r}")
        if not (isinstance(self.eps, (int, float)) and 0 < self.eps < 1):
            raise ValueError(f"TrainConfig.eps must be in (0, 1), got {self.eps!r}")
        if self.clip < 0 or self.weight_decay < 0:
            raise ValueError("TrainConfig.clip and weight_decay must be >= 0")

    def replace(self, **changes) -> "TrainConfig":
        unknown = set(changes) - {f.name for f in dataclasses.fields(self)}
        if unknown:
            raise ValueError(f"TrainConfig has no field(s) {sorted(unknown)}")
        return dataclasses.replace(self, **changes)


@dataclass
class History:
    """What a run logged. At the log steps (every cfg.log_every and the last): step, loss, accuracy (when the loss
    function gives one), grad_norm (before clipping). step_loss: every step's training loss, what a learned-or-not
    gate reads (first_loss, final_loss)."""
    step: list[int] = field(default_factory=list)
    loss: list[float] = field(default_factory=list)
    accuracy: list[float] = field(default_factory=list)
    grad_norm: dict[str, list[float]] = field(default_factory=dict)   # per layer ("embeddings", "layer0", ...)
    entropy_step: list[int] = field(default_factory=list)
    attn_entropy: list[list[float]] = field(default_factory=list)      # per logged step: mean entropy per layer (nats)
    step_loss: list[float] = field(default_factory=list)                # the training loss at every step
    stopped_early: int | None = None  # the steps taken, when an on_step hook stopped the run before cfg.steps

    @property
    def first_loss(self) -> float:
        """The loss of the first step: the untrained model's, on its first batch."""
        return self.step_loss[0]

    def final_loss(self, share: float = 0.1) -> float:
        """The mean training loss over the last `share` of the steps (at least one): the end of the run, with less
        of one batch's noise than its last step."""
        if not 0 < share <= 1:
            raise ValueError(f"share must be in (0, 1], got {share!r}")
        tail = self.step_loss[-max(1, round(share * len(self.step_loss))):]
        return sum(tail) / len(tail)


def loss_and_accuracy(model: MiniBert, batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
    """Cross-entropy and accuracy on the labelled positions (token tasks) or on [CLS] (class tasks)."""
    return head_loss_and_accuracy(model, model(**batch.model_inputs()).last_hidden_state, batch)


def head_loss_and_accuracy(model: MiniBert, hidden: torch.Tensor, batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
    """loss_and_accuracy from the encoder's output hidden (B, T, d): the MLM head at the labelled positions, or
    the classifier on [CLS]."""
    if batch.kind == "token":
        keep = batch.labels != IGNORE
        logits = model.mlm_logits(hidden[keep])  # (N_labelled, V): the vocabulary projection only where there is a loss
        loss = F.cross_entropy(logits.float(), batch.labels[keep])
        acc = (logits.argmax(-1) == batch.labels[keep]).float().mean()
    else:
        logits = model.class_logits(hidden)  # (B, C)
        loss = F.cross_entropy(logits.float(), batch.labels)
        acc = (logits.argmax(-1) == batch.labels).float().mean()
    return loss, acc


def layer_grad_norms(model: MiniBert) -> dict[str, float]:
    """L2 norm of the gradient of each group of parameters: embeddings, layer0 .. layerN-1."""
    groups: dict[str, float] = {}
    for name, p in model.named_parameters():
        key = grad_norm_group(name)
        if p.grad is not None and key is not None:
            groups[key] = groups.get(key, 0.0) + float(p.grad.detach().float().pow(2).sum())
    return {k: math.sqrt(v) for k, v in groups.items()}


def grad_norm_group(name: str) -> str | None:
    """The group of layer_grad_norms a parameter belongs to: "embeddings", "layer0", ..., or None (the heads)."""
    if name.startswith("layers."):
        return "layer" + name.split(".")[1]
    if name.startswith("embeddings."):
        return "embeddings"
    return None


@torch.no_grad()
def attention_entropy(model: MiniBert, batch: Batch) -> list[float]:
    """Mean attention entropy (nats) per layer over real query positions of a batch."""
    internals = model(**batch.model_inputs(), return_internals=True).internals
    keep = batch.attention_mask.bool()
    out = []
    for i in range(model.cfg.n_layers):
        h = entropy(internals[f"layer{i}.probs"].float())  # (B, H, T)
        out.append(float(h.mean(1)[keep].mean()))
    return out


def train(model: MiniBert, task, cfg: TrainConfig = TrainConfig(), *,
          on_step: Callable[[History, int, torch.nn.Module, object], None] | None = None) -> History:
    """Train a MiniBert (or a model with its interface, like notebook 13's RecurrentLM) on fresh batches of a
    qalib.lab.data task: the weights' other randomness (dropout) and the batches both seeded from cfg.seed.
    on_step as in fit (e.g. a held-out evaluation at checkpoints), after the entropy log of cfg.entropy_every."""
    device = get_device(cfg.device)
    model.to(device)
    torch.manual_seed(cfg.seed)  # dropout masks
    data_gen = torch.Generator().manual_seed(cfg.seed)
    batches = (task.batch(cfg.batch_size, data_gen) for _ in range(cfg.steps))
    hooks = [partial(_log_entropy, every=cfg.entropy_every, last=cfg.steps - 1)] if cfg.entropy_every else []
    hooks += [on_step] if on_step is not None else []
    return fit(model, partial(task_loss, device=device), batches, cfg,
               on_step=partial(_each, hooks) if len(hooks) > 1 else (hooks[0] if hooks else None))


def _each(hooks, *args) -> None:
    for hook in hooks:
        hook(*args)


def task_loss(model: MiniBert, batch: Batch, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """A task batch's loss and accuracy on `device`. A MiniBert's inputs are checked here, on the host where the task
    made them, and its forward then skips the checks: they read tensor values (.min(), .any()), a host-device sync
    per step on a GPU. Other models (notebook 13's RecurrentLM) run their own forward."""
    if isinstance(model, MiniBert):
        token_type_ids, keep = model.check_inputs(batch.input_ids, batch.token_type_ids, batch.attention_mask)
        batch = batch.to(device)
        hidden = model.forward_unchecked(batch.input_ids, token_type_ids.to(device),
                                         None if keep is None else keep.to(device)).last_hidden_state
        return head_loss_and_accuracy(model, hidden, batch)
    return loss_and_accuracy(model, batch.to(device))


def _log_entropy(history: History, step: int, model: MiniBert, batch: Batch, every: int, last: int) -> None:
    if step % every == 0 or step == last:
        model.eval()
        history.entropy_step.append(step)
        history.attn_entropy.append(attention_entropy(model, batch.to(next(model.parameters()).device)))
        model.train()


LossFn = Callable[..., "torch.Tensor | tuple[torch.Tensor, torch.Tensor]"]


def fit(model: torch.nn.Module, loss_fn: LossFn, batches: Iterable, cfg: TrainConfig = TrainConfig(), *,
        on_step: Callable[[History, int, torch.nn.Module, object], None] | None = None,
        decay_groups: tuple[list[torch.Tensor], list[torch.Tensor]] | None = None) -> History:
    """Train `model` for cfg.steps steps, one batch of `batches` a step: loss_fn(model, batch) -> the loss, or
    (loss, accuracy). AdamW, cfg.warmup steps of linear warm-up then cfg.decay, gradient clipping at cfg.clip, on
    cfg.device under cfg.threads; bf16 autocast on CUDA. Weight decay goes to the weights of >= 2 dims, or, with
    decay_groups = (decay, no_decay), to exactly those (BERT's rule names biases and LayerNorm); clipping sums the
    parameters' norms in the order of model.parameters(), or of decay + no_decay when the groups are given.
    on_step(history, step, model, batch) runs after each step's update (probes, entropy logs); it may switch the
    model to eval mode and must switch it back; returning True stops training there (history.stopped_early). The caller seeds the weights and the batches. The model comes back
    in eval mode. FloatingPointError names the first step whose loss is NaN or inf."""
    device = get_device(cfg.device)
    with training_threads(cfg, device):
        return _fit(model, loss_fn, batches, cfg, device, on_step, decay_groups)


def _fit(model, loss_fn, batches, cfg: TrainConfig, device: torch.device, on_step, decay_groups) -> History:
    model.to(device).train()
    if decay_groups is None:
        decay = [p for p in model.parameters() if p.requires_grad and p.dim() >= 2]
        no_decay = [p for p in model.parameters() if p.requires_grad and p.dim() < 2]  # biases, norm gains
        clipped = list(model.parameters())
    else:
        decay, no_decay = (list(g) for g in decay_groups)
        clipped = decay + no_decay
    opt, sched = make_optimizer(decay, no_decay, cfg)
    autocast = (torch.autocast("cuda", dtype=torch.bfloat16) if device.type == "cuda" else contextlib.nullcontext())
    hist = History()
    unread_losses: list[torch.Tensor] = []  # this step's and earlier losses not yet read on the host, detached
    step = -1
    for step, batch in zip(tqdm(range(cfg.steps), disable=not cfg.progress, desc="training", leave=False), batches):
        with autocast:
            out = loss_fn(model, batch)
        loss, acc = out if isinstance(out, tuple) else (out, None)
        unread_losses.append(loss.detach())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        log = is_log_step(step, cfg)
        if log:
            # NaN/inf is checked here, for every step since the last log step, in one transfer; a non-finite step
            # before it only costs the steps up to here (its numbers are lost either way)
            losses = torch.stack(unread_losses).float().tolist()
            raise_if_not_finite(losses, step - len(losses) + 1)
            unread_losses.clear()
            hist.step_loss += losses
            for k, v in layer_grad_norms(model).items():
                hist.grad_norm.setdefault(k, []).append(v)
        if cfg.clip:
            # the order matters to the last bit: the total norm sums the parameters' norms in this order
            torch.nn.utils.clip_grad_norm_(clipped, cfg.clip)
        opt.step()
        sched.step()
        if log:
            hist.step.append(step)
            hist.loss.append(losses[-1])
            if acc is not None:
                hist.accuracy.append(float(acc))
        if on_step is not None and on_step(hist, step, model, batch) is True:
            hist.stopped_early = step + 1  # the hook said stop (e.g. the task is solved): steps actually taken
            if unread_losses:  # the steps since the last log step
                losses = torch.stack(unread_losses).float().tolist()
                raise_if_not_finite(losses, step - len(losses) + 1)
                hist.step_loss += losses
            break
    if step + 1 < cfg.steps and hist.stopped_early is None:
        raise ValueError(f"batches ran out after {step + 1} of TrainConfig.steps = {cfg.steps} steps")
    model.eval()
    return hist


@contextlib.contextmanager
def training_threads(cfg: TrainConfig, device: torch.device):
    """torch's CPU threads set to cfg.threads while training on the CPU (see TrainConfig.threads), then restored."""
    previous_threads = torch.get_num_threads()
    if cfg.threads is not None and device.type == "cpu":
        torch.set_num_threads(cfg.threads)
    try:
        yield
    finally:
        torch.set_num_threads(previous_threads)


def make_optimizer(decay: list[torch.Tensor], no_decay: list[torch.Tensor], cfg: TrainConfig):
    """AdamW with weight decay on `decay` only, and the learning-rate schedule -> (optimizer, scheduler)."""
    # foreach: one call per step for all parameters. torch picks it by default only on CUDA; on the CPU the
    # per-tensor loop cost ~10% of a small model's training step here, for the same numbers.
    kernel = {"foreach": {"foreach": True}, "fused": {"fused": True}, "default": {}}[cfg.kernel]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": cfg.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}], lr=cfg.lr, eps=cfg.eps, **kernel)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, partial(lr_factor, cfg=cfg))
    return opt, sched


def lr_factor(step: int, cfg: TrainConfig) -> float:
    """The learning rate at `step` as a share of cfg.lr: a linear warm-up over cfg.warmup steps, (step + 1) / warmup,
    then 1 (decay "constant"), or a linear fall to 0 at cfg.steps (decay "linear", the shape of BERT's schedule)."""
    if step < cfg.warmup:
        return min(1.0, (step + 1) / cfg.warmup)
    if cfg.decay == "constant":
        return 1.0
    return max(0.0, (cfg.steps - step) / max(1, cfg.steps - cfg.warmup))


def is_log_step(step: int, cfg: TrainConfig) -> bool:
    return step % cfg.log_every == 0 or step == cfg.steps - 1


def raise_if_not_finite(losses: list[float], first_step: int, member: str = "") -> None:
    """FloatingPointError naming the first step whose loss is NaN or inf; losses[i] is step first_step + i's.
    The loop reads its losses only at log steps (one transfer for all the steps since the last), not every step."""
    for i, value in enumerate(losses):
        if not math.isfinite(value):
            raise FloatingPointError(f"loss became {value} at step {first_step + i}{member}: lower TrainConfig.lr "
                                     "or check the model variant")


@torch.no_grad()
def evaluate(model: MiniBert, task, n_batches: int = 4, batch_size: int = 128, seed: int = 12345, **batch_kwargs) -> dict[str, float]:
    """Loss and accuracy on fresh batches from a fixed evaluation seed (disjoint from training draws)."""
    device = next(model.parameters()).device
    model.eval()
    gen = torch.Generator().manual_seed(seed)
    losses, accs = [], []
    for _ in range(n_batches):
        batch = task.batch(batch_size, gen, **batch_kwargs).to(device)
        loss, acc = loss_and_accuracy(model, batch)
        losses.append(float(loss))
        accs.append(float(acc))
    return {"loss": sum(losses) / n_batches, "accuracy": sum(accs) / n_batches}
