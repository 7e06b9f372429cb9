"""Notebook 06, sections 5-6: the mini-BERT trained with each norm on padded masked-LM batches,
Post-LN vs Pre-LN gradients at initialisation, and the LayerNorms of the pretrained MiniLM.

    PaddedMLMTask            masked LM on sentences of different lengths, padded with [PAD] (attention_mask 0)
    run_norm_experiment      train one model per (norm, seed); loss curves, train/eval gaps, batch-statistic fluctuation
    prepost_gradients        gradient norm per layer at initialisation, Post-LN vs Pre-LN (Xiong et al. 2020)
    minilm_layernorms        the real model's LayerNorm outputs, gains and biases
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field
from functools import partial

import numpy as np
import torch

from qalib.lab.data import IGNORE, N_SPECIAL, PAD, SEP, Batch, SyntheticLanguage, mask_tokens, with_cls_sep
from qalib.lab.device import one_thread
from qalib.lab.gate import Gate, learned, learned_share
from qalib.lab.parallel import map_runs
from qalib.lab.reference import ReferenceSpec, Rung
from qalib.lab.stats import PairedDifference, paired_difference
from qalib.lab.train import TrainConfig, layer_grad_norms, loss_and_accuracy, train
from qalib.lab.train_batched import train_seeds
from qalib.nn.config import MiniBertConfig
from qalib.nn.model import MiniBert
from qalib.nn.norms import TokenBatchNorm
from qalib.nn.validate import choices, int_in, seed_list
from qalib.notebook.claims import above, at_least, at_most, below, check
from qalib.notebook.drawing import seed_band

NORM_LABELS = {"layer": "LayerNorm", "batch": "BatchNorm (pads included)", "batch_masked": "BatchNorm (pads masked)",
               "rms": "RMSNorm", "none": "no norm"}
NORM_COLOURS = {"layer": "#7570b3", "batch": "#d95f02", "batch_masked": "#1b9e77", "rms": "#e7298a", "none": "0.4"}


@dataclass
class PaddedMLMTask:
    """[CLS] w_1 .. w_n [SEP] [PAD] ..: n uniform in [min_len, seq_len]; attention_mask 0 and labels IGNORE at pads.

    extra_pad appends that many more [PAD] columns (the same sentences padded to a longer bucket)."""

    language: SyntheticLanguage
    seq_len: int = 12
    min_len: int = 2
    mlm_prob: float = 0.3

    def __post_init__(self):
        int_in("PaddedMLMTask.seq_len", self.seq_len, 1)
        int_in("PaddedMLMTask.min_len", self.min_len, 1, self.seq_len)

    def batch(self, batch_size: int, generator: torch.Generator | None = None, extra_pad: int = 0) -> Batch:
        ids = with_cls_sep(self.language.sample(batch_size, self.seq_len, generator))  # (B, seq_len + 2)
        n = torch.randint(self.min_len, self.seq_len + 1, (batch_size,), generator=generator)
        pos = torch.arange(ids.shape[1])[None]
        real = pos < n[:, None] + 2  # [CLS] + n words + [SEP]
        ids = torch.where(pos == n[:, None] + 1, SEP, ids)
        ids = torch.where(real, ids, PAD)
        corrupted, labels = mask_tokens(ids, self.language.vocab_size, generator, self.mlm_prob,
                                        maskable=real & (ids >= N_SPECIAL))
        if extra_pad:
            grow = lambda t, v: torch.cat([t, torch.full((batch_size, extra_pad), v)], dim=1)  # noqa: E731
            corrupted, labels, real = grow(corrupted, PAD), grow(labels, IGNORE), grow(real, False)
        return Batch(corrupted, torch.zeros_like(corrupted), real.long(), labels, "token")


LIVE_STEPS = 300  # the live run: every variant already well below the unigram level (the gate), ~15 s on 2 cores


def experiment_setup(scale: int = 1):
    """(model config, train config, task) of the experiment. scale > 1 (a GPU) trains the same model scale times
    longer: the reference's "4x" rung at scale 4, so its checks are tried on the CPU too (make reference NB=06)."""
    int_in("scale", scale, 1)
    language = SyntheticLanguage(vocab_size=32, branching=2, lag=4, p_lag=0.0, seed=0)
    cfg = MiniBertConfig(vocab_size=32, d_model=32, n_layers=2, n_heads=4, d_ff=64, max_len=64)
    tcfg = TrainConfig(steps=LIVE_STEPS * scale, batch_size=32, lr=6e-3, warmup=10, log_every=5 * scale)
    return cfg, tcfg, PaddedMLMTask(language)


