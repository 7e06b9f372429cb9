"""Notebook 18, "Is attention an explanation?": a task whose explanation is known, the truth by intervention (which
keys the prediction depends on), five attribution methods read from one model, how well each finds the decisive
token, how much they agree, Jain & Wallace's adversarial attention and Wiegreffe & Pinter's uniform baseline. Compute
functions are pure (tensors in, tensors or dicts out); plots take (fig, data).

    task = KeyTokenTask(label_noise=0.1)          # one key token decides the label; its position is known
    iv = key_intervention(model, batch, key_pos, task.distractors)   # does replacing the key flip the prediction?
    attr = attributions(model, batch, readout)    # {method: (B, T)} for raw attention, rollout, gradients, erasure
    rank_scores(attr["rollout"], key_pos, content)  # top-1 hit and reciprocal rank of the known token

The gradient methods are Captum's (Kokhlikyan et al. 2020): LayerGradientXActivation and LayerIntegratedGradients
on the word-embedding layer, so the attribution is per word piece, summed over the embedding's features.
"""

from __future__ import annotations

import contextlib
import html
import itertools
import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from captum.attr import LayerGradientXActivation, LayerIntegratedGradients
from captum.attr._utils.approximation_methods import approximation_parameters

from qalib.lab.data import CLS, N_SPECIAL, PAD, SEP, Batch
from qalib.lab.train import TrainConfig, fit
from qalib.notebook.drawing import LiveTickLabels, bar_polygons, live, live_bars, live_title
from qalib.nn.model import MiniBert
from qalib.nn.validate import int_in

METHODS = ("attention (last layer)", "attention (mean of layers)", "rollout", "gradient x input",
           "integrated gradients", "leave-one-out")
SHORT = {"attention (last layer)": "attn last", "attention (mean of layers)": "attn mean", "rollout": "rollout",
         "gradient x input": "grad x in", "integrated gradients": "IG", "leave-one-out": "erasure"}
IG_STEPS = 64  # steps of integrated gradients (Captum's Gauss-Legendre points; Sundararajan et al. advise
               # 20-300); the notebook prints the completeness gap at this count


# -- the task: one known token decides the label --------------------------------------------------------------
@dataclass(frozen=True)
class KeyTokenTask:
    """[CLS] x_1 .. x_T [SEP] with exactly one key token at a uniformly random position; the label is the key's
    class (the first n_keys key tokens mean 0, the next n_keys mean 1). Every other token is a distractor drawn
    uniformly from the remaining content tokens, so the key is the whole explanation of the label.

    label_noise: the share of *training* labels flipped at random (batch(), what training draws). It keeps the
    trained model off the plateau: the best possible log-odds is then ln((1 - noise) / noise) (2.2 at 0.1), not
    unbounded, so gradients and erasures stay far above float rounding. sample() returns the clean labels: the
    Bayes (best possible) accuracy against them stays 1."""

    vocab_size: int = 32
    seq_len: int = 12
    n_keys: int = 2
    label_noise: float = 0.0

    def __post_init__(self):
        int_in("KeyTokenTask.seq_len", self.seq_len, 2, 256)
        int_in("KeyTokenTask.n_keys", self.n_keys, 1)
        int_in("KeyTokenTask.vocab_size", self.vocab_size, N_SPECIAL + 2 * self.n_keys + 1)
        if not (isinstance(self.label_noise, (int, float)) and 0 <= self.label_noise < 0.5):
            raise ValueError(f"KeyTokenTask.label_noise must lie in [0, 0.5), got {self.label_noise!r}")

    @property
    def keys(self) -> torch.Tensor:
        """(2 * n_keys,) the key token ids: class 0's, then class 1's."""
        return torch.arange(N_SPECIAL, N_SPECIAL + 2 * self.n_keys)

    @property
    def distractors(self) -> torch.Tensor:
        """(V - N_SPECIAL - 2 n_keys,) the distractor token ids."""
        return torch.arange(N_SPECIAL + 2 * self.n_keys, self.vocab_size)

    @property
    def best_log_odds(self) -> float:
        """ln((1 - noise) / noise): the log-odds that minimise the expected loss under label_noise (inf at 0)."""
        return math.inf if self.label_noise == 0 else math.log((1 - self.label_noise) / self.label_noise)

    def sample(self, batch_size: int, generator: torch.Generator | None = None,
               noisy: bool = False) -> tuple[Batch, torch.Tensor]:
        """-> (a class Batch, key positions (B,) as indices into the sequence with [CLS] at 0). The labels are the
        key's class; noisy=True flips each with probability label_noise (drawn after everything else, so the
        sentences are the same either way)."""
        b = int_in("batch_size", batch_size, 1, 1 << 16)
        first = N_SPECIAL + 2 * self.n_keys  # distractors: first .. vocab_size - 1
        x = torch.randint(first, self.vocab_size, (b, self.seq_len), generator=generator)
        pos = torch.randint(self.seq_len, (b,), generator=generator)
        which = torch.randint(2 * self.n_keys, (b,), generator=generator)
        x[torch.arange(b), pos] = self.keys[which]
        label = (which >= self.n_keys).long()
        if noisy and self.label_noise > 0:
            flip = torch.rand(b, generator=generator) < self.label_noise
            label = torch.where(flip, 1 - label, label)
        ids = torch.cat([torch.full((b, 1), CLS), x, torch.full((b, 1), SEP)], dim=1)
        return Batch(ids, torch.zeros_like(ids), torch.ones_like(ids), label, "class"), pos + 1

    def batch(self, batch_size: int, generator: torch.Generator | None = None) -> Batch:
        """A training batch: labels flipped with probability label_noise."""
        return self.sample(batch_size, generator, noisy=True)[0]


