"""Notebook 08, the trained part: clip sweep, length extrapolation, the seed paper's observations, costs.

    sweep = run_variants([("shaw", 0), ("shaw", 2)], seeds=(0, 1, 2))   # accuracy at L and 2L per seed
    obs = train_mlm_relative(seed=0)                                   # Huang et al. method 4 on MLM
    runs = train_mlm_runs(seeds=(0, 1, 2))                             # the same, one run per seed
    relative_weight_norms(obs.model), attention_by_offset(obs.model, batch)
    position_costs(...)                                                # parameters and forward time per method
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from functools import partial

import numpy as np
import torch

from qalib.lab.data import MLMTask, ProbeTask, SyntheticLanguage
from qalib.lab.device import one_thread
from qalib.lab.parallel import map_runs
from qalib.lab.reference import ReferenceSpec, Rung
from qalib.lab.stats import paired_difference
from qalib.lab.train import TrainConfig, evaluate, train
from qalib.nn.config import MiniBertConfig
from qalib.nn.model import MiniBert
from qalib.nn.validate import choice, int_in, seed_list
from qalib.notebook.claims import above, below, check
from qalib.notebook.drawing import seed_band

POSITIONS = ("learned", "sinusoidal", "shaw", "relative_key_query", "rotary", "alibi")


@dataclass(frozen=True)
class ProbeSetup:
    """A one-layer d=32 model on ProbeTask; scale > 1 makes it wider and trains longer (GPU)."""
    kind: str = "previous"
    k: int = 1
    seq_len: int = 16
    vocab_size: int = 16
    steps: int = 200
    batch_size: int = 32
    lr: float = 1e-2
    d_model: int = 32
    n_layers: int = 1
    causal: bool = False

    def scaled(self, scale: int) -> "ProbeSetup":
        int_in("scale", scale, 1)
        from dataclasses import replace
        return replace(self, steps=self.steps * scale, d_model=self.d_model * min(scale, 2))

    def config(self, pos: str, clip: int = 4) -> MiniBertConfig:
        return MiniBertConfig(vocab_size=self.vocab_size, d_model=self.d_model, n_layers=self.n_layers, n_heads=4,
                              d_ff=2 * self.d_model, max_len=self.seq_len + 1, pos=pos, rel_clip=clip,
                              causal=self.causal)

    def task(self) -> ProbeTask:
        return ProbeTask(self.kind, self.vocab_size, self.seq_len, self.k)


def _name(device) -> str | None:
    """TrainConfig.device takes a string ("cpu", "cuda:0"); accept a torch.device too."""
    return None if device is None else str(device)


def train_probe(pos: str, clip: int, seed: int, setup: ProbeSetup = ProbeSetup(), device=None) -> MiniBert:
    choice("pos", pos, POSITIONS)
    torch.manual_seed(seed)
    model = MiniBert(setup.config(pos, clip))
    train(model, setup.task(), TrainConfig(steps=setup.steps, batch_size=setup.batch_size, lr=setup.lr, warmup=10,
                                           seed=seed, log_every=setup.steps, device=_name(device)))
    return model


def length_accuracy(model: MiniBert, setup: ProbeSetup, factor: int = 2) -> tuple[float, float, str]:
    """Accuracy at the training length L and at factor * L; a model that cannot run at factor * L gives
    nan and the error message."""
    task = setup.task()
    at_l = evaluate(model, task, n_batches=2, batch_size=128)["accuracy"]
    try:
        longer = evaluate(model, task, n_batches=2, batch_size=128, seq_len=factor * setup.seq_len)["accuracy"]
        return at_l, longer, ""
    except ValueError as err:
        return at_l, math.nan, str(err)


def run_variants(variants, seeds=(0, 1, 2), setup: ProbeSetup = ProbeSetup(), device=None) -> dict:
    """Train each (pos, clip) variant for each seed; accuracy at L and 2L. -> arrays (n_variants, n_seeds).
    The runs are independent and go side by side on the CPU cores (qalib.lab.parallel)."""
    variants = [tuple(v) for v in variants]
    seeds = seed_list("seeds", seeds)
    if not variants:
        raise ValueError("variants must be non-empty")
    runs = [(pos, clip, seed) for pos, clip in variants for seed in seeds]
    scores = map_runs(partial(_probe_scores, setup=setup, device=device), runs, device)
    acc = np.array([at_l for at_l, _, _ in scores]).reshape(len(variants), len(seeds))
    acc2 = np.array([longer for _, longer, _ in scores]).reshape(len(variants), len(seeds))
    errors = {(pos, clip): err for (pos, clip, _), (_, _, err) in zip(runs, scores) if err}
    return {"variants": variants, "seeds": list(seeds), "acc": acc, "acc_2L": acc2, "errors": errors,
            "chance": 1 / (setup.vocab_size - 5), "setup": setup}


def _probe_scores(run: tuple[str, int, int], setup: ProbeSetup, device) -> tuple[float, float, str]:
    pos, clip, seed = run
    return length_accuracy(train_probe(pos, clip, seed, setup, device), setup)


def plot_sweep(fig, r: dict, labels=None) -> None:
    ax = fig.add_subplot()
    labels = labels or [f"{p}\nk={c}" if p in ("shaw", "relative_key_query") else p for p, c in r["variants"]]
    x = np.arange(len(labels))
    for key, off, colour, name in (("acc", -0.17, "C0", "length L (trained)"), ("acc_2L", 0.17, "C1", "length 2L")):
        a = r[key]
        ok = np.isfinite(a).all(axis=1)
        mean = np.where(ok, a.mean(1), np.nan)
        err = np.where(ok, [mean - a.min(1), a.max(1) - mean], 0)
        ax.bar(x[ok] + off, mean[ok], width=0.34, color=colour, yerr=err[:, ok], capsize=3, label=name)
    for i in np.flatnonzero(~np.isfinite(r["acc_2L"]).all(axis=1)):
        ax.text(x[i] + 0.17, 0.05, "error", rotation=90, ha="center", fontsize=8)
    ax.axhline(r["chance"], color="0.4", ls=":", lw=1, label="chance")
    ax.set_xticks(x, labels, fontsize=8)
    ax.set(ylim=(0, 1.05), ylabel="accuracy (mean, min-max over seeds)",
           title=f"ProbeTask {r['setup'].kind}, trained at L = {r['setup'].seq_len}")
    ax.legend(fontsize=8, loc="upper left")


# ---------------------------------------------------------------------------------------------
# The seed paper's observations (Huang et al. 2020, sec. 5: Figs. 4 and 5) on a trained mini-BERT
# ---------------------------------------------------------------------------------------------
@dataclass
class MLMRun:
    model: MiniBert
    task: MLMTask
    accuracy: float


def train_mlm_relative(seed: int = 0, steps: int = 200, clip: int = 8, seq_len: int = 16, d_model: int = 32,
                       device=None) -> MLMRun:
    """Huang et al. method 4 (relative_key_query) trained with MLM on the synthetic language, whose token at t
    depends on t-1 and (half the time) t-4."""
    lang = SyntheticLanguage(vocab_size=32, branching=4, lag=4, p_lag=0.5, seed=0)
    task = MLMTask(lang, seq_len=seq_len)
    cfg = MiniBertConfig(vocab_size=32, d_model=d_model, n_layers=2, n_heads=4, d_ff=2 * d_model, max_len=seq_len + 2,
                         pos="relative_key_query", rel_clip=clip)
    torch.manual_seed(seed)
    model = MiniBert(cfg)
    train(model, task, TrainConfig(steps=steps, batch_size=32, lr=5e-3, warmup=20, seed=seed, log_every=steps,
                                   device=_name(device)))
    return MLMRun(model, task, evaluate(model, task, n_batches=2, batch_size=128)["accuracy"])


def train_mlm_runs(seeds=(0, 1, 2), steps: int = 200, device=None) -> list[MLMRun]:
    """train_mlm_relative for each seed, side by side on the CPU cores (qalib.lab.parallel)."""
    return map_runs(partial(_mlm_run, steps=steps, device=device), seed_list("seeds", seeds), device)


def _mlm_run(seed: int, steps: int, device) -> MLMRun:
    return train_mlm_relative(seed=seed, steps=steps, device=device)


def relative_weight_norms(model: MiniBert, layer: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(offsets -k..k, L2 norm of the learned relative vector w_offset) for one layer."""
    pos = model.layers[layer].attention.position
    if pos is None or not hasattr(pos, "distance_embedding"):
        raise ValueError(f"layer {layer} has no learned relative table (pos={model.cfg.pos!r})")
    w = pos.distance_embedding.weight.detach().cpu()
    return np.arange(-pos.clip, pos.clip + 1), w.norm(dim=1).numpy()