def unigram_level(task: PaddedMLMTask, n_sentences: int = 4096, seed: int = 5) -> float:
    """The loss of predicting every masked token from the token frequencies alone (nats): the entropy of the
    masked targets' distribution, counted on n_sentences fresh sentences. A model at this level ignores its
    context; the learned-or-not gate asks for a loss well below it."""
    labels = task.batch(n_sentences, torch.Generator().manual_seed(seed)).labels
    counts = torch.bincount(labels[labels != IGNORE]).double()
    p = counts[counts > 0] / counts.sum()
    return float(-(p * p.log()).sum())


GATE_MARGIN = 0.5  # nats below the unigram level: the model predicts from context, not from frequencies


def context_gate(held_out_loss: float, unigram: float) -> Gate:
    """The learned-or-not gate of this task: held-out masked-LM loss (eval mode) below the unigram level by 0.5 nats."""
    return learned("held-out masked-LM loss (nats)", held_out_loss, baseline=unigram,
                   baseline_name="the unigram level", margin=GATE_MARGIN, higher_is_better=False)


class _BatchStatRecorder:
    """Before each train-mode BatchNorm call: distance of the batch statistics from the running ones,
    in units of the running std, averaged over features (the quantity PowerNorm's analysis tracks)."""

    def __init__(self, module: TokenBatchNorm):
        self.mean_dev, self.std_dev = [], []
        self.handle = module.register_forward_pre_hook(self)

    def __call__(self, module, args):
        if not module.training:
            return
        x, keep = args[0].detach().float(), args[1] if len(args) > 1 else None
        tokens = x.reshape(-1, x.shape[-1])
        if module.masked and keep is not None:
            tokens = tokens[keep.reshape(-1)]
        run_std = module.running_var.float().sqrt()
        self.mean_dev.append(float(((tokens.mean(0) - module.running_mean) / run_std).abs().mean()))
        self.std_dev.append(float((tokens.std(0, unbiased=False) / run_std - 1).abs().mean()))


@torch.no_grad()
def _mean_loss(model: MiniBert, batches: list[Batch]) -> float:
    return float(np.mean([float(loss_and_accuracy(model, b)[0]) for b in batches]))


@torch.no_grad()
def eval_gaps(model: MiniBert, task: PaddedMLMTask, n_batches: int = 4, batch_size: int = 32, seed: int = 999) -> dict:
    """Loss on the same held-out sentences: eval mode (running statistics); train mode (the batch's statistics,
    on a copy so the running statistics stay put); train mode with 8 extra [PAD] columns; train mode one
    sentence at a time (batch size 1) against eval mode on the same sentences. hidden_change_extra_pad: mean
    |change| of the real tokens' final hidden states (train mode) when 8 [PAD] columns are appended."""
    gen = torch.Generator().manual_seed(seed)
    batches = [task.batch(batch_size, gen) for _ in range(n_batches)]
    gen = torch.Generator().manual_seed(seed)
    padded = [task.batch(batch_size, gen, extra_pad=8) for _ in range(n_batches)]
    trained = copy.deepcopy(model).train()
    singles = [Batch(*(t[i:i + 1] for t in (b.input_ids, b.token_type_ids, b.attention_mask, b.labels)), "token")
               for b in batches for i in range(batch_size)]
    singles = [s for s in singles if (s.labels != IGNORE).any()]
    # batch size 1 vs the same sentences in their batch: weight each sentence's tokens alike in both
    one = sum(float(loss_and_accuracy(trained, s)[0]) * int((s.labels != IGNORE).sum()) for s in singles)
    one_ref = sum(float(loss_and_accuracy(model.eval(), s)[0]) * int((s.labels != IGNORE).sum()) for s in singles)
    n_lab = sum(int((s.labels != IGNORE).sum()) for s in singles)
    b, p = batches[0], padded[0]
    t, real = b.input_ids.shape[1], b.attention_mask.bool()
    h = trained(**b.model_inputs()).last_hidden_state[real]
    h_pad = trained(**p.model_inputs()).last_hidden_state[:, :t][real]
    model.eval()
    return {"hidden_change_extra_pad": float((h - h_pad).abs().mean()), "eval": _mean_loss(model, batches), "train_mode": _mean_loss(trained, batches),
            "train_mode_extra_pad": _mean_loss(trained, padded),
            "batch_size_1_train_mode": one / n_lab, "batch_size_1_eval": one_ref / n_lab}


