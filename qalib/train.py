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

from qalib.attention import entropy
from qalib.data import IGNORE, Batch
from qalib.device import get_device
from qalib.model import MiniBert


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
    hidden = model(**batch.model_inputs()).last_hidden_state
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
        if p.grad is None:
            continue
        if name.startswith("layers."):
            key = "layer" + name.split(".")[1]
        elif name.startswith("embeddings."):
            key = "embeddings"
        else:
            continue
        groups[key] = groups.get(key, 0.0) + float(p.grad.detach().float().pow(2).sum())
    return {k: math.sqrt(v) for k, v in groups.items()}


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
    previous_threads = torch.get_num_threads()
    if cfg.threads is not None and device.type == "cpu":
        torch.set_num_threads(cfg.threads)
    try:
        return _train(model, task, cfg, device)
    finally:
        torch.set_num_threads(previous_threads)


def _train(model: MiniBert, task, cfg: TrainConfig, device: torch.device) -> History:
    model.to(device).train()
    torch.manual_seed(cfg.seed)  # dropout masks
    data_gen = torch.Generator().manual_seed(cfg.seed)
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]  # biases and norm gains: no weight decay
    # foreach: one call per step for all parameters. torch picks it by default only on CUDA; on the CPU the
    # per-tensor loop cost ~10% of a small model's training step here, for the same numbers.
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": cfg.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}], lr=cfg.lr, foreach=True)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / cfg.warmup) if cfg.warmup else 1.0)
    autocast = (torch.autocast("cuda", dtype=torch.bfloat16) if device.type == "cuda" else contextlib.nullcontext())
    hist = History()
    for step in tqdm(range(cfg.steps), disable=not cfg.progress, desc="training", leave=False):
        batch = task.batch(cfg.batch_size, data_gen).to(device)
        with autocast:
            loss, acc = loss_and_accuracy(model, batch)
        if not torch.isfinite(loss):
            raise FloatingPointError(f"loss became {float(loss)} at step {step}: lower TrainConfig.lr or check the model variant")
        opt.zero_grad(set_to_none=True)
        loss.backward()
        log = step % cfg.log_every == 0 or step == cfg.steps - 1
        if log:
            for k, v in layer_grad_norms(model).items():
                hist.grad_norm.setdefault(k, []).append(v)
        if cfg.clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.clip)
        opt.step()
        sched.step()
        if log:
            hist.step.append(step)
            hist.loss.append(float(loss.detach()))
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