@torch.no_grad()
def attention_by_offset(model: MiniBert, batch, layer: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Mean attention probability at each offset j - i (over heads, sequences and queries), and for each
    offset the number of keys there is taken into account: returns (offsets, mean prob per (query, key) pair)."""
    probs = model(**batch.model_inputs(), return_internals=True).internals[f"layer{layer}.probs"]
    return offset_profile(probs)


def offset_profile(probs: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
    """(B, H, T, T) attention probabilities -> (offsets -(T-1)..T-1, mean probability on each diagonal)."""
    if probs.dim() != 4 or probs.shape[-1] != probs.shape[-2]:
        raise ValueError(f"probs must be (B, H, T, T), got {tuple(probs.shape)}")
    p = probs.detach().float().cpu().mean(dim=(0, 1))  # (T, T) averaged over batch and heads
    t = p.shape[0]
    offsets = np.arange(-t + 1, t)
    return offsets, np.array([float(torch.diagonal(p, o).mean()) for o in offsets])


def plot_observations(fig, offsets_w, norms, offsets_a, attn, t: int) -> None:
    """norms: (n_seeds, 2k+1); attn: (n_seeds, 2T-1)."""
    ax1, ax2 = fig.subplots(1, 2)
    for data, ax, x in ((norms, ax1, offsets_w), (attn, ax2, offsets_a)):
        _, band, _ = seed_band(ax, x, data, marker="o", ms=3, color="C0", label="mean over seeds")
        band.set_label("min-max")
    ax1.set(title="layer 0: norm of learned w_offset", xlabel="offset j - i (clipped, tokens)", ylabel="L2 norm")
    ax2.axhline(1 / t, color="0.4", ls=":", label="uniform 1/T")
    ax2.set(title="layer 0: mean attention at each offset", xlabel="offset j - i (tokens)", ylabel="probability")
    ax2.legend(fontsize=8)


# ---------------------------------------------------------------------------------------------
# Storage and compute (Huang et al. 2020, sec. 3.3 / Table 1)
# ---------------------------------------------------------------------------------------------
def position_parameters(model: MiniBert) -> int:
    """Parameters that exist only to encode position: the learned table or the relative tables."""
    n = sum(p.numel() for name, p in model.named_parameters()
            if name.startswith("embeddings.position_embeddings") or ".attention.position." in name)
    return int(n)


@torch.no_grad()
def forward_ms(model: MiniBert, batch_size: int, t: int, repeats: int = 5, seed: int = 0) -> float:
    """Best-of-`repeats` wall time (ms) of one forward pass without internals (the fused attention path)."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, model.cfg.vocab_size, (batch_size, t), generator=g)
    model.eval()
    model(ids)  # warm-up
    best = math.inf
    for _ in range(repeats):
        start = time.perf_counter()
        model(ids)
        best = min(best, time.perf_counter() - start)
    return 1000 * best


def position_costs(base: MiniBertConfig, t: int = 128, batch_size: int = 8, repeats: int = 5,
                   methods=POSITIONS, clip: int = 16) -> dict:
    """For each method on the same base config: position parameters, all parameters, forward time (ms)."""
    if t > base.max_len:
        base = base.replace(max_len=t)
    rows = {}
    for pos in methods:
        torch.manual_seed(0)
        model = MiniBert(base.replace(pos=pos, rel_clip=clip))
        rows[pos] = {"position_params": position_parameters(model), "params": model.num_parameters(),
                     "forward_ms": forward_ms(model, batch_size, t, repeats)}
    return rows


def method4_scores(model: MiniBert, input_ids: torch.Tensor, layer: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Huang et al. eq. 16 by hand, (q_i.k_j + q_i.a_ij + k_j.a_ij) / sqrt(d_head), next to the scores the model
    computed. -> (by hand, model), both (B, H, T, T)."""
    if model.cfg.pos != "relative_key_query":
        raise ValueError(f"model.cfg.pos must be 'relative_key_query', got {model.cfg.pos!r}")
    with torch.no_grad():
        internals = model(input_ids, return_internals=True).internals
        q, k = internals[f"layer{layer}.q"], internals[f"layer{layer}.k"]  # (B, H, T, dh)
        a = model.layers[layer].attention.position.table(input_ids.shape[1])  # (T, T, dh)
        manual = (q @ k.transpose(-1, -2) + torch.einsum("bhid,ijd->bhij", q, a)
                  + torch.einsum("bhjd,ijd->bhij", k, a)) * model.cfg.scale
    return manual, internals[f"layer{layer}.scores"]


def position_similarity(table: torch.Tensor) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Cosine similarity of learned absolute position vectors (n, d) -> (matrix (n, n), offsets 0..n-1,
    mean similarity at each offset)."""
    if table.dim() != 2 or table.shape[0] < 2:
        raise ValueError(f"table must be (n >= 2, d), got {tuple(table.shape)}")
    x = torch.nn.functional.normalize(table.detach().float(), dim=1)
    sim = x @ x.T
    n = sim.shape[0]
    return sim.numpy(), np.arange(n), np.array([float(torch.diagonal(sim, o).mean()) for o in range(n)])


# -- the reference: symmetric ALiBi with one layer and with two, trained longer, 8 seeds ---------------------------
HELD_OUT = 40_000_003  # + the seed: the reference's held-out batches, disjoint from every training stream
REFERENCE_STEPS = 3000


def reference_seed(seed: int, steps: int, lr: float, n_layers: int) -> dict:
    """One seed of the reference: section 5's 2-back copy with symmetric ALiBi (the live sweep's task and model,
    n_layers layers), trained `steps` steps at rate `lr`. -> {"acc": held-out accuracy at the training length L,
    "acc_2L": at 2L}"""
    from dataclasses import replace
    setup = replace(ProbeSetup(kind="k_back", k=2), steps=steps, lr=lr, n_layers=n_layers)
    model = train_probe("alibi", 0, seed, setup, device="cpu")
    task = setup.task()
    return {"acc": evaluate(model, task, n_batches=2, batch_size=128, seed=HELD_OUT + seed)["accuracy"],
            "acc_2L": evaluate(model, task, n_batches=2, batch_size=128, seed=HELD_OUT + seed,
                               seq_len=2 * setup.seq_len)["accuracy"]}


def reference_table(ref) -> dict[str, dict[str, np.ndarray]]:
    """{rung name: {"acc": (seeds,), "acc_2L": (seeds,)}} in the spec's rung order."""
    return {r.name: {k: r.values(k) for k in ("acc", "acc_2L")} for r in ref.rungs.values()}


def reference_claims(ref) -> None:
    """The checks notebook 08 makes on its reference run (the runner makes them on every regeneration too)."""
    t = reference_table(ref)
    one = {name: float(v["acc"].max()) for name, v in t.items() if name.startswith("1 layer")}
    check("one layer of symmetric ALiBi never learns the 2-back copy: every seed below 50% at every budget, up to "
          f"{REFERENCE_STEPS} steps at a smaller rate (chance 9%)", below(max(one.values()), 0.5), one)
    two = t[f"2 layers, {REFERENCE_STEPS} steps"]
    check(f"two layers learn it: after {REFERENCE_STEPS} steps the median seed is above 90% at the training length L",
          above(float(np.median(two["acc"])), 0.9), two["acc"])
    check("but what they learned does not carry to twice the length: the median seed is below 70% at 2L",
          below(float(np.median(two["acc_2L"])), 0.7), two["acc_2L"])


@one_thread()  # a 1-2 layer model of width 32: a second thread only spins
def hops_seed(seed: int, steps: int, n_layers: int, clip: int = 2) -> dict:
    """One seed of the chained-hops reference: section 5a's 2-back copy with Shaw's relative keys clipped at `clip`
    (no absolute positions), n_layers layers, `steps` steps at rate 3e-3. -> {"acc": held-out accuracy at the
    training length L, "acc_2L": at 2L}"""
    from dataclasses import replace
    setup = replace(ProbeSetup(kind="k_back", k=2), steps=steps, lr=3e-3, n_layers=n_layers)
    model = train_probe("shaw", clip, seed, setup, device="cpu")
    task = setup.task()
    batch = task.batch(128, torch.Generator().manual_seed(HELD_OUT + seed))
    with torch.no_grad():
        internals = model.eval()(**batch.model_inputs(), return_internals=True).internals
    on = {-1: [], -2: []}  # per layer: the largest mean share of attention any head puts on offset -1, and on -2
    for layer in range(n_layers):
        p = internals[f"layer{layer}.probs"]                   # (B, H, T, T)
        rows = torch.arange(3, p.shape[-1])                     # positions with two tokens before them ([CLS] at 0)
        for offset in on:
            on[offset].append(float(p[:, :, rows, rows + offset].mean(dim=(0, 2)).max()))
    return {"acc": evaluate(model, task, n_batches=2, batch_size=128, seed=HELD_OUT + seed)["accuracy"],
            "acc_2L": evaluate(model, task, n_batches=2, batch_size=128, seed=HELD_OUT + seed,
                               seq_len=2 * setup.seq_len)["accuracy"], "on_previous": on[-1], "on_target": on[-2]}


def hops_claims(ref) -> None:
    """The checks notebook 08 makes on the chained-hops reference (the runner makes them on every regeneration)."""
    t = reference_table(ref)
    one, = (v for name, v in t.items() if name.startswith("1 layer"))
    two = {ref.rungs[name].kwargs["steps"]: v for name, v in t.items() if name.startswith("2 layers")}
    chance = 1 / (ProbeSetup().vocab_size - 5)
    check(f"clip 2, one layer: offset -2 shares its vector with every offset further left, and no seed passes 50% in "
          f"{ref.rungs[next(iter(t))].kwargs['steps']} steps (chance {chance:.0%})", below(one["acc"], 0.5), one["acc"])
    mid = sorted(two)[len(two) // 2]
    check(f"clip 2, two layers: every seed copies the token two back at > 95% by {mid} steps",
          above(two[mid]["acc"], 0.95), {f"{s} steps": v["acc"] for s, v in two.items()})
    mid_rung = next(r for r in ref.rungs.values() if r.kwargs.get("n_layers") == 2 and r.kwargs["steps"] == mid)
    prev, target = mid_rung.values("on_previous"), mid_rung.values("on_target")  # (seeds, 2 layers)
    check("but not by chaining hops: no layer-0 head puts more than 0.25 of its attention on the token just before (a "
          "hop would need most of it), while a layer-1 head puts > 0.9 on the target two back itself, in every seed",
          below(prev[:, 0], 0.25) & above(target[:, 1], 0.9), {"layer 0 on i-1": prev[:, 0], "layer 1 on i-2": target[:, 1]})
    print(f"accuracy at 2L after {mid} steps: {np.round(two[mid]['acc_2L'], 2)} (at L: {np.round(two[mid]['acc'], 2)})")


EXTRAPOLATION = (("rotary", 0), ("shaw", 3), ("learned", 0), ("sinusoidal", 0))  # section 5b's schemes (pos, clip)


@one_thread()  # a one-layer model of width 32-64: a second thread only spins
def extrapolation_seed(seed: int, scale: int) -> dict:
    """One seed of the extrapolation reference: section 5b's 2-back copy for each scheme of EXTRAPOLATION, trained as
    the live run trains it at ProbeSetup(kind="k_back", k=2).scaled(scale) (scale 4: d = 64, 4x the steps).
    -> {scheme: {"acc": held-out accuracy at L, "acc_2L": at 2L (NaN where the scheme cannot run there)}}"""
    setup = ProbeSetup(kind="k_back", k=2).scaled(scale)
    out = {}
    for pos, clip in EXTRAPOLATION:
        model = train_probe(pos, clip, seed, setup, device="cpu")
        task = setup.task()
        at_l = evaluate(model, task, n_batches=2, batch_size=128, seed=HELD_OUT + seed)["accuracy"]
        try:
            at_2l = evaluate(model, task, n_batches=2, batch_size=128, seed=HELD_OUT + seed,
                             seq_len=2 * setup.seq_len)["accuracy"]
        except ValueError:  # a learned table has no row beyond max_len
            at_2l = math.nan
        out[f"{pos} k={clip}" if pos == "shaw" else pos] = {"acc": at_l, "acc_2L": at_2l}
    return out


def extrapolation_claims(ref) -> None:
    """The checks notebook 08 makes on the extrapolation reference (the runner makes them on every regeneration)."""
    narrow, wide = list(ref.rungs.values())
    val = lambda r, scheme, key: r.values(scheme, key)  # (seeds,)
    for r in (narrow, wide):
        print(f"{r.name:26s}", {s: f"L {np.median(val(r, s, 'acc')):.2f}, 2L {np.median(val(r, s, 'acc_2L')):.2f}"
                                for s in ("rotary", "shaw k=3", "learned", "sinusoidal")}, "(medians)")
    check("both relative schemes learn the copy at L on the median seed, at both sizes (> 0.95)",
          above(min(float(np.median(val(r, s, "acc"))) for r in (narrow, wide) for s in ("rotary", "shaw k=3")), 0.95),
          {r.name: {s: val(r, s, "acc") for s in ("rotary", "shaw k=3")} for r in (narrow, wide)})
    check("Shaw (k = 3) loses nothing at 2L, in every seed at both sizes (within 0.02 of its accuracy at L): its clipped "
          "labels never go out of range", below(max(np.abs(val(r, "shaw k=3", "acc_2L") - val(r, "shaw k=3", "acc")).max()
                                                    for r in (narrow, wide)), 0.02),
          {r.name: val(r, "shaw k=3", "acc_2L") for r in (narrow, wide)})
    best_absolute = max(val(r, s, "acc").max() for r in (narrow, wide) for s in ("learned", "sinusoidal"))
    check("neither absolute scheme learns the copy in one layer at either size: every seed below 0.2 at L (chance 0.09)",
          below(best_absolute, 0.2), {r.name: {s: val(r, s, "acc").max() for s in ("learned", "sinusoidal")}
                                      for r in (narrow, wide)})
    drop = paired_difference(val(wide, "rotary", "acc"), val(wide, "rotary", "acc_2L"), "at L", "at 2L")
    check(f"rotary keeps it at 2L only at d = 32: at d = 64 every seed loses more than 0.1 at 2L (paired: {drop})",
          above(val(narrow, "rotary", "acc_2L").min(), 0.9)
          & above(val(wide, "rotary", "acc") - val(wide, "rotary", "acc_2L"), 0.1),
          {"d = 32 at 2L": val(narrow, "rotary", "acc_2L"), "d = 64 at 2L": val(wide, "rotary", "acc_2L")})


def xl_bias_claims(ref) -> None:
    """The checks notebook 08 makes on the Transformer-XL reference (the runner makes them on every regeneration)."""
    for rung in ref.rungs.values():
        acc = {v: rung.values(v, "acc") for v in XL_VARIANTS}                          # (seeds, rates) each
        print(f"{rung.name}: seeds that learned at rates {list(XL_LRS)}:",
              {v: (a > XL_LEARNED).sum(0).tolist() for v, a in acc.items()})
        diff = paired_difference(largest_learned_rate(acc["transformer_xl"]),
                                 largest_learned_rate(acc["transformer_xl_no_bias"]), "with u, v", "without")
        check(f"{rung.name}: removing u and v does not let seeds learn at higher rates: the largest rate at which a "
              f"seed learns, with minus without, has a 95% interval above -1 step of the grid ({diff})",
              above(diff.low, -1), diff.diffs)




@torch.no_grad()
def scores_by_formula(model: MiniBert, input_ids: torch.Tensor, layer: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Layer `layer`'s scaled scores recomputed from its own q, k and position parameters by the paper's formula,
    for Huang et al.'s methods 1-3 and Transformer-XL (with or without u, v). -> (by the formula, from the model),
    each (B, H, T, T)."""
    pos = model.cfg.pos
    inner = model(input_ids, return_internals=True).internals
    q, k, s = inner[f"layer{layer}.q"], inner[f"layer{layer}.k"], inner[f"layer{layer}.scores"]
    scheme, t = model.layers[layer].attention.position, q.shape[-2]
    off = torch.arange(t)[None, :] - torch.arange(t)[:, None]                 # (T, T): j - i
    clip = model.cfg.rel_clip
    content = q @ k.transpose(-1, -2)                                         # (B, H, T, T)
    if pos == "huang_unsigned_scalar":                                        # method 1: (q.k) a_|j-i|
        raw = content * scheme.scalars[:, off.abs().clamp(max=clip)]
    elif pos == "huang_signed_scalar":                                        # method 2: (q.k) a_(j-i)
        raw = content * scheme.scalars[:, off.clamp(-clip, clip) + clip]
    elif pos == "huang_vector":                                               # method 3: sum_d q_d k_d a_(j-i),d
        raw = torch.einsum("bhid,bhjd,ijd->bhij", q, k, scheme.vectors[off.clamp(-clip, clip) + clip])
    elif pos.startswith("transformer_xl"):                                    # Dai et al.: (a) + (b) + (c) + (d)
        pk = scheme.position_keys(t)                                          # (H, T, T, d_head): W_R R_(i-j)
        raw = content + torch.einsum("bhid,hijd->bhij", q, pk)
        if scheme.with_biases:
            raw = raw + torch.einsum("hd,bhjd->bhj", scheme.u, k)[:, :, None, :] + torch.einsum("hd,hijd->hij", scheme.v, pk)
    else:
        raise ValueError(f"scores_by_formula knows Huang's methods 1-3 and Transformer-XL, not pos={pos!r}")
    return raw * model.cfg.scale, s


# -- Transformer-XL's u and v: do they make training unstable? ------------------------------------------------------
XL_VARIANTS = ("transformer_xl", "transformer_xl_no_bias")
XL_LRS = (1e-2, 2e-2, 3e-2, 5e-2)   # Adam's rate, 10 warm-up steps; the live probe trains at 1e-2
XL_LEARNED = 0.9                    # accuracy on the previous-token copy (chance 1/11) that counts as learned


@one_thread()
def xl_bias_seed(seed: int, steps: int, lrs=XL_LRS) -> dict:
    """One seed of the Transformer-XL comparison: the one-layer previous-token probe with Dai et al.'s relative
    scores, with and without their biases u and v, trained at each rate of `lrs` from the same initial weights'
    draw and batches. -> {variant: {"acc": [held-out accuracy per rate], "rise": [largest rise of the training loss
    above its running minimum, per rate]}}"""
    setup = ProbeSetup(steps=steps)
    out = {}
    for pos in XL_VARIANTS:
        acc, rise = [], []
        for lr in lrs:
            torch.manual_seed(seed)
            model = MiniBert(setup.config(pos))
            hist = train(model, setup.task(), TrainConfig(steps=steps, batch_size=setup.batch_size, lr=lr, warmup=10,
                                                          seed=seed, log_every=1, device="cpu"))
            loss = np.asarray(hist.loss)
            rise.append(float((loss - np.minimum.accumulate(loss)).max()))
            acc.append(evaluate(model, setup.task(), n_batches=2, batch_size=128, seed=HELD_OUT + seed)["accuracy"])
        out[pos] = {"acc": acc, "rise": rise}
    return out


def largest_learned_rate(acc: np.ndarray) -> np.ndarray:
    """(seeds, rates) accuracies -> (seeds,) the index of the largest rate of the grid at which the seed learned
    (-1 if at none): higher is more stable."""
    ok = np.asarray(acc) > XL_LEARNED
    idx = np.where(ok, np.arange(ok.shape[1])[None, :], -1)
    return idx.max(1)


REFERENCES = [
    ReferenceSpec(
        "08_relative_positions", "alibi_layers", reference_seed, seeds=8,
        rungs=(Rung("1 layer, 200 steps", steps=200, lr=1e-2, n_layers=1),
               Rung(f"1 layer, {REFERENCE_STEPS} steps", steps=REFERENCE_STEPS, lr=3e-3, n_layers=1),
               Rung("2 layers, 800 steps", steps=800, lr=3e-3, n_layers=2),
               Rung(f"2 layers, {REFERENCE_STEPS} steps", steps=REFERENCE_STEPS, lr=3e-3, n_layers=2)),
        lesson="whether symmetric ALiBi can learn the 2-back copy with one layer or two, at the live budget and "
               "longer, over 8 seeds", claims=reference_claims),
    ReferenceSpec(
        "08_relative_positions", "chained_hops", hops_seed, seeds=8,
        rungs=(Rung("1 layer, clip 2, 800 steps", steps=800, n_layers=1),
               Rung("2 layers, clip 2, 200 steps", steps=200, n_layers=2),
               Rung("2 layers, clip 2, 800 steps", steps=800, n_layers=2),
               Rung("2 layers, clip 2, 3000 steps", steps=3000, n_layers=2)),
        lesson="whether two layers with Shaw's clip 2 chain two one-token hops into the 2-back copy that one layer "
               "with that clip cannot make, over 8 seeds", claims=hops_claims),
    ReferenceSpec(
        "08_relative_positions", "extrapolation", extrapolation_seed, seeds=8,
        rungs=(Rung("d = 32, 200 steps (live)", scale=1), Rung("d = 64, 800 steps", scale=4)),
        lesson="which schemes learn the 2-back copy at length L and keep it at 2L, at the live size and at twice the "
               "width with 4x the steps, over 8 seeds", claims=extrapolation_claims),
    ReferenceSpec(
        "08_relative_positions", "xl_biases", xl_bias_seed, seeds=16,
        rungs=(Rung("200 steps (live)", steps=200), Rung("800 steps", steps=800)),
        lesson="whether Transformer-XL's biases u and v make the previous-token probe less stable as the learning "
               "rate rises, with and without them from the same weights and batches, over 16 seeds",
        claims=xl_bias_claims),
]