@dataclass
class NormExperiment:
    norms: list[str]
    seeds: list[int]
    step: list[int]
    loss: dict[str, np.ndarray]                  # norm -> (seeds, logged steps)
    gaps: dict[str, list[dict]]                  # norm -> per seed: eval_gaps(...)
    fluct_mean: dict[str, np.ndarray] = field(default_factory=dict)  # BN norms -> (seeds, steps): |mu_B - mu_run| / sd_run
    fluct_std: dict[str, np.ndarray] = field(default_factory=dict)
    models: dict[str, list] = field(default_factory=dict)             # norm -> trained models, one per seed

    def final_loss(self, norm: str, last: int = 3) -> np.ndarray:
        """Per seed: the mean training loss over the last `last` logged steps."""
        return self.loss[norm][:, -last:].mean(1)

    def gap(self, norm: str, key: str, ref: str = "eval") -> np.ndarray:
        """Per seed: gaps[key] - gaps[ref]."""
        return np.array([g[key] - g[ref] for g in self.gaps[norm]])


def run_norm_experiment(norms=("layer", "batch", "batch_masked", "rms", "none"), seeds=(0, 1, 2), scale: int = 1,
                        device=None, steps: int | None = None) -> NormExperiment:
    """One model per (norm, seed), trained on PaddedMLMTask; steps overrides experiment_setup's (for tests)."""
    cfg, tcfg, task = experiment_setup(scale)
    if steps is not None:
        tcfg = tcfg.replace(steps=steps)
    norms = choices("norms", norms, NORM_LABELS)
    seeds = seed_list("seeds", seeds)
    exp = NormExperiment(list(norms), seeds, [], {}, {})
    # the runs go side by side on the CPU cores, one thread each: a norm without batch statistics trains its seeds
    # as one batched run (qalib.lab.train_batched); BatchNorm, whose running statistics change in place, one per seed
    jobs = [(norm, tuple(seeds)) for norm in norms if not norm.startswith("batch")]
    jobs += [(norm, (seed,)) for norm in norms if norm.startswith("batch") for seed in seeds]
    outcomes = map_runs(partial(_train_runs, cfg=cfg, tcfg=tcfg, task=task, device=device), jobs, device)
    by_norm = {norm: [] for norm in norms}
    for (norm, _), outs in zip(jobs, outcomes):
        by_norm[norm] += outs  # BatchNorm's jobs come in seed order
    for norm, mine in by_norm.items():
        exp.step = mine[-1]["step"]
        exp.loss[norm] = np.array([out["loss"] for out in mine])
        exp.gaps[norm] = [out["gaps"] for out in mine]
        exp.models[norm] = [out["model"] for out in mine]
        if norm.startswith("batch"):
            exp.fluct_mean[norm] = np.array([out["fluct_mean"] for out in mine])
            exp.fluct_std[norm] = np.array([out["fluct_std"] for out in mine])
    return exp


HELD_OUT = 10_000  # seed k's held-out sentences come from generator seed HELD_OUT + k: they move with the seeds


def _train_runs(job: tuple[str, tuple[int, ...]], cfg, tcfg, task, device) -> list[dict]:
    """A norm's runs, one dict per seed (as _train_one): the seeds as one batched run (train_seeds), or BatchNorm's
    single seed solo."""
    norm, seeds = job
    if norm.startswith("batch"):
        return [_train_one((norm, seed), cfg, tcfg, task, device) for seed in seeds]
    run = train_seeds(cfg.replace(norm=norm), task, list(seeds), tcfg.replace(device=device))
    outs = []
    for seed, model, hist in zip(seeds, run.models, run.histories):
        model.cpu()
        outs.append({"step": hist.step, "loss": hist.loss, "gaps": eval_gaps(model, task, seed=HELD_OUT + seed),
                     "model": model})
    return outs


def _train_one(run: tuple[str, int], cfg, tcfg, task, device) -> dict:
    """One (norm, seed) run: its loss curve, train/eval gaps, the model, and (BatchNorm) batch-statistic
    fluctuations averaged over layers."""
    norm, seed = run
    torch.manual_seed(seed)
    model = MiniBert(cfg.replace(norm=norm))
    recs = [_BatchStatRecorder(layer.attention_norm) for layer in model.layers] if norm.startswith("batch") else []
    hist = train(model, task, tcfg.replace(seed=seed, device=device))
    model.cpu()
    for r in recs:
        r.handle.remove()
    out = {"step": hist.step, "loss": hist.loss, "gaps": eval_gaps(model, task, seed=HELD_OUT + seed), "model": model}
    if recs:  # (layers, steps) -> mean over layers
        out["fluct_mean"] = np.mean([r.mean_dev for r in recs], axis=0)
        out["fluct_std"] = np.mean([r.std_dev for r in recs], axis=0)
    return out