# -- readouts: what output an attribution explains ------------------------------------------------------------
def cls_readout(t: int) -> torch.Tensor:
    """(T,) weights over query positions: the classifier reads [CLS] (position 0) alone."""
    w = torch.zeros(t)
    w[0] = 1.0
    return w


def mean_readout(keep: torch.Tensor) -> torch.Tensor:
    """(B, T) -> (B, T): mean pooling over the real tokens (sentence-transformers' pooling), as query weights."""
    k = keep.float()
    return k / k.sum(-1, keepdim=True)


def class_margin(model: MiniBert, input_ids, token_type_ids, attention_mask) -> torch.Tensor:
    """(B, 2): [l0 - l1, l1 - l0], the log-odds of each class. Attributing the predicted class's log-odds keeps the
    gradient alive where the softmax saturates (the probability's gradient would vanish at p ~ 1)."""
    logits = model.class_logits(model(input_ids, token_type_ids, attention_mask).last_hidden_state)  # (B, 2)
    d = logits[:, 0] - logits[:, 1]
    return torch.stack([d, -d], dim=-1)


def pooled(model: MiniBert, input_ids, token_type_ids, attention_mask) -> torch.Tensor:
    """(B, d) unit sentence embeddings: mean over real tokens, then L2-normalised (all-MiniLM-L6-v2's pooling)."""
    h = model(input_ids, token_type_ids, attention_mask).last_hidden_state  # (B, T, d)
    w = mean_readout(attention_mask.bool())                                  # (B, T)
    return F.normalize(torch.einsum("bt,btd->bd", w, h), dim=-1)


def similarity_to(reference: torch.Tensor):
    """A target f(model, ids, types, mask) -> (B,): cosine similarity of the sentence embedding to `reference` (d,)."""
    def f(model, input_ids, token_type_ids, attention_mask):
        return pooled(model, input_ids, token_type_ids, attention_mask) @ reference
    return f


# -- attention-based attributions -----------------------------------------------------------------------------
def attention_maps(model: MiniBert, batch_inputs: dict) -> torch.Tensor:
    """(L, B, H, T, T) attention probabilities of every layer (before dropout)."""
    with torch.no_grad():
        inner = model(**batch_inputs, return_internals=True).internals
    return torch.stack([inner[f"layer{i}.probs"] for i in range(model.cfg.n_layers)])


def rollout(probs: torch.Tensor) -> torch.Tensor:
    """Attention rollout (Abnar & Zuidema 2020, sec. 3, eq. 1): (L, B, H, T, T) -> (B, T, T), the product
    A_{L-1} .. A_0 of A_l = (mean over heads of P_l + I) / 2. Each A_l is row-stochastic, so the product is the
    t-step transition matrix of a walk that at each layer stays put with probability 1/2 (notebook 09's walk)."""
    t = probs.shape[-1]
    eye = torch.eye(t, dtype=probs.dtype, device=probs.device)
    a = 0.5 * probs.mean(2) + 0.5 * eye  # (L, B, T, T)
    out = a[0]
    for layer in a[1:]:
        out = layer @ out  # later layers on the left: row i of the product is where token i's mixture came from
    return out


def attention_attributions(probs: torch.Tensor, readout: torch.Tensor) -> dict[str, torch.Tensor]:
    """probs (L, B, H, T, T), readout (T,) or (B, T) query weights -> the three attention methods, each (B, T):
    the readout's row of the last layer's head-mean, of the layer-and-head mean, and of the rollout."""
    w = readout if readout.dim() == 2 else readout.expand(probs.shape[1], -1)  # (B, T)
    row = lambda m: torch.einsum("bq,bqk->bk", w, m)  # noqa: E731  (B, T, T) -> (B, T)
    return {"attention (last layer)": row(probs[-1].mean(1)), "attention (mean of layers)": row(probs.mean((0, 2))),
            "rollout": row(rollout(probs))}


