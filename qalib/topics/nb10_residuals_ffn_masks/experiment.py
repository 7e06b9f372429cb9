"""Notebook 10, sections 5 and 6: a deep mini-BERT with and without residuals; MiniLM's blocks.

    task = LookupTask(seq_len=8)                        # label_t = perm[x_t]: needs no context at all
    res = run_residual_experiment(n_layers=6, seeds=(0, 1, 2), steps=60)
    res.accuracy, res.init_grad                         # (2, S) held-out accuracy; (2, S, L) grad norms at step 0
    minilm_block_stats(model, tok, text)                # residual stream vs sublayer updates, per layer
    minilm_mask_checks(model, tok)                      # bidirectional (no causal mask); padding masked
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial

import numpy as np
import torch

from qalib.lab.data import CLS, IGNORE, N_SPECIAL, PAD, Batch
from qalib.lab.device import one_thread
from qalib.lab.gate import Gate, learned
from qalib.lab.parallel import map_runs
from qalib.lab.reference import ReferenceSpec, Rung
from qalib.lab.stats import paired_difference
from qalib.lab.train import TrainConfig, evaluate, train
from qalib.nn.model import MiniBert
from qalib.nn.validate import int_in, seed_list
from qalib.notebook.claims import above, at_least, below, check
from qalib.notebook.drawing import budget_axis, decade_ticks, seed_band, seeds_and_median
from qalib.topics.nb10_residuals_ffn_masks.compute import block_config, stream_contributions

VARIANTS = {"with residual": True, "without residual": False}


@dataclass
class LookupTask:
    """Uniform random tokens; the label at every position is a fixed permutation of the token there.

    No context is needed: a model that can pass each token's identity up its stack solves it.
    [CLS] x_1 .. x_T, [CLS] unlabelled; chance accuracy 1/27."""

    vocab_size: int = 32
    seq_len: int = 8

    def __post_init__(self):
        int_in("vocab_size", self.vocab_size, N_SPECIAL + 2, 10_000)
        int_in("seq_len", self.seq_len, 1, 512)
        n = self.vocab_size - N_SPECIAL
        self.perm = torch.randperm(n, generator=torch.Generator().manual_seed(1234))

    def batch(self, batch_size: int, generator: torch.Generator | None = None) -> Batch:
        n = self.vocab_size - N_SPECIAL
        x = torch.randint(n, (int_in("batch_size", batch_size, 1, 1 << 16), self.seq_len), generator=generator)
        ids = torch.cat([torch.full((batch_size, 1), CLS), x + N_SPECIAL], dim=1)  # (B, T + 1)
        labels = torch.cat([torch.full((batch_size, 1), IGNORE), self.perm[x] + N_SPECIAL], dim=1)
        return Batch(ids, torch.zeros_like(ids), torch.ones_like(ids), labels, "token")


@dataclass
class ResidualResult:
    variants: list[str]
    seeds: list[int]
    accuracy: np.ndarray      # (V, S) held-out accuracy after training
    eval_loss: np.ndarray     # (V, S) held-out loss (nats)
    train_loss: np.ndarray    # (V, S) training loss at the last step
    init_grad: np.ndarray     # (V, S, L) gradient norm of each layer's parameters at step 0 (before clipping)
    steps: list[int]
    curves: np.ndarray        # (V, S, n_logged) training accuracy
    n_layers: int = 6
    task: LookupTask = field(default_factory=LookupTask)


@one_thread()
def run_residual_experiment(n_layers: int = 6, seeds=(0, 1, 2), steps: int = 60, d_model: int = 32,
                            lr: float = 1e-2, batch_size: int = 32, seq_len: int = 8,
                            device: str | None = None) -> ResidualResult:
    """Train the post-norm mini-BERT with and without residual connections, same seeds and data streams."""
    int_in("n_layers", n_layers, 1, 48), int_in("steps", steps, 1, 100_000)
    seeds = seed_list("seeds", seeds)
    task = LookupTask(seq_len=seq_len)
    runs = [(name, seed) for name in VARIANTS for seed in seeds]  # independent: side by side on the CPU cores
    train_cfg = TrainConfig(steps=steps, batch_size=batch_size, lr=lr, warmup=10, log_every=max(1, steps // 20),
                            device=device)
    outcomes = map_runs(partial(_train_one, n_layers=n_layers, d_model=d_model, task=task, train_cfg=train_cfg),
                        runs, device)
    shape = (len(VARIANTS), len(seeds))

    def pick(key: str) -> np.ndarray:  # -> (variants, seeds, *the value's own shape)
        return np.array([o[key] for o in outcomes]).reshape(shape + np.shape(outcomes[0][key]))

    return ResidualResult(list(VARIANTS), list(seeds), pick("accuracy"), pick("eval_loss"), pick("train_loss"),
                          pick("init_grad"), outcomes[-1]["step"], pick("curve"), n_layers, task)


def _train_one(run: tuple[str, int], n_layers: int, d_model: int, task: LookupTask, train_cfg: TrainConfig) -> dict:
    name, seed = run
    torch.manual_seed(seed)
    model = MiniBert(block_config(n_layers, VARIANTS[name], d_model=d_model))
    hist = train(model, task, train_cfg.replace(seed=seed))
    ev = evaluate(model, task, n_batches=2, batch_size=256)
    return {"accuracy": ev["accuracy"], "eval_loss": ev["loss"], "train_loss": hist.loss[-1], "step": hist.step,
            "init_grad": [hist.grad_norm[f"layer{k}"][0] for k in range(n_layers)], "curve": hist.accuracy}


def plot_residual_experiment(fig, res: ResidualResult) -> None:
    ax1, ax2 = fig.subplots(1, 2)
    for i, name in enumerate(res.variants):
        seed_band(ax1, np.arange(res.n_layers), res.init_grad[i], log=True, label=name, marker="o", ms=3)
        seed_band(ax2, res.steps, res.curves[i], label=name, marker="o", ms=3)
    decade_ticks(ax1, "y", np.log10(res.init_grad))
    ax1.set(title="gradient norm per layer at initialisation", xlabel="layer", ylabel="||grad of layer params|| (log scale)")
    ax2.axhline(1 / (res.task.vocab_size - N_SPECIAL), color="grey", ls=":", lw=1, label="chance")
    ax2.set(title=f"{res.n_layers}-layer mini-BERT, {len(res.seeds)} seeds (min-max band)", xlabel="training step",
            ylabel="training accuracy", ylim=(-0.02, 1.02))
    ax2.legend(fontsize=8)


# -- the pretrained model ----------------------------------------------------------------------
@one_thread()
@torch.no_grad()
def minilm_block_stats(model: MiniBert, tok, text: str) -> dict:
    """Per layer of a post-norm model: ||attention update|| / ||x||, ||FFN update|| / ||its input||, and
    cos(layer input, layer output) averaged over tokens; plus the FFN's share of the layer's parameters."""
    enc = tok(text)
    out = model(**enc, return_internals=True)
    x = out.internals["embeddings.out"]  # (1, T, d)
    rows = {"attn_ratio": [], "ffn_ratio": [], "cos_in_out": []}
    for i, layer in enumerate(model.layers):
        a = layer.attention(x, None)
        h = layer.attention_norm(a + x, None)
        f = layer.ffn(h)
        y = out.internals[f"layer{i}.hidden"]
        rows["attn_ratio"].append(float((a.norm(dim=-1) / x.norm(dim=-1)).mean()))
        rows["ffn_ratio"].append(float((f.norm(dim=-1) / h.norm(dim=-1)).mean()))
        rows["cos_in_out"].append(float(torch.nn.functional.cosine_similarity(x, y, dim=-1).mean()))
        x = y
    layer = model.layers[0]
    n_ffn = sum(p.numel() for p in layer.ffn.parameters())
    n_layer = sum(p.numel() for p in layer.parameters())
    return {k: np.array(v) for k, v in rows.items()} | {"ffn_share": n_ffn / n_layer, "n_ffn": n_ffn, "n_layer": n_layer}


@one_thread()
@torch.no_grad()
def minilm_mask_checks(model: MiniBert, tok, text: str = "The cat sat on the mat because it was tired .",
                       last_word: str = "happy", n_pad: int = 4) -> dict:
    """(1) change the last word: does the first word's output move? (no causal mask in BERT)
    (2) append n_pad [PAD] tokens with attention_mask 0, then change them: do the real outputs move?"""
    enc = tok(text)
    ids = enc["input_ids"]
    t = ids.shape[1]
    swapped = ids.clone()
    swapped[0, t - 3] = tok.backend.token_to_id(last_word)  # the word before "." and [SEP]
    h0 = model(**enc).last_hidden_state
    h1 = model(swapped, enc["token_type_ids"], enc["attention_mask"]).last_hidden_state
    pad_ids = torch.cat([ids, torch.full((1, n_pad), PAD)], dim=1)
    mask = torch.cat([torch.ones(1, t, dtype=torch.long), torch.zeros(1, n_pad, dtype=torch.long)], dim=1)
    other = pad_ids.clone()
    other[0, t:] = tok.backend.token_to_id("dog")  # whatever sits in the padded slots
    p0 = model(pad_ids, attention_mask=mask).last_hidden_state[:, :t]
    p1 = model(other, attention_mask=mask).last_hidden_state[:, :t]
    unmasked = model(other, attention_mask=torch.ones_like(mask)).last_hidden_state[:, :t]
    return {"first_word_change": float((h1 - h0)[0, 1].abs().max()),
            "pad_change": float((p1 - p0).abs().max()),
            "pad_vs_unpadded": float((p0 - h0).abs().max()),
            "unmasked_pad_change": float((unmasked - p0).abs().max())}


# -- the reference: more steps, 10 seeds, and a second initialisation ------------------------------------------
CHANCE = 1 / 27   # LookupTask's 27 content tokens, each equally likely
REFERENCE_STEPS = 2000
HELD_OUT = 10_000_019  # + the seed: the reference's held-out sequences, disjoint from every training stream


def reference_seed(seed: int, steps: int, init_std: float, lr: float) -> dict:
    """One seed of the reference: the live run's 6-layer model with and without residuals (same seed, same data
    stream), trained `steps` steps at rate `lr` from weights N(0, init_std). -> {variant: {"accuracy", "eval_loss",
    "train_loss"}}: held-out accuracy and loss (2 x 256 sequences), the last step's training loss."""
    task = LookupTask()
    cfg = TrainConfig(steps=steps, batch_size=32, lr=lr, warmup=10, log_every=steps, device="cpu", seed=seed)
    out = {}
    for name, residual in VARIANTS.items():
        torch.manual_seed(seed)
        model = MiniBert(block_config(6, residual, d_model=32, init_std=init_std))
        hist = train(model, task, cfg)
        ev = evaluate(model, task, n_batches=2, batch_size=256, seed=HELD_OUT + seed)  # held out, moves with the seed
        out[name] = {"accuracy": ev["accuracy"], "eval_loss": ev["loss"], "train_loss": hist.loss[-1]}
    return out


