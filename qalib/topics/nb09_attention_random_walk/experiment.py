"""Notebook 09, sections 5 and 6: rank collapse in a trained mini-BERT and in all-MiniLM-L6-v2.

    res = run_residual_experiment(seeds=range(3), steps=150)
    res["final"]["no residual"]        # (n_seeds,) held-out MLM accuracy
    res["ratio"]["residual"]           # (n_seeds, n_layers + 1) collapse ratio of the trained hidden states
    prof = minilm_profiles(model, tok, text)   # real residual stream vs attention-only stacks from its own weights
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from qalib.lab.data import IGNORE, MLMTask, SyntheticLanguage
from qalib.lab.device import one_thread
from qalib.lab.gate import Gate, learned
from qalib.lab.parallel import map_runs
from qalib.lab.reference import ReferenceSpec, Rung
from qalib.lab.stats import paired_difference
from qalib.lab.train import TrainConfig, evaluate
from qalib.lab.train_batched import train_seeds
from qalib.nn.config import MiniBertConfig
from qalib.nn.model import MiniBert
from qalib.nn.validate import int_in, seed_list
from qalib.notebook.claims import above, at_least, below, check
from qalib.notebook.drawing import budget_axis, log_ticks, seed_band, seeds_and_median
from qalib.topics.nb09_attention_random_walk.compute import FLOAT_FLOOR, LOG_AXIS_TICKS, collapse_ratio, effective_rank, stationary

VARIANTS = {"residual": True, "no residual": False}
EVAL_SEED = 12345  # qalib.lab.train.evaluate's default evaluation seed


# ---------------------------------------------------------------------------------------------
# Section 5: train with and without residual connections
# ---------------------------------------------------------------------------------------------
def mlm_task(seq_len: int = 16, seed: int = 0) -> MLMTask:
    """MLM on qalib's synthetic language (27 content tokens); 30% of positions carry a label (more signal per step)."""
    return MLMTask(SyntheticLanguage(vocab_size=32, branching=4, lag=4, p_lag=0.5, seed=seed), seq_len=seq_len, mlm_prob=0.3)


def experiment_config(residual: bool, d_model: int = 32, n_layers: int = 2, n_heads: int = 2, max_len: int = 24) -> MiniBertConfig:
    return MiniBertConfig(vocab_size=32, d_model=d_model, n_layers=n_layers, n_heads=n_heads, d_ff=2 * d_model,
                          max_len=max_len, residual=residual)


@torch.no_grad()
def layer_profile(model: MiniBert, task, batch_size: int = 64, seed: int = 99) -> dict:
    """Collapse ratio and effective rank of the hidden states (B, T, d) after the embeddings and after each layer."""
    model.eval()
    batch = task.batch(batch_size, torch.Generator().manual_seed(seed)).to(next(model.parameters()).device)
    internals = model(**batch.model_inputs(), return_internals=True).internals
    hs = [internals["embeddings.out"]] + [internals[f"layer{i}.hidden"] for i in range(model.cfg.n_layers)]
    return {"ratio": np.array([collapse_ratio(h.cpu()) for h in hs]), "erank": np.array([effective_rank(h.cpu()) for h in hs])}


def best_constant_accuracy(task, n_batches: int = 2, batch_size: int = 128, seed: int = EVAL_SEED) -> float:
    """Accuracy of always predicting the most frequent label on the evaluation batches: the best any model can do
    whose output is the same at every position (what a fully collapsed model produces)."""
    gen = torch.Generator().manual_seed(seed)
    labels = torch.cat([task.batch(batch_size, gen).labels.flatten() for _ in range(n_batches)])
    labels = labels[labels != IGNORE]
    return float(torch.bincount(labels).max() / len(labels))