def plot_loss_curves(fig, exp: NormExperiment, unigram: float | None = None):
    """Each norm's training loss (mean over seeds, min-max band); unigram: the level of a model that ignores context."""
    ax = fig.add_subplot()
    for norm in exp.norms:
        c = exp.loss[norm]
        label = f"{NORM_LABELS[norm]} ({c.mean(0)[-1]:.2f})"
        seed_band(ax, exp.step, c, alpha=0.2, color=NORM_COLOURS[norm], label=label)
    if unigram is not None:
        ax.axhline(unigram, color="grey", ls=":", lw=1, label=f"unigram level ({unigram:.2f})")
    ax.set(xlabel="training step", ylabel="masked-LM loss (nats)",
           title=f"Mini-BERT on padded masked LM: mean and min-max over {len(exp.seeds)} seeds")
    ax.legend(fontsize=8)


def plot_fluctuation(fig, exp: NormExperiment):
    ax1, ax2 = fig.add_subplot(1, 2, 1), fig.add_subplot(1, 2, 2)
    for norm, arr in exp.fluct_mean.items():
        steps = np.arange(arr.shape[1])
        ax1.plot(steps, arr.mean(0), color=NORM_COLOURS[norm], lw=1, label=NORM_LABELS[norm])
        ax2.plot(steps, exp.fluct_std[norm].mean(0), color=NORM_COLOURS[norm], lw=1, label=NORM_LABELS[norm])
    ax1.set(xlabel="training step", ylabel="|batch mean - running mean| / running std",
            title="Batch mean vs running mean", yscale="log")
    ax2.set(xlabel="training step", ylabel="|batch std / running std - 1|", title="Batch std vs running std", yscale="log")
    ax1.legend(fontsize=8)