# -- gradient-based attributions (Captum) and erasure --------------------------------------------------------
def gradient_attributions(model: MiniBert, batch_inputs: dict, target_fn, target=None,
                          ig_steps: int = IG_STEPS, specials: tuple[int, ...] = (CLS, SEP)) -> dict[str, torch.Tensor]:
    """Gradient x input and integrated gradients of target_fn at the word-embedding layer, summed over the features:
    (B, T) each, signed. IG's baseline keeps [CLS], [SEP] and padding and puts [PAD]'s embedding at every other
    position (Sundararajan et al. 2017, sec. 3: a baseline where the prediction is near neutral). specials: the
    ids kept in the baseline ([CLS] and [SEP]: qalib's by default, the tokenizer's for a real model)."""
    ids = batch_inputs["input_ids"]
    extra = (batch_inputs["token_type_ids"], batch_inputs["attention_mask"])
    fwd = lambda i, tt, m: target_fn(model, i, tt, m)  # noqa: E731
    layer = model.embeddings.word_embeddings
    gxi = LayerGradientXActivation(fwd, layer).attribute(ids, target=target, additional_forward_args=extra)
    special = torch.isin(ids, torch.tensor(specials)) | (batch_inputs["attention_mask"] == 0)
    base = torch.where(special, ids, torch.full_like(ids, PAD))
    ig = LayerIntegratedGradients(fwd, layer).attribute(ids, baselines=base, target=target, n_steps=ig_steps,
                                                         additional_forward_args=extra, internal_batch_size=None)
    return {"gradient x input": gxi.sum(-1).detach(), "integrated gradients": ig.sum(-1).detach()}


def leave_one_out(model: MiniBert, batch_inputs: dict, target_fn, target=None) -> torch.Tensor:
    """(B, T): f(x) - f(x without token j), the token erased from the attention mask (no query attends to it; it
    keeps its position). One batched forward of B * T sequences. Padding and [CLS] get 0."""
    ids, types, mask = batch_inputs["input_ids"], batch_inputs["token_type_ids"], batch_inputs["attention_mask"]
    b, t = ids.shape
    pick = lambda out: out if target is None else out.gather(-1, target[:, None]).squeeze(-1)  # noqa: E731
    with torch.no_grad():
        full = pick(target_fn(model, ids, types, mask))                       # (B,)
        erased = mask[:, None, :].repeat(1, t, 1)                              # (B, T_erased, T)
        erased[:, torch.arange(t), torch.arange(t)] = 0
        erased[:, 0, :] = mask                                                 # [CLS] is the readout: never erased
        rep = lambda x: x[:, None, :].expand(b, t, t).reshape(b * t, t)        # noqa: E731
        tgt = None if target is None else target.repeat_interleave(t)
        out = target_fn(model, rep(ids), rep(types), erased.reshape(b * t, t))
        out = out if tgt is None else out.gather(-1, tgt[:, None]).squeeze(-1)
    delta = (full[:, None] - out.view(b, t)) * mask
    delta[:, 0] = 0.0  # [CLS] is the readout, not erased (its row differs from `full` only by float rounding)
    return delta


def attributions(model: MiniBert, batch_inputs: dict, readout: torch.Tensor, target_fn, target=None,
                 ig_steps: int = IG_STEPS, specials: tuple[int, ...] = (CLS, SEP)) -> dict[str, torch.Tensor]:
    """Every method of METHODS: {name: (B, T)}. Attention methods are >= 0; the others signed (score them by |.|)."""
    out = attention_attributions(attention_maps(model, batch_inputs), readout)
    out.update(gradient_attributions(model, batch_inputs, target_fn, target, ig_steps, specials))
    out["leave-one-out"] = leave_one_out(model, batch_inputs, target_fn, target)
    return {m: out[m] for m in METHODS}


# -- the truth by intervention ---------------------------------------------------------------------------------
def key_intervention(model: MiniBert, batch_inputs: dict, key_pos: torch.Tensor,
                     replacements: torch.Tensor) -> dict[str, torch.Tensor]:
    """Replace each sentence's key token by each of the K token ids in `replacements` (distractors) and run the
    model again: one batched forward of B * K sentences. -> per sentence (B,): "pred" the prediction with the key,
    "flip" the share of the K replacements that change it, "delta" the mean drop in the predicted class's log-odds,
    "log_odds" that log-odds with the key. The key is *decisive* for a sentence when the prediction flips for most
    replacements (flip > 1/2): the model's output depends on it, whatever the task says."""
    ids, types, mask = batch_inputs["input_ids"], batch_inputs["token_type_ids"], batch_inputs["attention_mask"]
    b, t = ids.shape
    k = len(replacements)
    if k < 1 or key_pos.shape != (b,):
        raise ValueError("key_intervention needs one key position per sentence and at least one replacement")
    with torch.no_grad():
        f = class_margin(model, ids, types, mask)                        # (B, 2)
        pred = f.argmax(-1)
        own = f.gather(1, pred[:, None])[:, 0]                           # (B,) the predicted class's log-odds
        swapped = ids[:, None, :].repeat(1, k, 1)                        # (B, K, T)
        swapped[torch.arange(b), :, key_pos] = replacements.to(ids.dtype)[None, :].expand(b, k)
        rep = lambda x: x[:, None, :].expand(b, k, t).reshape(b * k, t)  # noqa: E731
        g = class_margin(model, swapped.reshape(b * k, t), rep(types), rep(mask)).view(b, k, 2)
        after = g.gather(2, pred[:, None, None].expand(b, k, 1))[..., 0]  # (B, K)
    return {"pred": pred, "log_odds": own, "flip": (g.argmax(-1) != pred[:, None]).float().mean(1),
            "delta": own - after.mean(1)}