def run_residual_experiment(seeds=range(3), steps: int = 150, d_model: int = 32, n_layers: int = 2,
                            batch_size: int = 32, lr: float = 1e-2, seq_len: int = 16, log_every: int = 10,
                            device: str | None = "cpu", eval_batches: int = 2, eval_batch_size: int = 128) -> dict:
    """Train the mini-BERT with and without residual connections on the same MLM task for each seed; return
    training-accuracy curves, held-out accuracy, and the per-layer collapse ratio / effective rank at
    initialisation and after training (arrays over seeds)."""
    seeds = seed_list("seeds", seeds)
    int_in("steps", steps, 1)
    task = mlm_task(seq_len)
    out = {"seeds": seeds, "steps": steps, "chance": 1 / 27,
           "best_constant": best_constant_accuracy(task, eval_batches, eval_batch_size),
           "curves": {}, "final": {}, "ratio": {}, "erank": {}, "ratio_init": {}, "erank_init": {}, "step": None}
    train_cfg = TrainConfig(steps=steps, batch_size=batch_size, lr=lr, warmup=20, log_every=log_every, device=device)
    # every seed of one variant in one batched run (qalib.lab.train_batched); the two variants side by side on the cores
    train_variant = functools.partial(_train_variant, seeds=seeds, task=task, d_model=d_model, n_layers=n_layers,
                                      seq_len=seq_len, eval_batches=eval_batches, eval_batch_size=eval_batch_size,
                                      train_cfg=train_cfg)
    for name, mine in zip(VARIANTS, map_runs(train_variant, list(VARIANTS), device)):
        out["step"] = mine[-1]["step"]
        for key in ("curves", "final", "ratio", "erank", "ratio_init", "erank_init"):
            out[key][name] = np.array([o[key] for o in mine])
    return out


def _train_variant(name: str, seeds: list[int], task, d_model: int, n_layers: int, seq_len: int, eval_batches: int,
                   eval_batch_size: int, train_cfg: TrainConfig) -> list[dict]:
    """Every seed of one variant: member i starts as torch.manual_seed(seed_i); MiniBert(config) and reads its own
    data stream, so each seed sees the same data with and without the residual path."""
    cfg = experiment_config(VARIANTS[name], d_model, n_layers, max_len=seq_len + 8)
    inits = []
    for seed in seeds:  # the profile at initialisation: the same weights train_seeds will start from
        torch.manual_seed(seed)
        inits.append(layer_profile(MiniBert(cfg), task, batch_size=min(64, eval_batch_size)))
    run = train_seeds(cfg, task, seeds, train_cfg)
    out = []
    for model, hist, init in zip(run.models, run.histories, inits):
        prof = layer_profile(model, task, batch_size=min(64, eval_batch_size))
        final = evaluate(model, task, n_batches=eval_batches, batch_size=eval_batch_size)["accuracy"]
        out.append({"step": np.array(hist.step), "curves": hist.accuracy, "final": final, "ratio": prof["ratio"],
                    "erank": prof["erank"], "ratio_init": init["ratio"], "erank_init": init["erank"]})
    return out


def plot_experiment(fig, res: dict) -> None:
    """Left: training accuracy (mean, band = min..max over seeds). Right: collapse ratio per layer, trained (solid)
    and at initialisation (dashed)."""
    ax1, ax2 = fig.subplots(1, 2)
    layers = np.arange(next(iter(res["ratio"].values())).shape[1])
    for i, name in enumerate(res["curves"]):
        c = res["curves"][name]
        seed_band(ax1, res["step"], c, alpha=0.2, color=f"C{i}", label=name)
        for key, style in (("ratio", "-o"), ("ratio_init", "--x")):
            r = np.maximum(res[key][name], FLOAT_FLOOR)
            ax2.plot(layers, np.exp(np.log(r).mean(0)), style, ms=4, color=f"C{i}",
                     label=f"{name}, {'trained' if key == 'ratio' else 'init'}")
            ax2.fill_between(layers, r.min(0), r.max(0), color=f"C{i}", alpha=0.15)
    ax1.axhline(res["best_constant"], color="0.3", ls="--", lw=1, label="best constant prediction")
    ax1.axhline(res["chance"], color="0.5", ls=":", lw=1, label="chance 1/27")
    ax1.set(xlabel="training step", ylabel="training accuracy (masked tokens)", ylim=(0, None),
            title=f"MLM, {len(res['seeds'])} seeds (band = min..max)")
    ax1.legend(fontsize=7)
    ax2.set(yscale="log", ylim=(FLOAT_FLOOR / 3, 2), xlabel="layer (0 = embeddings)",
            ylabel="||H - 1 mean|| / ||H||  (log)", title="Collapse ratio of the hidden states")
    log_ticks(ax2, "y", LOG_AXIS_TICKS)
    ax2.set_xticks(layers)
    ax2.legend(fontsize=7)


# ---------------------------------------------------------------------------------------------
# Section 6: all-MiniLM-L6-v2
# ---------------------------------------------------------------------------------------------
def _heads(layer, x: torch.Tensor, cfg: MiniBertConfig):
    """q, k, v of one pretrained layer for x (T, d): each (H, T, d_head)."""
    t = x.shape[0]
    proj = layer.attention.qkv(x).view(t, 3, cfg.n_heads, cfg.d_head).permute(1, 2, 0, 3)  # (3, H, T, dh)
    return proj[0], proj[1], proj[2]