# -- the reference: the same runs with 20 paired seeds, at three budgets and two initialisations -----------------
def reference_seed(seed: int, steps: int, lr: float, init_std: float | None = None) -> dict:
    """One seed of the reference: every norm trained `steps` steps at rate `lr` from the same seed (the same initial
    draw and the same batches), then measured on held-out sentences as in the live run.
    -> {norm: {"held_out_loss": eval mode, "final_train_loss": mean of the last 3 logged, "train_eval_gap",
    "batch_size_1_gap": train mode one sentence at a time minus eval mode, "extra_pad_change": mean |change| of the
    real tokens' hidden states with 8 more [PAD] columns, "fluctuation": |batch mean - running mean| / running std
    over the last 50 steps (BatchNorms; None otherwise), "steps", "loss": the logged training loss}}"""
    cfg, tcfg, task = experiment_setup(1)
    cfg = cfg if init_std is None else cfg.replace(init_std=init_std)
    tcfg = tcfg.replace(steps=steps, lr=lr, log_every=max(5, steps // 40))
    out = {}
    for norm in NORM_LABELS:
        r = _train_one((norm, seed), cfg, tcfg, task, "cpu")
        g = r["gaps"]
        out[norm] = {"held_out_loss": g["eval"], "final_train_loss": float(np.mean(r["loss"][-3:])),
                     "train_eval_gap": g["train_mode"] - g["eval"],
                     "batch_size_1_gap": g["batch_size_1_train_mode"] - g["batch_size_1_eval"],
                     "extra_pad_change": g["hidden_change_extra_pad"],
                     "fluctuation": float(np.mean(r["fluct_mean"][-50:])) if "fluct_mean" in r else None,
                     "steps": list(r["step"]), "loss": [round(float(x), 4) for x in r["loss"]]}
    return out


@dataclass(frozen=True)
class NormRung:
    """One rung of the reference, per norm: arrays over the seeds, in seed order (so they pair across norms)."""

    name: str
    steps: int
    lr: float
    init: str                               # "0.02" (BERT's, the live run's) or "d^-1/2"
    unigram: float                          # the task's unigram level (nats)
    metrics: dict[str, dict[str, np.ndarray]]  # norm -> metric name (reference_seed's keys) -> (seeds,)
    gates: dict[str, list[Gate]]            # norm -> per seed: context_gate on the held-out loss
    curve_steps: np.ndarray                 # (logged,)
    curves: dict[str, np.ndarray]           # norm -> (seeds, logged) training loss

    def values(self, norm: str, metric: str) -> np.ndarray:
        return self.metrics[norm][metric]

    def learned_share(self, norm: str) -> float:
        return learned_share(self.gates[norm])

    def learned(self, *norms: str) -> np.ndarray:
        """(seeds,) bool: every one of these norms' runs passed the gate in that seed."""
        return np.array([all(self.gates[n][i].passed for n in norms) for i in range(len(self.gates[norms[0]]))])

    def paired(self, a: str, b: str, metric: str = "held_out_loss", gate_on: tuple[str, ...] | None = None
               ) -> PairedDifference:
        """a's metric minus b's, on the seeds where both passed the gate (or only the norms in gate_on: a slow
        control that has not learned yet still counts against a baseline that has)."""
        keep = self.learned(*(gate_on or (a, b)))
        return paired_difference(self.values(a, metric)[keep], self.values(b, metric)[keep], NORM_LABELS[a],
                                 NORM_LABELS[b])


def summarize_reference(ref) -> list[NormRung]:
    """The stored reference (qalib.lab.reference.Reference) as one NormRung per rung, in the spec's order."""
    unigram = unigram_level(experiment_setup(1)[2])
    metrics = ("held_out_loss", "final_train_loss", "train_eval_gap", "batch_size_1_gap", "extra_pad_change")
    out = []
    for rung in ref.rungs.values():
        m = {n: {k: rung.values(n, k) for k in metrics} for n in NORM_LABELS}
        for n in ("batch", "batch_masked"):
            m[n]["fluctuation"] = rung.values(n, "fluctuation")
        init = "0.02" if rung.kwargs.get("init_std") is None else "d^-1/2"
        out.append(NormRung(rung.name, int(rung.kwargs["steps"]), float(rung.kwargs["lr"]), init, unigram, m,
                            {n: [context_gate(v, unigram) for v in m[n]["held_out_loss"]] for n in NORM_LABELS},
                            np.array(rung.runs[0]["layer"]["steps"]),
                            {n: rung.values(n, "loss") for n in NORM_LABELS}))
    return out


NORMED = ("layer", "rms", "batch", "batch_masked")  # the variants the lesson reads; no norm is the slow control


def reference_claims(ref) -> None:
    """The checks notebook 06 makes on its reference run (the runner makes them on every regeneration too)."""
    rungs = {r.name: r for r in summarize_reference(ref)}
    live, ref_ = rungs["live"], rungs["reference"]
    shares = {name: min(r.learned_share(n) for n in NORMED) for name, r in rungs.items()}
    check(f"the gate: at every budget and both initialisations every normed run learned (held-out loss more than "
          f"{GATE_MARGIN} nats below the unigram level, {live.unigram:.2f}); only learned runs are compared",
          at_least(min(shares.values()), 1.0), shares)
    none_live = live.paired("none", "layer", gate_on=("layer",))
    check(f"{live.steps} steps: no norm ends above LayerNorm (paired 95% interval of the held-out loss difference "
          "entirely above 0.5 nats)", above(none_live.low, 0.5), str(none_live))
    late = [r.paired("none", "layer", gate_on=("layer",)) for r in rungs.values() if r.steps == ref_.steps]
    check(f"by {ref_.steps} steps, from either initialisation, no norm has caught up with LayerNorm to within 0.1 nats "
          "(every interval lies inside [-0.1, +0.1])",
          above(min(d.low for d in late), -0.1) & below(max(d.high for d in late), 0.1), [str(d) for d in late])
    bn = [r.paired("batch_masked", "layer") for r in (live, rungs["4x"])]
    check("BatchNorm with pads masked trains faster than LayerNorm: its held-out loss is lower at 300 and 1200 steps "
          "(both intervals entirely below 0)", below(max(d.high for d in bn), 0), [str(d) for d in bn])
    rms = [r.paired("rms", "layer") for r in rungs.values()]
    check("RMSNorm and LayerNorm cannot be told apart at any budget or initialisation: every interval contains 0 and "
          "lies inside [-0.1, +0.1] (so no difference larger than 0.1 nats)",
          at_most(max(d.low for d in rms), 0) & at_least(min(d.high for d in rms), 0)
          & above(min(d.low for d in rms), -0.1) & below(max(d.high for d in rms), 0.1), [str(d) for d in rms])
    bs1 = np.concatenate([r.values(n, "batch_size_1_gap")[r.learned(n)] for r in rungs.values()
                          for n in ("batch", "batch_masked")])
    check("outside the batch, at every budget and initialisation: a sentence alone in train mode loses more than 0.1 "
          "nats against eval mode, in every learned BatchNorm run", above(bs1.min(), 0.1),
          {"min": bs1.min(), "median": float(np.median(bs1))})
    pads = np.concatenate([r.values("batch", "extra_pad_change")[r.learned("batch")] for r in rungs.values()])
    check("8 extra [PAD] columns move the real tokens' hidden states of pads-included BatchNorm by more than 0.05, in "
          "every learned run", above(pads.min(), 0.05), {"min": pads.min(), "median": float(np.median(pads))})
    fl = [r.paired("batch", "batch_masked", "fluctuation") for r in rungs.values()]
    check("counting the pads makes the batch mean wander further from the running mean than masking them (every "
          "interval above 0), and both stay under 0.1 running std in the median run",
          above(min(d.low for d in fl), 0) & below(max(float(np.median(r.values(n, "fluctuation")))
                                                      for r in rungs.values() for n in ("batch", "batch_masked")), 0.1),
          [str(d) for d in fl])


def plot_reference(fig, ref) -> None:
    """Left: each norm's held-out loss against the budget (median over seeds, middle half shaded); the other
    initialisation at the reference budget as open markers. Right: the reference budget's training curves (median)."""
    rungs = summarize_reference(ref)
    main = [r for r in rungs if r.init == "0.02"]
    other = [r for r in rungs if r.init != "0.02"]
    ax, ax_curve = fig.subplots(1, 2)
    steps = np.array([r.steps for r in main])
    for i, norm in enumerate(NORM_LABELS):
        c = NORM_COLOURS[norm]
        q25, q50, q75 = (np.array([np.percentile(r.values(norm, "held_out_loss"), q) for r in main]) for q in (25, 50, 75))
        ax.plot(steps, q50, "o-", color=c, label=NORM_LABELS[norm])
        ax.fill_between(steps, q25, q75, color=c, alpha=0.15, lw=0)
        for r in other:  # beside the last budget, one step right per norm, so equal values do not hide each other
            ax.plot([r.steps * (1.1 + 0.06 * i)], [np.median(r.values(norm, "held_out_loss"))], "o", mfc="none", color=c)
        ref_rung = main[-1]
        ax_curve.plot(ref_rung.curve_steps, np.median(ref_rung.curves[norm], axis=0), color=c, lw=1.2,
                      label=NORM_LABELS[norm])
    for a in (ax, ax_curve):
        a.axhline(main[0].unigram, color="grey", ls=":", lw=1, label="unigram level (ignores context)")
    ax.set_xscale("log")
    ax.set_xticks(steps, [str(x) for x in steps])
    ax.minorticks_off()
    n = len(main[0].gates["layer"])
    ax.set(xlabel=f"training steps (open markers: init std {other[0].init})" if other else "training steps",
           ylabel="held-out masked-LM loss (nats)", title=f"median over {n} seeds, middle half shaded")
    ax_curve.set(xlabel="training step", ylabel="training loss (nats)",
                 title=f"{main[-1].steps} steps: median training curve")
    ax.legend(fontsize=8)


# -- Post-LN vs Pre-LN ----------------------------------------------------------------------
@one_thread()
def prepost_gradients(n_layers: int = 8, d_model: int = 32, init_std: float | None = None, seeds=(0, 1, 2),
                      batch_size: int = 32) -> dict:
    """Gradient norms at initialisation after one backward pass of masked LM, per layer, for both placements.

    init_std None: Xavier-like d_model ** -0.5 (the initialisation Xiong et al. analyse); BERT uses 0.02.
    Returns {placement: {"ffn_w2": (seeds, layers), "layer": (seeds, layers)}}: the gradient of the FFN's
    second weight matrix (the quantity of Xiong et al.'s Fig. 3) and of all the layer's parameters.
    """
    int_in("n_layers", n_layers, 1, 48)
    seeds = seed_list("seeds", seeds)
    std = d_model ** -0.5 if init_std is None else init_std
    cfg = MiniBertConfig(vocab_size=32, d_model=d_model, n_layers=n_layers, n_heads=4, d_ff=4 * d_model,
                         max_len=64, init_std=std)
    task = PaddedMLMTask(SyntheticLanguage(vocab_size=32, branching=2, p_lag=0.0, seed=0))
    out = {}
    for placement in ("post", "pre"):
        out[placement] = _prepost_one(cfg, task, placement, seeds, batch_size)
    out["init_std"] = std
    return out


def _prepost_one(cfg: MiniBertConfig, task, placement: str, seeds, batch_size: int) -> dict:
    w2, whole = [], []
    for seed in seeds:
        torch.manual_seed(seed)
        model = MiniBert(cfg.replace(norm_placement=placement))
        loss, _ = loss_and_accuracy(model, task.batch(batch_size, torch.Generator().manual_seed(seed)))
        loss.backward()
        w2.append([float(layer.ffn.output.weight.grad.norm()) for layer in model.layers])
        g = layer_grad_norms(model)
        whole.append([g[f"layer{i}"] for i in range(cfg.n_layers)])
    return {"ffn_w2": np.array(w2), "layer": np.array(whole)}


def plot_prepost(fig, results: list[dict], key: str = "ffn_w2"):
    """One panel per result of prepost_gradients (e.g. Xavier-like init and BERT's 0.02)."""
    for k, r in enumerate(results):
        ax = fig.add_subplot(1, len(results), k + 1)
        for placement, colour in (("post", "#d95f02"), ("pre", "#1b9e77")):
            a = r[placement][key]
            layers = np.arange(1, a.shape[1] + 1)
            ax.errorbar(layers, a.mean(0), yerr=[a.mean(0) - a.min(0), a.max(0) - a.mean(0)], marker="o",
                        capsize=3, color=colour, label=f"{placement.capitalize()}-LN")
        ax.set(xlabel="layer", ylabel="||dL/dW2|| of the FFN (at init)", ylim=(0, None),
               title=f"init std {r['init_std']:.3g}: mean, min-max over seeds")
        ax.legend(fontsize=8)


# -- the pretrained model -------------------------------------------------------------------------
@torch.no_grad()
def minilm_layernorms(model: MiniBert, enc: dict) -> dict:
    """For every LayerNorm of the model: its output h on `enc`, gain gamma, bias beta, and z = (h - beta) / gamma
    (the normalised vector before the affine step), where all gains are non-zero."""
    outputs, handles = {}, []
    names = [n for n, m in model.named_modules() if isinstance(m, torch.nn.LayerNorm) and not n.startswith("mlm")]
    for name in names:
        module = model.get_submodule(name)
        handles.append(module.register_forward_hook(lambda m, a, o, name=name: outputs.__setitem__(name, o[0])))
    try:
        model(**enc)
    finally:
        for h in handles:
            h.remove()
    res = {}
    for name in names:
        module = model.get_submodule(name)
        gamma, beta = module.weight.detach(), module.bias.detach()
        ok = bool((gamma.abs() > 1e-3).all())
        z = (outputs[name] - beta) / gamma if ok else None
        res[name] = {"gamma": gamma.numpy(), "beta": beta.numpy(), "h_norm": outputs[name].norm(dim=-1).numpy(),
                     "z_norm": z.norm(dim=-1).numpy() if ok else None, "z_mean": z.mean(-1).numpy() if ok else None}
    return res


@torch.no_grad()
def minilm_logit_sizes(model: MiniBert, enc: dict) -> dict:
    """Per layer, what sets the size of the attention logits s = q . k / sqrt(d_head) behind the LayerNorms: the largest
    |s|, the largest ||q|| ||k|| / sqrt(d_head) (what s would be at cosine 1), the largest |cos(q, k)|, how much a
    query's norm varies over the tokens (max / min within a head, the median head), and the largest gap between s
    and ||q|| ||k|| cos / sqrt(d_head) (0 up to rounding: the decomposition is exact)."""
    if enc["attention_mask"].min() < 1:
        raise ValueError("enc must be one unpadded input (padding puts -inf into the scores)")
    internals = model(**enc, return_internals=True).internals
    out = {"max_logit": [], "max_bound": [], "max_cos": [], "q_norm_spread": [], "decomposition_error": []}
    for i in range(model.cfg.n_layers):
        q, k = internals[f"layer{i}.q"][0].double(), internals[f"layer{i}.k"][0].double()  # (H, T, d_head) each
        s = internals[f"layer{i}.scores"][0].double()                                     # (H, T, T), scaled
        qn, kn = q.norm(dim=-1), k.norm(dim=-1)                                            # (H, T)
        bound = qn[..., :, None] * kn[..., None, :] / math.sqrt(q.shape[-1])              # (H, T, T)
        cos = (q / qn[..., None]) @ (k / kn[..., None]).transpose(-1, -2)                  # (H, T, T)
        out["max_logit"].append(float(s.abs().max()))
        out["max_bound"].append(float(bound.max()))
        out["max_cos"].append(float(cos.abs().max()))
        out["q_norm_spread"].append(float((qn.max(-1).values / qn.min(-1).values).median()))
        out["decomposition_error"].append(float((s - bound * cos).abs().max()))
    return {k: np.array(v) for k, v in out.items()}


def plot_minilm_gammas(fig, res: dict):
    names = list(res)
    short = [n.replace("layers.", "L").replace("_norm", "").replace("embeddings.norm", "emb") for n in names]
    gam = np.stack([res[n]["gamma"] for n in names])  # (n_norms, d)
    ax1, ax2 = fig.add_subplot(1, 2, 1), fig.add_subplot(1, 2, 2)
    im = ax1.imshow(gam, aspect="auto", cmap="viridis", interpolation="nearest")
    ax1.grid(False)
    ax1.set_yticks(range(len(names)), short, fontsize=7)
    ax1.set(xlabel="feature", title="LayerNorm gains gamma, all-MiniLM-L6-v2")
    fig.colorbar(im, ax=ax1, label="gamma")
    for k, n in enumerate(names):
        h = res[n]["h_norm"].ravel()
        ax2.scatter(np.full(h.shape, k) + np.linspace(-0.25, 0.25, h.size), h, s=5, color="#7570b3")
    d = gam.shape[1]
    ax2.axhline(math.sqrt(d), color="k", ls=":", label=f"||z|| = sqrt(d) = {math.sqrt(d):.1f} for every token")
    ax2.set_xticks(range(len(names)), short, rotation=90, fontsize=7)
    ax2.set(ylabel="||gamma * z + beta|| per token", title="After gamma and beta, token norms spread out")
    ax2.legend(fontsize=8)


@torch.no_grad()
def checkpoint_norm_tensors(path=None) -> dict:
    """The normalisation tensors the checkpoint file itself stores, read from model.safetensors directly (not
    through qalib's model): every LayerNorm's gain and bias, and any BatchNorm state (running mean, variance,
    batch count), which a BatchNorm would need at inference."""
    from safetensors import safe_open

    from qalib.nn.pretrained import real_model_dir

    with safe_open(str(path or real_model_dir() / "model.safetensors"), "pt") as f:
        names = sorted(f.keys())
        shapes = {k: tuple(f.get_slice(k).get_shape()) for k in names}
    layer_norms = sorted({k.rsplit(".", 1)[0] for k in names if ".LayerNorm." in k})
    return {"layer_norms": layer_norms,
            "ln_shapes": sorted({shapes[k] for k in names if ".LayerNorm." in k}),
            "running_stats": [k for k in names if any(s in k for s in ("running_mean", "running_var", "num_batches"))],
            "n_tensors": len(names)}


@torch.no_grad()
def batch_independence(model: MiniBert, tokenizer, first: str, second: str) -> dict:
    """Encode `first` alone, then in a batch with a longer `second` (first padded with [PAD], mask 0).

    Returns the max |difference| of first's hidden states (every layer) between the two runs: 0 up to
    float rounding if every norm works per token; not 0 if any norm pooled statistics over the batch."""
    a, b = tokenizer(first), tokenizer(second)
    ta, tb = a["input_ids"].shape[1], b["input_ids"].shape[1]
    if tb < ta:
        raise ValueError(f"second must have at least as many word pieces as first ({tb} < {ta})")
    pad = lambda t: torch.cat([t, torch.zeros(1, tb - ta, dtype=t.dtype)], dim=1)  # noqa: E731
    batch = {k: torch.cat([pad(a[k]), b[k]]) for k in a}
    alone = model(**a, return_internals=True).internals
    together = model(**batch, return_internals=True).internals
    keys = [k for k in alone if k.endswith(".hidden")]
    diff = max(float((alone[k][0] - together[k][0, :ta]).abs().max()) for k in keys)
    return {"max_diff": diff, "layers": len(keys), "pad_share": 1 - (ta + tb) / (2 * tb),
            "has_running_stats": any("running_mean" in k for k in model.state_dict())}


REFERENCES = [
    ReferenceSpec(
        "06_layernorm_vs_batchnorm", "norms", reference_seed, seeds=20,
        rungs=(Rung("live", steps=LIVE_STEPS, lr=6e-3), Rung("4x", steps=4 * LIVE_STEPS, lr=6e-3),
               Rung("reference", steps=3200, lr=3e-3),
               Rung("reference, init d^-1/2", steps=3200, lr=3e-3, init_std=32 ** -0.5)),
        lesson="how the five norms train and what BatchNorm costs outside its batch, at three budgets and two "
               "initialisations, over 20 paired seeds", claims=reference_claims),
]


@dataclass(frozen=True)
class StreamGrowth:
    """Inside trained models, on held-out sentences (real tokens only), per model (rows) and layer (columns):
    growth, the mean norm of the layer's output over that of the embeddings' output; peak, the mean largest
    attention probability of a query (1 = one key takes everything, 1/T = uniform)."""
    growth: np.ndarray
    peak: np.ndarray


@torch.no_grad()
def stream_growth(models: list, task: PaddedMLMTask, n_sentences: int = 256, seed: int = HELD_OUT) -> StreamGrowth:
    """How big the residual stream gets, layer by layer, and how peaked attention is, in each trained model."""
    batch = task.batch(n_sentences, torch.Generator().manual_seed(seed))
    inputs = batch.model_inputs()
    keep = inputs["attention_mask"].bool()                                  # (B, T)
    growth, peak = [], []
    for model in models:
        model.eval()
        inner = model(**inputs, return_internals=True).internals
        base = inner["embeddings.out"][keep].norm(dim=-1).mean()
        layers = range(model.cfg.n_layers)
        growth.append([float(inner[f"layer{i}.hidden"][keep].norm(dim=-1).mean() / base) for i in layers])
        rows = keep[:, None, :].expand(-1, model.cfg.n_heads, -1)          # (B, H, T): real queries
        peak.append([float(inner[f"layer{i}.probs"].amax(-1)[rows].mean()) for i in layers])
    return StreamGrowth(np.array(growth), np.array(peak))