def reference_gate(accuracy: float) -> Gate:
    """Learned or not: held-out accuracy more than twice chance (1/27): a model that passes each token up its
    stack at all."""
    return learned("held-out accuracy", accuracy, baseline=CHANCE, baseline_name="chance (1/27)", margin=CHANCE)


@dataclass(frozen=True)
class ResidualRung:
    """One rung of the reference: held-out accuracy per variant, (seeds,) arrays in seed order (they pair)."""

    name: str
    steps: int
    init_std: float
    lr: float
    accuracy: dict[str, np.ndarray]

    def learned(self, variant: str) -> np.ndarray:
        """(seeds,) bool: the runs of `variant` that passed reference_gate."""
        return np.array([reference_gate(a).passed for a in self.accuracy[variant]])


def summarize_reference(ref) -> list[ResidualRung]:
    """The stored reference (qalib.lab.reference.Reference) as one ResidualRung per rung, in the spec's order."""
    return [ResidualRung(r.name, int(r.kwargs["steps"]), float(r.kwargs["init_std"]), float(r.kwargs["lr"]),
                         {v: r.values(v, "accuracy") for v in VARIANTS}) for r in ref.rungs.values()]


def reference_claims(ref) -> None:
    """The checks notebook 10 makes on its reference run (the runner makes them on every regeneration too)."""
    rungs = {r.name: r for r in summarize_reference(ref)}
    with_res = {n: float(r.accuracy["with residual"].min()) for n, r in rungs.items()}
    check("the gate: with residuals the model learned at every budget and both initialisations (held-out accuracy "
          "> 0.95 in every seed)", above(min(with_res.values()), 0.95), with_res)
    bert_init = [r for r in rungs.values() if r.init_std == 0.02]
    stuck = {f"{r.steps} steps": float(r.accuracy["without residual"].max()) for r in bert_init}
    check(f"without residuals, at BERT's init (std 0.02, lr 1e-2), no run passed the gate at any budget up to "
          f"{max(r.steps for r in bert_init)} steps: held-out accuracy < {2 * CHANCE:.3f} (twice chance) in every seed",
          below(max(stuck.values()), 2 * CHANCE), stuck)
    wide = rungs["reference, std 0.2"]
    plain = wide.accuracy["without residual"]
    d = paired_difference(wide.accuracy["with residual"], plain, "with", "without")
    check(f"from std 0.2 at lr 1e-3 the model without residuals does learn, slowly: after {wide.steps} steps at least "
          f"8 of {len(plain)} seeds pass the gate, and it stays far below the residual model (paired 95% interval "
          "of the accuracy difference above 0.5)",
          at_least(float(wide.learned("without residual").mean()), 0.8) & above(d.low, 0.5),
          {"without residuals": plain, "difference": str(d)})