def attention_only(layer, x: torch.Tensor, cfg: MiniBertConfig) -> torch.Tensor:
    """The layer's multi-head attention alone (its own W_q, W_k, W_v, W_o): no residual, no norm, no FFN."""
    q, k, v = _heads(layer, x, cfg)
    p = torch.softmax(q @ k.transpose(-1, -2) * cfg.scale, dim=-1)         # (H, T, T)
    return layer.attention.output((p @ v).transpose(0, 1).reshape(x.shape[0], -1))  # (T, d)


@one_thread()
@torch.no_grad()
def minilm_profiles(model: MiniBert, tok, text: str) -> dict:
    """Collapse ratio per layer: the real model's hidden states, and stacks built by hand from its pretrained
    attention weights: attention only; attention + LayerNorm (no gain/bias); attention + residual. float64."""
    enc = tok(text)
    internals = model(**enc, return_internals=True).internals
    cfg = model.cfg
    x0 = internals["embeddings.out"][0].double()
    real = [x0] + [internals[f"layer{i}.hidden"][0].double() for i in range(cfg.n_layers)]
    out = {"tokens": tok.tokens(text), "real": np.array([collapse_ratio(h) for h in real])}
    layers = [_double_layer(layer) for layer in model.layers]
    for mode in ("attention only", "attention + LayerNorm", "attention + residual"):
        x, ratios = x0, [collapse_ratio(x0)]
        for layer in layers:
            a = attention_only(layer, x, cfg)
            x = x + a if mode.endswith("residual") else a
            if mode.endswith("LayerNorm"):
                x = F.layer_norm(x, (cfg.d_model,))
            ratios.append(collapse_ratio(x))
        out[mode] = np.array(ratios)
    return out


def _double_layer(layer):
    import copy

    return copy.deepcopy(layer).double()


@one_thread()
@torch.no_grad()
def minilm_kernel(model: MiniBert, tok, text: str) -> dict:
    """For every layer and head: the norm spread of the attention inputs (radius sqrt(d) on the LN sphere?), the
    spread of the key factor |k|^2/(2s), and the total-variation distance between the real attention rows and the
    pure Gaussian-kernel rows softmax(-|q-k|^2 / 2s) (which drop the key factor). s = sqrt(d_head)."""
    internals = model(**tok(text), return_internals=True).internals
    cfg = model.cfg
    s = 1.0 / cfg.scale
    xs = [internals["embeddings.out"][0]] + [internals[f"layer{i}.hidden"][0] for i in range(cfg.n_layers - 1)]
    norms, tv, kstd, tv_tied = [], [], [], []
    for layer, x in zip(model.layers, xs):
        q, k, _ = (t.double() for t in _heads(layer, x, cfg))  # float32 projections, float64 from here on
        x = x.double()
        p = torch.softmax(q @ k.transpose(-1, -2) / s, dim=-1)
        g = torch.softmax(-torch.cdist(q, k).pow(2) / (2 * s), dim=-1)
        tv.append((0.5 * (p - g).abs().sum(-1)).mean(-1).numpy())          # (H,) mean over query rows
        kstd.append((k.pow(2).sum(-1) / (2 * s)).std(-1).numpy())
        norms.append(x.norm(dim=-1).numpy())
        xn = F.layer_norm(x, (cfg.d_model,), eps=1e-12)                              # the sphere: no gain, no bias
        pt = torch.softmax(xn @ xn.T / np.sqrt(cfg.d_model), dim=-1)
        gt = torch.softmax(-torch.cdist(xn, xn).pow(2) / (2 * np.sqrt(cfg.d_model)), dim=-1)
        tv_tied.append(float((0.5 * (pt - gt).abs().sum(-1)).max()))
    return {"input_norms": norms, "radius": float(np.sqrt(cfg.d_model)), "tv": np.array(tv), "key_factor_std": np.array(kstd),
            "tv_sphere_tied": np.array(tv_tied)}


@one_thread()
@torch.no_grad()
def minilm_stationary(model: MiniBert, tok, text: str) -> dict:
    """Each head's attention matrix as a Markov chain: stationary mass on [CLS] + [SEP] and |lambda_2|."""
    internals = model(**tok(text), return_internals=True).internals
    cfg = model.cfg
    mass, lam2 = np.zeros((cfg.n_layers, cfg.n_heads)), np.zeros((cfg.n_layers, cfg.n_heads))
    for i in range(cfg.n_layers):
        probs = internals[f"layer{i}.probs"][0].double()  # (H, T, T)
        for h in range(cfg.n_heads):
            pi = stationary(probs[h])
            mass[i, h] = float(pi[0] + pi[-1])             # [CLS] is first, [SEP] last
        mods = torch.linalg.eigvals(probs).abs().sort(dim=-1, descending=True).values  # (H, T)
        lam2[i] = mods[:, 1].numpy()
    return {"special_mass": mass, "lam2": lam2, "n_tokens": internals["layer0.probs"].shape[-1]}


