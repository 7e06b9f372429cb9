"""Notebook 13: why attention replaced recurrence (path length, sequential steps, cost per layer, soft lookup).

Compute functions (tensors or numbers in, dicts out) and plots `plot_x(fig, result)`.

    task = MarkedRecall(distance=64)                  # recall the one marked token, `distance` tokens back
    model = make_model("gru", max_len=65)             # torch.nn.GRU, or a one-layer mini-BERT ("attention")
    distance_gradients("gru", length=257)             # ||dLoss/d(embedding)|| of the token d steps back, at init
    count_products("gru", lengths=(16, 64))           # matrix products one forward pass runs (torch profiler)
    teacher_forcing(n=16)                             # training: 1 forward pass for n losses; generation: n passes
    layer_flops(n=512, d=64)                          # FLOPs counted by torch.utils.flop_counter
    soft_lookup(temperature=1.0)                      # softmax(q.k / T) as a soft dictionary lookup
    self_match_rate(shared=True)                      # one projection for q and k: each token's top key is itself
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
import sys
import time
from collections import Counter
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from qalib.lab.data import IGNORE, N_SPECIAL, Batch
from qalib.lab.device import one_thread
from qalib.nn.attention import attention
from qalib.nn.config import MiniBertConfig
from qalib.nn.model import MiniBert
from qalib.nn.validate import choice, float_in, int_in, seed_list
from qalib.notebook.drawing import Update, decade_ticks, limits_with_margins, live, seed_band


KINDS = ("gru", "lstm", "attention")
N_MARKED, N_PLAIN = 8, 16  # symbols the answer is drawn from; symbols of the distractors (a disjoint set)
VOCAB = N_SPECIAL + N_MARKED + N_PLAIN
WIDTH = 64                 # the GRU's hidden size; the attention model's d_model is half of it (see make_model)


# -- the task ---------------------------------------------------------------------------------
@dataclass
class MarkedRecall:
    """x_0 is one of N_MARKED marked symbols; x_1 .. x_d are distractors from N_PLAIN other symbols. The label at the
    last position is x_0: the answer lies `distance` tokens back. Chance accuracy 1 / N_MARKED.

    The mark is content (a separate set of symbols), so an attention layer can find the answer by what it is, at
    any distance, and a gated RNN can in principle latch it (store on a marked symbol, hold on the others)."""

    distance: int = 16

    def __post_init__(self):
        int_in("distance", self.distance, 1, 8192)

    def batch(self, batch_size: int, generator: torch.Generator | None = None) -> Batch:
        b = int_in("batch_size", batch_size, 1, 1 << 16)
        answer = torch.randint(N_MARKED, (b, 1), generator=generator) + N_SPECIAL
        plain = torch.randint(N_PLAIN, (b, self.distance), generator=generator) + N_SPECIAL + N_MARKED
        ids = torch.cat([answer, plain], dim=1)  # (B, d + 1)
        labels = torch.full_like(ids, IGNORE)
        labels[:, -1] = answer[:, 0]
        return Batch(ids, torch.zeros_like(ids), torch.ones_like(ids), labels, "token")


# -- the two models ---------------------------------------------------------------------------
class RecurrentOutput(NamedTuple):
    last_hidden_state: torch.Tensor  # (B, T, hidden)


class RecurrentLM(nn.Module):
    """Embedding -> torch.nn.GRU (or LSTM), one layer, left to right -> linear read-out. Same interface as MiniBert
    for qalib.lab.train: forward(input_ids, ...) -> .last_hidden_state, and mlm_logits(hidden)."""

    def __init__(self, cell: str = "gru", vocab_size: int = VOCAB, hidden: int = WIDTH, gate_init: str = "default",
                 t_max: int = 64) -> None:
        super().__init__()
        choice("cell", cell, ("gru", "lstm"))
        self.cell = cell
        self.embeddings = nn.Embedding(vocab_size, hidden)  # named so that train.layer_grad_norms finds it
        self.rnn = (nn.GRU if cell == "gru" else nn.LSTM)(hidden, hidden, batch_first=True)
        self.head = nn.Linear(hidden, vocab_size)
        set_gate_bias(self.rnn, choice("gate_init", gate_init, GATE_INITS), int_in("t_max", t_max, 2))

    def forward(self, input_ids, token_type_ids=None, attention_mask=None) -> RecurrentOutput:
        out, _ = self.rnn(self.embeddings(input_ids))  # (B, T, hidden): h_t for every t
        return RecurrentOutput(out)

    def mlm_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.head(hidden)


GATE_INITS = ("default", "chrono", "forget_bias_1")


@torch.no_grad()
def set_gate_bias(rnn: nn.GRU | nn.LSTM, gate_init: str, t_max: int) -> None:
    """The gate biases that decide how long a fresh cell holds its state (the weights stay PyTorch's).

    default        PyTorch's: every bias uniform in +-1/sqrt(hidden), so each gate starts near 1/2.
    chrono         Tallec and Ollivier (2018): the keep gate's bias drawn as log(U(1, t_max - 1)), so the cell starts
                   out holding its state for 1 to t_max steps (GRU: the update gate z, where h' = (1 - z) n + z h;
                   LSTM: the forget gate, and the input gate's bias its negative).
    forget_bias_1  LSTM only: forget-gate bias 1 (Jozefowicz et al. 2015; Keras's default)."""
    h = rnn.hidden_size
    if gate_init == "default":
        return
    if isinstance(rnn, nn.GRU):  # PyTorch's GRU biases: [reset | update z | new], each `hidden` long
        if gate_init != "chrono":
            raise ValueError(f"gate_init {gate_init!r} is for an LSTM; a GRU takes 'default' or 'chrono'")
        rnn.bias_ih_l0[h:2 * h] = torch.log(torch.empty(h).uniform_(1, t_max - 1))
        rnn.bias_hh_l0[h:2 * h] = 0.0
        return
    # PyTorch's LSTM biases: [input i | forget f | cell g | output o]
    forget = torch.log(torch.empty(h).uniform_(1, t_max - 1)) if gate_init == "chrono" else torch.ones(h)
    rnn.bias_ih_l0[h:2 * h], rnn.bias_hh_l0[h:2 * h] = forget, 0.0
    if gate_init == "chrono":
        rnn.bias_ih_l0[:h], rnn.bias_hh_l0[:h] = -forget, 0.0


def attention_config(max_len: int, init_std: float = 0.1) -> MiniBertConfig:
    """One post-norm mini-BERT layer, d = 32, 1 head, d_ff = 64, learned positions up to max_len.

    No residual around the attention: the query token (a distractor) carries nothing the answer needs, and
    without x + Attn(x) the attended value is normalised to full size instead of being 1/n of a small update.
    With init std 0.1 (BERT's 0.02 starts the bilinear q.k slowly) it learns the task within the CPU budget."""
    return MiniBertConfig(vocab_size=VOCAB, d_model=WIDTH // 2, n_layers=1, n_heads=1, d_ff=WIDTH, max_len=max_len,
                          residual=False, init_std=init_std)


def make_model(kind: str, max_len: int, seed: int = 0, gate_init: str = "default", init_std: float = 0.1) -> nn.Module:
    """A fresh model of `kind` seeded with `seed`. The attention layer is narrower (d = 32 against the GRU's 64) so
    that the two have a similar number of parameters (printed by the notebook). gate_init: a recurrent cell's gate
    biases (set_gate_bias; chrono's t_max is max_len); init_std: the attention model's weights (BERT's is 0.02)."""
    choice("kind", kind, KINDS)
    torch.manual_seed(seed_list("seed", [seed])[0])
    if kind == "attention":
        return MiniBert(attention_config(max_len, init_std))
    return RecurrentLM(kind, gate_init=gate_init, t_max=max(2, max_len))


def n_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


# -- 1. path length: the gradient that reaches the token d steps back -------------------------
def embedding_gradients(model: nn.Module, batch: Batch) -> torch.Tensor:
    """||dLoss/de_t|| for each input position t, averaged over the batch: (T,). e_t is the token embedding (the
    word embedding's output), caught with a forward hook, so the same code reads both models."""
    caught = []

    def keep(_module, _inputs, out):
        out.retain_grad()
        caught.append(out)

    emb = model.embeddings if isinstance(model, RecurrentLM) else model.embeddings.word_embeddings
    handle = emb.register_forward_hook(keep)
    try:
        hidden = model(**batch.model_inputs()).last_hidden_state
        loss = F.cross_entropy(model.mlm_logits(hidden[:, -1]), batch.labels[:, -1])
        loss.backward()
    finally:
        handle.remove()
    return caught[0].grad.norm(dim=-1).mean(0)  # (T,)


@one_thread()
def distance_gradients(kind: str = "gru", length: int = 257, seeds=(0, 1, 2), batch_size: int = 8,
                       gate_init: str = "default") -> dict:
    """At initialisation, in float64 (the GRU's gradient falls below float32's range within a few hundred steps):
    grad (S, length) with grad[s, d] = ||dLoss/de|| of the token d steps back from the last position (d = 0 is the
    last token itself). Each seed has its own weights and its own batch of MarkedRecall(length - 1)."""
    choice("kind", kind, KINDS)
    length = int_in("length", length, 2, 4096)
    seeds = seed_list("seeds", seeds)
    rows = []
    for seed in seeds:
        model = make_model(kind, max_len=length, seed=seed, gate_init=gate_init).double()
        batch = MarkedRecall(length - 1).batch(int_in("batch_size", batch_size, 1, 512),
                                               torch.Generator().manual_seed(seed))
        rows.append(embedding_gradients(model, batch).detach().flip(0).numpy())  # flip: index = distance back
    return {"grad": np.array(rows), "distance": np.arange(length), "kind": kind, "seeds": seeds}


def decay_per_step(res: dict, lo: int = 8, hi: int | None = None) -> np.ndarray:
    """Per seed, the factor by which the gradient shrinks per step of distance: exp of the least-squares slope of
    ln(grad) against d over distances lo .. hi. (S,)"""
    d = res["distance"][lo:hi]
    logs = np.log(np.maximum(res["grad"][:, lo:hi], 1e-300))
    return np.exp(np.polyfit(d, logs.T, 1)[0])


def plot_distance_gradients(fig, results: dict) -> None:
    """results: {label: distance_gradients(...)}. Gradient norm (log) against distance, min-max band over seeds."""
    ax = fig.subplots()
    lows = []
    for label, r in results.items():
        g = np.maximum(r["grad"][:, 1:], 1e-300)
        seed_band(ax, r["distance"][1:], g, log=True, label=label)
        lows.append(np.log10(g))
    decade_ticks(ax, "y", np.concatenate([x.ravel() for x in lows]))
    ax.set(title="gradient reaching the token d steps back, at initialisation (min-max over seeds)",
           xlabel="distance d (tokens back from the prediction)", ylabel="||dLoss / d embedding||  (log)")
    ax.legend(fontsize=8)


# -- 2. sequential steps: matrix products counted by the profiler ------------------------------
PRODUCTS = ("aten::addmm", "aten::mm", "aten::bmm", "aten::matmul", "aten::linear",
            "aten::scaled_dot_product_attention")


@contextlib.contextmanager
def _quiet_fd2():
    """The profiler's C++ side logs its start and stop to file descriptor 2, below sys.stderr, where a notebook shows
    them as debug lines: point descriptor 2 at the null device while it runs."""
    sys.stderr.flush()
    saved, null = os.dup(2), os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(null, 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(null)


@torch.no_grad()
@one_thread()
def count_products(kind: str = "gru", lengths=(16, 64, 256), batch_size: int = 2) -> dict:
    """For one forward pass of a fresh model at each length: how many times each matrix-product op ran (torch
    profiler, on the CPU, where nn.GRU runs its time loop as separate ops; cuDNN would fuse the loop into one
    kernel call that still loops inside). products[i] counts the top-level product ops (linear, matmul, bmm, sdpa)."""
    from torch.profiler import ProfilerActivity, profile

    choice("kind", kind, KINDS)
    lengths = [int_in("length", n, 2, 4096) for n in lengths]
    model = make_model(kind, max_len=max(lengths)).eval()
    counts = []
    for n in lengths:
        ids = torch.randint(N_SPECIAL, VOCAB, (batch_size, n), generator=torch.Generator().manual_seed(0))
        with _quiet_fd2(), profile(activities=[ProfilerActivity.CPU]) as prof:
            model(ids)
        seen = Counter(e.name for e in prof.events())
        counts.append({op: seen[op] for op in PRODUCTS if seen[op]})
    top = ("aten::linear", "aten::matmul", "aten::bmm", "aten::scaled_dot_product_attention")
    return {"lengths": lengths, "counts": counts, "kind": kind,
            "products": [sum(c.get(op, 0) for op in top) for c in counts]}


@torch.no_grad()
@one_thread()
def teacher_forcing(n: int = 16, seed: int = 0) -> dict:
    """A small causal DecoderLM (qalib.nn.decoder). Training: one forward pass over n tokens gives all n next-token
    distributions (the causal mask makes position t see only tokens <= t). Generation: qalib.nn.generate produces n
    tokens from a 1-token prompt, and a forward hook counts the model calls it makes (with the KV cache). The
    same n distributions computed one position at a time from the cache differ from the one-pass ones by max_diff."""
    from qalib.nn.config import DecoderConfig
    from qalib.nn.decoder import DecoderLM
    from qalib.nn.generate import generate

    n = int_in("n", n, 2, 256)
    torch.manual_seed(seed)
    model = DecoderLM(DecoderConfig(vocab_size=VOCAB, d_model=32, n_layers=2, n_heads=2, d_ff=64,
                                    max_len=n + 1)).eval()
    calls = []
    handle = model.register_forward_pre_hook(lambda _m, _args: calls.append(1))
    try:
        ids = torch.randint(N_SPECIAL, VOCAB, (1, n), generator=torch.Generator().manual_seed(seed))
        parallel = model(ids).logits  # (1, n, V): every position in one call
        training_calls = len(calls)
        out, cache = None, None
        steps = []
        for t in range(n):  # the same positions one at a time, reading the cache
            out = model(ids[:, t:t + 1], cache=cache, use_cache=True)
            cache = out.cache
            steps.append(out.logits)
        stepwise = torch.cat(steps, dim=1)  # (1, n, V)
        calls.clear()
        generated = generate(model, ids[:, :1], n)
        generation_calls = len(calls)
    finally:
        handle.remove()
    return {"n": n, "training_calls": training_calls, "generation_calls": generation_calls,
            "new_tokens": generated.shape[1] - 1, "max_diff": float((parallel - stepwise).abs().max())}


# -- 3. Table 1: FLOPs per layer, counted from the ops that run --------------------------------
def _flops(fn, *args) -> int:
    with FlopCounterMode(display=False) as counter:
        fn(*args)
    return int(counter.get_total_flops())


@torch.no_grad()
def layer_flops(n: int = 256, d: int = 64) -> dict:
    """FLOPs of one layer on a (1, n, d) input, counted by torch.utils.flop_counter (matrix products only):
    the attention core softmax(QK^T / sqrt(d)) V (QK^T and PV: 2 n^2 d each), its four d x d projections
    (8 n d^2), a tanh RNN layer (nn.RNN: W_x x_t and W_h h_{t-1}, 4 n d^2) and a GRU (three gates: 12 n d^2)."""
    n, d = int_in("n", n, 1, 1 << 14), int_in("d", d, 1, 4096)
    x = torch.zeros(1, n, d)
    rnn, gru, proj = nn.RNN(d, d, batch_first=True), nn.GRU(d, d, batch_first=True), nn.Linear(d, d)
    core = _flops(lambda u: attention(u[:, None], u[:, None], u[:, None]), x)
    return {"n": n, "d": d, "attention core": core, "attention projections": 4 * _flops(proj, x),
            "RNN (tanh)": _flops(rnn, x), "GRU": _flops(gru, x)}


@torch.no_grad()
@one_thread()
def layer_times(lengths=(32, 64, 128, 256, 512, 1024), d: int = 64, repeats: int = 3) -> dict:
    """Forward wall time (ms, best of `repeats`, one thread) of the attention core and of nn.RNN on (1, n, d).
    A timing on a shared machine moves: print it, judge it in qalib/tools/bench_timing.py."""
    lengths = [int_in("length", n, 1, 1 << 14) for n in lengths]
    rnn = nn.RNN(int_in("d", d, 1, 4096), d, batch_first=True)
    out = {"lengths": lengths, "d": d, "attention core": [], "RNN (tanh)": []}
    for n in lengths:
        x = torch.randn(1, n, d, generator=torch.Generator().manual_seed(0))
        for name, fn in (("attention core", lambda: attention(x[:, None], x[:, None], x[:, None])),
                         ("RNN (tanh)", lambda: rnn(x))):
            best = math.inf
            for _ in range(int_in("repeats", repeats, 1, 50)):
                start = time.perf_counter()
                fn()
                best = min(best, time.perf_counter() - start)
            out[name].append(best * 1e3)
    return out


def cost_view(n: int = 256, d: int = 64) -> dict:
    """Per-layer FLOPs against n at width d, from the formulas layer_flops counts (the notebook checks them
    against the counter): attention core 4 n^2 d, projections 8 n d^2, tanh RNN 4 n d^2, GRU 12 n d^2."""
    n, d = int_in("n", n, 1, 1 << 14), int_in("d", d, 1, 4096)
    grid = np.unique(np.geomspace(8, 8192, 60).astype(int))
    curves = {"attention core (4 n^2 d)": 4.0 * grid ** 2 * d, "tanh RNN (4 n d^2)": 4.0 * grid * d ** 2,
              "GRU (12 n d^2)": 12.0 * grid * d ** 2}
    at_n = {"attention core": 4.0 * n * n * d, "tanh RNN": 4.0 * n * d * d, "GRU": 12.0 * n * d * d}
    return {"n": n, "d": d, "grid": grid, "curves": curves, "at_n": at_n}


COST_VIEW = (3.0, 12.0)  # log10 FLOPs shown: from 8 tokens at d = 16 (4e3) to 8192 tokens at d = 1024 (3e11)


def plot_cost_view(fig, r: dict) -> Update:
    """Fixed axes for every n and d the demo allows; a change redraws the three curves, the n mark, the crossover
    mark and the title."""
    ax = fig.subplots()
    lg = np.log10(r["grid"])
    lines = [ax.plot(lg, np.log10(c), label=name)[0] for name, c in r["curves"].items()]
    mark = ax.axvline(math.log10(r["n"]), color="grey", ls="--", lw=1, label="your n")
    cross = ax.axvline(math.log10(r["d"]), color="#b35806", ls=":", lw=1.5, label="n = d (attention core = tanh RNN)")
    ax.set_xticks(np.log10([8, 64, 512, 4096]), ["8", "64", "512", "4096"])
    decade_ticks(ax, "y", COST_VIEW)
    ax.set(xlim=limits_with_margins(lg[0], lg[-1]), ylim=COST_VIEW, xlabel="sequence length n (log scale)",
           ylabel="FLOPs per layer (log scale)")
    ax.legend(fontsize=8, loc="upper left")
    live(*lines, mark, cross, ax.title)

    def update(r) -> None:
        for line, c in zip(lines, r["curves"].values()):
            line.set_ydata(np.log10(c))
        mark.set_xdata([math.log10(r["n"])] * 2)
        cross.set_xdata([math.log10(r["d"])] * 2)
        a = r["at_n"]
        cheaper = "attention core" if a["attention core"] < a["tanh RNN"] else "tanh RNN"
        ax.set_title(f"n = {r['n']}, d = {r['d']}: attention core {a['attention core']:.3g}, tanh RNN "
                     f"{a['tanh RNN']:.3g}, GRU {a['GRU']:.3g} FLOPs; cheaper of the first two: {cheaper}", fontsize=9)

    update(r)
    return update


# -- 4. Q, K, V as a soft dictionary lookup -----------------------------------------------------
N_KEYS, KEY_DIM = 6, 8


@functools.lru_cache(maxsize=8)
def _dictionary(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """N_KEYS unit keys in KEY_DIM dimensions and one scalar value per key (0, 1, ..., N_KEYS - 1)."""
    g = torch.Generator().manual_seed(seed)
    keys = F.normalize(torch.randn(N_KEYS, KEY_DIM, generator=g, dtype=torch.float64), dim=-1)
    return keys, torch.arange(N_KEYS, dtype=torch.float64)


def soft_lookup(temperature: float = 1.0, target: int = 2, blend: float = 0.3, seed: int = 0) -> dict:
    """A query q = (1 - blend) k_target + blend k_next (renormalised) looks up a dictionary of N_KEYS keys and
    values. weights = softmax(q.k_j / temperature); output = sum_j weights_j v_j. As the temperature falls the
    weights become one-hot on the best-matching key and the output becomes that key's value: a hard lookup."""
    temperature = float_in("temperature", temperature, 1e-3, 1e3)
    target = int_in("target", target, 0, N_KEYS - 1)
    blend = float_in("blend", blend, 0.0, 1.0)
    keys, values = _dictionary(int_in("seed", seed, 0, 1000))
    q = F.normalize((1 - blend) * keys[target] + blend * keys[(target + 1) % N_KEYS], dim=0)
    scores = keys @ q  # (N_KEYS,): cosine similarities, in [-1, 1]
    weights = torch.softmax(scores / temperature, dim=0)
    best = int(scores.argmax())
    return {"scores": scores.numpy(), "weights": weights.numpy(), "output": float(weights @ values),
            "values": values.numpy(), "best": best, "hard": float(values[best]), "temperature": temperature,
            "target": target, "blend": blend}


def plot_soft_lookup(fig, r: dict) -> Update:
    """Left: the weights over the keys (with the scores q.k). Right: the output against the values. Fixed axes;
    a change redraws the bars, the output mark and the titles."""
    ax1, ax2 = fig.subplots(1, 2, width_ratios=[1.4, 1])
    x = np.arange(N_KEYS)
    bars = ax1.bar(x, r["weights"], color="#2166ac")
    dots, = ax1.plot(x, (r["scores"] + 1) / 2, "o", color="#b35806", label="(q.k + 1) / 2")
    ax1.set(xticks=x, ylim=(0, 1.05), xlabel="key j (value v_j = j)", ylabel="weight softmax(q.k / T)")
    ax1.legend(fontsize=8, loc="upper right")
    ax2.scatter(r["values"], np.zeros(N_KEYS), color="grey", zorder=2, label="values v_j")
    out, = ax2.plot([r["output"]], [0], "D", color="#2166ac", ms=10, label="output sum_j w_j v_j")
    ax2.set(xlim=(-0.5, N_KEYS - 0.5), ylim=(-1, 1), yticks=[], xlabel="value")
    ax2.legend(fontsize=8, loc="upper left")
    live(*bars, dots, out, ax1.title, ax2.title)

    def update(r) -> None:
        for bar, w in zip(bars, r["weights"]):
            bar.set_height(w)
        dots.set_ydata((r["scores"] + 1) / 2)
        out.set_xdata([r["output"]])
        ax1.set_title(f"T = {r['temperature']:.3g}: max weight {r['weights'].max():.3f} on key {r['best']}", fontsize=9)
        ax2.set_title(f"output {r['output']:.3f} (hard lookup: {r['hard']:g})", fontsize=9)

    update(r)
    return update


@torch.no_grad()
def self_match_rate(shared: bool, d: int = 32, n_tokens: int = 16, seeds=(0, 1, 2, 3, 4)) -> np.ndarray:
    """Per seed: the share of queries whose highest-scoring key is their own token, for n_tokens random tokens
    x ~ N(0, I_d) and random projections (std d^-1/2). shared=True uses one matrix W for queries and keys
    (score x_i W W^T x_j, a positive semi-definite form), shared=False two independent ones. (S,)"""
    d, n_tokens = int_in("d", d, 1, 4096), int_in("n_tokens", n_tokens, 2, 4096)
    rates = []
    for seed in seed_list("seeds", seeds):
        g = torch.Generator().manual_seed(seed)
        x = torch.randn(n_tokens, d, generator=g)
        w_q = torch.randn(d, d, generator=g) / math.sqrt(d)
        w_k = w_q if shared else torch.randn(d, d, generator=g) / math.sqrt(d)
        scores = (x @ w_q) @ (x @ w_k).T  # (n, n): query i against key j
        rates.append(float((scores.argmax(1) == torch.arange(n_tokens)).float().mean()))
    return np.array(rates)