def plot_reference(fig, ref) -> None:
    """Held-out accuracy against the budget, with and without residuals (median over seeds, a dot per seed): BERT's
    init as lines, std 0.2 at lr 1e-3 as open markers beside the last budget."""
    rungs = summarize_reference(ref)
    ax = fig.add_subplot(1, 1, 1)
    bert = [r for r in rungs if r.init_std == 0.02]
    other = [r for r in rungs if r.init_std != 0.02]
    steps = np.array([r.steps for r in bert])
    for i, (v, c) in enumerate(zip(VARIANTS, ("C0", "C3"))):
        acc = np.array([r.accuracy[v] for r in bert])  # (rungs, seeds)
        seeds_and_median(ax, steps, acc, c, f"{v}, std 0.02 (BERT), lr 1e-2")
        for r in other:  # beside the last budget, open markers
            seeds_and_median(ax, [r.steps * (1.25 + 0.1 * i)], [r.accuracy[v]], c,
                             f"{v}, std {r.init_std:g}, lr {r.lr:g}", marker="o", mfc="white", ms=7)
    ax.axhline(CHANCE, color="grey", ls=":", lw=1, label="chance (1/27)")
    ax.axhline(2 * CHANCE, color="grey", ls="--", lw=1, label="the gate: twice chance")
    budget_axis(ax, steps)
    ax.set(ylabel="held-out accuracy", ylim=(-0.02, 1.02),
           title=f"6 layers, {len(rungs[0].accuracy['with residual'])} seeds (dots), median as markers")
    ax.legend(fontsize=7, loc="center right")