def split_hits(hit: torch.Tensor, decisive: torch.Tensor) -> tuple[float, float]:
    """hit (B,) 0/1, decisive (B,) bool -> (mean hit over the decisive sentences, over the others); NaN for an
    empty group."""
    d = decisive.bool()
    mean = lambda x: float(x.mean()) if x.numel() else float("nan")  # noqa: E731
    return mean(hit[d]), mean(hit[~d])


# -- scoring against the truth and against each other --------------------------------------------------------
def rank_scores(attr: torch.Tensor, key_pos: torch.Tensor, content: torch.Tensor) -> dict[str, torch.Tensor]:
    """attr (B, T), key_pos (B,), content (B, T) bool (the positions that compete) -> per example (B,):
    hit = the known token has the largest |attribution| among the content tokens; rr = 1 / its rank (ties count
    against it: rank = 1 + the number of content tokens with |attribution| >= its own, itself excluded)."""
    score = attr.abs().masked_fill(~content, -1.0)
    mine = score.gather(1, key_pos[:, None])
    others = content.clone()
    others[torch.arange(len(key_pos)), key_pos] = False
    rank = 1 + ((score >= mine) & others).sum(1)
    return {"hit": (rank == 1).float(), "rr": 1.0 / rank.float()}


def kendall_tau(a: torch.Tensor, b: torch.Tensor, content: torch.Tensor) -> torch.Tensor:
    """(B, T) x2 -> (B,) Kendall's tau-b between |a| and |b| over each example's content tokens (Jain & Wallace
    2019, sec. 4.1 compare attention with gradients and erasure this way)."""
    da = a.abs()[:, :, None] - a.abs()[:, None, :]  # (B, T, T)
    db = b.abs()[:, :, None] - b.abs()[:, None, :]
    pair = content[:, :, None] & content[:, None, :]
    pair = pair & torch.triu(torch.ones_like(pair[0]), diagonal=1)
    sa, sb = torch.sign(da) * pair, torch.sign(db) * pair
    num = (sa * sb).sum((1, 2))
    den = torch.sqrt((sa != 0).sum((1, 2)).float() * (sb != 0).sum((1, 2)).float())
    return torch.where(den > 0, num / den.clamp_min(1e-12), torch.zeros_like(num))


def agreement_matrix(attr: dict[str, torch.Tensor], content: torch.Tensor) -> np.ndarray:
    """(M, M) mean Kendall tau over examples between every pair of methods in METHODS order."""
    names = [m for m in METHODS if m in attr]
    out = np.eye(len(names))
    for i, a in enumerate(names):
        for j in range(i + 1, len(names)):
            out[i, j] = out[j, i] = float(kendall_tau(attr[a], attr[names[j]], content).mean())
    return out


# -- Jain & Wallace's adversarial attention, on the last layer's [CLS] row -------------------------------------
def last_layer_cls_logits(model: MiniBert, inner: dict, cls_probs: torch.Tensor) -> torch.Tensor:
    """The classifier's logits (B, C) when the last layer's [CLS] query uses attention cls_probs (B, H, T) instead
    of its own; everything else as computed (inner: return_internals of the same inputs). The [CLS] output of the
    last layer depends on no other query of that layer, so this is the whole effect of changing that row."""
    cfg = model.cfg
    if cfg.norm_placement != "post":
        raise ValueError("last_layer_cls_logits follows the post-norm (BERT) layer")
    last = cfg.n_layers - 1
    layer = model.layers[last]
    x_in = inner[f"layer{last - 1}.hidden"] if last > 0 else inner["embeddings.out"]  # (B, T, d)
    v = inner[f"layer{last}.v"]                                                         # (B, H, T, dh)
    mixed = torch.einsum("bht,bhtd->bhd", cls_probs, v).reshape(v.shape[0], -1)         # (B, d)
    x = layer.attention_norm(x_in[:, 0] + layer.attention.output(mixed))
    x = layer.ffn_norm(x + layer.ffn(x))
    return model.class_logits(model.final_norm(x)[:, None, :])