def plot_minilm_profiles(fig, prof: dict) -> None:
    ax = fig.add_subplot()
    layers = np.arange(len(prof["real"]))
    ax.plot(layers, prof["real"], "-o", color="k", label="real model (residual + LN + FFN)")
    for i, mode in enumerate(("attention only", "attention + LayerNorm", "attention + residual")):
        ax.plot(layers, np.maximum(prof[mode], FLOAT_FLOOR), "-o", ms=4, color=f"C{i}", label=f"{mode} (pretrained W)")
    ax.axhline(FLOAT_FLOOR, color="0.5", ls=":", lw=1)
    ax.set(yscale="log", ylim=(FLOAT_FLOOR / 3, 2), xlabel="layer (0 = embedding output)",
           ylabel="||H - 1 mean|| / ||H||  (log)", title=f"all-MiniLM-L6-v2, one sentence ({len(prof['tokens'])} word pieces)")
    log_ticks(ax, "y", LOG_AXIS_TICKS)
    ax.legend(fontsize=7)


def plot_minilm_stationary(fig, st: dict) -> None:
    ax1, ax2 = fig.subplots(1, 2)
    for ax, key, label in ((ax1, "special_mass", "stationary mass on [CLS] + [SEP]"), (ax2, "lam2", "|λ2|")):
        im = ax.imshow(st[key], cmap="viridis", vmin=0, vmax=1, aspect="auto")
        fig.colorbar(im, ax=ax, label=label)
        ax.set(xlabel="head", ylabel="layer", title=label)
        ax.grid(False)


# -- the reference: more steps, 10 seeds, and a second initialisation ------------------------------------------
REFERENCE_STEPS = 2400
HELD_OUT = 20_000_033  # + the seed: the reference's held-out batches, disjoint from every training stream


def reference_seed(seed: int, steps: int, init_std: float, lr: float) -> dict:
    """One seed of the reference: section 5's 2-layer model with and without residuals (same seed, same data),
    trained `steps` steps at rate `lr` from weights N(0, init_std). -> {"best_constant": the best constant
    prediction's accuracy on the held-out batches, variant: {"accuracy": held-out MLM accuracy, "ratio": the collapse
    ratio of the trained hidden states after the embeddings and each layer}}."""
    task = mlm_task(16)
    held_out = HELD_OUT + seed
    out = {"best_constant": best_constant_accuracy(task, 2, 128, seed=held_out)}
    for name, residual in VARIANTS.items():
        cfg = experiment_config(residual, 32, 2, max_len=24).replace(init_std=init_std)
        train_cfg = TrainConfig(steps=steps, batch_size=32, lr=lr, warmup=20, log_every=steps, device="cpu")
        model = train_seeds(cfg, task, [seed], train_cfg).models[0]
        out[name] = {"accuracy": evaluate(model, task, n_batches=2, batch_size=128, seed=held_out)["accuracy"],
                     "ratio": layer_profile(model, task, seed=held_out + 1)["ratio"].tolist()}
    return out


def constant_gate(accuracy: float, best_constant: float) -> Gate:
    """Learned or not: held-out accuracy above the best constant prediction by more than 0.01 (a model whose output
    is the same at every position cannot beat it)."""
    return learned("held-out accuracy", accuracy, baseline=best_constant, baseline_name="the best constant prediction",
                   margin=0.01)


@dataclass(frozen=True)
class CollapseRung:
    """One rung of the reference: (seeds,) arrays in seed order (they pair across variants)."""

    name: str
    steps: int
    init_std: float
    lr: float
    best_constant: np.ndarray
    accuracy: dict[str, np.ndarray]
    ratio: dict[str, np.ndarray]   # variant -> (seeds, n_layers + 1)

    def learned(self, variant: str) -> np.ndarray:
        return np.array([constant_gate(a, c).passed for a, c in zip(self.accuracy[variant], self.best_constant)])