REFERENCES = [
    ReferenceSpec(
        "10_residuals_ffn_masks", "no_residual", reference_seed, seeds=10,
        rungs=(Rung("live", steps=30, init_std=0.02, lr=1e-2), Rung("4x", steps=120, init_std=0.02, lr=1e-2),
               Rung("reference", steps=REFERENCE_STEPS, init_std=0.02, lr=1e-2),
               Rung("reference, std 0.2", steps=REFERENCE_STEPS, init_std=0.2, lr=1e-3)),
        lesson="whether a 6-layer mini-BERT without residuals learns the lookup task given 2000 steps, at BERT's init "
               "and at std 0.2, against the same model with residuals, over 10 seeds", claims=reference_claims),
]


STREAM_TEXTS = ("The quick brown fox jumps over the lazy dog near the river bank.",
                "She sold her old car and bought a bicycle instead.",
                "Interest rates rose again this quarter, surprising most analysts.",
                "My grandmother grows tomatoes in the garden every summer.",
                "The committee postponed the vote until next week.",
                "A small boat drifted slowly across the calm lake at dawn.")


@dataclass(frozen=True)
class StreamShares:
    """stream_contributions over several sentences. shares: (S, K) each writer's share of the output in each
    sentence's median token; error: the largest |sum of the parts - output| over all sentences, relative to the
    largest |output|; gain_spread: {writer: 90th / 10th percentile of the later norms' |gamma| product}."""
    names: tuple[str, ...]
    shares: np.ndarray
    error: float
    gain_spread: dict[str, float]

    def share(self, *names: str) -> np.ndarray:
        """(S,) the summed share of the named writers in each sentence."""
        return self.shares[:, [self.names.index(n) for n in names]].sum(1)


@one_thread()
def minilm_stream_shares(model: MiniBert, tok, texts=STREAM_TEXTS) -> StreamShares:
    """What the embeddings, each sublayer and the LayerNorm biases contribute to MiniLM's output, per sentence."""
    rows, err = [], 0.0
    for text in texts:
        r = stream_contributions(model, tok(text)["input_ids"])
        err = max(err, float((r.components.sum(0) - r.output).abs().max() / r.output.abs().max()))
        rows.append(r.shares.median(dim=1).values.numpy())
    spread = {n: r.gain_spread(n) for n in r.names if n != "LayerNorm biases"}
    return StreamShares(r.names, np.stack(rows), err, spread)