def uniform_last_layer(model: MiniBert, batch_inputs: dict) -> dict[str, torch.Tensor]:
    """Wiegreffe & Pinter's uniform-weights baseline (2019), on the last layer's [CLS] query: every head
    attends equally to the real tokens, the rest of the model as computed. -> per sentence (B,): "delta_p" the
    change in the predicted class's probability, "flip" 1.0 where the prediction changes."""
    with torch.no_grad():
        inner = model(**batch_inputs, return_internals=True).internals
        last = model.cfg.n_layers - 1
        own = inner[f"layer{last}.probs"][:, :, 0, :]                                  # (B, H, T)
        keep = batch_inputs["attention_mask"].float()[:, None, :].expand_as(own)
        p0 = last_layer_cls_logits(model, inner, own).softmax(-1)
        p1 = last_layer_cls_logits(model, inner, keep / keep.sum(-1, keepdim=True)).softmax(-1)
    pred = p0.argmax(-1)
    delta = (p1 - p0).gather(1, pred[:, None])[:, 0]
    return {"delta_p": delta.abs(), "flip": (p1.argmax(-1) != pred).float()}


@contextlib.contextmanager
def frozen(model: torch.nn.Module):
    """Weights with requires_grad False inside the block, as they were after it."""
    params = list(model.parameters())
    was = [p.requires_grad for p in params]
    for p in params:
        p.requires_grad_(False)
    try:
        yield model
    finally:
        for p, w in zip(params, was):
            p.requires_grad_(w)


