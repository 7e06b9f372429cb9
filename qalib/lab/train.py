"""A small training loop for the experiments: AdamW, linear warm-up, gradient clipping, progress bar.

    history = train(model, task, TrainConfig(steps=300, seed=0))
    history.loss, history.accuracy, history.grad_norm["layer0"], history.attn_entropy

Same seed on CPU -> identical loss curve (the data generator and the weights are both seeded).
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from qalib.lab.data import IGNORE, Batch
from qalib.lab.device import get_device
from qalib.nn.attention import entropy
from qalib.nn.model import MiniBert


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
    # torch's fused AdamW (one kernel for all parameters): on the CPU here its step takes ~0.26 ms instead of
    # foreach's ~1.3 ms (d = 32, 2 layers), but its arithmetic differs (parameters ~2e-6 apart after 100 steps),
    # so the notebooks' printed numbers would move: off by default.
    fused_adamw: bool = False

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
        if not isinstance(self.fused_adamw, bool):
            raise ValueError(f"TrainConfig.fused_adamw must be a bool, got {self.fused_adamw!r}")
        if self.clip < 0 or self.weight_decay < 0:
            raise ValueError("TrainConfig.clip and weight_decay must be >= 0")

    def replace(self, **changes) -> "TrainConfig":
        unknown = set(changes) - {f.name for f in dataclasses.fields(self)}
        if unknown:
            raise ValueError(f"TrainConfig has no field(s) {sorted(unknown)}")
        return dataclasses.replace(self, **changes)


@dataclass
class History:
    step: list[int] = field(default_factory=list)
    loss: list[float] = field(default_factory=list)
    accuracy: list[float] = field(default_factory=list)
    grad_norm: dict[str, list[float]] = field(default_factory=dict)   # per layer ("embeddings", "layer0", ...)
    entropy_step: list[int] = field(default_factory=list)
    attn_entropy: list[list[float]] = field(default_factory=list)      # per logged step: mean entropy per layer (nats)


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


def train(model: MiniBert, task, cfg: TrainConfig = TrainConfig()) -> History:
    device = get_device(cfg.device)
    with training_threads(cfg, device):
        return _train(model, task, cfg, device)


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
    """AdamW with weight decay on `decay` only, and the linear warm-up -> (optimizer, scheduler)."""
    # foreach: one call per step for all parameters. torch picks it by default only on CUDA; on the CPU the
    # per-tensor loop cost ~10% of a small model's training step here, for the same numbers.
    kernel = {"fused": True} if cfg.fused_adamw else {"foreach": True}
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": cfg.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}], lr=cfg.lr, **kernel)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / cfg.warmup) if cfg.warmup else 1.0)
    return opt, sched


def is_log_step(step: int, cfg: TrainConfig) -> bool:
    return step % cfg.log_every == 0 or step == cfg.steps - 1


def raise_if_not_finite(losses: list[float], first_step: int, member: str = "") -> None:
    """FloatingPointError naming the first step whose loss is NaN or inf; losses[i] is step first_step + i's.
    The loop reads its losses only at log steps (one transfer for all the steps since the last), not every step."""
    for i, value in enumerate(losses):
        if not math.isfinite(value):
            raise FloatingPointError(f"loss became {value} at step {first_step + i}{member}: lower TrainConfig.lr "
                                     "or check the model variant")


def _train(model: MiniBert, task, cfg: TrainConfig, device: torch.device) -> History:
    model.to(device).train()
    torch.manual_seed(cfg.seed)  # dropout masks
    data_gen = torch.Generator().manual_seed(cfg.seed)
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]  # biases and norm gains: no weight decay
    opt, sched = make_optimizer(decay, no_decay, cfg)
    autocast = (torch.autocast("cuda", dtype=torch.bfloat16) if device.type == "cuda" else contextlib.nullcontext())
    # A MiniBert's inputs are checked here, on the host where the task made them, and its forward then skips the
    # checks: they read tensor values (.min(), .any()), a host-device sync per step on a GPU. Other models
    # (notebook 13's RecurrentLM) run their own forward.
    checked_here = isinstance(model, MiniBert)
    hist = History()
    unread_losses: list[torch.Tensor] = []  # this step's and earlier losses not yet read on the host, detached
    for step in tqdm(range(cfg.steps), disable=not cfg.progress, desc="training", leave=False):
        batch = task.batch(cfg.batch_size, data_gen)
        with autocast:
            if checked_here:
                token_type_ids, keep = model.check_inputs(batch.input_ids, batch.token_type_ids, batch.attention_mask)
                batch = batch.to(device)
                hidden = model.forward_unchecked(batch.input_ids, token_type_ids.to(device),
                                                 None if keep is None else keep.to(device)).last_hidden_state
                loss, acc = head_loss_and_accuracy(model, hidden, batch)
            else:
                batch = batch.to(device)
                loss, acc = loss_and_accuracy(model, batch)
        unread_losses.append(loss.detach())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        log = is_log_step(step, cfg)
        if log:
            # NaN/inf is checked here, for every step since the last log step, in one transfer; a non-finite step
            # before it only costs the steps up to here (its numbers are lost either way)
            losses = torch.stack(unread_losses).tolist()
            raise_if_not_finite(losses, step - len(losses) + 1)
            unread_losses.clear()
            for k, v in layer_grad_norms(model).items():
                hist.grad_norm.setdefault(k, []).append(v)
        if cfg.clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.clip)
        opt.step()
        sched.step()
        if log:
            hist.step.append(step)
            hist.loss.append(losses[-1])
            hist.accuracy.append(float(acc))
        if cfg.entropy_every and (step % cfg.entropy_every == 0 or step == cfg.steps - 1):
            model.eval()
            hist.entropy_step.append(step)
            hist.attn_entropy.append(attention_entropy(model, batch))
            model.train()
    model.eval()
    return hist


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