def summarize_reference(ref) -> list[CollapseRung]:
    """The stored reference (qalib.lab.reference.Reference) as one CollapseRung per rung, in the spec's order."""
    return [CollapseRung(r.name, int(r.kwargs["steps"]), float(r.kwargs["init_std"]), float(r.kwargs["lr"]),
                         r.values("best_constant"), {v: r.values(v, "accuracy") for v in VARIANTS},
                         {v: r.values(v, "ratio") for v in VARIANTS}) for r in ref.rungs.values()]


def reference_claims(ref) -> None:
    """The checks notebook 09 makes on its reference run (the runner makes them on every regeneration too)."""
    rungs = summarize_reference(ref)
    bert = [r for r in rungs if r.init_std == 0.02]
    wide = next(r for r in rungs if r.init_std != 0.02)
    res_ok = {f"{r.name}": float(r.learned("residual").mean()) for r in rungs}
    check("the gate: with residuals every run learned (held-out accuracy above the best constant prediction by > 0.01) "
          "at every budget and both initialisations", at_least(min(res_ok.values()), 1.0), res_ok)
    stuck = {f"{r.steps} steps": float((r.accuracy["no residual"] - r.best_constant).max()) for r in bert}
    check(f"without residuals, at BERT's init (std 0.02, lr 1e-2), no run beat the best constant prediction by more "
          f"than 0.005 at any budget up to {max(r.steps for r in bert)} steps", below(max(stuck.values()), 0.005), stuck)
    plain = wide.accuracy["no residual"]
    check(f"from std 0.2 at lr 1e-3 the model without residuals does learn: after {wide.steps} steps at least 8 of "
          f"{len(plain)} seeds pass the gate", at_least(float(wide.learned("no residual").mean()), 0.8),
          {"no residual": plain, "best constant": wide.best_constant,
           "residual minus no residual": str(paired_difference(wide.accuracy["residual"], plain))})
    grew = bert[-1].accuracy["residual"] / bert[0].accuracy["residual"]
    check(f"the live run is far from trained: with residuals, held-out accuracy after {bert[-1].steps} steps is more "
          f"than twice that after {bert[0].steps}, in every seed", above(float(grew.min()), 2), grew)
    last = {r.name: float(np.median(r.ratio["no residual"][:, -1])) for r in (bert[-1], wide)}
    check("and it is the init that decides the collapse: after training, the no-residual model's last hidden states "
          "keep a collapse ratio > 0.1 in the median seed from std 0.2, and < 0.01 from std 0.02",
          above(last[wide.name], 0.1) & below(last[bert[-1].name], 0.01), last)


def plot_reference(fig, ref) -> None:
    """Held-out accuracy over the best constant prediction against the budget, with and without residuals (median
    over seeds, a dot per seed): BERT's init as lines, std 0.2 at lr 1e-3 as open markers beside the last budget."""
    rungs = summarize_reference(ref)
    ax = fig.add_subplot(1, 1, 1)
    bert = [r for r in rungs if r.init_std == 0.02]
    other = [r for r in rungs if r.init_std != 0.02]
    steps = np.array([r.steps for r in bert])
    for i, (v, c) in enumerate(zip(VARIANTS, ("C0", "C3"))):
        gain = np.array([r.accuracy[v] - r.best_constant for r in bert])  # (rungs, seeds)
        seeds_and_median(ax, steps, gain, c, f"{v}, std 0.02 (BERT), lr 1e-2")
        for r in other:  # beside the last budget, open markers
            seeds_and_median(ax, [r.steps * (1.25 + 0.1 * i)], [r.accuracy[v] - r.best_constant], c,
                             f"{v}, std {r.init_std:g}, lr {r.lr:g}", marker="o", mfc="white", ms=7)
    ax.axhline(0, color="grey", ls=":", lw=1, label="the best constant prediction")
    budget_axis(ax, steps)
    ax.set(ylabel="held-out accuracy minus the best constant's",
           title=f"2 layers, {len(bert[0].best_constant)} seeds (dots), median as markers")
    ax.legend(fontsize=7)


REFERENCES = [
    ReferenceSpec(
        "09_attention_random_walk", "no_residual", reference_seed, seeds=10,
        rungs=(Rung("live", steps=150, init_std=0.02, lr=1e-2), Rung("4x", steps=600, init_std=0.02, lr=1e-2),
               Rung("reference", steps=REFERENCE_STEPS, init_std=0.02, lr=1e-2),
               Rung("reference, std 0.2", steps=REFERENCE_STEPS, init_std=0.2, lr=1e-3)),
        lesson="whether the 2-layer mini-BERT without residuals beats the best constant prediction given 2400 steps, "
               "at BERT's init and at std 0.2, against the same model with residuals, over 10 seeds",
        claims=reference_claims),
]