def js_divergence(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """Jensen-Shannon divergence in nats along the last dim (0 .. ln 2), with 0 log 0 = 0."""
    m = 0.5 * (p + q)
    kl = lambda a: torch.where(a > 0, a * (a.clamp_min(1e-30).log() - m.clamp_min(1e-30).log()), 0.0).sum(-1)  # noqa: E731
    return 0.5 * (kl(p) + kl(q))


def seed_pair_distances(cls_attention: torch.Tensor) -> tuple[list[tuple[int, int]], torch.Tensor]:
    """Wiegreffe & Pinter's variance calibration (2019): how far apart the attention of models trained alike, but for
    the seed, is on the same sentences. cls_attention: (S, B, T), one attention distribution per model and sentence
    (heads are not matched across seeds, so pass their mean). -> (the S(S-1)/2 pairs (i, j), their JS divergences
    (n_pairs, B) in nats)."""
    if cls_attention.dim() != 3 or cls_attention.shape[0] < 2:
        raise ValueError(f"cls_attention must be (seeds >= 2, sentences, tokens), got {tuple(cls_attention.shape)}")
    pairs = list(itertools.combinations(range(cls_attention.shape[0]), 2))
    return pairs, torch.stack([js_divergence(cls_attention[i], cls_attention[j]) for i, j in pairs])


class AttentionLogits(nn.Module):
    """The adversarial search's free variable: logits z (B, H, T) of the last layer's [CLS] attention rows."""

    def __init__(self, z: torch.Tensor) -> None:
        super().__init__()
        self.z = nn.Parameter(z)


def adversarial_attention(model: MiniBert, batch_inputs: dict, bound: float = 0.01, steps: int = 150,
                          lr: float = 0.5, seed: int = 0) -> dict[str, torch.Tensor]:
    """Jain & Wallace 2019, sec. 4.2: for each example, search attention for the last layer's [CLS] query (every
    head) that is as far as possible from the model's own (mean JS divergence over heads) while the predicted
    class's probability moves by less than `bound`. Adam on the logits of the new rows, a hinge penalty on the
    output change; the best feasible iterate is kept (the original, JSD 0, when none is feasible).
    -> {"original", "adversarial": (B, H, T), "jsd": (B,), "delta_p": (B,)}."""
    with torch.no_grad():
        inner = model(**batch_inputs, return_internals=True).internals
    last = model.cfg.n_layers - 1
    orig = inner[f"layer{last}.probs"][:, :, 0, :].detach()  # (B, H, T)
    keep = batch_inputs["attention_mask"].bool()[:, None, :]
    inner = {k: v.detach() for k, v in inner.items()}
    with torch.no_grad():
        p0 = last_layer_cls_logits(model, inner, orig).softmax(-1)
    pred = p0.argmax(-1)
    p0 = p0.gather(1, pred[:, None]).squeeze(1)
    g = torch.Generator().manual_seed(seed)
    search = AttentionLogits((orig.clamp_min(1e-9).log() + torch.randn(orig.shape, generator=g)).masked_fill(~keep, -1e9))
    best, best_jsd = orig.clone(), torch.zeros(orig.shape[0])

    def penalised_jsd(search: AttentionLogits, _) -> torch.Tensor:
        """-JSD plus the hinge on the output change, summed over examples; keeps the best feasible iterate so far."""
        probs = search.z.masked_fill(~keep, -1e9).softmax(-1)
        p = last_layer_cls_logits(model, inner, probs).softmax(-1).gather(1, pred[:, None]).squeeze(1)
        jsd = js_divergence(probs, orig).mean(1)    # (B,) mean over heads
        gap = (p - p0).abs()
        with torch.no_grad():
            better = (gap < bound) & (jsd > best_jsd)
            best[better], best_jsd[better] = probs[better].detach(), jsd[better].detach()
        return (-jsd + 100.0 * F.relu(gap - 0.5 * bound)).sum()

    # Adam (AdamW without weight decay), constant rate, no clipping; "default": a plain torch.optim.Adam's kernel
    cfg = TrainConfig(steps=steps, lr=lr, warmup=0, weight_decay=0.0, clip=0.0, kernel="default", log_every=steps,
                      threads=None, device=orig.device)
    with frozen(model):
        fit(search, penalised_jsd, itertools.repeat(None), cfg)
    with torch.no_grad():
        p_best = last_layer_cls_logits(model, inner, best).softmax(-1).gather(1, pred[:, None]).squeeze(1)
    return {"original": orig, "adversarial": best, "jsd": best_jsd, "delta_p": (p_best - p0).abs()}


# -- real text -----------------------------------------------------------------------------------------------
MAX_PIECES = 40  # the typing demo's cap on word pieces: redraws stay fast on 2 CPU cores
DEMO_IG_STEPS = 16  # the typing demo's integrated-gradients steps: at 4 the sum missed f(x) - f(x') by ~90% on
                   # MiniLM; the demo prints the gap in its title


def fused_attributions(model: MiniBert, batch_inputs: dict, readout: torch.Tensor, target_fn,
                       ig_steps: int = DEMO_IG_STEPS, specials: tuple[int, ...] = (CLS, SEP)) -> dict[str, torch.Tensor]:
    """attributions() for one sentence (B = 1) and a scalar target in two batched passes: the sentence and its
    ig_steps interpolation points as 1 + ig_steps rows in one forward and backward (their word embeddings put in
    place by a hook), and its T erasures in one forward without gradients. The same numbers as Captum's
    (Gauss-Legendre points, as its default; tests/topics/test_nb18_attention_explanation.py compares them) at a fraction
    of the cost: the typing demo's path. Also returns f(x) under "target"."""
    ids, types, mask = batch_inputs["input_ids"], batch_inputs["token_type_ids"], batch_inputs["attention_mask"]
    if ids.shape[0] != 1:
        raise ValueError("fused_attributions takes one sentence")
    t, k = ids.shape[1], int_in("ig_steps", ig_steps, 1, 256)
    out = attention_attributions(attention_maps(model, batch_inputs), readout)
    word = model.embeddings.word_embeddings
    special = torch.isin(ids, torch.tensor(specials)) | (mask == 0)
    with torch.no_grad():
        e = word(ids)                                                                  # (1, T, d)
        e0 = word(torch.where(special, ids, torch.full_like(ids, PAD)))                # (1, T, d) the baseline
    step_fn, alpha_fn = approximation_parameters("gausslegendre")
    steps, alphas = torch.tensor(step_fn(k), dtype=e.dtype), torch.tensor(alpha_fn(k), dtype=e.dtype)
    emb = torch.cat([e, e0 + alphas[:, None, None] * (e - e0)]).requires_grad_(True)  # (1 + k, T, d)
    hook = word.register_forward_hook(lambda module, inputs, output: emb)
    with frozen(model):  # no weight gradients: the backward computes only what reaches the embeddings
        try:
            y = target_fn(model, ids.expand(1 + k, -1), types.expand(1 + k, -1), mask.expand(1 + k, -1))  # (1 + k,)
        finally:
            hook.remove()
        (grad,) = torch.autograd.grad(y[0] + (steps * y[1:]).sum(), emb)
    out["gradient x input"] = (grad[0] * e[0]).sum(-1)[None].detach()
    out["integrated gradients"] = ((e[0] - e0[0]) * grad[1:].sum(0)).sum(-1)[None].detach()
    erased = mask.repeat(t, 1)                                                         # (T, T): row j lacks token j
    erased[torch.arange(t), torch.arange(t)] = 0
    erased[0] = mask[0]                                                                # [CLS] is never erased
    with torch.no_grad():
        y_erased = target_fn(model, ids.expand(t, -1), types.expand(t, -1), erased)    # (T,)
    loo = (y[0].detach() - y_erased) * mask[0]
    loo[0] = 0.0  # [CLS] is not erased
    out["leave-one-out"] = loo[None]
    return {**{m: out[m] for m in METHODS}, "target": y[:1].detach()}  # and f(x) itself, (1,)


_REFERENCES: dict = {}  # (id(model), reference) -> its unit embedding: the demo embeds each reference once


def _reference_embedding(model: MiniBert, tok, reference: str) -> torch.Tensor:
    key = (id(model), reference)
    if key not in _REFERENCES:
        if len(_REFERENCES) > 64:
            _REFERENCES.clear()
        with torch.no_grad():
            _REFERENCES[key] = pooled(model, **tok(reference, max_length=MAX_PIECES))[0]
    return _REFERENCES[key]


def real_attributions(model: MiniBert, tok, text: str, reference: str, ig_steps: int = DEMO_IG_STEPS) -> dict:
    """Each method's attribution on one sentence for all-MiniLM-L6-v2's own output: the cosine similarity of the
    sentence's pooled embedding to the reference's. -> {"tokens", "attr": {method: (T,) np}, "similarity", "note"}.
    Raises ValueError for text with no word pieces."""
    if not isinstance(text, str) or not isinstance(reference, str):
        raise ValueError("type a sentence and a reference")
    pieces = tok.tokens(text)
    if len(pieces) <= 2:
        raise ValueError("the sentence has no word pieces: type some words")
    if len(tok.tokens(reference)) <= 2:
        raise ValueError("the reference has no word pieces: type a word or sentence to compare with")
    note = ""
    enc = tok(text, max_length=MAX_PIECES)
    t = enc["input_ids"].shape[1]
    if len(pieces) > MAX_PIECES:
        note = f"cut to its first {MAX_PIECES - 2} word pieces (of {len(pieces) - 2}) to keep the redraw fast"
    f = similarity_to(_reference_embedding(model, tok, reference))
    attr = fused_attributions(model, enc, mean_readout(enc["attention_mask"].bool()), f, ig_steps,
                              (tok.cls_id, tok.sep_id))
    sim = float(attr.pop("target")[0])
    ids = enc["input_ids"]
    base = torch.where(torch.isin(ids, torch.tensor((tok.cls_id, tok.sep_id))) | (enc["attention_mask"] == 0), ids,
                       torch.full_like(ids, PAD))
    with torch.no_grad():
        f_base = float(f(model, base, enc["token_type_ids"], enc["attention_mask"])[0])
    tokens = pieces[: t - 1] + ["[SEP]"] if len(pieces) > MAX_PIECES else pieces
    return {"tokens": tokens, "attr": {m: a[0].numpy() for m, a in attr.items()}, "similarity": sim,
            "reference": reference, "note": html.escape(note),
            "ig_gap": ig_gap(float(attr["integrated gradients"].sum()), sim - f_base)}


def ig_gap(ig_sum: float, change: float) -> float:
    """Integrated gradients' completeness gap |sum - (f(x) - f(x'))| / |f(x) - f(x')| (0: complete; NaN where the
    output did not move)."""
    return abs(ig_sum - change) / abs(change) if change != 0 else float("nan")


def normalised_rows(attr: dict, content: np.ndarray) -> np.ndarray:
    """(M, T): |attribution| of each method over the content tokens, divided by its row's maximum there
    (a row of zeros stays 0); special tokens get 0 (the plot draws them blank)."""
    rows = []
    for m in METHODS:
        a = np.where(content, np.abs(np.asarray(attr[m], dtype=float)), 0.0)
        top = a.max() if a.size else 0.0
        rows.append(a / top if top > 0 else a)
    return np.array(rows)


def safe_label(text: str) -> str:
    """A token as matplotlib text: '$' escaped so typed text never starts mathtext."""
    return text.replace("$", r"\$")


def real_demo_compute(model, tok, text: str, reference: str) -> dict:
    res = real_attributions(model, tok, text, reference)
    toks = res["tokens"]
    content = np.array([t not in ("[CLS]", "[SEP]") for t in toks])
    res["rows"] = normalised_rows(res["attr"], content)
    res["content"] = content
    return res


def plot_real_demo(fig, res: dict):
    """One heat map: a row per method, a column per word piece, |attribution| / the row's maximum. Returns the
    update: the image, the word pieces and the similarity are live; the x range follows the length in powers of two."""
    ax = fig.add_subplot(1, 1, 1)
    m = len(METHODS)
    image = live(ax.imshow(np.zeros((m, 1)), cmap="viridis", vmin=0, vmax=1, aspect="auto",
                           interpolation="nearest"))[0]
    ax.set_yticks(range(m), [SHORT[k] for k in METHODS])
    pieces = LiveTickLabels(ax, "x", size=8)
    ax.set_xlabel("word piece ([CLS] and [SEP] blank)")
    title = live_title(ax, "|attribution| / the row's maximum")
    fig.colorbar(image, ax=ax, label="relative |attribution|")

    width = MAX_PIECES  # the image always fills the axes: columns widen for short sentences, so no limit moves
    ax.set_xlim(-0.5, width - 0.5)
    ax.set_ylim(m - 0.5, -0.5)

    def update(r: dict):
        t = len(r["tokens"])
        image.set_data(np.ma.masked_array(r["rows"], mask=np.broadcast_to(~r["content"], r["rows"].shape)))
        image.set_extent((-0.5, width - 0.5, m - 0.5, -0.5))
        pieces.set([safe_label(x) for x in r["tokens"]], positions=(np.arange(t) + 0.5) * width / t - 0.5)
        title.set_text(f"cosine similarity to the reference: {r['similarity']:.2f}; IG sum misses "
                       f"f(x) - f(baseline) by {r['ig_gap']:.0%}")
        return None

    update(res)
    return update


# -- the adversarial demo ------------------------------------------------------------------------------------
def adversarial_demo_compute(model: MiniBert, examples: Batch, bound: float = 0.01, example: int = 0) -> dict:
    """One example of the trained toy: its last-layer [CLS] attention (mean over heads) and the adversarial one
    found under |delta p| < bound."""
    if not (isinstance(bound, (int, float)) and math.isfinite(bound) and 0 < bound < 1):
        raise ValueError(f"the bound on |delta p| must lie in (0, 1), got {bound!r}")
    i = int_in("example", example, 0, examples.input_ids.shape[0] - 1)
    inputs = {k: v[i:i + 1] for k, v in examples.model_inputs().items()}
    adv = adversarial_attention(model, inputs, bound=float(bound), steps=30)  # 30 Adam steps: ~95% of 60 steps' JSD
    return {"tokens": [str(int(t)) for t in inputs["input_ids"][0]], "original": adv["original"][0].mean(0).numpy(),
            "adversarial": adv["adversarial"][0].mean(0).numpy(), "jsd": float(adv["jsd"][0]),
            "delta_p": float(adv["delta_p"][0]), "bound": float(bound)}


def plot_adversarial_demo(fig, res: dict):
    """The model's own and the adversarial last-layer [CLS] attention (head mean) per token, as live bars; the
    token ids and the JSD / delta p title are live too."""
    ax = fig.add_subplot(1, 1, 1)
    t = len(res["tokens"])
    own = live_bars(ax, facecolors="#2166ac", label="the model's own")
    adv = live_bars(ax, facecolors="#b35806", label="adversarial")
    ax.set_xlim(-0.6, t - 0.4)
    ax.set_ylim(0, 1)
    tokens = LiveTickLabels(ax, "x", size=8, rotation=0, width_chars=5)
    ax.set_xlabel("token id ([CLS] first, [SEP] last)")
    ax.set_ylabel("last-layer [CLS] attention\n(mean over heads)")
    title = live_title(ax, "Attention the output does not need")
    ax.legend(loc="upper right", fontsize=8)

    def update(r: dict):
        x = np.arange(len(r["tokens"]))
        own.set_verts(bar_polygons(x - 0.2, r["original"], width=0.4))
        adv.set_verts(bar_polygons(x + 0.2, r["adversarial"], width=0.4))
        tokens.set(["[CLS]"] + r["tokens"][1:-1] + ["[SEP]"])
        title.set_text(f"JSD {r['jsd']:.3f} nats (max ln 2 = 0.693), |Δp| = {r['delta_p']:.4f} < {r['bound']:g}")
        return None

    update(res)
    return update


# -- where rollout's random walk and the real layer part ways -------------------------------------------------
def residual_share(model: MiniBert, batch_inputs: dict) -> torch.Tensor:
    """(L,) per layer, the median over real tokens of ||x|| / (||x|| + ||attn(x)||): how much of the sum x + attn(x)
    that the post-norm layer normalises is the residual. Rollout assumes 1/2 in every layer (A = (P + I) / 2)."""
    keep = batch_inputs["attention_mask"].bool()
    with torch.no_grad():
        out = model(**batch_inputs, output_hidden_states=True)
        shares = []
        for i, layer in enumerate(model.layers):
            x = out.hidden_states[i]                     # (B, T, d): the layer's input
            a = layer.attention(x, keep)                 # (B, T, d): what attention adds to it
            r = x.norm(dim=-1) / (x.norm(dim=-1) + a.norm(dim=-1))
            shares.append(r[keep].median())
    return torch.stack(shares)


def special_mass(attr: torch.Tensor, special: torch.Tensor) -> torch.Tensor:
    """attr (B, T) >= 0 (an attention method's row), special (B, T) bool -> (B,) the share of the row's mass on the
    special tokens ([CLS], [SEP])."""
    a = attr.abs()
    return (a * special).sum(1) / a.sum(1).clamp_min(1e-30)


def completeness_gap(model: MiniBert, batch_inputs: dict, target: torch.Tensor, ig_steps: int = IG_STEPS,
                     min_change: float = 1.0) -> torch.Tensor:
    """Integrated gradients' completeness check (Sundararajan et al. 2017, Proposition 1: the attributions sum to
    f(x) - f(x'); the paper advises checking this when choosing the number of steps, sec. 5 as we recall it):
    |sum - (f(x) - f(x'))| /
    |f(x) - f(x')| for the sentences whose target moves by more than min_change between baseline and input (N,)."""
    ids = batch_inputs["input_ids"]
    ig = gradient_attributions(model, batch_inputs, class_margin, target, ig_steps)["integrated gradients"].sum(1)
    base = torch.where(torch.isin(ids, torch.tensor((CLS, SEP))), ids, torch.full_like(ids, PAD))
    with torch.no_grad():
        f = lambda i: class_margin(model, i, batch_inputs["token_type_ids"],  # noqa: E731
                                   batch_inputs["attention_mask"]).gather(1, target[:, None])[:, 0]
        change = f(ids) - f(base)
    moved = change.abs() > min_change
    return ((ig - change).abs() / change.abs())[moved]
